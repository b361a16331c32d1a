"""What :mod:`formcast.automata.pda` relies on stays true where it is compiled with mypyc
(``formcast._native.NATIVE_MODULES``; tests/project/test_native_build.py runs tests/automata
against the compiled copy).

* ``Frame`` and ``ParserState`` stay ordinary (interpreted) classes: *far* frames and states
  are interned weakly, and mypyc's native classes take no weak reference.  So both must take
  one, and far frames must go once nothing holds them.
* ``_PerRule`` (a ``dict`` subclass made on first look-up) refuses rules out of range.
* ``cache_resets`` counts the resets of the caches: 0 after construction.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from formcast import GrammarCompiler
from formcast.automata.pda import Frame, ParserState, PushdownAutomaton, _PerRule
from formcast.limits import ParserLimits
from formcast.vocab.loaders import load_vocabulary

# a counted string: with far_count=2 its frames are far (request-specific, weakly interned)
SCHEMA = {"type": "string", "minLength": 2, "maxLength": 300}


def test_frames_and_states_take_weak_references() -> None:
    f = Frame(0, 1, None)
    s = ParserState(frozenset((f,)), False, 0)
    assert weakref.ref(f)() is f
    assert weakref.ref(s)() is s
    assert s.frames == frozenset((f,))
    assert not s.dead
    assert not s.far


def test_far_frames_are_interned_weakly_and_dropped() -> None:
    prog = GrammarCompiler(load_vocabulary("llama3"), cache_size=0).compile_json_schema(SCHEMA)
    base = prog.program.pda
    pda = PushdownAutomaton(base.auto, base.limits, far_count=2)
    assert pda.cache_resets == 0
    state = pda.initial
    for b in b'"abcdef':
        state = pda.step(state, b)
        assert not state.dead
    assert state.far
    assert pda._far_frames
    assert pda._far_states
    before = len(pda._far_frames)
    ref = weakref.ref(state)
    del state
    gc.collect()
    assert ref() is None
    assert not pda._far_states
    assert len(pda._far_frames) < before  # the walk's far frames went with its states


def test_per_rule_lists_refuse_rules_out_of_range() -> None:
    made: list[int] = []

    def make(rule: int) -> list[bool]:
        made.append(rule)
        return [True] * (rule + 1)

    per = _PerRule(make, 3)
    assert per[2] == [True] * 3
    assert per[2] is per[2]
    assert made == [2]
    for bad in (3, -1, "1"):
        with pytest.raises(IndexError):
            per[bad]  # type: ignore[index]
    assert len(per) == 1


def test_cache_resets_count_from_zero() -> None:
    prog = GrammarCompiler(load_vocabulary("llama3"), cache_size=0).compile_json_schema(
        {"type": "array", "items": {"type": "integer"}}
    )
    base = prog.program.pda
    pda = PushdownAutomaton(base.auto, ParserLimits(max_cache_entries=40))
    assert pda.cache_resets == 0
    state = pda.initial
    for b in b"[1,22,333,4444,55555]":
        state = pda.step(state, b)
        assert not state.dead
    assert state.accepting
    assert pda.cache_resets > 0
