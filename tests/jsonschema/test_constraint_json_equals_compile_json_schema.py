"""``compile(constraints.json(s))`` and ``compile_json_schema(s)`` give the same masks (#28).

Both lower the schema to the same IR (``schema_to_grammar`` with its run-time marks and the
JSON Schema program hints); the constraint object embeds it under a start rule of its own.
For MaskBench schemas (``<repo>/../shared/data/JSONSchemaBench/maskbench/data``, read as
tests/jsonschema/test_maskbench_ratchet.py reads them) each is compiled both ways by separate
compilers (no shared cache, so this compares two real compiles), and along every valid instance
(compact JSON, byte vocabulary) the token mask before each byte must be identical, and so must
the final acceptance.  A schema that fails to compile must fail both ways with the same error
class (and, for ``UnsupportedFeatureError``, the same feature).

Cost: all 8,738 schemas take far more than the few minutes a CI test may take on one core
(measured on the sample below: 49 s of CPU for 219 schemas, about 0.23 s each, so about 35
minutes for all), so CI checks a deterministic sample: every ``STRIDE``-th file in name order
(``STRIDE = 40``: 219 schemas, under a minute of CPU; 3.3 minutes of wall time on a loaded
two-core machine).  ``FORMCAST_EQUIVALENCE_ALL=1`` checks every schema.  Each schema has a
``BUDGET_S`` alarm (machine load varies; a timeout is skipped, not failed).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "JSONSchemaBench" / "maskbench" / "data"
STRIDE = 1 if os.environ.get("FORMCAST_EQUIVALENCE_ALL") == "1" else 40
BUDGET_S = 20.0
#: bytes of an instance walked mask by mask (longer instances: the rest is accepted in one go)
MAX_WALK = 3000


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


def _files() -> list[str]:
    if not DATA.is_dir():
        return []
    return sorted(p.name for p in DATA.iterdir() if p.suffix == ".json")[::STRIDE]


@pytest.fixture(scope="module")
def vocab() -> Any:
    from formcast import Vocabulary

    return Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )


def _outcome(build: Any) -> tuple[Any, tuple[str, str] | None]:
    """``(compiled, None)`` or ``(None, (error class, feature))``."""
    from formcast.errors import FormcastError, UnsupportedFeatureError

    try:
        return build(), None
    except UnsupportedFeatureError as e:
        return None, ("UnsupportedFeatureError", e.feature)
    except FormcastError as e:
        return None, (type(e).__name__, "")


def _walk(a: Any, b: Any, text: bytes) -> str | None:
    """None when the masks of ``a`` and ``b`` agree before every byte of ``text`` (and their
    acceptance at the end); else where they first differ."""
    from formcast import GrammarMatcher
    from formcast.bitmask import bitmask_words

    ma, mb = GrammarMatcher(a), GrammarMatcher(b)
    words = bitmask_words(a.vocab.vocab_size)
    ra, rb = np.zeros(words, np.int32), np.zeros(words, np.int32)
    for i, byte in enumerate(text[:MAX_WALK]):
        ma.fill_next_token_bitmask(ra)
        mb.fill_next_token_bitmask(rb)
        if not np.array_equal(ra, rb):
            return f"masks differ before byte {i} of {text[:i + 1][-60:]!r}"
        oka, okb = ma.accept_token(byte), mb.accept_token(byte)
        if oka != okb:
            return f"byte {i} accepted by one only"
        if not oka:
            return None  # both refuse the instance here (property order): nothing more to compare
    rest = text[MAX_WALK:]
    oka, okb = ma.accept_bytes(rest), mb.accept_bytes(rest)
    if oka != okb or (oka and ma.is_accepting() != mb.is_accepting()):
        return "the instance's end is accepted by one only"
    return None


@pytest.mark.parametrize("name", _files() or ["(no data)"])
def test_masks_are_identical_through_both_doors(vocab: Any, name: str) -> None:
    if not DATA.is_dir():
        pytest.skip(f"MaskBench data not found at {DATA} (expected <repo>/../shared/data)")
    from formcast import GrammarCompiler, constraints
    from formcast.frontends.jsonschema.options import JsonSchemaOptions

    doc = json.loads((DATA / name).read_text(encoding="utf-8"))
    schema = doc.get("schema", doc)
    # no wall-clock cap inside the compile (outcomes must not depend on the machine's load)
    opts = JsonSchemaOptions(max_compile_seconds=None)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, BUDGET_S)
    try:
        a, err_a = _outcome(
            lambda: GrammarCompiler(vocab, cache_size=0).compile_json_schema(schema, opts)
        )
        b, err_b = _outcome(
            lambda: GrammarCompiler(vocab, cache_size=0).compile(
                constraints.json(schema, options=opts)
            )
        )
        assert err_a == err_b, f"{name}: compile_json_schema {err_a}, constraints.json {err_b}"
        if a is None:
            return
        assert len(b.unique_items) == len(a.unique_items)
        assert type(a.program) is type(b.program)
        for t in doc.get("tests", []):
            if t.get("valid"):
                text = json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False)
                where = _walk(a, b, text.encode("utf-8"))
                assert where is None, f"{name}: {where}"
    except _Timeout:
        pytest.skip(f"{name}: over {BUDGET_S} s on this machine")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
