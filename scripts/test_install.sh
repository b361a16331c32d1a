#!/usr/bin/env bash
# Tests formcast as users install it: builds the sdist and, from it, the wheel (`python -m build`,
# with FORMCAST_NATIVE=required, so a C kernel or mypyc module that does not compile fails here
# instead of falling back), installs them in a fresh virtual environment and runs a subset of
# the suite against each install:
#   1. the wheel (every mypyc module and C kernel compiled; FORMCAST_EXPECT_NATIVE=1 makes the
#      kernel tests fail instead of skip),
#   2. the sdist installed with FORMCAST_NATIVE=0: the pure-Python fallback.
# The subset (SUBSET below) is what the compiled code touches (automata, IR, index programs,
# serialization and the disk cache, the brute-force mask oracle, the kernels' differential
# tests), the random walks of tests/runtime and the install checks of
# tests/project/test_installed_build.py: about 1.5 minutes per install on 2 cores. The whole
# suite runs against the editable (pure) install in scripts/test.sh.
#
#   PYTHON        the interpreter that creates the venv (default: python)
#   FORMCAST_INSTALL_DIR  where the venv and dist/ go (default: a temporary directory, removed
#                 at the end)
# Arguments, when given, replace SUBSET (pytest arguments).  Takes ~6-8 minutes with pip's cache
# warm (the compiled build ~2 minutes of it).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
PYTHON="${PYTHON:-python}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
SUBSET=(
  tests/project/test_installed_build.py
  tests/automata
  tests/ir
  tests/index/test_compile_fuel_independent_of_history.py
  tests/index/test_serialized_grammar_round_trip.py
  tests/index/test_disk_cache_of_compiled_grammars.py
  tests/index/test_mask_equals_brute_force_oracle.py
  tests/index/test_cfg_mask_vs_reference.py
  tests/vocab/test_native_trie_walk.py
  tests/runtime/test_masked_walk_stays_valid.py
)
if [ "$#" -gt 0 ]; then SUBSET=("$@"); fi

if [ -n "${FORMCAST_INSTALL_DIR:-}" ]; then
  WORK="$FORMCAST_INSTALL_DIR"; rm -rf "$WORK"; mkdir -p "$WORK"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/formcast-install.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
fi
t0=$(date +%s)
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install -q "build==1.6.1"
if ! FORMCAST_NATIVE=required "$PY" -m build --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1
then
  tail -60 "$WORK/build.log"
  echo "test_install: python -m build failed (log above)" >&2
  exit 1
fi
WHEEL="$(ls "$WORK"/dist/formcast-*.whl)"
SDIST="$(ls "$WORK"/dist/formcast-*.tar.gz)"
t1=$(date +%s)
echo "test_install: built $(basename "$SDIST") and $(basename "$WHEEL") in $((t1 - t0)) s"

run_subset() {  # BUILD: which build the install must be
  # from the repository root, where no `formcast` package lies (src layout): the import finds
  # the installed one, which tests/project/test_installed_build.py checks
  env CI="${CI:-true}" FORMCAST_EXPECT_BUILD="$1" FORMCAST_SDIST="$SDIST" \
    ${2:+FORMCAST_EXPECT_NATIVE=1} \
    "$PY" -m pytest -q -p no:cacheprovider "${SUBSET[@]}"
}

"$PY" -m pip install -q "$WHEEL[test]"
"$WORK/venv/bin/formcast" --version
run_subset native expect-native
t2=$(date +%s)
echo "test_install: the wheel's install and tests took $((t2 - t1)) s"

FORMCAST_NATIVE=0 "$PY" -m pip install -q --force-reinstall --no-deps "$SDIST"
"$WORK/venv/bin/formcast" --version
run_subset pure
t3=$(date +%s)
echo "test_install: the pure install from the sdist and its tests took $((t3 - t2)) s;" \
  "all: $((t3 - t0)) s"
