"""The process-wide rule automaton cache (``automata.rules.RULE_DFA_CACHE``).

* A rule compiled in one grammar serves another grammar that numbers its rules differently
  (call edges are stored by callee name): the masks are those of a cold compile.
* A hit is charged the fuel its build cost, so whether a compile fits ``max_compile_work``
  does not depend on what the process compiled before.
"""

from __future__ import annotations

import numpy as np
import pytest

import formcast.automata.rules as rules_mod
from formcast import CompileLimits, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata.rules import RULE_DFA_CACHE, compile_grammar_automaton
from formcast.errors import LimitExceededError
from formcast.frontends.gbnf import parse_gbnf
from formcast.ir.nodes import Grammar, ProgramHints, node_refs

VOCAB = Vocabulary.from_tokens(
    [bytes([b]) for b in range(32, 127)] + [b'{"', b'":', b'",', b"true", b"<eos>"],
    stop_token_ids=[99],
    name="ascii",
)

# the same recursive rule ("item") in two grammars whose rule ids differ
GRAMMAR_A = 'root ::= "[" item "]"\nitem ::= "a" | "(" item ")" | "b" item'
GRAMMAR_B = (
    'root ::= "<" other ">" item\nother ::= "x" other | "y"\nitem ::= "a" | "(" item ")" | "b" item'
)


def _masks(compiled, text: bytes) -> list[bytes]:
    m = GrammarMatcher(compiled)
    out = [np.asarray(m.allowed_token_ids()).tobytes()]
    for b in text:
        assert m.accept_bytes(bytes([b]))
        out.append(np.asarray(m.allowed_token_ids()).tobytes())
    return out


def test_a_cached_rule_serves_a_grammar_that_numbers_rules_differently() -> None:
    RULE_DFA_CACHE.clear()
    cold = GrammarCompiler(VOCAB, cache_size=0).compile_grammar(GRAMMAR_B)
    want = _masks(cold, b"<xxy>b(a)")
    RULE_DFA_CACHE.clear()
    GrammarCompiler(VOCAB, cache_size=0).compile_grammar(GRAMMAR_A)  # caches "item"
    hits = RULE_DFA_CACHE.hits
    warm = GrammarCompiler(VOCAB, cache_size=0).compile_grammar(GRAMMAR_B)
    assert RULE_DFA_CACHE.hits > hits
    assert _masks(warm, b"<xxy>b(a)") == want


def test_json_schema_boilerplate_is_shared_and_exact() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    RULE_DFA_CACHE.clear()
    cold = GrammarCompiler(VOCAB, cache_size=0).compile_json_schema(schema)
    text = b'{"a":"q","zz":[1,{"k":null}],"b":true}'
    want = _masks(cold, text)
    hits = RULE_DFA_CACHE.hits
    warm = GrammarCompiler(VOCAB, cache_size=0).compile_json_schema(schema)
    assert RULE_DFA_CACHE.hits > hits
    assert _masks(warm, text) == want


def test_fuel_is_charged_on_a_hit() -> None:
    """A warm compile spends the fuel of a cold one, so limits decide alike."""
    grammar = parse_gbnf(GRAMMAR_B)
    limits = CompileLimits()
    RULE_DFA_CACHE.clear()
    cold = limits.budget()
    compile_grammar_automaton(grammar, limits, budget=cold)
    hits = RULE_DFA_CACHE.hits
    warm = limits.budget()
    compile_grammar_automaton(grammar, limits, budget=warm)
    assert RULE_DFA_CACHE.hits > hits
    assert warm.used == cold.used > 0
    tight = CompileLimits(max_compile_work=cold.used - 1)
    for _ in range(2):  # cold, then with whatever the failed attempt cached
        with pytest.raises(LimitExceededError):
            compile_grammar_automaton(grammar, tight)


def test_ir_equality_is_iterative_and_linear_in_the_dag() -> None:
    """Cache keys are rule bodies compared structurally: a deep body must not overflow the
    stack, and a DAG whose tree unfolding is exponential must compare in linear time."""
    from formcast.ir.nodes import Alt, Concat, Literal, Repeat

    def deep(n: int):
        node = Literal("x")
        for i in range(n):
            node = Concat((Literal(str(i % 7)), Repeat(node, 0, 2)))
        return node

    a, b = deep(20_000), deep(20_000)
    assert a is not b
    assert hash(a) == hash(b)
    assert a == b
    assert a != deep(19_999)

    def dag(n: int, last: str):
        node = Literal(last)
        for _ in range(n):
            node = Alt((Concat((node, Literal("b"))), Concat((node, Literal("c")))))
        return node

    assert dag(80, "a") == dag(80, "a")  # 2**80 paths, 160 distinct pairs
    assert dag(80, "a") != dag(80, "z")


# two rules equal up to the names of their callees (and a third whose callees come in another
# order): one cache entry, each mapped back onto its own callees
GRAMMAR_RENAMED = "\n".join(
    [
        'root ::= "<" a1 ">" | "[" b1 "]" | "{" c1 "}"',
        'a1 ::= "x" a1 a2 | "y" a3',
        'b1 ::= "x" b1 b2 | "y" b3',
        'c1 ::= "x" c1 b3 | "y" a2',
        'a2 ::= "p" a2 | "p"',
        'b2 ::= "q" b2 | "q"',
        'a3 ::= "r" a3 | "s"',
        'b3 ::= "t" b3 | "u"',
    ]
)


def _accepts(compiled, text: bytes) -> bool:
    m = GrammarMatcher(compiled)
    return m.accept_bytes(text) and m.is_accepting()


def _renamed_grammar() -> Grammar:
    # no expansion of small recursive callees into their callers (as for JSON Schema), so the
    # rules keep their shapes
    g = parse_gbnf(GRAMMAR_RENAMED)
    return Grammar(g.rules, g.start, hints=ProgramHints(expand_calls=False))


def test_rules_equal_up_to_callee_names_share_an_entry_and_keep_their_callees() -> None:
    RULE_DFA_CACHE.clear()
    hits = RULE_DFA_CACHE.hits
    compiled = GrammarCompiler(VOCAB, cache_size=0).compile_grammar_ir(_renamed_grammar())
    assert RULE_DFA_CACHE.hits > hits  # within one cold compile
    for text, ok in [
        (b"<ys>", True),
        (b"<xysp>", True),
        (b"<xxyrsppp>", True),
        (b"<yu>", False),
        (b"<xysq>", False),
        (b"[yu]", True),
        (b"[xytuq]", True),
        (b"[ys]", False),
        (b"[xyup]", False),
        (b"{yp}", True),
        (b"{ypp}", True),
        (b"{xypu}", True),
        (b"{xxyputtu}", True),
        (b"{ys}", False),
        (b"{xypq}", False),
        (b"{xyps}", False),
    ]:
        assert _accepts(compiled, text) is ok, text


def test_a_shared_entry_charges_what_building_each_rule_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = CompileLimits()
    RULE_DFA_CACHE.clear()
    cold = limits.budget()
    hits = RULE_DFA_CACHE.hits
    compile_grammar_automaton(_renamed_grammar(), limits, budget=cold, expand_calls=False)
    assert RULE_DFA_CACHE.hits > hits
    warm = limits.budget()
    compile_grammar_automaton(_renamed_grammar(), limits, budget=warm, expand_calls=False)
    # keyed by the body itself (callee names included: no sharing between the rules; the
    # interpreted package only, a compiled module calls its own function)
    RULE_DFA_CACHE.clear()
    monkeypatch.setattr(
        rules_mod, "_canonical_body", lambda body: (body, tuple(sorted(node_refs(body))))
    )
    apart = limits.budget()
    compile_grammar_automaton(_renamed_grammar(), limits, budget=apart, expand_calls=False)
    assert warm.used == cold.used == apart.used > 0
