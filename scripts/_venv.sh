# Sourced by scripts/demo.sh and scripts/test.sh (the README's two commands): chooses the Python
# environment they install into, and exports PYTHON for the scripts they call.
#   PYTHON set                 that interpreter, as it is (PYTHON=python: the global one)
#   a virtual environment active ($VIRTUAL_ENV)   its python
#   otherwise                  <repo>/.venv (FORMCAST_VENV to put it elsewhere), created on first
#                              use with python3 (BASE_PYTHON to choose another; needs Python >= 3.10
#                              and, on Debian/Ubuntu, the python3-venv package), and activated
#                              for the rest of the script, so its `formcast` is on PATH too
if [ -z "${PYTHON:-}" ]; then
  if [ -z "${VIRTUAL_ENV:-}" ]; then
    FORMCAST_VENV="${FORMCAST_VENV:-$(pwd)/.venv}"
    if [ ! -x "$FORMCAST_VENV/bin/python" ]; then
      echo "[formcast] creating the virtual environment $FORMCAST_VENV" \
           "(then: . $FORMCAST_VENV/bin/activate)" >&2
      "${BASE_PYTHON:-python3}" -m venv "$FORMCAST_VENV"
    fi
    # shellcheck disable=SC1091
    . "$FORMCAST_VENV/bin/activate"
  fi
  PYTHON=python
fi
export PYTHON
