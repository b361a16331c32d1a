"""The parser's step memo kept in per-state rows (``ParserState.nexts``), and the candidate
checks that read them (#31, check33).

``PushdownAutomaton.step`` memoizes ``state --byte--> state`` in the state's own dict of
successors by byte (made on its first memoized step, emptied with the parser's caches); the checks
(``cfg_program._verify_in_order`` / ``_verify_looped`` / ``_verify_strings`` /
``_verify_by_levels``) and ``step_bytes`` read it before calling ``step``.  Oracles:

* every verdict of the checks equals that of stepping each candidate's bytes with the
  unmemoized step (``PushdownAutomaton._step``, no row read), with caches small enough that
  they are reset in the middle of walks and checks;
* every memoized row entry is the state ``_step`` computes (compared by frames and flags);
* masks along seeded walks are the same with tiny caches (many resets) as with the defaults;
* a reset leaves no row behind (the rows are what ``max_cache_entries`` bounds), and the
  ``step_memo()`` view agrees with the rows.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata.pda import NO_STEPS, ParserState
from formcast.limits import ParserLimits
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
GBNF_DIR = SHARED / "llama.cpp-grammars" / "grammars"
COUNTED = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "maxLength": 40},
        "a": {"type": "array", "items": {"type": "integer"}, "maxItems": 5},
        "n": {"type": "number"},
    },
    "required": ["s", "a"],
}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary, which: str, max_cache_entries: int | None) -> CompiledGrammar:
    limits = (
        ParserLimits()
        if max_cache_entries is None
        else ParserLimits(max_cache_entries=max_cache_entries)
    )
    c = GrammarCompiler(vocab, cache_size=0, parser_limits=limits)
    if which == "builtin":
        return c.compile_builtin_json_grammar()
    if which == "counted":
        return c.compile_json_schema(COUNTED)
    path = GBNF_DIR / which
    if not path.exists():
        pytest.skip(f"shared data missing: {path}")
    return c.compile_grammar(path.read_text("utf-8"))


def _key(s: ParserState) -> tuple[Any, ...]:
    def frame(f: Any) -> tuple[Any, ...]:
        out = []
        while f is not None:
            out.append((f.rule, f.state, f.need, f.left))
            f = f.parent
        return tuple(out)

    return (s.accepting, s.dead, s.error, frozenset(frame(f) for f in s.frames))


GRAMMARS = ["builtin", "counted", "json.gbnf", "c.gbnf"]


@pytest.mark.parametrize("which", GRAMMARS)
def test_checks_match_unmemoized_steps(vocab: Vocabulary, which: str) -> None:
    compiled = _compile(vocab, which, 800)  # resets inside walks and checks
    program: Any = compiled.program
    pda = program.pda
    trie = vocab.trie
    rng = random.Random(5)

    def fresh(st: ParserState, b: int) -> ParserState:
        with pda._lock:
            return pda._step(st, b)

    checked = rows_checked = 0
    for walk in random_walks(compiled, walks=3, steps=20, seed=9):
        m = GrammarMatcher(compiled)
        for t in [*walk, None]:
            state = m._history[-1]  # (the matcher's parser state)
            m.allowed_token_ids()  # (the program's mask: fills the rows the checks read)
            states = [s for s in pda._rowed if not s.dead][-6:]
            if isinstance(state, ParserState):
                states.append(state)
            for st in states:
                cand: set[int] = set()
                for f in st.frames:
                    if f.rule not in program._counted.rules:
                        cand.update(program.classify(f.rule, f.state).candidates.tolist())
                cand.update(rng.sample(range(trie.num_strings), 300))
                cands = np.asarray(sorted(cand), dtype=np.int64)
                want, _ = cfg_program._verify_in_order(fresh, st, trie, cands)
                got, _ = cfg_program._verify_in_order(pda.step, st, trie, cands, pda.step_memo)
                lv, _ = cfg_program._verify_by_levels(pda.step, st, trie, cands)
                assert got.tolist() == want.tolist()
                assert sorted(lv.tolist()) == want.tolist()
                checked += 1
            for st in list(pda._rowed)[-40:]:  # memoized entries are the steps
                for b, nxt in list(st.nexts.items()):
                    assert _key(nxt) == _key(fresh(st, b)), (st, b)
                    rows_checked += 1
            if t is not None:
                assert m.accept_token(t)
    assert checked > 20
    assert rows_checked > 100
    assert pda.cache_resets > 0, "the caches were never reset: make them smaller"


@pytest.mark.parametrize("which", GRAMMARS)
def test_masks_with_tiny_caches_equal_the_defaults(vocab: Vocabulary, which: str) -> None:
    ref = _compile(vocab, which, None)
    walks = random_walks(ref, walks=3, steps=25, seed=3)
    want = replay_masks(ref, walks)
    tiny = _compile(vocab, which, 100)
    got = replay_masks(tiny, walks)
    assert tiny.program.pda.cache_resets > 0  # type: ignore[attr-defined]
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]}"


def test_reset_clears_every_row_and_the_view_agrees(vocab: Vocabulary) -> None:
    compiled = _compile(vocab, "builtin", None)
    pda: Any = compiled.program.pda  # type: ignore[attr-defined]
    state = pda.step_bytes(pda.initial, b'{"a": [1, 2.5, {"b": "x"}], "c": tru')
    assert not state.dead
    rowed = list(pda._rowed)
    assert rowed
    assert all(type(s.nexts) is dict and s.nexts and s.nexts is not NO_STEPS for s in rowed)
    memo = pda.step_memo()
    entries = [(s, b) for s in rowed for b in s.nexts]
    assert len(memo) == len(entries) > 0
    for s, b in entries[:50]:
        assert (s, b) in memo
        assert memo.get((s, b)) is s.nexts[b] is memo[(s, b)] is not None
    assert (state, 7) not in memo
    assert memo.get((state, 7)) is None
    assert pda.cache_entries() >= len(entries)  # what max_cache_entries bounds
    pda._reset_caches()
    assert all(s.nexts is NO_STEPS for s in rowed), "a reset left rows behind"
    assert not NO_STEPS
    assert len(pda.step_memo()) == 0
    assert not pda._rowed
    # the states made before the reset still step right (into the new generation)
    again = pda.step_bytes(state, b"e}")
    assert again.accepting
    pda.step_memo().clear()
    assert all(s.nexts is NO_STEPS for s in rowed)
    assert len(pda.step_memo()) == 0
