"""The call-expanded lexer (``build_expanded_lexer``) against a simulation of what it determinizes.

The lexer joins every rule DFA by its call edges: from rule position ``(r, q)`` a byte moves each
member of the current set of global states (``offsets[rule] + state``) along its own DFA, and a
state that calls rules adds their start states (calls are epsilon moves; returns are not
followed).  The reference keeps that set explicitly, one byte at a time; the lexer's state must
be dead exactly when the set is empty, must stand for one set only (a deterministic quotient),
and its split flag on a byte must be the set's: some member accepts and the byte may follow or
restart its rule (or, for a counted rule allowing zero iterations, its start state with a byte
that may follow the rule).  Grammars: hand-written ones with calls whose first bytes overlap
(so several members live on at once) and the grammars of a few JSON schemas.
"""

from __future__ import annotations

import numpy as np
import pytest

from formcast import GrammarCompiler
from formcast.automata.dfa import DEAD
from formcast.automata.lexer import build_expanded_lexer
from formcast.automata.rules import GrammarAutomaton
from formcast.index.cfg_program import CfgProgram
from formcast.vocab.vocabulary import Vocabulary

_GBNF = [
    # after "a" a pair may end (a split on "," or "]") or call ``tail``: a lexer state of two
    # members whose split flags differ
    r"""root ::= pair ("," pair)* | "[" root "]"
pair ::= "a" tail?
tail ::= "b" | "c" pair""",
    r"""root ::= item ("," item)*
item ::= word | word "-" word | "\"" [a-z]* "\"" | num | "[" root "]"
word ::= [a-z] [a-z0-9]*
num ::= [0-9]+ | [0-9]+ "." [0-9]+""",
    r"""root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | [a-z]+ | [a-z]+ "(" expr ")" | "(" expr ")" """,
    r"""root ::= "{" ws (pair (ws "," ws pair)*)? ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z]{1,3} "\"" | "\"" [a-z0-9_]* "\""
val ::= key | [0-9]{1,4} | [0-9]+ "e" [0-9]+ | root | "true"
ws ::= [ \n]{0,2}""",
]

_SCHEMAS = [  # recursive (a regular grammar compiles to one DFA, without a lexer)
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 5},
                    "note": {"type": "string", "maxLength": 500},
                    "id": {"type": "integer"},
                    "tags": {"type": "array", "items": {"enum": ["a", "ab", "abc"]}},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "$defs": {
            "v": {
                "anyOf": [
                    {"type": "number"},
                    {"type": "string", "pattern": "^[a-c]+$"},
                    {"type": "array", "items": {"$ref": "#/$defs/v"}},
                ]
            }
        },
        "$ref": "#/$defs/v",
    },
]

_VOCAB = Vocabulary([bytes([b]) for b in range(256)] + [b""], stop_token_ids=[256])


def _automata() -> list[GrammarAutomaton]:
    compiler = GrammarCompiler(_VOCAB, cache_size=0)
    compiled = [compiler.compile_grammar(g) for g in _GBNF]
    compiled += [compiler.compile_json_schema(s) for s in _SCHEMAS]
    autos = []
    for c in compiled:
        assert isinstance(c.program, CfgProgram)
        autos.append(c.program.auto)
    return autos


def _reference(
    auto: GrammarAutomaton,
) -> tuple[np.ndarray, np.ndarray, list[list[int]], np.ndarray]:
    """Global tables: ``(successor per global state and byte, split flags, calls, offsets)``."""
    analysis = auto.analysis
    offsets = np.cumsum([0] + [d.table.shape[0] for d in auto.dfas])
    n = int(offsets[-1])
    succ = np.zeros((n, 256), dtype=np.int64)
    split = np.zeros((n, 256), dtype=bool)
    calls: list[list[int]] = [[] for _ in range(n)]
    for r, dfa in enumerate(auto.dfas):
        off = int(offsets[r])
        returns = analysis.follow[r] | analysis.restart[r]
        for q in range(1, dfa.table.shape[0]):
            for b in range(256):
                t = int(dfa.table[q, b])
                succ[off + q, b] = off + t if t != DEAD else 0
                split[off + q, b] = bool(dfa.accepting[q]) and bool(returns[b])
            for callee, _ in auto.refs[r][q]:
                calls[off + q].append(int(offsets[callee]) + auto.dfas[callee].start)
        count = auto.count_of(r)
        if count is not None and count[0] == 0:
            split[off + dfa.start] |= analysis.follow[r]
    return succ, split, calls, offsets


def _closure(calls: list[list[int]], states: set[int]) -> frozenset[int]:
    seen, todo = set(states), list(states)
    while todo:
        for t in calls[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return frozenset(seen)


@pytest.mark.parametrize("which", range(len(_GBNF) + len(_SCHEMAS)))
def test_the_expanded_lexer_is_the_determinized_call_expansion(which: int) -> None:
    auto = _automata()[which]
    lexer = build_expanded_lexer(auto)
    assert lexer is not None
    succ, split, calls, offsets = _reference(auto)
    assert np.array_equal(lexer.offsets, offsets)
    # every lexer state reachable from a rule position, on every byte (breadth-first)
    set_of: dict[int, frozenset[int]] = {0: frozenset()}
    todo: list[int] = []
    for r, dfa in enumerate(auto.dfas):
        for q in range(1, dfa.table.shape[0]):
            start, members = lexer.entry(r, q), _closure(calls, {int(offsets[r]) + q})
            assert set_of.setdefault(start, members) == members
            todo.append(start)
    several = 0  # lexer states standing for two or more global states
    seen = set(todo)
    while todo:
        cur = todo.pop()
        members = set_of[cur]
        several += len(members) >= 2
        for b in range(256):
            assert bool(lexer.split[cur, b]) == any(split[m, b] for m in members), (cur, b)
            nxt = {int(succ[m, b]) for m in members} - {0}
            target = _closure(calls, nxt) if nxt else frozenset()
            got = int(lexer.table[cur, b])
            assert (got == 0) == (not target)
            # a lexer state stands for one set of global states only
            assert set_of.setdefault(got, target) == target
            if got and got not in seen:
                seen.add(got)
                todo.append(got)
    assert several  # the grammar made the lexer determinize unions of several states
