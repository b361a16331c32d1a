"""Grown regions (``_LazyExitSplitClassifier._grown_region``, region37, issue #31): a wide start
whose reach is new states plus states of one stable region grows that region instead of
searching and refining its own (grammar_bench's c1_arith: its 2nd region is the 1st + 2 states,
~0.2 ms of its first mask).  Checked:

* ``equivalence.grown_classes`` against an independent refinement (``equivalence_classes`` on
  the region's quotient plus the new states, from the split labels): the same partition, the
  region's classes keeping their numbers, the new classes numbered in the order of their first
  state; random automata with chains and cycles among the new states, and new states alike to
  old classes through cycles (the greatest relation, not the least);
* on grammars and schemas that grow regions: every region is closed and its partition the
  whole region's Moore refinement (the oracle of test_region_classes), stable; every state's
  walk key and digest equal those of the same walks with growing switched off where that
  search converged (keys: a class is one future; digests: the same for the same future), and
  the masks are the same bit for bit.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from test_region_classes import _moore, _same_partition

import formcast.index.cfg_program as cp
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast.automata.dfa import DEAD
from formcast.automata.equivalence import equivalence_classes, grown_classes
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import random_walks, replay_masks

C1_ARITH = (
    "root ::= expr\nexpr ::= term (ws [+\\-] ws term)*\nterm ::= factor (ws [*/] ws factor)*\n"
    'factor ::= number | ident | call | "(" ws expr ws ")" | "-" factor\n'
    'call ::= ident "(" ws (expr (ws "," ws expr)*)? ws ")"\n'
    'number ::= [0-9]+ ("." [0-9]+)?\nident ::= [a-z_] [a-z0-9_]*\nws ::= [ ]*\n'
)
SOURCES: list[Any] = [
    C1_ARITH,
    C1_ARITH.replace("root ::= expr", 'root ::= expr ";"'),
    'root ::= (stmt "\\n")+\nstmt ::= ident " = " expr\nexpr ::= term (" + " term)*\n'
    'term ::= ident | num | "(" expr ")"\nident ::= [a-zA-Z_] [a-zA-Z0-9_]*\n'
    'num ::= [0-9]+ ("." [0-9]+)?\n',
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 8},
            "b": {"type": "array", "items": {"type": "number"}},
            "c": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    },
    "builtin_json",
]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


# -- _grown_classes against a refinement -------------------------------------------------------
def _random_case(
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """A random region (dead state 0, closed, stable partition) and new states: ``(class rows,
    class flags, new codes, new flags, n_cls)`` on the region's quotient (rows of classes)."""
    while True:
        n = int(rng.integers(3, 30))
        w = int(rng.integers(1, 6))
        sub = rng.integers(0, n, size=(n, w)).astype(np.int32)
        sub[rng.random((n, w)) < float(rng.choice([0.1, 0.4]))] = DEAD
        sub[DEAD] = DEAD
        split = rng.random((n, w)) < float(rng.choice([0.05, 0.3]))
        split = split[rng.integers(0, max(n // 3, 1), size=n)]  # few distinct labels
        split[DEAD] = False
        part, stable = equivalence_classes(sub, cp._split_labels(split), 200)
        if stable:
            break
    rep = np.zeros(int(part.max()) + 1, dtype=np.int64)
    rep[part[::-1]] = np.arange(part.size - 1, -1, -1)
    n_cls = rep.size
    class_rows = part[sub[rep]]
    class_flags = split[rep]
    k = int(rng.integers(1, 9))
    codes = rng.integers(0, n_cls + k, size=(k, w))
    flags = rng.random((k, w)) < 0.2
    # new states copying a class (its moves into the class's successors, or into new states
    # copying those): alike to the class through cycles among the new states
    for i in range(k):
        if rng.random() < 0.6:
            c = int(rng.integers(1, n_cls))
            codes[i] = class_rows[c]
            flags[i] = class_flags[c]
            for j in range(w):
                t = int(class_rows[c, j])
                if t != 0 and rng.random() < 0.5:
                    twins = [m for m in range(k) if m != i and rng.random() < 0.3]
                    if twins:
                        m = twins[0]
                        codes[m] = class_rows[t]
                        flags[m] = class_flags[t]
                        codes[i, j] = n_cls + m
            if rng.random() < 0.3:
                codes[i, int(rng.integers(0, w))] = n_cls + i  # a loop where c loops? (maybe)
        elif rng.random() < 0.3 and i > 0:  # a twin of an earlier new state
            codes[i] = codes[i - 1]
            flags[i] = flags[i - 1]
    return class_rows, class_flags, codes, flags, n_cls


def _oracle(
    class_rows: np.ndarray, class_flags: np.ndarray, codes: np.ndarray, flags: np.ndarray
) -> tuple[np.ndarray, bool]:
    table = np.concatenate((class_rows, codes)).astype(np.int32)
    split = np.concatenate((class_flags, flags))
    return equivalence_classes(table, cp._split_labels(split), 500)


def test_grown_classes_are_a_refinements() -> None:
    rng = np.random.default_rng(37)
    matched = fresh = 0
    for _ in range(400):
        class_rows, class_flags, codes, flags, n_cls = _random_case(rng)
        want, stable = _oracle(class_rows, class_flags, codes, flags)
        assert stable
        assert np.unique(want[:n_cls]).size == n_cls  # the classes stay apart
        got = grown_classes(
            n_cls,
            class_rows.tolist(),
            [r.tobytes() for r in class_flags],
            codes.tolist(),
            [r.tobytes() for r in flags],
        )
        assert got is not None
        new_part, new_rep = got
        whole = np.arange(n_cls).tolist() + new_part
        assert _same_partition(np.asarray(whole), want)
        # numbering: new classes from n_cls on, in the order of their first state (the member)
        seen: list[int] = []
        for c in new_part:
            if c >= n_cls and c not in seen:
                seen.append(c)
        assert seen == list(range(n_cls, n_cls + len(seen)))
        assert [new_part[i] for i in new_rep] == seen
        assert new_rep == sorted(new_rep)
        matched += sum(c < n_cls for c in new_part)
        fresh += len(seen)
    assert matched > 100
    assert fresh > 100


def test_grown_classes_greatest_relation_on_a_cycle() -> None:
    """A new state looping on itself where a class loops on itself: alike (a least fixed
    point, or a check of successors already matched, would keep them apart)."""
    # class 1: byte 0 -> 1, byte 1 -> dead; class 2: byte 0 -> 2, byte 1 -> 2 (other flags)
    class_rows = [[0, 0], [1, 0], [2, 2]]
    class_flags = [b"\x00\x00", b"\x00\x00", b"\x01\x00"]
    # new 0 loops like class 1; new 1 -> new 0 on byte 0 (like class 1 too); new 2: a cycle
    # 2 -> 3 -> 2 with class 2's flags (alike to class 2); new 3 alike too
    codes = [[3, 0], [3, 0], [6, 6], [5, 5]]
    flags = [b"\x00\x00", b"\x00\x00", b"\x01\x00", b"\x01\x00"]
    assert grown_classes(3, class_rows, class_flags, codes, flags) == ([1, 1, 2, 2], [])
    # apart from every class: two new states alike to each other only
    codes = [[4, 3], [3, 4]]
    flags = [b"\x00\x01", b"\x00\x01"]
    assert grown_classes(3, class_rows, class_flags, codes, flags) == ([3, 3], [0])
    # apart from every class and told apart two moves on: a -> b -> x, c -> d -> y (x and y
    # differ by their flags; a refinement of one round would keep a and c together)
    codes = [[4, 0], [7, 0], [6, 0], [8, 0], [0, 0], [0, 0]]
    flags = [b"\x00\x00"] * 4 + [b"\x01\x01", b"\x00\x01"]
    got = grown_classes(3, class_rows, class_flags, codes, flags)
    assert got == ([3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5])


# -- grown regions on grammars -----------------------------------------------------------------
def _run(vocab: Vocabulary, source: Any, grow: bool, bound: int) -> CompiledGrammar:
    context_for(vocab).cache(cp.SHARED_WALKS).clear()
    compiler = GrammarCompiler(vocab, cache_size=0)
    with (
        mock.patch.object(cp, "LAZY_INDEX", True),
        mock.patch.object(cp, "_GROW_REGIONS", grow),
        mock.patch.object(cp, "_SHARED_WALK_STATES", bound),
    ):
        if source == "builtin_json":
            grammar = compiler.compile_builtin_json_grammar()
        elif isinstance(source, str):
            grammar = compiler.compile_grammar(source)
        else:
            grammar = compiler.compile_json_schema(source)
        walks = random_walks(grammar, walks=5, steps=30, seed=7)
        masks = replay_masks(grammar, walks)
    return grammar, masks  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("source", "bound"),
    [(s, cp._SHARED_WALK_STATES) for s in range(len(SOURCES))] + [(0, 33), (1, 34)],
)
def test_grown_regions_keys_digests_masks(vocab: Vocabulary, source: int, bound: int) -> None:
    """``bound``: ``_SHARED_WALK_STATES``; 33 and 34 on c1/c2_arith, whose 1st region has 33
    and 34 classes: growing it past the bound would make its start's digest None by counting
    where the start reaches fewer (so it is not grown there)."""
    src = SOURCES[source]
    grown, g_masks = _run(vocab, src, True, bound)  # type: ignore[misc]
    plain, p_masks = _run(vocab, src, False, bound)  # type: ignore[misc]
    for a, b in zip(g_masks, p_masks, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    g: Any = grown.program._positions
    p: Any = plain.program._positions
    assert isinstance(g, cp._LazyExitSplitClassifier)
    if source < 2 and bound == cp._SHARED_WALK_STATES:
        assert len(g._regions) < len(p._regions), "no region grown"
    depth = max(vocab.trie.max_len, cp._STABLE_ROUNDS)
    _, col_of_byte = g._cut_columns()
    lexer, xb = g.lexer, g.exit_byte
    for start, states, part, dpart, sub, cut_split, rep in g._regions:
        assert states[1] == start
        table = lexer.table[states].astype(np.int64)
        split = lexer.split[states].copy()
        if xb is not None:
            table[:, xb] = DEAD
            split[:, xb] = False
        split[0] = False
        local = {int(q): i for i, q in enumerate(states.tolist())}
        assert set(np.unique(table).tolist()) <= local.keys()  # closed
        sub256 = np.vectorize(local.__getitem__, otypes=[np.int64])(table)
        assert (sub[:, col_of_byte] == sub256).all()
        assert (cut_split[:, col_of_byte] == split).all()
        want, stable = _moore(sub256, split, depth)
        assert _same_partition(part, want)
        assert (dpart is part) == stable
        assert (dpart[rep] == np.arange(rep.size)).all()
    # keys: two states share a key in the grown build iff they do in the plain one (where
    # both made a region for them); digests: equal where the plain region converged
    assert g.lexer.size == p.lexer.size
    keys: dict[bytes, bytes] = {}
    back: dict[bytes, bytes] = {}
    compared = 0
    for q in range(1, g.lexer.size):
        ga, pa = g._region_at(q), p._region_at(q)
        if ga is None or pa is None:
            continue
        gk, pk = g._region_key(ga), p._region_key(pa)
        pstable = p._regions[pa[0]][3] is p._regions[pa[0]][2]
        if pstable:
            assert keys.setdefault(gk, pk) == pk or _same_digest(g, p, ga, pa), q
            assert back.setdefault(pk, gk) == gk or _same_digest(g, p, ga, pa), q
            with mock.patch.object(cp, "_SHARED_WALK_STATES", bound):
                assert g._region_digest(ga) == p._region_digest(pa), q
            compared += 1
    assert compared
    # a load keeps the grown regions (stable: one array for both partitions) and the keys
    loaded: Any = type(grown).deserialize(grown.serialize(), vocab).program._positions
    assert len(loaded._regions) == len(g._regions)
    for a, b in zip(loaded._regions, g._regions, strict=True):
        assert (a[3] is a[2]) == (b[3] is b[2])
        assert all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    for q in range(1, g.lexer.size):
        at = g._region_at(q)
        if at is not None:
            assert loaded._region_key(loaded._region_at(q)) == g._region_key(at), q


def _same_digest(g: Any, p: Any, ga: tuple[int, int], pa: tuple[int, int]) -> bool:
    """Two keys for one future (plain regions of two starts may class one state twice)."""
    d = g._region_digest(ga)
    return d is not None and d == p._region_digest(pa)  # (at the default bound)
