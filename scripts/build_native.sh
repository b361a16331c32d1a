#!/usr/bin/env bash
# Builds the compiled copy of formcast into DIR (default: build/native), for benchmarks and
# tests: `PYTHONPATH=DIR python ...` then imports the compiled package.  The mypyc-compiled
# modules are the ones listed in src/formcast/_native.py (NATIVE_MODULES), the C kernels those
# of NATIVE_KERNELS (<module>.c); the rest of DIR/formcast is the same pure-Python source.  Needs mypy (mypyc) and a C compiler; takes a few minutes of CPU.
# MYPYC_OPT_LEVEL (default 3) is passed to mypyc; FORMCAST_NATIVE_EXTRA="formcast.x formcast.y"
# compiles more modules (experiments: the runtime report still lists NATIVE_MODULES only).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$REPO/build/native}"
PYTHON="${PYTHON:-python}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
start=$(date +%s)
rm -rf "$DIR/formcast" "$DIR/build" "$DIR"/*__mypyc*.so
# the source, without caches or extensions left over from an earlier build
(cd "$REPO/src" && tar --exclude='__pycache__' --exclude='*.so' --exclude='*.pyd' -cf - formcast) \
  | (cd "$DIR" && tar -xf -)
cd "$DIR"
mapfile -t FILES < <("$PYTHON" - <<'PY'
import runpy
import os
names = runpy.run_path("formcast/_native.py")["NATIVE_MODULES"]
for name in (*names, *os.environ.get("FORMCAST_NATIVE_EXTRA", "").split()):
    print(name.replace(".", "/") + ".py")
PY
)
MYPYC_OPT_LEVEL="${MYPYC_OPT_LEVEL:-3}" "$PYTHON" - "${FILES[@]}" <<'PY'
import os, runpy, sys
from setuptools import Extension, setup
from mypyc.build import mypycify
files = sys.argv[1:]
kernels = [
    Extension(name, [name.replace(".", "/") + ".c"], extra_compile_args=["-O3"])
    for name in runpy.run_path("formcast/_native.py")["NATIVE_KERNELS"]
]
sys.argv = [sys.argv[0], "build_ext", "--inplace"]
setup(
    name="formcast_native_build",
    ext_modules=[
        *mypycify(["--ignore-missing-imports", *files], opt_level=os.environ["MYPYC_OPT_LEVEL"], debug_level="1"),
        *kernels,
    ],
)
PY
rm -rf "$DIR/build" "$DIR/.mypy_cache"
end=$(date +%s)
"$PYTHON" -c "import formcast._native as n; print('formcast native modules:', n.native_summary())"
echo "built the compiled copy in $DIR in $((end - start)) s (${#FILES[@]} modules compiled with mypyc, and the C kernels)"
