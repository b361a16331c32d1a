"""The bounds of the built-in JSON grammar (``compile_builtin_json_grammar()``,
``generate(grammar="json")``): whitespace per gap and number digits.

``json_grammar()`` with its defaults stays the exact RFC 8259 language (JSONTestSuite's
conformance runs against it in ``tests/frontends/test_builtin_json_vs_jsontestsuite.py``); the
built-in grammar used for generation is ``builtin_json_grammar()``, bounded by
:data:`BUILTIN_JSON_BOUNDS`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from formcast.bitmask import bitmask_to_bool
from formcast.errors import ConfigurationError
from formcast.frontends.builtin_json import BUILTIN_JSON_BOUNDS, builtin_json_grammar, json_grammar
from formcast.frontends.jsonschema.api import JsonSchemaOptions

EOS = 256
BYTES = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[EOS], name="bytes"
)
BIG = 64 * 1024
WS = BUILTIN_JSON_BOUNDS["max_ws"]


@pytest.fixture(scope="module")
def builtin():
    return GrammarCompiler(BYTES).compile_builtin_json_grammar()


def accepts(compiled, data: bytes) -> bool:
    m = GrammarMatcher(compiled)
    return m.accept_bytes(data) and m.is_accepting() and m.is_token_allowed(EOS)


def test_bounds_are_documented_defaults() -> None:
    expected = {
        "max_ws": 20,
        "max_integer_digits": JsonSchemaOptions.max_integer_digits,
        "max_fraction_digits": JsonSchemaOptions.max_fraction_digits,
        "max_exponent_digits": JsonSchemaOptions.max_exponent_digits,
    }
    assert expected == BUILTIN_JSON_BOUNDS
    assert (JsonSchemaOptions.max_integer_digits, JsonSchemaOptions.max_fraction_digits) == (
        20,
        20,
    )
    assert builtin_json_grammar() == json_grammar(
        "flexible",
        20,
        max_integer_digits=20,
        max_fraction_digits=20,
        max_exponent_digits=3,
    )


def test_a_thousand_spaces_are_rejected(builtin) -> None:
    for doc in (b" " * 1000 + b"1", b"[" + b" " * 1000 + b"1]", b'{"a":' + b"\n" * 1000 + b"1}"):
        assert not accepts(builtin, doc)
        m = GrammarMatcher(builtin)
        assert not m.accept_bytes(doc)
    gap = b"\n" + b" " * (WS - 1)
    assert accepts(builtin, b"[" + gap + b"1," + gap + b"2" + gap + b"]" + gap)
    assert not accepts(builtin, b"[" + gap + b" 1]")
    # at the bound the mask offers no more whitespace
    m = GrammarMatcher(builtin)
    assert m.accept_bytes(b"[" + gap)
    mask = allocate_token_bitmask(1, BYTES.vocab_size)
    assert m.fill_next_token_bitmask(mask)
    allowed = bitmask_to_bool(mask[0], BYTES.vocab_size)
    assert not any(allowed[ord(c)] for c in " \t\n\r")
    assert allowed[ord("1")]
    assert allowed[ord("]")]
    # the unbounded grammar (RFC 8259 exactly) still takes them
    exact = GrammarCompiler(BYTES).compile_grammar_ir(json_grammar())
    assert accepts(exact, b"[" + b" " * 1000 + b"1]")


def test_numbers_are_bounded(builtin) -> None:
    for ok in ("1." + "0" * 20, "9" * 20, "-" + "9" * 20 + "." + "9" * 20 + "e-308", "1E+999"):
        assert accepts(builtin, ok.encode()), ok
    for bad in ("1." + "0" * 21, "9" * 21, "1e1000", "1e+0005", "1." + "0" * 1000):
        assert not accepts(builtin, bad.encode()), bad
    m = GrammarMatcher(builtin)
    assert m.accept_bytes(b"[1." + b"0" * 20)
    mask = allocate_token_bitmask(1, BYTES.vocab_size)
    assert m.fill_next_token_bitmask(mask)
    allowed = bitmask_to_bool(mask[0], BYTES.vocab_size)
    assert not any(allowed[ord(c)] for c in "0123456789")
    assert allowed[ord("]")]
    assert allowed[ord("e")]


def test_json_grammar_digit_bounds_are_checked() -> None:
    for bad in (
        {"max_integer_digits": 0},
        {"max_fraction_digits": -1},
        {"max_exponent_digits": True},
    ):
        with pytest.raises(ConfigurationError):
            json_grammar(**bad)  # type: ignore[arg-type]
    g = GrammarCompiler(BYTES).compile_grammar_ir(
        json_grammar("compact", max_fraction_digits=0, max_exponent_digits=0)
    )
    assert accepts(g, b"[12,-3]")
    assert not accepts(g, b"1.5")
    assert not accepts(g, b"1e5")


_NUMBER = re.compile(rb"-?(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE][+-]?([0-9]+))?")
_WS_RUN = re.compile(rb"[ \t\n\r]+")


def _within_bounds(data: bytes) -> bool:
    """No whitespace run and no number over the built-in bounds (a rough lexical scan: strings
    in JSONTestSuite's y_ files hold no digit runs or whitespace runs that long)."""
    if any(len(r) > WS for r in _WS_RUN.findall(data)):
        return False
    for m in _NUMBER.finditer(data):
        if len(m.group(1)) > 20 or len(m.group(2) or b"") > 20 or len(m.group(3) or b"") > 3:
            return False
    return True


def test_json_test_suite_within_the_bounds(builtin, shared_data: Path) -> None:
    folder = shared_data / "JSONTestSuite" / "test_parsing"
    if not folder.is_dir():
        pytest.skip(f"JSONTestSuite not found at {folder}")
    files = {p.name: p.read_bytes() for p in sorted(folder.glob("*.json"))}
    ys = {n: d for n, d in files.items() if n.startswith("y_")}
    assert len(ys) >= 60
    outside = sorted(n for n, d in ys.items() if not _within_bounds(d))
    assert outside == ["y_number_double_close_to_zero.json"]  # 78 fraction digits
    wrong = [n for n, d in ys.items() if accepts(builtin, d) != (n not in outside)]
    assert not wrong, wrong
    accepted_n = [
        n for n, d in files.items() if n.startswith("n_") and len(d) <= BIG and accepts(builtin, d)
    ]
    assert not accepted_n, accepted_n
    # implementation-defined numbers: exponents of 4 or more digits and integers of more than 20
    # digits are past the bound
    i_numbers = {n: accepts(builtin, d) for n, d in files.items() if n.startswith("i_number")}
    assert {n for n, ok in i_numbers.items() if not ok} == {
        "i_number_huge_exp.json",
        "i_number_neg_int_huge_exp.json",
        "i_number_real_neg_overflow.json",
        "i_number_real_pos_overflow.json",
        "i_number_real_underflow.json",
        "i_number_too_big_neg_int.json",  # 30 integer digits: past the bound of 20
        "i_number_very_big_negative_int.json",  # 48 integer digits
    }


def test_generate_json_grammar_stops_a_whitespace_loving_model() -> None:
    from formcast.generation import generate
    from formcast.model.callable import CallableModel

    def spaces(seq: list[int]) -> np.ndarray:
        logits = np.full(BYTES.vocab_size, -5.0)
        logits[ord(" ")] = 10.0
        logits[ord("0")] = 9.0
        logits[EOS] = -10.0
        return logits

    result = generate(CallableModel(spaces, BYTES), [65], grammar="json", max_tokens=500)
    assert result.finish_reason == "completed"
    assert result.text == " " * WS + "0" + " " * WS
    assert result.value == 0
