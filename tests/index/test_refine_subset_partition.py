"""The lazy classifier's refinement of the cut lexer (``_LazyExitSplitClassifier._refine``)
runs on the built states and the states they lead to only; its partition must be the one
of the refinement of every state made so far (the previous build's), up to class numbers,
and its stable flag the same (issue #31)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import GrammarCompiler, Vocabulary
from formcast.automata.dfa import DEAD
from formcast.automata.equivalence import equivalence_classes
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 8},
            "b": {"type": "array", "items": {"type": "number"}},
            "c": {"enum": ["x", "xy", "q r"]},
        },
    },
    {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "integer"}}}},
]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _full_partition(positions: Any) -> tuple[np.ndarray, bool]:
    """The refinement over all ``lexer.size`` states, as the previous build ran it."""
    lexer = positions.lexer
    _, _, _, cut, cut_split, built, _, _ = positions._classes
    full = cut.copy()
    unbuilt = np.flatnonzero(~built)
    full[unbuilt] = lexer.table[unbuilt][:, 0][:, None]  # any rows: classes of their own
    labels = cfg_program._row_classes(np.packbits(cut_split, axis=1)) + 1
    labels[DEAD] = 0
    labels[unbuilt] = int(labels.max()) + 1 + np.arange(unbuilt.size)
    depth = max(positions._vocab.trie.max_len, cfg_program._STABLE_ROUNDS)
    return equivalence_classes(full, labels, depth)


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return bool(np.unique(pairs[0]).size == pairs.shape[1] == np.unique(pairs[1]).size)


@pytest.mark.parametrize("schema", range(len(SCHEMAS)))
def test_subset_refinement_is_the_full_one(vocab: Vocabulary, schema: int) -> None:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    with mock.patch.object(cfg_program, "LAZY_INDEX", True):
        grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(SCHEMAS[schema])
        replay_masks(grammar, random_walks(grammar, walks=3, steps=25, seed=schema))
    program: Any = grammar.program
    positions = program._positions
    assert isinstance(positions, cfg_program._LazyExitSplitClassifier)
    positions._classes = None
    positions._refine()  # on the lexer as the walks left it
    n, part, dpart, *_ = positions._classes
    want, want_stable = _full_partition(positions)
    assert part.size == n == want.size
    assert _same_partition(part, want)
    assert (dpart is part) == want_stable
