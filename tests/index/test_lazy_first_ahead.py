"""A grammar's first classification writes walk rows ``_LAZY_FIRST_AHEAD`` bytes ahead,
later ones ``_LAZY_AHEAD`` (#31: the first mask is part of the time to first mask).  The
look-ahead moves only time: with the first look-ahead as small as it can be (0: every walk
stops on the rows it meets unwritten and is run again) and as large as the others' (40),
seeded random walks drawn on the eager build meet its masks bit for bit, and the first call
asks for the first look-ahead, the later ones for the usual one (in the pure build; the
compiled walks write the rows they meet as they go and ask for none ahead).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "size": {"type": "integer", "minimum": -40, "maximum": 900},
        "kind": {"enum": ["alpha", "alpine", "beta", "bet"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "kind"],
}

#: the classifier's methods can be spied on (a patched method of a mypyc native class is never
#: called by compiled code: where formcast.index.cfg_program is compiled, the masks are still
#: checked, the spies' counts are not)
SPIED = not compiled_modules().get("formcast.index.cfg_program", False)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(vocab: Vocabulary) -> CompiledGrammar:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    return GrammarCompiler(vocab, cache_size=0).compile_json_schema(SCHEMA)


@pytest.mark.parametrize("first", [0, 12, 40])
def test_first_look_ahead_keeps_the_eager_masks(vocab: Vocabulary, first: int) -> None:
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager = _compile(vocab)
        walks = random_walks(eager, walks=4, steps=30, seed=5)
        expected = replay_masks(eager, walks)
    aheads: list[int] = []
    real_ensure = cfg_program._LazyExitSplitClassifier._ensure

    def ensure(self: Any, states: np.ndarray, ahead: int = 0) -> None:
        aheads.append(ahead)
        real_ensure(self, states, ahead)

    with (
        mock.patch.object(cfg_program, "LAZY_INDEX", True),
        mock.patch.object(cfg_program, "_LAZY_FIRST_AHEAD", first),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_ensure", ensure),
    ):
        lazy = _compile(vocab)
        got = replay_masks(lazy, walks)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert np.array_equal(a, b)
    if not SPIED:
        return
    assert aheads
    if cfg_program.walks_write_rows():  # the compiled walks write the rows they meet
        assert set(aheads) == {0}
        return
    assert aheads[0] == first
    assert cfg_program._LAZY_AHEAD in aheads[1:]
