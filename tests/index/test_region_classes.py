"""The lazy classifier's regions (``_LazyExitSplitClassifier._new_region``, issue #31): a wide
start's region is the set of states it reaches in the cut lexer, refined on its own instead of
the whole lexer (a 10-20 ms step inside one mask on 4k-8k-state lexers).  Checked against an
independent oracle, a plain numpy Moore refinement of the region on all 256 columns (the exit
byte cut), labelled by its distinct split rows:

* each region is closed (its states' successors are in it) and its partition is the oracle's,
  its stable flag too (digest classes the classes themselves, else the states);
* the walk keys: two start states share a walk only where they share a region's class, and
  the keys survive a serialize/load round trip (the map of states to regions is rebuilt);
* the masks are the eager build's, bit for bit (the walks the regions share are exact).
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import numpy as np
import pytest
from test_lazy_index_matches_eager import _compare

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.automata.dfa import DEAD
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

SCHEMAS: list[Any] = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 8},
            "b": {"type": "array", "items": {"type": "number"}},
            "c": {"enum": ["x", "xy", "q r"]},
            "d": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    },
    {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "integer"}}}},
    {
        "type": "object",
        "properties": {
            "p": {"type": "string", "pattern": "^[a-z]{2,5}-[0-9]+$"},
            "q": {"anyOf": [{"type": "boolean"}, {"type": "string", "format": "date"}]},
            "r": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["p"],
    },
    # a grammar: identifiers and numbers whose splits differ inside a region
    'root ::= (stmt "\\n")+\nstmt ::= ident " = " expr\nexpr ::= term (" + " term)*\n'
    'term ::= ident | num | "(" expr ")"\nident ::= [a-zA-Z_] [a-zA-Z0-9_]*\n'
    'num ::= [0-9]+ ("." [0-9]+)?\n',
]

#: the classifier's methods can be spied on (a patched method of a mypyc native class is never
#: called by compiled code: where formcast.index.cfg_program is compiled, the masks are still
#: checked, the spy's calls are not)
SPIED = not compiled_modules().get("formcast.index.cfg_program", False)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _lazy(vocab: Vocabulary, schema: int) -> CompiledGrammar:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    with mock.patch.object(cfg_program, "LAZY_INDEX", True):
        grammar = _compile(GrammarCompiler(vocab, cache_size=0), SCHEMAS[schema])
        replay_masks(grammar, random_walks(grammar, walks=4, steps=30, seed=schema))
    return grammar


def _compile(compiler: GrammarCompiler, source: Any) -> CompiledGrammar:
    if isinstance(source, str):
        return compiler.compile_grammar(source)
    return compiler.compile_json_schema(source)


def _moore(sub: np.ndarray, split: np.ndarray, depth: int) -> tuple[np.ndarray, bool]:
    """Plain Moore refinement: ``depth`` rounds at most of (label, successors' classes)."""
    _, cls = np.unique(split, axis=0, return_inverse=True)
    labels = cls.reshape(-1) + 1
    labels[DEAD] = 0
    cls = np.unique(labels, return_inverse=True)[1].reshape(-1)
    for _ in range(depth):
        sig = np.concatenate([labels[:, None], cls[sub]], axis=1)
        new = np.unique(sig, axis=0, return_inverse=True)[1].reshape(-1)
        if np.unique(new).size == np.unique(cls).size:
            return new, True
        cls = new
    return cls, False


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return bool(np.unique(pairs[0]).size == pairs.shape[1] == np.unique(pairs[1]).size)


@pytest.mark.parametrize("schema", range(len(SCHEMAS)))
def test_region_partition_is_the_oracle(vocab: Vocabulary, schema: int) -> None:
    positions: Any = _lazy(vocab, schema).program._positions
    assert isinstance(positions, cfg_program._LazyExitSplitClassifier)
    assert positions._regions, "no wide start met"
    lexer, xb = positions.lexer, positions.exit_byte
    depth = max(vocab.trie.max_len, cfg_program._STABLE_ROUNDS)
    _, col_of_byte = positions._cut_columns()
    for start, states, part, dpart, sub, cut_split, rep in positions._regions:
        assert states[0] == DEAD
        assert states[1] == start
        assert lexer.built[states].all()
        table = lexer.table[states].astype(np.int64)
        split = lexer.split[states].copy()
        if xb is not None:
            table[:, xb] = DEAD
            split[:, xb] = False
        split[0] = False
        local = {int(q): i for i, q in enumerate(states.tolist())}
        assert set(np.unique(table).tolist()) <= local.keys()  # closed
        sub256 = np.vectorize(local.__getitem__, otypes=[np.int64])(table)
        # the stored rows, one column per byte class, spread back to 256: the oracle's rows
        assert (sub[:, col_of_byte] == sub256).all()
        assert (cut_split[:, col_of_byte] == split).all()
        want, stable = _moore(sub256, split, depth)
        assert _same_partition(part, want)
        assert (dpart is part) == stable
        if not stable:
            assert (dpart == np.arange(states.size)).all()
        assert (dpart[rep] == np.arange(rep.size)).all()  # a member of each class


@pytest.mark.parametrize("schema", range(len(SCHEMAS)))
def test_walk_keys_are_region_classes(vocab: Vocabulary, schema: int) -> None:
    grammar = _lazy(vocab, schema)
    positions: Any = grammar.program._positions
    keys = {}
    for g in range(1, positions.lexer.size):
        at = positions._region_at(g)
        if at is not None:
            rid, i = at
            region = positions._regions[rid]
            assert region[1][i] == g
            keys[g] = positions._region_key(at)
            assert keys[g] == b"r%d.%d" % (region[0], int(region[2][i]))
    assert keys
    # a class is one future: every state in it is keyed by it, wherever the region started
    for rid, (start, states, part, *_) in enumerate(positions._regions):
        for i, g in enumerate(states.tolist()[1:], 1):
            first = positions._region_at(g)
            if first is not None and first[0] == rid:
                assert keys[g] == b"r%d.%d" % (start, int(part[i]))
    loaded: Any = type(grammar).deserialize(grammar.serialize(), vocab).program._positions
    assert loaded._region_of is None  # rebuilt on first use, the same
    assert {g: loaded._region_key(loaded._region_at(g)) for g in keys} == keys


@pytest.mark.parametrize("schema", range(len(SCHEMAS)))
def test_region_masks_are_the_eager_masks(vocab: Vocabulary, schema: int) -> None:
    source = SCHEMAS[schema]
    method = "compile_grammar" if isinstance(source, str) else "compile_json_schema"
    assert _compare(vocab, method, (source,), {}, seed=schema) > 0


def _instance_walks(vocab: Vocabulary, doc: Any) -> list[list[int]]:
    """The MaskBench document's valid instances, compact, as greedy longest-match tokens."""
    table = {vocab.tokens[i]: i for i in range(len(vocab.tokens)) if vocab.is_text_token(i)}
    longest = max(len(t) for t in table)
    walks = []
    for test in doc.get("tests", []):
        if not test["valid"]:
            continue
        data = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False).encode()
        ids, i = [], 0
        while i < len(data):
            n = next(
                n for n in range(min(longest, len(data) - i), 0, -1) if data[i : i + n] in table
            )
            ids.append(table[data[i : i + n]])
            i += n
        walks.append(ids)
    return walks


def test_a_region_past_its_row_budget_is_not_made(vocab: Vocabulary) -> None:
    """A wide start whose region search would build more lexer rows than
    ``_REGION_ROW_BUDGET`` gets no region (it is walked on its own, building only the rows its
    walk meets): on a large lazy lexer (MaskBench o79443, whose first wide start's region
    built ~1,200 rows inside one mask) with the budget at 0, no region is made after building
    a row, at least one search stops, and the masks along the schema's valid instances stay
    the eager build's."""
    from test_lazy_index_matches_eager import MASKBENCH, _compile, _skip_without

    path = MASKBENCH / "Github_easy---o79443.json"
    _skip_without(path)
    doc = json.loads(path.read_text("utf-8"))
    schema = doc.get("schema", doc)
    walks = _instance_walks(vocab, doc)
    assert walks
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        eager = _compile(vocab, False, "compile_json_schema", (schema,), {})
        expected = replay_masks(eager, walks)
    calls: list[tuple[int, int, bool]] = []
    real = cfg_program._LazyExitSplitClassifier._new_region

    def spy(self: Any, start: int) -> tuple[int, int] | None:
        before = int(self.lexer.built[: self.lexer.size].sum())
        out = real(self, start)
        calls.append((before, int(self.lexer.built[: self.lexer.size].sum()), out is None))
        return out

    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    with (
        mock.patch.object(cfg_program, "_REGION_ROW_BUDGET", 0),
        mock.patch.object(cfg_program._LazyExitSplitClassifier, "_new_region", spy),
    ):
        lazy = _compile(vocab, True, "compile_json_schema", (schema,), {})
        got = replay_masks(lazy, walks)
    assert (got == expected).all()
    if not SPIED:
        return
    assert calls, "no wide start met"
    assert any(none for _, _, none in calls), "the budget never stopped a search"
    assert all(none or after == before for before, after, none in calls)
