"""``keywords.suggest``'s prefilters give difflib's answer, and ``JsonSchemaOptions``' kept
cache key and table-driven checks behave as the computed ones (front35, #31/#30)."""

from __future__ import annotations

import dataclasses
import difflib
import pickle
import random
import string

import pytest

from formcast.errors import ConfigurationError
from formcast.frontends.jsonschema import keywords as kw
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.frontends.jsonschema.options import JsonSchemaOptions


def _suggest_oracle(name: str) -> str | None:
    """The definition: the case variant, else difflib over every constraining keyword."""
    names = [k.name for k in kw.KEYWORDS if k.status in ("exact", "partial")]
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:
        return lowered[name.lower()]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.85)
    return close[0] if close else None


def _words() -> list[str]:
    rng = random.Random(7)
    names = [k.name for k in kw.KEYWORDS]
    out = set(names)
    for w in names:
        for _ in range(12):
            chars = list(w)
            i = rng.randrange(len(chars))
            op = rng.randrange(4)
            if op == 0:
                chars.pop(i)
            elif op == 1:
                chars.insert(i, rng.choice(string.ascii_letters))
            elif op == 2:
                chars[i] = rng.choice(string.ascii_letters)
            else:
                chars[i], chars[-1] = chars[-1], chars[i]
            out.add("".join(chars))
            out.add("".join(chars).upper())
    for _ in range(600):
        out.add("".join(rng.choice(string.ascii_letters + "_$-") for _ in range(rng.randrange(20))))
    out |= {"", "pbj", "weight", "preferredOrder", "additonalProperties", "maxLenght", "itmes"}
    return sorted(out)


def test_suggest_is_difflibs_answer() -> None:
    words = _words()
    found = 0
    for w in words:
        got = kw.suggest(w)
        assert got == _suggest_oracle(w), w
        found += got is not None
    assert found > 100  # the misspellings are found (not a vacuous comparison)


def test_repeated_unknown_keyword_warns_each_time() -> None:
    # the per-normalizer memo of suggest: each occurrence is still reported
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "pbj": 1},
            "b": {"type": "integer", "pbj": 2},
            "c": {"type": "string", "maxLenght": 3},
            "d": {"type": "string", "maxLenght": 4},
        },
    }
    _, ignored = schema_to_grammar(schema, JsonSchemaOptions(lenient=True))
    text = "\n".join(ignored)
    assert text.count("pbj at") == 2
    assert text.count("maxLenght") == 2
    assert "did you mean 'maxLength'" in text


def test_options_cache_key_kept_and_equal_to_computed() -> None:
    for opts in (
        JsonSchemaOptions(),
        JsonSchemaOptions(lenient=True, max_rules=7, indent=2),
        JsonSchemaOptions(max_integer_digits=None, max_whitespace=0, whitespace="flexible"),
    ):
        key = opts.cache_key()
        assert key == opts._cache_key_uncached()
        assert opts.cache_key() is key  # kept
        fresh = dataclasses.replace(opts)
        assert fresh == opts
        assert hash(fresh) == hash(opts)
        assert repr(fresh) == repr(opts)
        assert fresh.cache_key() == key
        assert pickle.loads(pickle.dumps(opts)).cache_key() == key
        parts = [f"{f.name}={getattr(opts, f.name)!r}" for f in dataclasses.fields(opts)]
        assert key == "JsonSchemaOptions(" + ", ".join(parts) + ")"
    a, b = JsonSchemaOptions(), JsonSchemaOptions(max_rules=99)
    assert a.cache_key() != b.cache_key()


def test_options_kept_key_none_for_undigestable_registry() -> None:
    opts = JsonSchemaOptions(registry=object())
    assert opts.cache_key() is None
    assert opts.cache_key() is None


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("max_rules", 0, False),
        ("max_rules", True, False),
        ("max_rules", 1.0, False),
        ("max_rules", None, False),
        ("max_rules", 1, True),
        ("max_whitespace", 0, True),
        ("max_whitespace", -1, False),
        ("max_fraction_digits", 0, True),
        ("max_fraction_digits", None, True),
        ("max_integer_digits", None, True),
        ("max_integer_digits", 0, False),
        ("max_depth", None, False),
        ("max_count_states", False, False),
        ("max_ref_bytes", 2**70, True),
    ],
)
def test_options_limit_checks(field: str, value: object, ok: bool) -> None:
    if ok:
        JsonSchemaOptions(**{field: value})  # type: ignore[arg-type]
    else:
        with pytest.raises(ConfigurationError, match=field):
            JsonSchemaOptions(**{field: value})  # type: ignore[arg-type]
