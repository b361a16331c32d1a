"""``docs/json_schema.md`` is generated from the keyword registry: it must be up to date, and
the registry must cover every keyword the normalizer handles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from formcast.frontends.jsonschema.keywords import KEYWORDS, is_annotation, keyword_info, suggest

ROOT = Path(__file__).resolve().parents[2]


def test_docs_are_generated_from_the_registry() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_json_schema_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_registry_is_consistent() -> None:
    names = [k.name for k in KEYWORDS]
    assert len(names) == len(set(names))
    assert {k.status for k in KEYWORDS} <= {"exact", "partial", "annotation", "unsupported"}
    for kw in ("type", "properties", "required", "items", "$ref", "oneOf", "uniqueItems"):
        info = keyword_info(kw)
        assert info is not None, kw
        assert info.status in ("exact", "partial"), kw
    assert is_annotation("title")
    assert is_annotation("x-order")
    assert is_annotation("_format")
    assert is_annotation("readonly")  # a case variant of an annotation
    assert not is_annotation("pattern")
    assert not is_annotation("frobnicate")
    assert suggest("additonalProperties") == "additionalProperties"
    assert suggest("maxlength") == "maxLength"
    assert suggest("links") is None
