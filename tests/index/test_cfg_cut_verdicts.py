"""Candidate verdicts kept per cut stack give the masks of the full-stack check (#31).

``CfgProgram._verify_cut`` / ``_CutVerdicts``: a new parser state's candidates are checked on
its *cut* (its stacks above a common frame, at most a few frames deep), the verdicts kept per
cut, and only the candidates whose steps return below the cut (or hit a limit there) are
checked on the full stack.  The brute-force oracle: seeded random walks (tokens drawn from
the masks, biased towards nesting ones so stacks get deep), and at every state met, and at
copies of its stacks put on other bottoms (``_rebased``: the states a cut is shared by), the
mask with the cut verdicts on must equal the mask with them off (every candidate on the full
stack) on the same program and main's eager path (``LAZY_INDEX`` off, cut verdicts off) on
another compile.  Grammars: the builtin JSON grammar, llama.cpp's json.gbnf and c.gbnf, a
JSON schema with counted rules (``maxLength``, ``maxItems``: capped states and
``step_capped``), the same with a small ``max_stack_depth`` (the cut parser's depth bound:
limit errors must be the full stack's), and an ambiguous grammar (states of several stacks).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, ParserLimits, Vocabulary
from formcast.vocab.loaders import load_vocabulary

GBNF_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "llama.cpp-grammars"
GBNF_DIR = GBNF_DIR / "grammars"

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 6},
        "child": {"$ref": "#"},
        "kids": {"type": "array", "items": {"$ref": "#"}},
    },
}
#: nesting a token pushes several levels into after a return (``)((((``): the depth bound
PARENS = r"""
root ::= a+
a ::= "(" a* ")"
"""
AMBIGUOUS = r"""
root ::= item+
item ::= "(" root? ")" | "(" "x"* ")" | "[" item* "]" | "x"
"""


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary, which: str, lazy: bool = True) -> Any:
    limits = ParserLimits(max_stack_depth=10) if which in ("shallow_limit", "parens") else None
    compiler = GrammarCompiler(vocab, cache_size=0, parser_limits=limits)
    with mock.patch.object(cfg_program, "LAZY_INDEX", lazy):
        if which == "builtin":
            return compiler.compile_builtin_json_grammar().program
        if which in ("schema", "shallow_limit"):
            return compiler.compile_json_schema(SCHEMA).program
        if which in ("ambiguous", "parens"):
            return compiler.compile_grammar(AMBIGUOUS if which == "ambiguous" else PARENS).program
        return compiler.compile_grammar((GBNF_DIR / f"{which}.gbnf").read_text()).program


def _rebased(pda: Any, state: Any, times: int, rng: random.Random) -> Any:
    """``state`` with its stacks' common bottom frames repeated ``times`` more times below
    them (a stack never met, sharing its top frames with ``state``), or None."""
    tops = list(state.frames)
    if not tops:
        return None
    chains = []
    for f in tops:
        chain = []
        while f is not None:
            chain.append(f)
            f = f.parent
        chains.append(chain[::-1])  # bottom first
    base_len = rng.randint(1, min(len(c) for c in chains))
    base = chains[0][:base_len]
    if any(c[:base_len] != base for c in chains):
        return None
    par = None
    for _ in range(times):
        for fr in base:
            par = pda.frame(fr.rule, fr.state, par, fr.need, fr.left)
    new = []
    for chain in chains:
        p = par
        for fr in chain:
            p = pda.frame(fr.rule, fr.state, p, fr.need, fr.left)
        new.append(p)
    return pda.state_of(frozenset(new), state.accepting)


def _mask(prog: Any, state: Any, cut: bool) -> tuple[np.ndarray, bool]:
    """The mask of ``state`` with the kept verdicts (cut stacks and first bytes) on or off
    (every candidate walked in full), and whether a limit error was recorded."""
    if prog._counted.rules:
        state = prog.pda.capped(state, prog._cap)
    prog._limit_errors.pop(state, None)
    with (
        mock.patch.object(cfg_program, "CUT_VERDICTS", cut),
        mock.patch.object(cfg_program, "FIRST_VERDICTS", cut),
    ):
        mask = prog._compute_mask(state)
    return mask, state in prog._limit_errors


#: the bytes of the tokens a walk favours (else it stays inside one string): structure
_STRUCTURE = frozenset(b'{}[]()":,;= \n0123456789xtrue')


def _choose(
    vocab: Vocabulary, mask: np.ndarray, rng: random.Random, first: bool = False
) -> bytes | None:
    """A random token the mask allows (not a stop token), most often one of structure bytes
    only (a nesting one half of those times, and the first: deep stacks)."""
    stop = set(vocab.stop_token_ids)
    ids = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
    ids = ids[ids < vocab.vocab_size]
    allowed = [vocab.token_bytes(int(t)) for t in ids.tolist() if int(t) not in stop]
    allowed = [d for d in allowed if d]
    if not allowed:
        return None
    plain = [d for d in allowed if _STRUCTURE.issuperset(d)]
    opening = [d for d in plain if d[-1:] in (b"{", b"[", b"(")]
    r = rng.random()
    if opening and (first or r < 0.4):
        return rng.choice(opening)
    if plain and r < 0.85:
        return rng.choice(plain)
    return rng.choice(allowed)


@pytest.mark.parametrize(
    "which", ["builtin", "json", "c", "schema", "shallow_limit", "ambiguous", "parens"]
)
def test_cut_verdicts_give_the_full_stack_masks(vocab: Vocabulary, which: str) -> None:
    prog = _compile(vocab, which)
    eager = _compile(vocab, which, lazy=False)
    rng = random.Random(f"cut-{which}")
    compared = cut_used = errors = 0
    for _walk in range(4):
        state, estate = prog.pda.initial, eager.pda.initial
        for _ in range(40):
            states = [state]
            for times in (1, 2):
                other = _rebased(prog.pda, state, times, rng)
                if other is not None:
                    states.append(other)
            for st in states:
                before = prog._cut.cache_bytes() if getattr(prog, "_cut", None) else 0
                on, err_on = _mask(prog, st, True)
                off, err_off = _mask(prog, st, False)
                assert np.array_equal(on, off), (which, st)
                assert err_on == err_off, (which, st)
                with mock.patch.object(cfg_program, "CUT_VERDICTS", False):  # (first bytes)
                    first, err_first = _mask(prog, st, True)
                assert np.array_equal(first, off), (which, st)
                assert err_first == err_off, (which, st)
                errors += err_on
                cut_used += getattr(prog, "_cut", None) is not None and (
                    prog._cut.cache_bytes() != before
                )
                compared += 1
            # main's eager path, on another compile: the same bytes, the same mask
            ref, _ = _mask(eager, estate, False)
            mask = _mask(prog, state, True)[0]
            assert np.array_equal(mask, ref), which
            data = _choose(vocab, mask, rng, state is prog.pda.initial)
            if data is None:
                break
            nxt = prog.pda.step_bytes(state, data)
            if nxt.is_dead:
                break
            state, estate = nxt, eager.pda.step_bytes(estate, data)
    assert compared > 100
    assert cut_used > 0, "no cut verdict was made: the test checks nothing"
    if which in ("shallow_limit", "parens"):
        assert errors > 0, "no limit error met: the depth bound goes untested"
