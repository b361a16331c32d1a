"""The candidate checks of verdict40 (#31 TBM max): large candidate sets walked on a table of
parser states (``cfg_program._verify_by_table``) and checks of a capped state started from its
relaxed twin (``cfg_program._checked_state``) give the verdicts the level-by-level steps give.

* ``_verify_by_levels(..., table=True)`` against ``table=False`` (the steps alone) on large
  sets of the Llama-3 trie's strings, from states along random documents of several grammars
  (strings closing into objects, arrays and the top level; a ``maxLength`` pattern string as
  MaskBench o82853's ``name``), the table's overflow rows included (strings that leave them
  are stepped); a parser with a small stack-depth limit (dead steps carrying an error: the
  error must come back);
* the same stack top under different stacks (a string inside an array, an object, the top
  level) gets different verdicts for the same suffix (``"]`` / ``"}`` / ``"``): the table
  is made from the whole parser state, never from the top alone;
* a capped state's checks from its relaxed twin: the same verdicts, on states along a long
  counted string (left above, at and below the cap);
* masks with both on equal masks with both off, on random walks over several schemas (where
  ``cfg_program`` runs interpreted: a compiled module binds its switches at build time).
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast._native import compiled_modules
from formcast.automata.pda import ParserState, PushdownAutomaton
from formcast.limits import ParserLimits
from formcast.vocab.loaders import load_vocabulary

NAME_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "pattern": r"^([\w\/-]|[\w-][\w\/-]*[\w-])$",
            "maxLength": 255,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}},
        "n": {"type": "integer"},
        "inner": {
            "type": "object",
            "properties": {"s": {"type": "string"}, "k": {"enum": ["a", "bb"]}},
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}

DOCS = [
    {"name": "sidebar-top/x", "tags": ["ab", "c d"], "n": 12, "inner": {"s": "q r", "k": "bb"}},
    {"name": "a", "inner": {"k": "a"}},
    {"name": "html-head", "tags": [], "n": -3},
]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _states(pda: PushdownAutomaton, data: bytes, every: int = 1) -> list[ParserState]:
    out: list[ParserState] = []
    st = pda.initial
    for j, b in enumerate(data):
        if j % every == 0:
            out.append(st)
        st = pda.step(st, b)
        assert not st.dead, data[: j + 1]
    out.append(st)
    return out


def _cands(
    rng: random.Random, pda: PushdownAutomaton, st: ParserState, vocab: Vocabulary, size: int
) -> np.ndarray:
    """A sorted set of at least ``size`` string indices: those starting with a byte ``st``
    takes, topped up with random others (dead at their first byte)."""
    strings = vocab.trie.strings
    allowed = set(pda.next_bytes(st).tolist())
    live = [i for i, s in enumerate(strings) if s and s[0] in allowed]
    picked = set(live)
    while len(picked) < size:
        picked.add(rng.randrange(len(strings)))
    return np.asarray(sorted(picked), dtype=np.int64)


def _both(
    pda: PushdownAutomaton, st: ParserState, vocab: Vocabulary, cands: np.ndarray, capped: bool
) -> tuple[list[int], str | None]:
    step = pda.step_capped if capped else pda.step
    flat = vocab.trie.strings_end_to_end()
    ok_t, err_t = cfg_program._verify_by_levels(step, st, vocab.trie, cands, flat, pda.step_memo)
    ok_s, err_s = cfg_program._verify_by_levels(
        step, st, vocab.trie, cands, flat, pda.step_memo, table=False
    )
    assert sorted(ok_t.tolist()) == sorted(ok_s.tolist())
    assert err_t == err_s
    return sorted(ok_t.tolist()), err_t


def test_table_checks_equal_steps(vocab: Vocabulary) -> None:
    compiler = GrammarCompiler(vocab, cache_size=0)
    grammars = [
        (
            compiler.compile_json_schema(json.dumps(NAME_SCHEMA)),
            [json.dumps(d, separators=(",", ":")) for d in DOCS],
        ),
        (
            compiler.compile_builtin_json_grammar(),
            ['{"a": ["xy", {"b": "zz"}], "c": "w"}', '["p q", ["r"], {"s": "t"}]', '"solo"'],
        ),
    ]
    rng = random.Random(5)
    tabled = unknown = accepted = 0
    for grammar, texts in grammars:
        program = grammar.program
        pda = program.pda
        capped = bool(program._counted.rules)
        for text in texts:
            for st in _states(pda, text.encode(), every=2):
                if capped:
                    st = pda.capped(st, program._cap)
                cands = _cands(rng, pda, st, vocab, cfg_program._TABLE_VERIFY_MIN)
                step = pda.step_capped if capped else pda.step
                got = cfg_program._verify_by_table(pda, step, st, vocab.trie, cands, pda.step_memo)
                if got is not None:
                    tabled += 1
                    unknown += int(got[1].size)
                ok, _ = _both(pda, st, vocab, cands, capped)
                accepted += len(ok)
    assert tabled > 40
    assert unknown > 0  # (strings leaving the table's rows were stepped)
    assert accepted > 100_000


def test_table_checks_report_limit_errors(vocab: Vocabulary) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    pda = PushdownAutomaton(grammar.program.auto, ParserLimits(max_stack_depth=6))
    rng = random.Random(9)
    errors = 0
    for st in _states(pda, b"[[[ [", every=1):
        cands = _cands(rng, pda, st, vocab, cfg_program._TABLE_VERIFY_MIN)
        _, err = _both(pda, st, vocab, cands, False)
        errors += err is not None
    assert errors


def test_same_top_other_stack_other_verdict(vocab: Vocabulary) -> None:
    """The string state's top is the same in an array, an object and at the top level; the
    verdicts of ``"]``, ``"}`` and ``",`` after it are not (``"`` lives in all three): a
    table (or any verdict kept) made per top alone would give one of them the others'."""
    grammar = GrammarCompiler(vocab, cache_size=0).compile_builtin_json_grammar()
    pda = grammar.program.pda
    trie = vocab.trie
    index = {s: i for i, s in enumerate(trie.strings)}
    probes = [b'"]', b'"}', b'",', b'"']
    assert all(p in index for p in probes)
    rng = random.Random(2)
    ends = {b'["ab': pda.initial, b'{"k": "ab': pda.initial, b'"ab': pda.initial}
    verdicts: dict[bytes, tuple[bool, ...]] = {}
    tops = set()
    for text in ends:
        st = pda.step_bytes(pda.initial, text)
        tops.add(frozenset((f.rule, f.state) for f in st.frames))
        cands = _cands(rng, pda, st, vocab, cfg_program._TABLE_VERIFY_MIN)
        cands = np.union1d(cands, [index[p] for p in probes]).astype(np.int64)
        got = cfg_program._verify_by_table(pda, pda.step, st, trie, cands, pda.step_memo)
        assert got is not None
        ok = set(got[0].tolist())
        verdicts[text] = tuple(index[p] in ok for p in probes)
        want = set(_both(pda, st, vocab, cands, False)[0])
        assert ok <= want <= ok | set(got[1].tolist())
    assert len(tops) == 1  # the same top...
    assert verdicts[b'["ab'] == (True, False, True, True)
    assert verdicts[b'{"k": "ab'] == (False, True, True, True)
    assert verdicts[b'"ab'] == (False, False, False, True)


def test_relaxed_checks_equal_capped_checks(vocab: Vocabulary) -> None:
    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(json.dumps(NAME_SCHEMA))
    program = grammar.program
    pda = program.pda
    rules = program._counted.rules
    assert rules
    cap = program._cap
    trie = vocab.trie
    rng = random.Random(4)
    text = b'{"name":"' + b"ab-c/d" * 40 + b'"}'
    relaxed = 0
    for st in _states(pda, text, every=13):
        capped = pda.capped(st, cap)
        start = cfg_program._checked_state(pda, capped, rules, cap)
        relaxed += start is not capped
        cands = _cands(rng, pda, capped, vocab, 300)
        sub = np.asarray(sorted(rng.sample(cands.tolist(), 100)), dtype=np.int64)
        for c in (cands, sub):
            want = cfg_program._verify_in_order(pda.step_capped, capped, trie, c, pda.step_memo)
            got = cfg_program._verify_in_order(pda.step_capped, start, trie, c, pda.step_memo)
            assert sorted(got[0].tolist()) == sorted(want[0].tolist())
            assert got[1] == want[1]
    assert relaxed > 3


def _walk_ids(vocab: Vocabulary, text: str) -> list[int]:
    trie = vocab.trie
    by_string = {s: int(trie.first_token[i]) for i, s in enumerate(trie.strings) if len(s) <= 5}
    data = text.encode()
    ids, at = [], 0
    while at < len(data):
        n = next(n for n in range(min(5, len(data) - at), 0, -1) if data[at : at + n] in by_string)
        ids.append(by_string[data[at : at + n]])
        at += n
    return ids


@pytest.mark.skipif(
    compiled_modules().get("formcast.index.cfg_program", False),
    reason="a compiled cfg_program binds its switches at build time",
)
def test_masks_equal_with_and_without(vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch) -> None:
    schemas: list[tuple[Any, list[Any]]] = [
        (NAME_SCHEMA, DOCS),
        (
            {
                "type": "array",
                "items": {"type": "string", "pattern": "^[a-z-]+$", "maxLength": 300},
            },
            [["abc-def", "x"], []],
        ),
    ]
    masks: dict[bool, list[bytes]] = {}
    for on in (True, False):
        monkeypatch.setattr(cfg_program, "_TABLE_CHECKS", on)
        monkeypatch.setattr(cfg_program, "_RELAX_CHECKS", on)
        monkeypatch.setattr(cfg_program, "_TABLE_VERIFY_MIN", 256)  # (every level check)
        masks[on] = []
        for schema, docs in schemas:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(json.dumps(schema))
            for doc in docs:
                m = GrammarMatcher(grammar)
                for tok in [*_walk_ids(vocab, json.dumps(doc, separators=(",", ":"))), None]:
                    masks[on].append(m.next_token_words().tobytes())
                    if tok is None:
                        break
                    assert m.accept_token(tok)
    assert masks[True] == masks[False]
    assert len(masks[True]) > 60


def test_multi_top_self_loop_steps_equal_full_steps(vocab: Vocabulary) -> None:
    """``PushdownAutomaton.step``'s shortcut for a state of several tops that one byte steps to
    itself (``_loops_back``: the string's content bytes where the string may end) gives the
    state the full step (``_step``) gives, for every byte from states along documents."""
    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(json.dumps(NAME_SCHEMA))
    pda = grammar.program.pda
    # a number's top, joined to the string's states below: the string's top still loops on
    # a letter alone, but the state is no longer its closure (the step drops the number)
    number = pda.step_bytes(pda.initial, b'{"name":"a","n":1')
    looped = joined = 0
    for doc in DOCS:
        for st in _states(pda, json.dumps(doc, separators=(",", ":")).encode()):
            if st.far:
                st = pda.capped(st, grammar.program._cap, relax=True)
            both = pda.state_of(st.frames | number.frames, st.accepting)
            for b in range(256):
                for s in (st, both):
                    full = pda._step(s, b)
                    fast = pda.step(s, b)
                    assert fast is full or (fast.dead and full.dead and fast.error == full.error)
                looped += len(st.frames) > 1 and pda.step(st, b) is st
                joined += pda.step(st, b) is st and pda.step(both, b) is st
    assert looped > 100
    assert joined > 100
