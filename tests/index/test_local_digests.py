"""Lazy lexers are not refined as a whole: each wide start's digest is computed on the
states it reaches, its region (``_LazyExitSplitClassifier._new_region``; issue #31: the
whole-lexer refinement took 10-20 ms inside one mask on 4k-8k-state lexers, 80-150 ms on
MaskBench's Kubernetes lexers):

* masks: the lazy index with local digests gives the eager index's masks, bit for bit, on
  MaskBench schemas (seeded walks, the shared walks cleared between the compiles), including
  the Kubernetes schema whose refinement was the spike;
* digests: where the eager refinement converged, a rule position's local digest is the eager
  build's digest (the key of the process-wide shared walks: a wrong column, label or
  numbering would share walks that differ).
"""

from __future__ import annotations

import json

import pytest
from test_lazy_index_matches_eager import MASKBENCH, _compare, _compile, _maskbench, _skip_without

import formcast.index.cfg_program as cfg_program
from formcast import Vocabulary
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _schema(name: str) -> object:
    doc = json.loads((MASKBENCH / name).read_text("utf-8"))
    return doc.get("schema", doc)


@pytest.mark.parametrize("index", [0, 3, 5, 9])
def test_local_digest_masks_are_the_eager_masks(vocab: Vocabulary, index: int) -> None:
    _skip_without(MASKBENCH)
    schema = _schema(_maskbench()[index].name)
    _compare(vocab, "compile_json_schema", (schema,), {}, seed=index)


def test_local_digest_masks_on_a_large_lexer(vocab: Vocabulary) -> None:
    _skip_without(MASKBENCH / "Kubernetes---kb_818_Normalized.json")
    schema = _schema("Kubernetes---kb_818_Normalized.json")
    assert _compare(vocab, "compile_json_schema", (schema,), {}, seed=1) > 0


@pytest.mark.parametrize("index", [0, 3, 5, 9])
def test_local_digests_are_the_eager_digests(vocab: Vocabulary, index: int) -> None:
    _skip_without(MASKBENCH)
    schema = _schema(_maskbench()[index].name)
    eager = _compile(vocab, False, "compile_json_schema", (schema,), {})
    lazy = _compile(vocab, True, "compile_json_schema", (schema,), {})
    replay_masks(lazy, random_walks(lazy, walks=3, steps=24, seed=index))
    e_pos, l_pos = eager.program._positions, lazy.program._positions
    if not isinstance(l_pos, cfg_program._LazyExitSplitClassifier):
        pytest.skip("no lazy lexer")
    assert isinstance(e_pos, cfg_program._ExitSplitClassifier)
    if e_pos._digest_class is not e_pos._lex_class:
        pytest.skip("the eager refinement did not converge")
    compared = 0
    n_global = int(l_pos.lexer.offsets[-1])
    for g in range(1, n_global):
        got = l_pos.cut_signature(g)
        if got is not None:
            assert got == e_pos.cut_signature(g), g
            compared += 1
    assert compared > 0
