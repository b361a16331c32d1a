#!/usr/bin/env bash
# Tests formcast as users install it: builds the sdist and, from it, the wheel (`python -m build`,
# with FORMCAST_NATIVE=required, so a C kernel or mypyc module that does not compile fails here
# instead of falling back), installs them in a fresh virtual environment and runs a subset of
# the suite against each install:
#   1. the wheel (every mypyc module and C kernel compiled; FORMCAST_EXPECT_NATIVE=1 makes the
#      kernel tests fail instead of skip),
#   2. the sdist installed with FORMCAST_NATIVE=0: the pure-Python fallback.
# The subsets: against the wheel, the install checks of tests/project/test_installed_build.py,
# the three kernels' differential tests (C against numpy, which must not skip there), the
# serialization round trip, the brute-force mask oracle and the random walks of tests/runtime
# (what the compiled code decides, end to end); against the pure install, the install checks
# and the random walks. The whole suite runs against the editable (pure) install in
# scripts/test.sh, and a wider subset against a compiled copy in
# tests/project/test_native_build.py, so these stay small (CI time: README).
#
#   PYTHON        the interpreter that creates the venv (default: python)
#   FORMCAST_INSTALL_DIR  where the venv and dist/ go (default: a temporary directory, removed
#                 at the end)
# Arguments, when given, replace both subsets (pytest arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
PYTHON="${PYTHON:-python}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
NATIVE_SUBSET=(
  tests/project/test_installed_build.py
  tests/vocab/test_native_trie_walk.py
  tests/automata/test_native_moore.py
  tests/automata/test_native_columns.py
  tests/index/test_serialized_grammar_round_trip.py
  tests/index/test_mask_equals_brute_force_oracle.py
  tests/runtime/test_masked_walk_stays_valid.py
)
PURE_SUBSET=(
  tests/project/test_installed_build.py
  tests/runtime/test_masked_walk_stays_valid.py
)
if [ "$#" -gt 0 ]; then NATIVE_SUBSET=("$@"); PURE_SUBSET=("$@"); fi

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

run_subset() {  # BUILD [expect-native] TESTS...: which build the install must be, and the tests
  # from the repository root, where no `formcast` package lies (src layout): the import finds
  # the installed one, which tests/project/test_installed_build.py checks
  local build="$1" native="$2"
  shift 2
  env CI="${CI:-true}" FORMCAST_EXPECT_BUILD="$build" FORMCAST_SDIST="$SDIST" \
    ${native:+FORMCAST_EXPECT_NATIVE=1} \
    "$PY" -m pytest -q -p no:cacheprovider "$@"
}

"$PY" -m pip install -q "$WHEEL[test]"
"$WORK/venv/bin/formcast" --version
run_subset native expect-native "${NATIVE_SUBSET[@]}"
t2=$(date +%s)
echo "test_install: the wheel's install and tests took $((t2 - t1)) s"

FORMCAST_NATIVE=0 "$PY" -m pip install -q --force-reinstall --no-deps "$SDIST"
"$WORK/venv/bin/formcast" --version
run_subset pure "" "${PURE_SUBSET[@]}"
t3=$(date +%s)
echo "test_install: the pure install from the sdist and its tests took $((t3 - t2)) s;" \
  "all: $((t3 - t0)) s"
