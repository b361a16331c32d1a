"""The parser's step equals a reference step on plain tuples (#31, step34).

``PushdownAutomaton.step`` writes its common new steps out (``_step_one`` for a single top
that is not far, the multi-top loop of ``_step`` with frame interning and the closure memo
inlined) and reads DFA rows as memoryviews of the rule tables.  The oracle here shares none
of that: frames are tuples ``(rule, state, need, left, parent)``, the closure is the module
docstring's definition run afresh (no memo, no interning, numpy tables read directly), and
a state is compared by value: its stacks, ``accepting``, whether it is dead or carries a
limit error, and ``far`` (a counter above ``far_count`` at or below some top).

Every byte from every state along documents of: the builtin JSON grammar, a GBNF with
nesting and a string rule, a JSON schema with counted rules (``maxLength``, ``maxItems``)
under its own ``far_count`` and under ``far_count=2`` (far frames everywhere), each also
with caches small enough to reset in mid-walk, and with ``max_stacks`` / ``max_stack_depth``
low enough to stop some steps.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from formcast import GrammarCompiler, Vocabulary
from formcast.automata.dfa import DEAD
from formcast.automata.pda import PushdownAutomaton
from formcast.limits import ParserLimits
from formcast.vocab.loaders import load_vocabulary

JSON_DOC = b'{"order": [1, -2.5e3, {"a": "x\\"y z!", "b": null}], "ok": true, "n": "Zo\xc3\xab"}'
GBNF = r"""
root ::= "[" ws ( item ( "," ws item ){0,3} )? "]"
item ::= string | [0-9]+ | root
string ::= "\"" ( [^"\\] | "\\" ["\\n] )* "\""
ws ::= [ \n]*
"""
GBNF_DOC = b'[ "ab c!", 12,["x\\"y"],  [[1]]]'
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 300},
        "tags": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 200},
        "code": {"type": "string", "minLength": 40, "maxLength": 100},
    },
    "required": ["name", "tags", "code"],
}
# the name's counter goes from 300 to below the program's far_count (the longest token + 1);
# the code's counters are near from the start: single tops with ``need`` above 0
SCHEMA_DOC = json.dumps(
    {"name": "abc de" * 30, "tags": [1, 22, 333], "code": "x=1;" * 12}, separators=(",", ":")
).encode()

Ref = tuple[Any, ...]  # (rule, state, need, left, parent: Ref | None)


class _Reference:
    """The step of the module docstring on tuples: nothing memoized or interned."""

    def __init__(self, pda: PushdownAutomaton) -> None:
        self.auto, self.limits, self.fc = pda.auto, pda.limits, pda.far_count

    def far(self, f: Ref | None) -> bool:
        while f is not None:
            if self.fc is not None and (f[2] > self.fc or f[3] > self.fc):
                return True
            f = f[4]
        return False

    @staticmethod
    def depth(f: Ref | None) -> int:
        n = 0
        while f is not None:
            n, f = n + 1, f[4]
        return n

    def call(self, callee: int, ret: Ref | None) -> Ref:
        count = self.auto.count_of(callee)
        start = int(self.auto.dfas[callee].start)
        if count is None:
            return (callee, start, 0, 0, ret)
        lo, hi = count
        return (callee, start, lo, -1 if hi is None else hi, ret)

    def closure(self, start: Ref) -> tuple[set[Ref], bool, bool]:
        """(scan-ready tops, accepting, a limit stopped it)."""
        auto = self.auto
        tops: set[Ref] = set()
        acc = False
        seen = {start}
        todo = [start]
        while todo:
            fr = todo.pop()
            if len(seen) > self.limits.max_closure_work:
                return set(), False, True
            r, q, need, left, parent = fr
            dfa = auto.dfas[r]
            if (dfa.table[q] != DEAD).any():
                tops.add(fr)
            nxt: list[Ref | None] = []
            if dfa.accepting[q]:
                done = True
                if auto.count_of(r) is not None:
                    n2, l2 = max(need - 1, 0), left - 1 if left > 0 else -1
                    if l2 != 0:
                        nxt.append((r, int(dfa.start), n2, l2, parent))
                    done = n2 == 0
                if done:
                    if parent is None:
                        acc = True
                    else:
                        nxt.append(parent)
            for callee, ret in auto.refs[r][q]:
                ret_frame = parent if auto.tail[r][ret] else (r, ret, need, left, parent)
                child = self.call(callee, ret_frame)
                if self.depth(child) > self.limits.max_stack_depth:
                    return set(), False, True
                nxt.append(child)
                if child[2] == 0 and auto.count_of(callee) is not None:
                    if ret_frame is None:
                        acc = True
                    else:
                        nxt.append(ret_frame)
            for f in nxt:
                if f is not None and f not in seen:
                    seen.add(f)
                    todo.append(f)
        return tops, acc, False

    def step(self, frames: set[Ref], byte: int) -> tuple[set[Ref], bool, bool]:
        tops: set[Ref] = set()
        acc = False
        for r, q, need, left, parent in frames:
            q2 = int(self.auto.dfas[r].table[q, byte])
            if q2 == DEAD:
                continue
            got, a, err = self.closure((r, q2, need, left, parent))
            if err:
                return set(), False, True
            tops |= got
            acc = acc or a
        if len(tops) > self.limits.max_stacks:
            return set(), False, True
        return tops, acc, False


def _ref_frames(state: Any) -> set[Ref]:
    def conv(f: Any) -> Ref | None:
        return None if f is None else (f.rule, f.state, f.need, f.left, conv(f.parent))

    return {conv(f) for f in state.frames}  # type: ignore[misc]


def _walk(pda: PushdownAutomaton, doc: bytes) -> int:
    """Every byte from every state along ``doc`` against the reference; the states checked."""
    ref = _Reference(pda)
    state = pda.initial
    checked = 0
    for b in doc:
        want_from = _ref_frames(state)
        for x in range(256):
            got = pda.step(state, x)
            tops, acc, err = ref.step(want_from, x)
            assert bool(got.error) == err, (state, x)
            if err or (not tops and not acc):
                assert got.is_dead
                continue
            assert _ref_frames(got) == tops, (state, x)
            assert got.accepting == acc
            assert got.far == any(ref.far(f) for f in tops)
            # the memo answers the same object, and a second ask too
            assert pda.step(state, x) is got or got.far
        checked += 1
        state = pda.step(state, b)
        assert not state.is_dead, (doc, b)
    return checked


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _programs(vocab: Vocabulary) -> list[tuple[str, Any, bytes]]:
    c = GrammarCompiler(vocab, cache_size=0)
    return [
        ("json", c.compile_builtin_json_grammar().program, JSON_DOC),
        ("gbnf", c.compile_grammar(GBNF).program, GBNF_DOC),
        ("schema", c.compile_json_schema(SCHEMA).program, SCHEMA_DOC),
    ]


@pytest.mark.parametrize("cache", [None, 60])
@pytest.mark.parametrize("far", ["own", 2])
def test_step_matches_reference(vocab: Vocabulary, cache: int | None, far: Any) -> None:
    for name, prog, doc in _programs(vocab):
        base = prog.pda
        limits = base.limits if cache is None else ParserLimits(max_cache_entries=cache)
        pda = PushdownAutomaton(
            base.auto, limits, far_count=base.far_count if far == "own" else far
        )
        assert _walk(pda, doc) == len(doc), name
        if cache is not None:
            assert pda.cache_resets > 0, name  # resets happened in mid-walk


def test_step_limits_match_reference(vocab: Vocabulary) -> None:
    """Steps stopped by ``max_stacks`` or ``max_stack_depth`` are so by the reference too."""
    stopped = 0
    for name, prog, doc in _programs(vocab):
        for limits in (ParserLimits(max_stacks=2), ParserLimits(max_stack_depth=4)):
            pda = PushdownAutomaton(prog.pda.auto, limits, far_count=prog.pda.far_count)
            ref = _Reference(pda)
            state = pda.initial
            for b in doc:
                want_from = _ref_frames(state)
                for x in range(256):
                    got = pda.step(state, x)
                    tops, acc, err = ref.step(want_from, x)
                    assert bool(got.error) == err, (name, x)
                    stopped += err
                    if not got.is_dead:
                        assert _ref_frames(got) == tops
                        assert got.accepting == acc
                state = pda.step(state, b)
                if state.is_dead:
                    break
    assert stopped > 0


def test_rows_are_the_tables(vocab: Vocabulary) -> None:
    """A row read by a step is its DFA table's row, element for element."""
    prog = _programs(vocab)[2][1]
    pda = PushdownAutomaton(prog.pda.auto, prog.pda.limits, far_count=prog.pda.far_count)
    _walk(pda, SCHEMA_DOC[:12])
    made = 0
    for r, rule_rows in enumerate(pda._rows):
        for q, row in enumerate(rule_rows):
            if row is not None:
                made += 1
                assert list(row) == np.asarray(pda.auto.dfas[r].table[q]).tolist()
    assert made == pda._row_count > 0
