"""Property: a random masked walk over a real schema never produces an invalid instance.

For a seeded sample of the shared corpora's schemas (JSONSchemaBench/MaskBench, SchemaStore and
the JSON-Schema-Test-Suite's drafts 7 and 2020-12), each schema is compiled against a byte
vocabulary (256 one-byte tokens + a stop token) and walked: at every step a token is drawn
among the *allowed* ones (biased toward closing bytes so that walks end), and when the stop
token is drawn the text must parse and validate with ``jsonschema`` (the schema's own draft,
with a ``FormatChecker`` for every format formcast enforces and ``jsonschema`` can check).  A
schema that fails closed is skipped (that is sound), and so is a schema or instance that
``jsonschema`` itself cannot check; a walk that has not stopped within ``MAX_BYTES`` is
abandoned.

The data lives in ``<repo>/../shared/data``; the test is skipped when it is absent.  Marked slow
(about half a minute on two cores).
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from formcast.errors import FormcastError
from formcast.frontends.jsonschema import formats as json_formats
from formcast.frontends.jsonschema.api import JsonSchemaOptions
from formcast.index.compiler import GrammarCompiler
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

jsonschema = pytest.importorskip("jsonschema")

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
MASKBENCH = DATA / "JSONSchemaBench" / "maskbench" / "data"
SCHEMASTORE = DATA / "SchemaStore" / "src" / "schemas" / "json"
SUITE = DATA / "JSON-Schema-Test-Suite" / "tests"
#: suite folder -> the draft its schemas are read in
SUITE_DRAFTS = {"draft7": "7", "draft2020-12": "2020-12"}
SEED = 20261201
SAMPLE_MASKBENCH = 60
SAMPLE_SCHEMASTORE = 15
SAMPLE_SUITE = 60
WALKS = 4
MAX_BYTES = 600
TIME_BUDGET_S = 45.0
STOP = 256
_CLOSERS = [ord(c) for c in '"}],'] + [ord("0"), ord("e"), ord("l")]


def _claimed_format_checker(cls: Any = None) -> Any:
    """The format checker of the validator class ``cls`` (its draft's own checkers: the global
    ``FormatChecker()`` mixes in draft 3's ``time``), limited to the formats formcast enforces
    (exactly or as a subset)."""
    cls = cls or jsonschema.Draft202012Validator
    claimed = set(json_formats.FORMATS) - set(json_formats.ANNOTATION_FORMATS)
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {k: v for k, v in cls.FORMAT_CHECKER.checkers.items() if k in claimed}
    return checker


def _schemas() -> list[tuple[str, Any, str]]:
    """``(name, schema, default draft)`` of the seeded sample."""
    rng = random.Random(SEED)
    out: list[tuple[str, Any, str]] = []
    if MASKBENCH.is_dir():
        files = sorted(p.name for p in MASKBENCH.glob("*.json"))
        for name in rng.sample(files, min(SAMPLE_MASKBENCH, len(files))):
            doc = json.loads((MASKBENCH / name).read_text(encoding="utf-8"))
            schema = doc.get("schema", doc) if isinstance(doc, dict) else doc
            if isinstance(schema, str):
                schema = json.loads(schema)
            out.append((f"maskbench/{name}", schema, "2020-12"))
    if SCHEMASTORE.is_dir():
        files = sorted(p.name for p in SCHEMASTORE.glob("*.json"))
        for name in rng.sample(files, min(SAMPLE_SCHEMASTORE, len(files))):
            try:
                schema = json.loads((SCHEMASTORE / name).read_text(encoding="utf-8-sig"))
            except ValueError:
                continue
            out.append((f"schemastore/{name}", schema, "2020-12"))
    for folder, draft in SUITE_DRAFTS.items():
        base = SUITE / folder
        if not base.is_dir():
            continue
        cases = [
            (f"suite/{folder}/{path.relative_to(base).as_posix()}#{i}", case["schema"], draft)
            for path in sorted(base.rglob("*.json"))
            for i, case in enumerate(json.loads(path.read_text(encoding="utf-8")))
        ]
        out.extend(rng.sample(cases, min(SAMPLE_SUITE // len(SUITE_DRAFTS), len(cases))))
    return out


def walk(matcher: GrammarMatcher, rng: random.Random) -> bytes | None:
    """One random masked walk: the text accepted when the stop token is drawn (None when
    ``MAX_BYTES`` is reached first or the matcher dead-ends)."""
    while len(matcher.accepted_bytes()) < MAX_BYTES:
        allowed = [int(t) for t in matcher.allowed_token_ids()]
        if not allowed:
            return None
        stop_ok = STOP in allowed
        if stop_ok and rng.random() < 0.5:
            token = STOP
        else:
            closers = [t for t in allowed if t in _CLOSERS]
            pool = closers if closers and rng.random() < 0.6 else allowed
            pool = [t for t in pool if t != STOP] or pool
            token = rng.choice(pool)
        assert matcher.accept_token(token), f"allowed token {token} was refused"
        if token == STOP:
            return matcher.accepted_bytes()
    return None


def _ecma_match(error: Any) -> bool:
    """A ``pattern`` error that is ``re``'s Unicode ``\\w``/``\\d``/``\\s``, not the schema's:
    ECMA 262 (the dialect of JSON Schema and of formcast) reads them as ASCII classes, so
    ``"\u0400"`` matches ``^\\W$``; such a text matches with ``re.ASCII``."""
    if error.validator != "pattern" or not isinstance(error.instance, str):
        return False
    try:
        return re.search(error.validator_value, error.instance, re.ASCII) is not None
    except re.error:
        return False


def _validator(schema: Any, draft: str = "2020-12") -> Any:
    default = {"7": jsonschema.Draft7Validator}.get(draft, jsonschema.Draft202012Validator)
    cls = jsonschema.validators.validator_for(schema, default=default)
    return cls(schema, format_checker=_claimed_format_checker(cls))


@pytest.mark.slow
def test_random_masked_walks_produce_valid_instances() -> None:
    sample = _schemas()
    if not sample:
        pytest.skip(f"no corpora under {DATA}")
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[STOP]
    )
    compiler = GrammarCompiler(vocab, cache_size=0)
    rng = random.Random(SEED)
    deadline = time.monotonic() + TIME_BUDGET_S
    failures: list[str] = []
    compiled_n = walked_n = 0
    for name, schema, draft in sample:
        if time.monotonic() > deadline:
            break
        try:
            validator = _validator(schema, draft)
        except Exception:  # a schema jsonschema cannot use is no oracle
            continue
        try:
            compiled = compiler.compile_json_schema(schema, JsonSchemaOptions(default_draft=draft))
        except FormcastError:
            continue  # failing closed is sound
        compiled_n += 1
        for _ in range(WALKS):
            text = walk(GrammarMatcher(compiled), rng)
            if text is None:
                continue
            walked_n += 1
            try:
                value = json.loads(text.decode("utf-8"))
            except ValueError as e:
                failures.append(f"{name}: not JSON ({e}): {text[:200]!r}")
                continue
            try:
                errors = [e.message for e in validator.iter_errors(value) if not _ecma_match(e)]
            except Exception:  # the oracle cannot check it (an ECMA-only regex for `re`...)
                continue
            if errors:
                failures.append(f"{name}: {errors[0][:200]}: {text[:200]!r}")
    assert not failures, "invalid instances generated:\n" + "\n".join(failures)
    assert compiled_n >= 20, f"only {compiled_n} schemas compiled"
    assert walked_n >= 40, f"only {walked_n} walks ended"


def test_walk_stops_only_on_complete_documents() -> None:
    """The walker itself: on a small schema every walk that ends is a valid document."""
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[STOP]
    )
    compiler = GrammarCompiler(vocab, cache_size=0)
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 3}, "b": {"enum": ["x", "y"]}},
        "required": ["a"],
        "additionalProperties": False,
    }
    compiled = compiler.compile_json_schema(schema)
    rng = random.Random(1)
    ended = 0
    for _ in range(30):
        text = walk(GrammarMatcher(compiled), rng)
        if text is not None:
            ended += 1
            assert _validator(schema).is_valid(json.loads(text)), text
    assert ended >= 20


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date", "0001-01-01", "0000-01-01"),
        ("date-time", "0001-01-01T00:00:00Z", "0000-12-31T23:59:59Z"),
    ],
)
def test_dates_have_no_year_zero(fmt: str, good: str, bad: str) -> None:
    """Found by the walk: year 0000 is in RFC 3339's grammar but no validator's calendar."""
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[STOP]
    )
    compiled = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
        {"type": "string", "format": fmt}
    )
    checker = _claimed_format_checker()
    for text, ok in ((good, True), (bad, False)):
        assert checker.conforms(text, fmt) is ok
        m = GrammarMatcher(compiled)
        got = m.accept_bytes(json.dumps(text).encode()) and m.is_token_allowed(STOP)
        assert got is ok, text


def test_an_integer_enum_has_no_fraction_spelling() -> None:
    """Found by the walk: ``{"type": "integer", "enum": [6, 12]}`` under draft 4 generated
    ``12.0``, which draft 4 does not count as an integer."""
    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[STOP]
    )
    compiler = GrammarCompiler(vocab, cache_size=0)
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    for schema in (
        {**draft4, "enum": [6, 12]},
        {**draft4, "enum": [6.0, "x"]},
        {"$schema": draft4["$schema"], "allOf": [{"type": "integer"}], "const": 12},
    ):
        compiled = compiler.compile_json_schema(schema)
        validator = _validator(schema)
        for text in ("12", "6", "12.0", "6.0"):
            m = GrammarMatcher(compiled)
            if m.accept_bytes(text.encode()) and m.is_token_allowed(STOP):
                assert validator.is_valid(json.loads(text)), (schema, text)
        assert any(GrammarMatcher(compiled).accept_bytes(x.encode()) for x in ("12", "6"))
    # without ``type: integer`` the ``N.0`` spelling stays (equal to N in every draft)
    compiled = compiler.compile_json_schema({"enum": [6, 12]})
    m = GrammarMatcher(compiled)
    assert m.accept_bytes(b"12.0")
    assert m.is_token_allowed(STOP)
