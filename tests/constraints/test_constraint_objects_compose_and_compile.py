"""Constraint objects are immutable values that compose, cache, print and generate.

* equal constraints are equal, hash alike and share one compiled grammar (the compiler's
  cache key is the constraint's canonical text);
* ``+`` is ``seq``, ``|`` is ``select``, and both flatten;
* a ``json`` copies its schema (a later change to the caller's dict does not leak in);
* a regular constraint (no rules, no JSON) compiles as a regex does: one DFA, the same fuel;
* ``generate(..., constraint=c)`` and ``ConditionedSampler(..., constraint=c)`` produce text
  of the constraint's language (a scripted model over a small vocabulary).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from formcast import (
    ConditionedSampler,
    ConfigurationError,
    GrammarCompiler,
    GrammarMatcher,
    Vocabulary,
    generate,
)
from formcast import constraints as C
from formcast.index.regex_program import RegexProgram
from formcast.model.callable import CallableModel

TOKENS = [bytes([b]) for b in range(32, 127)] + [b"\n", b"Answer: ", b"yes", b"<eos>"]
EOS = len(TOKENS) - 1


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.from_tokens(TOKENS, stop_token_ids=[EOS], name="ascii")


def test_values_are_immutable_equal_and_hashable() -> None:
    a = C.seq("x", C.regex("[0-9]+"), C.optional(C.json({"type": "integer"})))
    b = C.seq("x", C.regex("[0-9]+"), C.optional(C.json({"type": "integer"})))
    assert a == b
    assert hash(a) == hash(b)
    assert a.cache_key() == b.cache_key()
    assert a != C.seq("x", C.regex("[0-9]*"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.items = ()  # type: ignore[misc]


def test_operators_flatten() -> None:
    s = C.literal("a") + "b" + C.regex("c")
    assert isinstance(s, C.Seq)
    assert len(s.items) == 3
    o = "x" | C.literal("y") | C.regex("z")
    assert isinstance(o, C.Select)
    assert len(o.options) == 3
    assert C.seq() == C.literal("")
    assert C.select(["only"]) == C.literal("only")


def test_json_copies_its_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    c = C.json(schema)
    key = c.cache_key()
    schema["properties"]["a"]["type"] = "string"
    assert c.cache_key() == key
    assert (
        c.to_gbnf()
        == C.json({"type": "object", "properties": {"a": {"type": "integer"}}}).to_gbnf()
    )


def test_equal_constraints_share_one_compiled_grammar(vocab: Vocabulary) -> None:
    comp = GrammarCompiler(vocab)
    first = comp.compile(C.seq("a", C.json({"type": "boolean"})))
    again = comp.compile(C.seq("a", C.json({"type": "boolean"})))
    assert again is first
    assert comp.hits == 1


def test_a_regular_constraint_compiles_like_its_regex(vocab: Vocabulary) -> None:
    comp = GrammarCompiler(vocab, cache_size=0)
    c = C.seq("Answer: ", C.select(["yes", "no"]), "\n", C.repeat(C.regex("[0-9]"), 1, 3))
    as_constraint = comp.compile(c)
    as_regex = comp.compile_regex(r"Answer: (yes|no)\n[0-9]{1,3}")
    assert isinstance(as_constraint.program, RegexProgram)
    assert as_constraint.program.dfa.num_states == as_regex.program.dfa.num_states  # type: ignore[attr-defined]


def test_a_transition_table_compiles_like_its_regex(vocab: Vocabulary) -> None:
    comp = GrammarCompiler(vocab, cache_size=0)
    m = C.StateMachine(
        "start",
        ["end"],
        [
            ("start", "GET ", "verb"),
            ("start", "PUT ", "verb"),
            ("verb", "/a", "path"),
            ("verb", "/b", "path"),
            ("path", "/", "verb"),
            ("path", " HTTP", "end"),
        ],
    )
    machine = comp.compile(m)
    regex = comp.compile_regex(r"(GET |PUT )/[ab](//[ab])* HTTP")
    assert isinstance(machine.program, RegexProgram)
    assert machine.program.dfa.num_states == regex.program.dfa.num_states  # type: ignore[attr-defined]


def _scripted(vocab: Vocabulary, text: str) -> CallableModel:
    """A model that wants to write ``text`` (then EOS) whatever it is asked."""
    wanted = [TOKENS.index(bytes([b])) for b in text.encode()] + [EOS]

    def logits(ids: list[int]) -> np.ndarray:
        out = np.zeros(vocab.vocab_size, dtype=np.float32)
        k = len(ids) - 1  # the prompt is one token
        out[wanted[k] if k < len(wanted) else EOS] = 10.0
        return out

    return CallableModel(logits, vocab)


def test_generate_and_the_sampler_take_a_constraint(vocab: Vocabulary) -> None:
    c = C.seq(
        "Answer: ",
        C.json({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
        "\nConfidence: ",
        C.regex(r"0\.[0-9]|1"),
    )
    model = _scripted(vocab, 'Answer: {"ok":true}\nConfidence: 0.9')
    result = generate(model, [0], constraint=c, max_tokens=80)
    assert result.finish_reason == "completed"
    assert re.fullmatch(r'Answer: \{"ok":(true|false)\}\nConfidence: (0\.[0-9]|1)', result.text)
    # a model that wants something else is held to the constraint
    stubborn = _scripted(vocab, "Answer: maybe, about 0.5")
    forced = generate(stubborn, [0], constraint=c, max_tokens=80)
    assert forced.text.startswith('Answer: {"ok":')
    sampler = ConditionedSampler(model, [0], constraint=c, method="mask", max_tokens=80)
    (sample,) = sampler.sample(1, seed=0)
    assert sample.text.startswith('Answer: {"ok":')
    with pytest.raises(ConfigurationError, match="at most one constraint"):
        generate(model, [0], constraint=c, regex="a")


def test_shared_parts_print_once(vocab: Vocabulary) -> None:
    """A part used twice at each of 25 levels is 2**25 copies as a tree, 25 as a DAG: the
    printed grammar outlines shared parts as rules, so it stays small and compiles to the same
    language (one of ``( [ {`` 25 times, then ``x``, then ``)`` 25 times)."""
    part: C.Constraint = C.literal("x")
    for _ in range(25):
        part = C.seq(C.select(["(", "["]), part, ")") | C.seq("{", part, ")")
    gbnf, lark = part.to_gbnf(), part.to_lark()
    assert len(gbnf) < 5000
    assert len(lark) < 5000
    comp = GrammarCompiler(vocab)
    text = "(" * 12 + "{" * 3 + "[" * 10 + "x" + ")" * 25
    for compiled in (
        comp.compile(part),
        comp.compile_grammar(gbnf),
        comp.compile_grammar(lark, syntax="lark"),
    ):
        m = GrammarMatcher(compiled)
        assert m.accept_tokens([TOKENS.index(bytes([b])) for b in text.encode()])
        assert m.is_accepting()
        assert not GrammarMatcher(compiled).accept_tokens([TOKENS.index(b"{"), TOKENS.index(b"}")])


def test_json_takes_a_pydantic_model(vocab: Vocabulary) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        y: int

    c = C.json(Point)
    assert c.cache_key() == C.json(Point.model_json_schema()).cache_key()
    comp = GrammarCompiler(vocab)
    m = GrammarMatcher(comp.compile(C.seq("P=", c)))
    assert m.accept_tokens([TOKENS.index(bytes([b])) for b in b'P={"x":1,"y":-2}'])
    assert m.is_accepting()
