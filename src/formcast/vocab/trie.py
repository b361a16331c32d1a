"""A level-ordered token trie for walking every token through a byte automaton at once.

The distinct byte strings of the vocabulary's text tokens are sorted; trie nodes are their
distinct prefixes, stored level by level (level ``d`` = prefixes of length ``d``) in
lexicographic order, so the children of a node are a contiguous range of the next level.

:meth:`TokenTrie.walk` runs a DFA transition table from one start state over the whole trie:
one numpy gather per level over the nodes whose parent is still alive.  Dead branches are dropped
as soon as they die, so a restrictive state (digits only) touches a few hundred nodes while a
permissive one (inside a JSON string) touches most of them.  Shared prefixes are walked once.

Permissive walks run on a *class trie* instead (:class:`_ClassTrie`): the bytes a table does
not tell apart (its equal columns) are one class, and the trie of the strings' class sequences
merges every prefix whose bytes agree class by class.  An identifier lexer (letters, digits and
a few operators: ten classes) turns the 128k-string trie's 275k nodes into 8k.  Class tries are
built on the first permissive walk of a table (O(trie nodes), a few dense walks' worth of
numpy, no sort) and kept per class map (:data:`_CLASS_TRIES_KEPT`, the most recent), so every
table of a grammar, and every grammar with the same byte classes, shares one.

The compiled build walks on the trie's subtree memo (:meth:`TokenTrie._subtree_memo`: nodes in
preorder, each larger subtree's byte set) and its text memo (a UTF-8 decoder's character
boundaries and *breaks* per node): a string body's walk (JSON's: 268k of Llama-3's 275k nodes)
takes the strings below a character boundary as ranges where its state loops on the text
bytes and well-formed characters there, and walks only the nodes under quotes, backslashes,
control or ill-formed bytes (~5-10k), exactly (tests/vocab/test_trie_text_memo.py).

Lifetime: per vocabulary (built once, lazily, by :attr:`Vocabulary.trie`, from its token
tuple: this module never imports the Vocabulary); immutable but for its caches of class tries
and per-table class maps (filled lazily, safe to share between threads: each entry is built
fully before it is published, and two threads building one build equal values).
Build cost: O(total token bytes) with numpy, ~0.5 s for a 128k vocabulary.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

import numpy as np

from ..bitmask import bitmask_set_many, bitmask_words, bool_to_bitmask
from ..cache import LruCache
from ..columns import column_classes

__all__ = [
    "ClassifyWalker",
    "TokenTrie",
    "WalkRows",
    "ahead_states",
    "classify_walk",
    "classify_walk_resume",
    "classify_walk_rows",
    "note_column_classes",
    "walks_write_rows",
    "write_walk_rows",
    "write_walk_state",
]

# the compiled build's walks (docs/native.md); absent from the pure-Python package
_KERNEL: Any
try:
    from . import _trie_walk as _KERNEL  # type: ignore[attr-defined,no-redef]
except ImportError:  # pragma: no cover - depends on the build
    _KERNEL = None

#: the flattened nodes of :meth:`TokenTrie._flat_nodes`: first child, child count, byte, string
#: ending there, parent (all per node, level order), and the root's child count
_FlatNodes = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]


class TokenTrie:
    """Distinct token byte strings arranged as a level-ordered trie (see module docstring).

    Attributes:
        strings: the distinct byte strings, sorted.
        token_to_unique: ``int64[vocab_size]``; index into ``strings`` or ``len(strings)`` for
            ids that are never text (special, empty or past the tokenizer).
        lengths: ``int32[len(strings)]`` byte length of each string.
        first_token: ``int64[len(strings)]``: one token id of each string (the smallest).
    """

    def __init__(
        self,
        tokens: Sequence[bytes] | None = None,
        *,
        special_token_ids: AbstractSet[int] = frozenset(),
        vocab_size: int = 0,
    ) -> None:
        """The trie of the text tokens among ``tokens`` (the bytes of each token id; ids in
        ``special_token_ids`` and empty tokens are never text), ``vocab_size`` ids wide.
        Without ``tokens``, an empty trie (see :meth:`_of_strings`)."""
        self._with_byte: dict[int, tuple[TokenTrie, np.ndarray]] = {}
        self._csr: tuple[np.ndarray, np.ndarray] | None = None
        # every string is one token id (None: not known yet; see _one_token_each)
        self._one_each: bool | None = None
        # the nodes flattened for the compiled walk (see _flat_nodes)
        self._flat: _FlatNodes | None = None
        # the subtree memo of the compiled walks (see _subtree_memo), and that memo with the
        # bits of every string for bitmasks of some width (see _memo_words)
        self._memo: _SubtreeMemo | None = None
        self._memo_all: tuple[_SubtreeMemo, int, _SubtreeMemo] | None = None
        # the strings laid end to end (see strings_end_to_end)
        self._joined: tuple[np.ndarray, np.ndarray] | None = None
        # the kernel's classify arguments of this trie (see _classify_head)
        self._heads: dict[
            tuple[int, int, bool], tuple[TokenTrie, _SubtreeMemo | None, _ClassifyHead | None]
        ] = {}
        # the walker :meth:`classify_walker` gave last (one: a trie is walked over one
        # vocabulary, one width, own strings or not, in practice)
        self._walker: ClassifyWalker | None = None
        # class tries by class map (LRU; see _classes_of)
        self._class_tries: LruCache[bytes, _ClassTrie] = LruCache(_CLASS_TRIES_KEPT)
        if tokens is None:  # a trie of plain strings: see _of_strings
            self.token_to_unique = np.zeros(0, dtype=np.int64)
            self.first_token = np.zeros(0, dtype=np.int64)
            self._set_strings([])
            return
        specials = special_token_ids
        text_ids = [tid for tid, tb in enumerate(tokens) if tb and tid not in specials]
        uniq = {tokens[tid]: 0 for tid in text_ids}
        strings = sorted(uniq)
        index = {s: i for i, s in enumerate(strings)}
        u = len(strings)
        t2u = np.full(vocab_size, u, dtype=np.int64)
        if text_ids:
            t2u[np.asarray(text_ids, dtype=np.int64)] = np.fromiter(
                (index[tokens[tid]] for tid in text_ids), dtype=np.int64, count=len(text_ids)
            )
        self.token_to_unique = t2u
        # one token id per distinct string (the smallest)
        first = np.full(u, -1, dtype=np.int64)
        text = np.flatnonzero(t2u < u)[::-1]
        first[t2u[text]] = text
        self.first_token = first
        self._set_strings(strings)

    def _set_strings(self, strings: list[bytes]) -> None:
        """Store the sorted distinct ``strings`` and build their levels."""
        self.strings: list[bytes] = strings
        self.num_strings = len(strings)
        lengths = np.fromiter(map(len, strings), dtype=np.int32, count=len(strings))
        self.lengths = lengths
        self.max_len = int(lengths.max()) if strings else 0
        self._joined = None
        self._build_levels(strings, lengths)

    def strings_end_to_end(self) -> tuple[np.ndarray, np.ndarray]:
        """:attr:`strings` laid end to end, and where each starts: the bytes (``uint8``) and
        ``num_strings + 1`` offsets (``int64``; the last is the end of the last string), both
        read only -- what a check of many candidates at once reads a candidate's byte at a
        position from (one gather, where joining 35,000 candidates' strings costs ~5 ms).
        Per vocabulary (the trie's lifetime): made on first use, O(total bytes) (~5 ms and
        ~1.8 MB on Llama-3), then kept with the trie; a race makes it twice, equal."""
        got = self._joined
        if got is None:
            buf = np.frombuffer(b"".join(self.strings), dtype=np.uint8)
            offsets = np.zeros(self.num_strings + 1, dtype=np.int64)
            np.cumsum(self.lengths, out=offsets[1:])
            offsets.setflags(write=False)
            got = self._joined = (buf, offsets)
        return got

    @classmethod
    def _of_strings(cls, strings: list[bytes]) -> TokenTrie:
        """A trie of some distinct byte strings, sorted (no token ids)."""
        self = cls()
        self._set_strings(strings)
        return self

    def with_byte(self, byte: int) -> tuple[TokenTrie, np.ndarray]:
        """(a trie of the strings that contain ``byte``, their indices in ``strings``).
        Built once per byte and kept."""
        hit = self._with_byte.get(byte)
        if hit is None:
            needle = bytes([byte])
            idx = [i for i, s in enumerate(self.strings) if needle in s]
            sub = TokenTrie._of_strings([self.strings[i] for i in idx])
            hit = (sub, np.asarray(idx, dtype=np.int64))
            self._with_byte[byte] = hit
        return hit

    def _build_levels(self, strings: list[bytes], lengths: np.ndarray) -> None:
        u = len(strings)
        lmax = self.max_len
        mat = np.zeros((u, max(lmax, 1)), dtype=np.uint8)
        flat = np.frombuffer(b"".join(strings), dtype=np.uint8)
        if u:
            rows = np.repeat(np.arange(u), lengths)
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            cols = np.arange(flat.size) - np.repeat(starts, lengths)
            mat[rows, cols] = flat
        # longest common prefix of adjacent sorted strings
        lcp = np.zeros(u, dtype=np.int32)
        if u > 1:
            neq = mat[1:] != mat[:-1]
            first_diff = np.where(neq.any(axis=1), neq.argmax(axis=1), lmax)
            lcp[1:] = np.minimum(first_diff, np.minimum(lengths[1:], lengths[:-1]))
        # per level arrays
        self.level_bytes: list[np.ndarray] = [np.zeros(0, np.int32)]  # level 0 = root
        self.level_parent: list[np.ndarray] = [np.zeros(0, np.int32)]
        self.level_end_nodes: list[np.ndarray] = [np.zeros(0, np.int32)]
        self.level_end_ids: list[np.ndarray] = [np.zeros(0, np.int64)]
        self.level_child_start: list[np.ndarray] = []
        self.level_child_count: list[np.ndarray] = []
        self.level_end_string: list[np.ndarray] = [np.zeros(1, np.int64) - 1]
        prev_row_node = np.zeros(u, dtype=np.int64)  # node of each row at level d-1 (root = 0)
        prev_n_nodes = 1
        for d in range(1, lmax + 1):
            rows_d = np.flatnonzero(lengths >= d)
            if rows_d.size == 0:
                break
            new = np.ones(rows_d.size, dtype=bool)
            if rows_d.size > 1:
                contiguous = rows_d[1:] == rows_d[:-1] + 1
                new[1:] = ~contiguous | (lcp[rows_d[1:]] < d)
            node_of_row = np.cumsum(new) - 1
            first_rows = rows_d[new]
            n_nodes = first_rows.size
            parents = prev_row_node[first_rows]
            self.level_parent.append(parents.astype(np.int32))
            self.level_bytes.append(mat[first_rows, d - 1].astype(np.int32))
            # children ranges of the previous level's nodes (parents is non-decreasing)
            start = np.searchsorted(parents, np.arange(prev_n_nodes), side="left")
            end = np.searchsorted(parents, np.arange(prev_n_nodes), side="right")
            self.level_child_start.append(start.astype(np.int64))
            self.level_child_count.append((end - start).astype(np.int64))
            ends_here = lengths[first_rows] == d
            end_string = np.where(ends_here, first_rows, -1).astype(np.int64)
            self.level_end_string.append(end_string)
            self.level_end_nodes.append(np.flatnonzero(ends_here).astype(np.int32))
            self.level_end_ids.append(first_rows[ends_here].astype(np.int64))
            new_row_node = np.zeros(u, dtype=np.int64)
            new_row_node[rows_d] = node_of_row
            prev_row_node = new_row_node
            prev_n_nodes = n_nodes
        sizes = [b.size for b in self.level_bytes]
        self.level_offset = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        self.total_nodes = int(sum(sizes))
        string_node = np.zeros(u, dtype=np.int64)
        for d in range(1, len(self.level_bytes)):
            string_node[self.level_end_ids[d]] = self.level_offset[d] + self.level_end_nodes[d]
        self.string_node = string_node
        # the last level has no children
        self.level_child_start.append(np.zeros(prev_n_nodes, dtype=np.int64))
        self.level_child_count.append(np.zeros(prev_n_nodes, dtype=np.int64))
        self.num_levels = len(self.level_bytes) - 1
        # levels (1-based) on which a dense walk may switch to sparse mode: those holding at
        # least 1/64 of the widest level (below them a level costs its call overhead anyway)
        widest = max(sizes) if sizes else 0
        wide = [d for d in range(1, len(sizes)) if sizes[d] * 64 >= widest]
        self._dense_check_levels = max(wide) if wide else 0
        # nodes below each first-byte node (itself included): what a walk from a state that
        # keeps that first byte alive may touch, at most
        below = np.ones(sizes[1] if len(sizes) > 1 else 0, dtype=np.int64)
        top = np.arange(below.size, dtype=np.int64)
        for d in range(2, len(sizes)):
            top = top[self.level_parent[d]]
            below += np.bincount(top, minlength=below.size)
        self._below_first = below
        # ... and per first-byte node and second byte, the nodes below that second-level
        # child (itself included; 0 where there is none): a walk's reach refined by the
        # second bytes its first states keep alive (:meth:`_reach`)
        n1 = below.size
        below_second = np.zeros((n1, 256), dtype=np.int64)
        if len(sizes) > 2:
            below2 = np.ones(sizes[2], dtype=np.int64)
            top = np.arange(sizes[2], dtype=np.int64)
            for d in range(3, len(sizes)):
                top = top[self.level_parent[d]]
                below2 += np.bincount(top, minlength=below2.size)
            below_second[self.level_parent[2], self.level_bytes[2]] = below2
        self._below_second = below_second

    def walk(self, table: np.ndarray, start: int) -> np.ndarray:
        """End state of every distinct string from ``start`` (0 where the automaton died).

        ``table`` is an ``int32[n_states, 256]`` DFA table whose state 0 is dead.
        Returns ``int32[num_strings]``.  Cost: O(trie nodes) numpy gathers while most of a
        level is alive ("dense" mode), then O(live nodes) once most of it has died ("sparse").
        """
        if self.num_levels == 0:
            return np.zeros(self.num_strings, dtype=np.int32)
        if self._native_takes(table, start):  # the compiled build
            return self._native_levels(table, start)
        return self._numpy_levels(table.reshape(-1), start)

    def _numpy_levels(
        self, flat: np.ndarray, start: int, cmap: np.ndarray | None = None, width: int = 256
    ) -> np.ndarray:
        """:meth:`walk` with numpy on the flattened ``flat`` (narrow with ``cmap``: rows
        ``width`` wide, byte ``b`` in column ``cmap[b]``; see :meth:`walk_pairs`)."""
        buf = np.zeros(self.total_nodes, dtype=np.int32)
        off = self.level_offset
        # dense mode: states for every node of the level (0 = dead)
        if cmap is None:
            idx = self.level_bytes[1] + start * 256
        else:
            idx = np.take(cmap, self.level_bytes[1]).astype(np.int64) + start * width
        states = np.take(flat, idx)
        buf[off[1] : off[1] + states.size] = states
        d = 1
        dense_check = self._dense_check_levels
        while d < self.num_levels:
            # deep levels hold few nodes: there the per-level call overhead dominates, so the
            # switch to sparse mode is only considered on the wide levels
            if d <= dense_check:
                live = int(np.count_nonzero(states))
                if live == 0:
                    return np.take(buf, self.string_node)
                if live * 8 < states.size:
                    break  # switch to sparse mode
            d += 1
            idx = np.take(states, self.level_parent[d])
            if cmap is None:
                np.left_shift(idx, 8, out=idx)
                np.add(idx, self.level_bytes[d], out=idx)
            else:
                idx = idx.astype(np.int64) * width + np.take(cmap, self.level_bytes[d])
            states = np.take(flat, idx)
            buf[off[d] : off[d] + states.size] = states
        else:
            return np.take(buf, self.string_node)
        # sparse mode
        nodes = np.flatnonzero(states)
        states = states[nodes]
        while d < self.num_levels:
            nodes, states = self._sparse_step(flat, d, nodes, states, cmap, width)
            d += 1
            if nodes.size == 0:
                break
            buf[off[d] + nodes] = states
        return np.take(buf, self.string_node)

    def _sparse_step(
        self,
        flat: np.ndarray,
        d: int,
        nodes: np.ndarray,
        states: np.ndarray,
        cmap: np.ndarray | None = None,
        width: int = 256,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Children (at level ``d + 1``) of live ``nodes`` at level ``d`` that stay alive, with
        their states.  ``cmap``: ``flat`` is a narrow table (see :meth:`walk_pairs`) with rows
        ``width`` wide.  O(children)."""
        counts = np.take(self.level_child_count[d], nodes)
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        starts = np.take(self.level_child_start[d], nodes)
        offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
        children = offsets + np.arange(total, dtype=np.int64)
        parent_states = np.repeat(states, counts)
        child_bytes = np.take(self.level_bytes[d + 1], children)
        if cmap is None:
            np.left_shift(parent_states, 8, out=parent_states)
        else:
            parent_states = parent_states.astype(np.int64) * width
            child_bytes = np.take(cmap, child_bytes)
        np.add(parent_states, child_bytes, out=parent_states)
        child_states = np.take(flat, parent_states)
        live = child_states != 0
        if not live.all():
            return children[live], child_states[live]
        return children, child_states

    def walk_pairs(
        self,
        table: np.ndarray,
        start: int,
        classes: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The distinct strings that stay alive from ``start`` and their end states.

        ``table`` must not change after it was walked: a permissive walk keeps its column
        classes while it lives (see :meth:`_classes_of`).

        ``classes``: None (``table`` has a column per byte), or ``(cmap, reps)``: ``table`` is
        *narrow*, ``int32[n, k]`` with one column per byte class: byte ``b`` reads column
        ``cmap[b]`` (``uint8[256]``, each below ``k``) and ``reps[c]`` is a byte of class ``c``
        (see :meth:`_walk_narrow`): the same strings and states as the 256-column table
        ``table[:, cmap]``, which is never built in the compiled build.

        Returns ``(string indices, end states)`` (states non-zero).  When few first bytes
        survive, the walk never materializes per-node or per-string arrays, so its cost is
        O(live trie nodes) instead of O(vocabulary); otherwise it is :meth:`walk` plus one scan.
        In the compiled build (docs/native.md) every walk runs in C (:meth:`_native_walk`),
        without numpy's per-level calls or class tries: a walk reaching fewer than
        :data:`_NATIVE_WALK_MAX_REACH` nodes depth-first (5-10 µs instead of 0.05-0.5 ms on
        Llama-3), a wider one in one pass over the nodes (0.6 ms instead of 1-2.5 ms).  The
        strings come in level order or in index order, depending on the path: callers must
        not rely on either.
        """
        if classes is not None:
            return self._walk_narrow(table, start, classes)
        if self.num_levels == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        if self._native_takes(table, start):  # the compiled build
            states = table[start].take(self.level_bytes[1])
            nodes = states.nonzero()[0]
            reach = int(self._below_first[nodes].sum())
            if reach >= _NATIVE_WALK_MAX_REACH:  # depth-first only if the second level says so
                reach = self._reach(table, nodes, states)
            return self._native_walk_checked(table, start, reach, min(reach, self.num_strings))
        flat = table.reshape(-1)
        states = np.take(flat, self.level_bytes[1] + start * 256)
        nodes = np.flatnonzero(states)
        reach = self._reach(table, nodes, states)
        if reach * _CLASS_WALK_SHARE >= self.total_nodes:  # permissive: on the class trie
            found = self._classes_of(table)
            if found is not None and found[1].total_nodes < reach:
                kept, ctrie = found
                full = ctrie.walk(kept.flat, start)
                idx = np.flatnonzero(full != 0)  # a boolean scan: 4-5x faster than on ints
                return idx, (full[idx] // ctrie.n_classes).astype(np.int32)
        if nodes.size * 8 >= states.size:
            full = self.walk(table, start)
            idx = np.flatnonzero(full != 0)
            return idx, full[idx]
        return self._sparse_pairs(flat, nodes, states[nodes])

    def _sparse_pairs(
        self,
        flat: np.ndarray,
        nodes: np.ndarray,
        states: np.ndarray,
        cmap: np.ndarray | None = None,
        width: int = 256,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`walk_pairs`' strings below the live first-level ``nodes`` (in ``states``)
        on the flattened ``flat`` (narrow with ``cmap``, rows ``width`` wide), level by level
        over the live nodes (:meth:`_sparse_step`).  O(live nodes)."""
        out_idx: list[np.ndarray] = []
        out_states: list[np.ndarray] = []
        d = 1
        while True:
            ends = np.take(self.level_end_string[d], nodes)
            has_end = ends >= 0
            if has_end.any():
                out_idx.append(ends[has_end])
                out_states.append(states[has_end])
            if d >= self.num_levels:
                break
            nodes, states = self._sparse_step(flat, d, nodes, states, cmap, width)
            d += 1
            if nodes.size == 0:
                break
        if not out_idx:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return np.concatenate(out_idx), np.concatenate(out_states)

    def _walk_narrow(
        self, table: np.ndarray, start: int, classes: tuple[np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`walk_pairs` on a narrow table (``classes = (cmap, reps)``, see there).  The
        compiled build walks it as it is (the kernel's ``walk``/``walk_all`` read column
        ``cmap[b]``: a counted window of a 24-state string item and 128 levels is 0.8 MB at
        22 classes instead of 9.4 MB, issue #31's TBM max).  The pure package walks it on
        the class trie of ``cmap`` where the walk is permissive (as :meth:`walk_pairs` does
        a 256-column table's classes), level by level over the live nodes otherwise; a
        table the kernel does not take (not int32, C-contiguous, ``cmap`` not ``uint8[256]``)
        is widened (``table[:, cmap]``, its classes noted: :func:`note_column_classes`).
        Each path gives the strings in the order :meth:`walk_pairs` gives on the 256-column
        table (callers do not rely on it; a classification's candidates keep it)."""
        cmap, reps = classes
        if self.num_levels == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        width = table.shape[1] if table.ndim == 2 else 0
        if (
            table.dtype != np.int32
            or not table.flags.c_contiguous
            or not 0 < width <= 256
            or not 0 < start < table.shape[0]
            or cmap.dtype != np.uint8
            or cmap.shape != (256,)
            or not cmap.flags.c_contiguous
            or int(cmap.max()) >= width
        ):
            full = np.ascontiguousarray(np.asarray(table)[:, cmap])
            note_column_classes(full, (cmap, reps))
            return self.walk_pairs(full, start)
        states = table[start].take(cmap.take(self.level_bytes[1]))
        if _KERNEL is None:  # the pure package
            nodes = np.flatnonzero(states)
            reach = self._reach(table, nodes, states, cmap)
            if (
                reach * _CLASS_WALK_SHARE >= self.total_nodes
                and width <= _CLASS_TRIE_MAX_CLASSES
                and width == int(cmap.max()) + 1  # (a class trie's classes are all used)
            ):
                ctrie = self._class_trie(cmap, width)
                if ctrie.total_nodes < reach:
                    full = ctrie.walk(table.astype(np.int64).reshape(-1) * width, start)
                    idx = np.flatnonzero(full != 0)
                    return idx, (full[idx] // width).astype(np.int32)
            flat = table.reshape(-1)
            if nodes.size * 8 >= states.size:  # (the paths of walk_pairs: the same order)
                full = self._numpy_levels(flat, start, cmap, width)
                idx = np.flatnonzero(full != 0)
                return idx, full[idx]
            return self._sparse_pairs(flat, nodes, states[nodes], cmap, width)
        nodes = states.nonzero()[0]
        reach = int(self._below_first[nodes].sum())
        if reach >= _NATIVE_WALK_MAX_REACH:  # depth-first only if the second level says so
            reach = self._reach(table, nodes, states, cmap)
        return self._native_walk_checked(table, start, reach, min(reach, self.num_strings), cmap)

    def _reach(
        self,
        table: np.ndarray,
        nodes: np.ndarray,
        states: np.ndarray,
        cmap: np.ndarray | None = None,
    ) -> int:
        """At most how many trie nodes a walk whose live first-level nodes are ``nodes`` (in
        states ``states[nodes]`` of ``table``) may touch: the nodes below those first bytes,
        and where that is many (a state that allows a space, which starts half of a
        vocabulary's tokens), the nodes below the second-level children the first states
        keep alive (a JSON whitespace gap keeps a few of the space's children: a few hundred
        nodes, not 130k).  O(live first bytes) numpy, plus O(live first bytes x 256) for the
        second level where the first is wide.  ``cmap``: ``table`` is narrow (see
        :meth:`walk_pairs`)."""
        reach = int(self._below_first[nodes].sum())
        if reach < _REACH_SECOND_LEVEL or not nodes.size:
            return reach
        live2 = np.take(table, states[nodes], axis=0) != 0
        if cmap is not None:
            live2 = live2[:, cmap]
        return int(nodes.size) + int(self._below_second[nodes][live2].sum())

    @staticmethod
    def _native_takes(table: np.ndarray, start: int) -> bool:
        """Whether the compiled walks apply: the extension is there (the compiled build) and
        ``table`` is a C-contiguous ``int32[n, 256]`` table with ``start`` a live state."""
        return (
            _KERNEL is not None
            and table.dtype == np.int32
            and table.flags.c_contiguous
            and table.ndim == 2
            and table.shape[1] == 256
            and 0 < start < table.shape[0]
        )

    def _native_walk(
        self, table: np.ndarray, start: int, reach: int = 0
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`walk_pairs` in the compiled build (``formcast.vocab._trie_walk``):
        ``(string indices ascending, end states)``; None where it does not apply (see
        :meth:`_native_takes`).  A walk reaching fewer than :data:`_NATIVE_WALK_MAX_REACH`
        nodes (``reach``: the nodes below its live first bytes) runs depth-first, O(live
        nodes); a wider one is :meth:`_native_levels` plus one scan, O(nodes)."""
        if not self._native_takes(table, start):
            return None
        return self._native_walk_checked(table, start, reach, self.num_strings)

    def _native_walk_checked(
        self,
        table: np.ndarray,
        start: int,
        reach: int,
        most: int,
        cmap: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_native_walk` once :meth:`_native_takes` holds (or, with ``cmap``, on a
        narrow table: :meth:`_walk_narrow`).  A depth-first walk's
        output arrays hold ``most`` strings: :meth:`walk_pairs` passes its reach (an upper
        bound of the nodes the walk touches, hence of the strings it finds; the kernel
        refuses to write past the arrays), not the vocabulary's size."""
        if reach >= _NATIVE_WALK_MAX_REACH:
            full = self._native_levels(table, start, cmap)
            idx = np.flatnonzero(full != 0)  # (a boolean scan: 4-5x faster than on ints)
            return idx, full[idx]
        first, count, byte, end, _, n_root = self._flat_nodes()
        size = most + 1
        out_idx = np.empty(size, dtype=np.int32)
        out_state = np.empty(size, dtype=np.int32)
        if cmap is None:
            k = _KERNEL.walk(first, count, byte, end, table, start, out_idx, out_state, 0, n_root)
        else:
            k = _KERNEL.walk(
                first, count, byte, end, table, start, out_idx, out_state, 0, n_root,
                cmap, table.shape[1],
            )  # fmt: skip
        return out_idx[:k].astype(np.int64), out_state[:k]

    def _native_levels(
        self, table: np.ndarray, start: int, cmap: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`walk` in the compiled build: every node's state in one pass over the nodes
        in level order (no liveness branching: ~2 ns a node, 0.6 ms on Llama-3's 275k
        nodes against 2.5 ms of numpy gathers), then each string's.  ``table`` must pass
        :meth:`_native_takes` (or, with ``cmap``, be narrow: :meth:`_walk_narrow`)."""
        _, _, byte, _, parent, _ = self._flat_nodes()
        nodes = np.empty(self.total_nodes, dtype=np.int32)
        if cmap is None:
            _KERNEL.walk_all(parent, byte, table, start, nodes)
        else:
            _KERNEL.walk_all(parent, byte, table, start, nodes, cmap, table.shape[1])
        out: np.ndarray = nodes.take(self.string_node)
        return out

    def _flat_nodes(self) -> _FlatNodes:
        """The trie's nodes numbered level after level (level ``d`` from
        ``level_offset[d]``): each node's first child and child count, its byte, the string
        ending there (-1: none) and its parent (-1: the root), plus the root's child count.
        Built once (O(nodes), ~17 bytes a node), for the compiled walks."""
        if self._flat is None:
            off = self.level_offset
            last = len(self.level_bytes) - 1
            first = np.concatenate(
                [
                    self.level_child_start[d] + (off[d + 1] if d < last else 0)
                    for d in range(1, last + 1)
                ]
            ).astype(np.int32)
            count = np.concatenate([self.level_child_count[d] for d in range(1, last + 1)]).astype(
                np.int32
            )
            byte = np.concatenate(self.level_bytes[1:]).astype(np.uint8)
            end = np.concatenate(self.level_end_string[1:]).astype(np.int32)
            parent = np.concatenate(
                [np.full(self.level_bytes[1].size if last >= 1 else 0, -1, dtype=np.int64)]
                + [self.level_parent[d] + off[d - 1] for d in range(2, last + 1)]
            ).astype(np.int32)
            n_root = int(self.level_bytes[1].size) if last >= 1 else 0
            flat = (first, count, byte, end, parent, n_root)
            # (built here, not on a grammar's first wide walk; published first: a thread that
            # sees the nodes sees the memo; none on a trie below :data:`_MEMO_MIN_NODES`)
            if self.total_nodes >= _MEMO_MIN_NODES:
                self._memo = _build_subtree_memo(self, flat)
            self._flat = flat
        return self._flat

    def _subtree_memo(self) -> _SubtreeMemo | None:
        """The subtree memo of the compiled classifications (``_trie_walk.c``'s
        ``SubtreeMemo``; None in the pure package): the nodes in preorder (a depth-first walk
        reads them in address order and skips a subtree by its size), and for each node with
        at least :data:`_MEMO_MIN_BELOW` nodes below it the 256-bit set of the bytes below it
        (byte ``b`` at bit ``b % 64`` of word ``b // 64``).  A walk arriving at such a node in
        a state whose row leads every byte of the set back to itself knows every string below
        ends there (the strings below a node are contiguous in sorted order): it takes them as
        one range without walking the subtree (an identifier, a number's digits: O(nodes
        outside such subtrees) instead of O(live nodes)).  Built with the flattened nodes
        (:meth:`_flat_nodes`, on a process's first compiled walk) in C, O(nodes), ~2-4 ms on
        Llama-3; kept (~16 bytes a node, 32 more a node with a set: ~7 MB on Llama-3).  A trie
        of fewer than :data:`_MEMO_MIN_NODES` nodes (a grammar's exit-byte trie) gets none
        there (its walks never use one); a call here builds it all the same (the tests'
        memo walks on small tries), and the classifications use it from then on.  With
        its text memo (``text_*``, the kernel's ``text_memo``: one more pass, ~5 bytes a node
        and 8 a break, ~1.4 MB on Llama-3), a walk in a string body's state takes the strings
        below a character boundary as ranges, walking only the nodes under breaks."""
        if self._flat is None:
            self._flat_nodes()
        if self._memo is None and self._flat is not None:
            self._memo = _build_subtree_memo(self, self._flat)
        return self._memo

    def _memo_words(self, memo: _SubtreeMemo, n_words: int) -> _SubtreeMemo:
        """``memo`` (this trie's :meth:`_subtree_memo`) with ``all_words``: the bitmask words
        (``n_words`` of them) of every string's :attr:`first_token`, for the walks of this
        trie's own strings (no string map) in a vocabulary of one token id each: a text walk
        whose ranges cover most strings ORs these words less the strings outside them (the
        kernel's ``finish_deferred``: O(strings outside) instead of O(strings in ranges)).
        ``memo`` itself where an id does not fit.  Built on the first call (one scatter and
        packing pass over the strings, ~0.3 ms on Llama-3), kept for that memo and width."""
        got = self._memo_all
        if got is not None and got[0] is memo and got[1] == n_words:
            return got[2]
        first = self.first_token
        if first.size and (int(first.min()) < 0 or int(first.max()) >= n_words * 32):
            return memo
        padded = np.zeros(n_words * 32, dtype=bool)
        padded[first] = True
        bits = np.packbits(padded, bitorder="little").view("<i4").astype(np.int32)
        out = memo._replace(all_words=bits)
        self._memo_all = (memo, n_words, out)
        return out

    def _classes_of(self, table: np.ndarray) -> tuple[_TableClasses, _ClassTrie] | None:
        """``table``'s column classes (:data:`_TABLE_CLASSES`: computed once per table, O(rows x
        256), kept while the table lives) and this trie's class trie for them (built on the
        first call per class map, kept for the :data:`_CLASS_TRIES_KEPT` most recent maps);
        None where the table has more than :data:`_CLASS_TRIE_MAX_CLASSES` classes (a class
        trie would merge few prefixes)."""
        got = _TABLE_CLASSES.get(id(table))
        if got is None or got.table() is not table:
            got = _keep_classes(table, column_classes(table, _CLASS_TRIE_MAX_CLASSES))
        if got.cmap is None:
            return None
        return got, self._class_trie(got.cmap, got.n_classes, got.map_key)

    def _class_trie(
        self, cmap: np.ndarray, n_classes: int, map_key: bytes | None = None
    ) -> _ClassTrie:
        """This trie's class trie for the class map ``cmap`` (``n_classes`` classes, each
        used; ``map_key``: ``cmap`` as uint8 bytes, computed when None): built on the first
        call per map, kept for the :data:`_CLASS_TRIES_KEPT` most recent maps."""
        if map_key is None:
            map_key = cmap.astype(np.uint8).tobytes()
        hit, ctrie = self._class_tries.get(map_key)
        if not hit or ctrie is None:
            ctrie = _ClassTrie(self, cmap, n_classes)
            self._class_tries.put(map_key, ctrie)
        return ctrie

    def token_mask_of(self, unique: np.ndarray, vocab_size: int) -> np.ndarray:
        """``bool[vocab_size]``: the token ids whose bytes are one of the ``unique`` strings."""
        out = np.zeros(vocab_size, dtype=bool)
        if self._one_token_each():  # every string is one token id: one scatter, O(strings)
            out[self.first_token[unique]] = True
        elif unique.size * 4 > self.num_strings:
            ext = np.zeros(self.num_strings + 1, dtype=bool)
            ext[unique] = True
            out[:] = ext[self.token_to_unique]
        elif unique.size:
            out[self.unique_token_ids(unique)] = True
        return out

    def token_words(
        self, unique: np.ndarray, vocab_size: int, base: np.ndarray | None = None
    ) -> np.ndarray:
        """``int32`` bitmask words of the token ids whose bytes are one of the ``unique``
        strings, OR-ed into a copy of ``base`` (bitmask words of ``vocab_size``) when given.

        A new array every call.  Few strings (at most :data:`_SPARSE_WORDS_MAX`: a key, a
        literal, the tokens with a quote that stay alive) set their bits directly, O(strings)
        after one allocation of ``ceil(vocab_size / 32)`` words; more go through
        :meth:`token_mask_of` and one packing pass, O(vocabulary)."""
        if self._native_bits():  # the compiled build: one C pass over the strings
            if base is None:
                words = np.zeros(bitmask_words(vocab_size), dtype=np.int32)
            else:
                words = base.copy()
            self.set_string_bits(words, unique)
            return words
        if unique.size <= _SPARSE_WORDS_MAX:
            if base is None:
                words = np.zeros(bitmask_words(vocab_size), dtype=np.int32)
            else:
                words = base.copy()
            if unique.size:
                bitmask_set_many(words, self.unique_token_ids(unique))
            return words
        if self._one_token_each():  # the bits straight into a padded vector, packed once
            padded = np.zeros(bitmask_words(vocab_size) * 32, dtype=bool)
            padded[self.first_token[unique]] = True
            packed = np.packbits(padded, bitorder="little").view("<i4").astype(np.int32)
        else:
            packed = bool_to_bitmask(self.token_mask_of(unique, vocab_size), vocab_size)
        if base is not None:
            packed |= base
        return packed

    def _native_bits(self) -> bool:
        """Whether :meth:`set_string_bits` runs in C: the compiled build, where every string
        is one token id."""
        return _KERNEL is not None and hasattr(_KERNEL, "set_bits") and self._one_token_each()

    def set_string_bits(self, words: np.ndarray, unique: np.ndarray) -> None:
        """Set the bits of the token ids of the distinct strings ``unique`` in the writable
        ``int32`` bitmask words ``words``, in place: in the compiled build (every string one
        id) one C pass, O(strings); else :func:`~formcast.bitmask.bitmask_set_many`."""
        if not unique.size:
            return
        if self._native_bits():
            first = self.first_token
            if first.dtype != np.int64 or not first.flags.c_contiguous:
                first = self.first_token = np.ascontiguousarray(first, dtype=np.int64)
            _KERNEL.set_bits(
                words, first, np.ascontiguousarray(unique, dtype=np.int64), 32 * words.size
            )
        else:
            bitmask_set_many(words, self.unique_token_ids(unique))

    def classify_walker(
        self, vocab_trie: TokenTrie, n_words: int, own_strings: bool
    ) -> ClassifyWalker | None:
        """The kernel's resumable classify walks of this trie's strings as tokens of
        ``vocab_trie`` (bits in ``n_words`` bitmask words; ``own_strings``: no string map),
        bound (:class:`ClassifyWalker`); None where they do not apply (the pure package, a
        kernel without ``classify_from``, an empty trie, a string of several token ids).  The
        last one given is kept and given again while it fits (the same vocabulary trie,
        width, memo, kernel and reach thresholds: ~0.2 us a call); else
        :meth:`_classify_head`'s look-up (or build) and a new walker (~2 us)."""
        w = self._walker
        if (
            w is not None
            and w.vocab_trie is vocab_trie
            and w.n_words == n_words
            and w.own_strings is own_strings
            and w.memo is self._memo
            and w.kernel is _KERNEL
            and w.reach_base is _NATIVE_WALK_MAX_REACH
            and w.share is _MEMO_WALK_MAX_SHARE
        ):
            return w
        if _KERNEL is None or not hasattr(_KERNEL, "classify_from"):
            return None
        head = self._classify_head(vocab_trie, n_words, own_strings)
        if head is None:
            return None
        w = ClassifyWalker(self, vocab_trie, n_words, own_strings, head)
        self._walker = w
        return w

    def _classify_head(
        self, vocab_trie: TokenTrie, n_words: int, own_strings: bool
    ) -> _ClassifyHead | None:
        """The arguments of the kernel's ``classify``/``classify_from`` that depend on this
        trie alone (:func:`_classify_call`: walks of this trie whose strings are tokens of
        ``vocab_trie``, their bits in ``n_words`` bitmask words; ``own_strings``: no string
        map): None where the kernel does not apply (an empty trie, a string of several token
        ids).  With the subtree memo (stops then numbered in its preorder: every call on this
        trie passes it), walks reaching fewer than half the nodes run depth-first on it (an
        identifier's or a number's walk skips the subtrees its state loops through), wider
        ones (a JSON string's body: most subtrees hold a byte that leaves it) pass over every
        node as before (:func:`_classify_call`).  Kept per (vocabulary trie, width, own
        strings), a handful a trie, while the memo is the same object: a walk's glue is then
        a look-up, not ~1-2 us of checks and attribute reads, and the kernel takes the
        handle's buffers (held while it lives: the arrays are never resized) instead of ~23
        arrays' (~1.3 us) a call."""
        if not self.num_levels:  # (an empty trie: nothing to walk, no nodes to flatten)
            return None
        if self._flat is None:
            self._flat_nodes()
        key = (id(vocab_trie), n_words, own_strings)
        heads = self._heads
        got = heads.get(key)
        if got is not None and got[0] is vocab_trie and got[1] is self._memo:
            return got[2]
        memo_src = self._memo
        head: _ClassifyHead | None = None
        if vocab_trie._one_token_each():
            first, count, byte, end, parent, _ = self._flat_nodes()
            string_node = self.string_node
            if string_node.dtype != np.int64 or not string_node.flags.c_contiguous:
                string_node = self.string_node = np.ascontiguousarray(string_node, np.int64)
            ftok = vocab_trie.first_token
            if ftok.dtype != np.int64 or not ftok.flags.c_contiguous:
                ftok = vocab_trie.first_token = np.ascontiguousarray(ftok, dtype=np.int64)
            fixed: tuple[np.ndarray, ...] = (first, count, byte, end, parent, string_node)
            fixed += (self._below_first, self._below_second, ftok)
            memo = memo_src
            own = own_strings and self is vocab_trie  # (a walk of this trie's own strings)
            if memo is not None and memo.text_flag is not None and own:
                memo = self._memo_words(memo, n_words)
            handle = _KERNEL.trie_handle(*fixed, memo)
            head = (handle, memo is not None)
        with _TABLE_CLASSES_LOCK:  # (a dict write; equal values from two threads)
            if len(heads) >= 8:
                heads.clear()
            heads[key] = (vocab_trie, memo_src, head)
        return head

    def _one_token_each(self) -> bool:
        """Whether every distinct string is exactly one token id (Llama-3's, most
        vocabularies'): then :attr:`first_token` maps strings to ids, one gather.  Computed
        on first use by counting the text ids (every string has one at least, so there are
        as many as strings exactly when each has one): one O(vocabulary) pass, no sort (the
        id ranges of :meth:`_token_ranges` cost an argsort, ~10-15 ms on Llama-3, and the
        compiled walks ask this on a grammar's first classification)."""
        one = self._one_each
        if one is None:
            u = self.num_strings
            text = int(np.count_nonzero(self.token_to_unique < u))
            one = self._one_each = bool(u > 0 and text == u)
        return one

    def _token_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(per string, where its ids start in the second array; the ids sorted by string),
        built once, O(vocabulary log vocabulary)."""
        if self._csr is None:
            order = np.argsort(self.token_to_unique, kind="stable")
            keys = self.token_to_unique[order]
            starts = np.searchsorted(keys, np.arange(self.num_strings + 1))
            self._csr = (starts, order)
        return self._csr

    def unique_token_ids(self, unique: np.ndarray) -> np.ndarray:
        """Token ids of the given distinct strings (a string may be several ids), string by
        string in the order given.  O(k): one gather where every string is one id."""
        if self._one_token_each():
            out: np.ndarray = self.first_token[unique]
            return out
        starts, order = self._token_ranges()
        lo = starts[unique]
        hi = starts[unique + 1]
        counts = hi - lo
        idx = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        return order[idx]


#: :meth:`TokenTrie.token_words` sets the bits of at most this many strings one by one (past
#: it, a boolean vector and one packing pass over the vocabulary are cheaper)
_SPARSE_WORDS_MAX = 512
#: the subtree memo (:meth:`TokenTrie._subtree_memo`) covers the nodes with at least this
#: many nodes below them (a smaller subtree is walked about as fast as its set is checked)
_MEMO_MIN_BELOW = 4
#: the tries of at least this many nodes get their subtree memo with their flattened nodes
#: (:meth:`TokenTrie._flat_nodes`); a smaller one (a grammar's exit-byte trie: ~2k nodes on
#: Llama-3) none: its fresh walks reach fewer nodes than the memo's least reach
#: (:data:`_NATIVE_WALK_MAX_REACH`), so it would only number a resumable walk's stops
#: (its ~0.1-0.2 ms build was paid in a grammar's first mask; walk38, session 24)
_MEMO_MIN_NODES = 32_768
#: with the subtree memo, compiled classifications whose reach is at least 1/this of the
#: trie's nodes pass over every node unless their start is a text state's (the kernel's
#: ``text_entry``: the trie then one text region; below it they walk depth-first on the memo: on
#: grammar_bench's c1_arith, reaches of 40-55k Llama-3 nodes 2-2.5x faster, of 114k even, and
#: JSON strings' 268k 1.8x slower than the pass)
_MEMO_WALK_MAX_SHARE = 2
#: the text bytes of the text memo (``_trie_walk.c``'s ``text_memo``): printable ASCII but the
#: quote and the backslash, the bytes a string body's state (JSON's, a C string's) leads back
#: to itself; a walk in a state looping on them and on every well-formed UTF-8 character
#: takes the strings below a node as ranges, walking only the nodes under other bytes
_TEXT_BYTES = frozenset(range(0x20, 0x7F)) - {0x22, 0x5C}
#: in the compiled build, walks whose live first bytes reach fewer trie nodes than this run
#: depth-first, wider ones in one pass over every node (depth-first on Llama-3: 5-10 µs below
#: 40k nodes, 0.7 ms at 40-80k, 3.1 ms past 160k, where the pass takes 0.6 ms)
_NATIVE_WALK_MAX_REACH = 32_768
#: first-level reaches from this many nodes on are refined by the second level
#: (:meth:`TokenTrie._reach`: O(live first bytes x 256) more numpy)
_REACH_SECOND_LEVEL = 4_096
#: a walk whose live first bytes reach at least 1/this of the trie's nodes is permissive: it
#: runs on the class trie of its table (where that trie is smaller than what it reaches)
_CLASS_WALK_SHARE = 8
#: tables with more column classes than this are walked byte by byte (a class trie of many
#: classes merges few prefixes and costs more to build than it saves)
_CLASS_TRIE_MAX_CLASSES = 24
#: class tries kept per trie (the most recently used class maps); each holds O(its nodes)
#: int32s and one int64 per string (~1-3 MB on a 128k vocabulary)
_CLASS_TRIES_KEPT = 8


class _TableClasses:
    """A walked table's column classes: ``cmap`` (the class of each byte; None past
    :data:`_CLASS_TRIE_MAX_CLASSES` classes), its key, and ``flat``: the table with one column
    per class, flattened, entries times the number of classes (see :meth:`_ClassTrie.walk`).
    Immutable; kept in :data:`_TABLE_CLASSES` while the table lives."""

    __slots__ = ("cmap", "flat", "map_key", "n_classes", "table")

    def __init__(
        self,
        table: weakref.ref[np.ndarray],
        found: tuple[np.ndarray, np.ndarray] | None,
    ) -> None:
        self.table = table
        self.cmap: np.ndarray | None = None
        self.map_key = b""
        self.n_classes = 0
        self.flat = np.zeros(0, dtype=np.int64)
        live = table()
        if found is not None and live is not None:
            cmap, first = found
            self.cmap = cmap
            self.map_key = cmap.astype(np.uint8).tobytes()
            self.n_classes = c = int(first.size)
            self.flat = live[:, first].astype(np.int64).reshape(-1) * c


#: column classes of the tables walked permissively, by ``id(table)`` (an entry's weak
#: reference tells the table from a later one reusing its id; dead entries are dropped when
#: an entry is added).  Process-wide: the tries of one vocabulary (its exit-byte sub-tries
#: included) share a table's classes.
_TABLE_CLASSES: dict[int, _TableClasses] = {}
_TABLE_CLASSES_LOCK = threading.Lock()


def _keep_classes(table: np.ndarray, found: tuple[np.ndarray, np.ndarray] | None) -> _TableClasses:
    """Record ``table``'s column classes in :data:`_TABLE_CLASSES` (dropping the entries of
    tables that died) and return the entry."""
    got = _TableClasses(weakref.ref(table), found)
    with _TABLE_CLASSES_LOCK:
        for k in [k for k, v in _TABLE_CLASSES.items() if v.table() is None]:
            del _TABLE_CLASSES[k]
        _TABLE_CLASSES[id(table)] = got
    return got


def note_column_classes(table: np.ndarray, classes: tuple[np.ndarray, np.ndarray]) -> None:
    """Tell the permissive walks of every trie ``table``'s column classes, known to the code
    that built it: ``(class of each column, a column of each class)``, where the columns of
    one class are equal (the partition may be finer than
    :func:`~formcast.columns.column_classes`'s: a class trie is exact on any such partition).

    A table built column by column from small inputs (a counted rule's window: levels of an
    item automaton) has the column classes of those inputs; given them, a permissive walk of
    the pure-Python build does not hash and check the whole table (O(rows x 256): 20-40 ms
    for a 10-20k-row window) to learn them.  ``table`` must not change afterwards.  The
    compiled build's walks do not use classes (a table they take is not recorded).  Cost:
    O(rows x classes) for the class table."""
    if TokenTrie._native_takes(table, 1):  # walked in C, without classes
        return
    cmap, first = classes
    found = (cmap, first) if first.size <= _CLASS_TRIE_MAX_CLASSES else None
    _keep_classes(table, found)


def write_walk_rows(
    ids: np.ndarray,
    targets: np.ndarray,
    split: np.ndarray,
    rows: np.ndarray,
    lex: np.ndarray,
    cut: np.ndarray,
    exit_byte: int | None,
    sink: int,
) -> bool:
    """The lazy walk tables' rows of some lexer states in one C pass (the compiled build's
    ``_trie_walk.write_rows``; see its source for the layout): True, or False in the pure
    package, where the caller writes them with numpy (the same rows)."""
    if _KERNEL is None or not hasattr(_KERNEL, "write_rows"):
        return False
    _KERNEL.write_rows(
        ids,
        np.ascontiguousarray(targets, dtype=np.int32),
        np.ascontiguousarray(split, dtype=np.bool_),
        np.ascontiguousarray(rows, dtype=np.int64),
        lex,
        cut,
        -1 if exit_byte is None else exit_byte,
        sink,
    )
    return True


def classify_walk(
    trie: TokenTrie,
    table: np.ndarray,
    start: int,
    pending: np.ndarray,
    sink: int,
    vocab_trie: TokenTrie,
    words: np.ndarray,
    string_map: np.ndarray | None = None,
    drop: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """A lazy classification's walk in one C call (the compiled build's
    ``_trie_walk.classify``): ``trie.walk_pairs(table, start)``, then per live string ``i``
    (``g = string_map[i]``, or ``i``: a string of ``vocab_trie``) whose end state ``s`` is
    not ``pending`` (a sentinel's row): ``g`` a candidate where ``s == sink`` (unless
    ``drop[g]``), else the bit of ``g``'s token set in ``words`` (bitmask words, in place).
    Returns ``(candidates ascending, stopped states)``; where some end state is pending,
    ``stopped`` lists each once and ``words``/``candidates`` are incomplete (the caller builds
    those rows and walks again).  None in the pure package, or where the kernel does not apply
    (a table it cannot take, a string of several token ids): the caller uses ``walk_pairs``
    (tests/vocab/test_trie_classify_walk.py checks both agree)."""
    got = _classify_call(
        trie, table, start, pending, sink, vocab_trie, words, string_map, drop, None
    )
    if got is None:
        return None
    return got[0], got[1]


class _SubtreeMemo(NamedTuple):
    """:meth:`TokenTrie._subtree_memo`: the trie's nodes in preorder (see ``_trie_walk.c``'s
    ``SubtreeMemo``).  Immutable, per trie."""

    pos: np.ndarray  # int32, per level-order node (of _flat_nodes): its preorder number
    byte: np.ndarray  # uint8, per preorder node
    depth: np.ndarray  # uint16: the root's children 1
    size: np.ndarray  # int32: the nodes of its subtree, itself included
    own: np.ndarray  # uint8: a string ends there
    str: np.ndarray  # int32 [n + 1]: the strings before it in preorder (= its string's index)
    sel: np.ndarray  # int32: its set's index, or -1 (small subtrees)
    sets: np.ndarray  # uint64 [k, 4]: the bytes below each selected node, 256 bits
    max_depth: int
    min_reach: int  # fresh walks reaching fewer nodes run depth-first without the memo
    # the text memo (``_trie_walk.c``'s ``text_memo``; None: none): per preorder node its
    # flags (1: a UTF-8 character ends there), per node the index of the first break at or
    # after it (n + 1 entries), the breaks in preorder, their partial characters, and the
    # text bytes (:data:`_TEXT_BYTES` as a 256-bit set)
    text_flag: np.ndarray | None = None  # uint8
    text_next: np.ndarray | None = None  # int32 [n + 1]
    text_breaks: np.ndarray | None = None  # int32
    text_pre: np.ndarray | None = None  # uint32
    text_bytes: np.ndarray | None = None  # uint64 [4]
    # the bitmask words of every string's token (TokenTrie._memo_words; None: not given)
    all_words: np.ndarray | None = None  # int32


class WalkRows(NamedTuple):
    """What :func:`classify_walk_rows` needs to write the lazy walk tables' rows it meets
    (``formcast.index.cfg_program._LazyWalkTables``; see ``_trie_walk.c``'s ``RowWriter``):
    the lexer's rows, split flags and built flags, the tables' per-state ids and ready flags,
    per-id states, both tables and the pending flags (whole maps: rows are written past the
    ids given so far), the ids given, and the exit byte (-1: none, the cut table is the lex
    table).  Arrays mutated in place by the call; the tuple lives for one call."""

    lexer: np.ndarray
    split: np.ndarray
    built: np.ndarray
    ids: np.ndarray
    ready: np.ndarray
    states: np.ndarray
    lex: np.ndarray
    cut: np.ndarray
    pending: np.ndarray
    given: int
    exit_byte: int


def classify_walk_rows(
    trie: TokenTrie,
    cut: bool,
    start: int,
    sink: int,
    vocab_trie: TokenTrie,
    words: np.ndarray,
    string_map: np.ndarray | None,
    drop: np.ndarray | None,
    rows: WalkRows,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """:func:`classify_walk` on the whole (cut if ``cut``) table of ``rows``, writing the
    rows of the sentinels it meets whose lexer rows are built, as it goes (so the walk goes
    on where :func:`classify_walk` stops): ``(candidates, stopped states, the lexer states
    whose rows were written (in order), ids given now)`` (the caller takes the count even
    where nothing was written: ids may be given to a row's targets before the room runs
    out); ``stopped`` lists the sentinels met whose lexer rows are not built (or that found
    no room).  The result is that of
    :func:`classify_walk` on the tables the call leaves (rows are functions of the lexer's).
    None where the kernel does not apply (nothing written).  Cost: the walk plus O(256) per
    row written; no Python per row."""
    table = rows.cut if cut else rows.lex
    return _classify_call(
        trie, table, start, rows.pending, sink, vocab_trie, words, string_map, drop, rows
    )


def classify_walk_resume(
    trie: TokenTrie,
    cut: bool,
    start: int,
    sink: int,
    vocab_trie: TokenTrie,
    words: np.ndarray,
    string_map: np.ndarray | None,
    drop: np.ndarray | None,
    rows: WalkRows,
    resume: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """:func:`classify_walk_rows`, resumable: a sentinel met whose row cannot be written
    (its lexer row unbuilt, or no room) is a *stop*: the node's string and subtree are left
    (every byte of a sentinel row leads back to it), and ``(node, row)`` is returned, so the
    walk goes on from there, not from the start, once the caller has written those rows.
    ``resume``: None (a walk from ``start``), or the stops of the walk before (int64
    ``[node, row, node, row, ...]``; ``start`` then unused), walked again from each: the
    node's string, then its subtree.  A fresh walk whose first bytes meet such a sentinel
    walks nothing (nothing written to ``words``): its stops are ``(-1, row)`` pairs, and the
    caller walks again from ``start`` once they are written (a stop that shallow would
    leave most of a wide walk to depth-first resumes).  Returns ``(candidates of this
    call, in walk order, ascending within the walk of each stop), stops, the lexer states
    whose rows were written, ids given now)``; ``words`` collects the bits of every call
    (the strings of one walk split among a walk and its resumes, each string once), so the
    caller keeps it across them and sorts the union of the candidates.  None where the
    kernel does not apply, or lacks resumable walks (the caller then uses
    :func:`classify_walk_rows`).  Cost: the live nodes walked this call plus O(256) per row
    written."""
    table = rows.cut if cut else rows.lex
    if not TokenTrie._native_takes(table, start):
        return None
    walker = trie.classify_walker(vocab_trie, int(words.size), string_map is None)
    if walker is None:
        return None
    got = walker.walk(table, start, rows.pending, sink, words, string_map, drop, rows, resume)
    written = np.asarray(got[2], dtype=np.int64) if got[2] else _NO_STATES
    return got[0], got[1], written, got[3]


def write_walk_state(rows: WalkRows, state: int, sink: int) -> tuple[int, bool] | None:
    """The walk rows of the lexer ``state`` (not ready) written as :func:`classify_walk_rows`
    writes those it meets (the compiled build's ``_trie_walk.write_state``): ``(ids given
    now, written)``, not written where the lexer row is not built or the tables had no room
    for an id (ids given before the room ran out stay given, as sentinels: the caller takes
    the count either way, then writes the rows its own way); None in the pure package.
    O(256)."""
    if _KERNEL is None or not hasattr(_KERNEL, "write_state"):
        return None
    count, done = _KERNEL.write_state(rows, state, sink)
    return int(count), bool(done)


def walks_write_rows() -> bool:
    """Whether :func:`classify_walk_rows` can apply (the compiled build): the lazy classifier
    then writes no rows ahead of its walks."""
    return _KERNEL is not None and hasattr(_KERNEL, "classify")


class ClassifyWalker:
    """The kernel's resumable classify walks (``_trie_walk.classify_from``, as
    :func:`classify_walk_resume`) of one trie's strings as tokens of one vocabulary trie,
    their bits in bitmasks of one width, with or without a string map, bound once
    (:meth:`TokenTrie.classify_walker`): the kernel's handle of the trie
    (:meth:`TokenTrie._classify_head`) and the walk's reach threshold are kept, so a call is
    the kernel's and its outputs' conversion, not ~1-2 us of look-ups and checks.  It does
    not check the table (the lazy walk tables' are ``int32[n, 256]``, C-contiguous: the
    kernel refuses another with ``ValueError``) nor the start (the kernel refuses one out of
    range).  Immutable; holds the handle (the trie's buffers) while it lives.  Valid while
    the trie's memo, the kernel and the reach thresholds are those it was made with
    (:meth:`TokenTrie.classify_walker` checks)."""

    __slots__ = (
        "handle",
        "kernel",
        "max_reach",
        "memo",
        "n_words",
        "own_strings",
        "reach_base",
        "share",
        "vocab_trie",
    )

    def __init__(
        self,
        trie: TokenTrie,
        vocab_trie: TokenTrie,
        n_words: int,
        own_strings: bool,
        head: _ClassifyHead,
    ) -> None:
        handle, has_memo = head
        self.handle = handle
        self.kernel = _KERNEL
        self.vocab_trie = vocab_trie
        self.n_words = n_words
        self.own_strings = own_strings
        self.memo = trie._memo
        self.reach_base = _NATIVE_WALK_MAX_REACH
        self.share = _MEMO_WALK_MAX_SHARE
        self.max_reach = _max_reach(trie, has_memo)

    def walk(
        self,
        table: np.ndarray,
        start: int,
        pending: np.ndarray,
        sink: int,
        words: np.ndarray,
        string_map: np.ndarray | None,
        drop: np.ndarray | None,
        rows: WalkRows,
        resume: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, list[int], int]:
        """:func:`classify_walk_resume` on ``table`` (``rows.cut`` or ``rows.lex``) and its
        ``pending`` flags (``rows.pending``), from row ``start`` or the stops ``resume``:
        ``(candidates, stops, lexer states whose rows were written (a new list: what the
        caller's ready list takes), ids given now)``; ``words`` (``n_words`` long) and
        ``rows`` mutated in place.  Raises ``ValueError`` where the kernel refuses its
        arguments."""
        got = self.kernel.classify_from(
            self.handle,
            table,
            start,
            pending,
            sink,
            string_map,
            drop,
            words,
            self.max_reach,
            rows,
            resume,
        )
        # (an empty output, most calls' stops: the shared empty array, not a view of b"";
        # the states written as a list by a memoryview: ~3x cheaper than numpy's view)
        c, s, w = got[0], got[1], got[2]
        return (
            np.frombuffer(c, dtype=np.int64) if c else _NO_STATES,
            np.frombuffer(s, dtype=np.int64) if s else _NO_STATES,
            memoryview(w).cast("q").tolist() if w else [],
            int(got[3]),
        )


def _max_reach(trie: TokenTrie, has_memo: bool) -> int:
    """The reach past which a classify walk of ``trie`` stops (the kernel's ``max_reach``):
    :data:`_NATIVE_WALK_MAX_REACH`, raised to a share of the trie's nodes where it has a
    subtree memo (:data:`_MEMO_WALK_MAX_SHARE`)."""
    if has_memo:
        return max(_NATIVE_WALK_MAX_REACH, trie.total_nodes // _MEMO_WALK_MAX_SHARE)
    return _NATIVE_WALK_MAX_REACH


def _classify_call(
    trie: TokenTrie,
    table: np.ndarray,
    start: int,
    pending: np.ndarray,
    sink: int,
    vocab_trie: TokenTrie,
    words: np.ndarray,
    string_map: np.ndarray | None,
    drop: np.ndarray | None,
    rows: WalkRows | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """:func:`classify_walk` (``rows`` None) and :func:`classify_walk_rows` in the kernel
    (its ``classify``): None where it does not apply."""
    if _KERNEL is None or not TokenTrie._native_takes(table, start):
        return None
    head = trie._classify_head(vocab_trie, int(words.size), string_map is None)
    if head is None:
        return None
    handle, memo = head
    got = _KERNEL.classify(
        handle, table, start, pending, sink, string_map, drop, words, _max_reach(trie, memo), rows
    )
    # (an empty output, most calls' stops: the shared empty array, not a view of b"")
    cands = np.frombuffer(got[0], dtype=np.int64) if got[0] else _NO_STATES
    stopped = np.frombuffer(got[1], dtype=np.int64) if got[1] else _NO_STATES
    if rows is None:
        return cands, stopped, _NO_STATES, 0
    written = np.frombuffer(got[2], dtype=np.int64) if got[2] else _NO_STATES
    return cands, stopped, written, int(got[3])


#: what :meth:`TokenTrie._classify_head` gives: the kernel's handle of a trie's classify
#: arguments (``_trie_walk.trie_handle``: first, count, byte, end, parent, string_node,
#: below_first, below_second, the first token of each of the walked vocabulary trie's
#: strings, and the memo), and whether the memo is given
_ClassifyHead = tuple[Any, bool]


_NO_STATES = np.zeros(0, dtype=np.int64)


def ahead_states(
    table: np.ndarray,
    skip: np.ndarray,
    frontier: np.ndarray,
    ahead: int,
    budget: int,
    scratch: np.ndarray,
) -> np.ndarray | None:
    """The lazy classifier's look-ahead in one C pass (the compiled build's
    ``_trie_walk.ahead_rows``: the successors of ``frontier`` in ``table``, level by level,
    each once, not flagged in ``skip``, which it flags; see its source), or None in the pure
    package, where the caller runs the same levels with numpy.  ``scratch``: int64, a slot per
    table row."""
    if _KERNEL is None or not hasattr(_KERNEL, "ahead_rows") or budget <= 0 or ahead <= 0:
        return None
    if not (table.shape[0] == skip.size == scratch.size and table.dtype == np.int32):
        return None  # (the kernel refuses them; the numpy levels take any)
    out = np.empty(budget, dtype=np.int64)
    n = _KERNEL.ahead_rows(
        table, skip, np.ascontiguousarray(frontier, dtype=np.int64), ahead, budget, out, scratch
    )
    return out[:n]


class _ClassTrie:
    """The trie of a :class:`TokenTrie`'s strings read as class sequences under one class map
    (``cmap[byte]``, ``n_classes`` classes): level ``d`` holds the distinct class sequences of
    length ``d`` of the strings' prefixes, each with its parent (on level ``d - 1``) and last
    class.  A walk on a table whose equal columns are those classes gives every string the
    end state of its node.  Immutable.  Build: one pass per level over the byte trie's nodes
    (O(nodes + level's class nodes x classes), no sort)."""

    __slots__ = (
        "level_class",
        "level_offset",
        "level_parent",
        "n_classes",
        "string_node",
        "total_nodes",
    )

    def __init__(self, trie: TokenTrie, cmap: np.ndarray, n_classes: int) -> None:
        c = n_classes
        self.n_classes = c
        self.level_parent: list[np.ndarray] = [np.zeros(0, np.int64)]
        self.level_class: list[np.ndarray] = [np.zeros(0, np.int64)]
        offsets = [0]
        string_node = np.zeros(trie.num_strings, dtype=np.int64)
        comp_prev = np.zeros(1, dtype=np.int64)  # class node of each byte node, level d - 1
        n_prev = 1
        total = 1  # the root (never read: strings are non-empty)
        for d in range(1, trie.num_levels + 1):
            key = comp_prev[trie.level_parent[d]] * c + cmap[trie.level_bytes[d]]
            mark = np.zeros(n_prev * c, dtype=bool)
            mark[key] = True
            uniq = np.flatnonzero(mark)
            comp = (np.cumsum(mark, dtype=np.int64) - 1)[key]
            self.level_parent.append(uniq // c)
            self.level_class.append(uniq % c)
            offsets.append(total)
            string_node[trie.level_end_ids[d]] = total + comp[trie.level_end_nodes[d]]
            total += uniq.size
            comp_prev, n_prev = comp, uniq.size
        self.level_offset = offsets
        self.total_nodes = total
        self.string_node = string_node

    def walk(self, flat: np.ndarray, start: int) -> np.ndarray:
        """End state of every string from ``start`` (0 where the automaton died) on ``flat``,
        a table with one column per class, flattened, whose entries are next states times the
        number of classes (state 0 dead).  ``int64[num_strings]``, states times the number of
        classes.  O(class nodes), stopping at the first level where every node is dead."""
        c = self.n_classes
        buf = np.zeros(self.total_nodes, dtype=np.int64)
        off = self.level_offset
        parents = self.level_parent
        classes = self.level_class
        states = flat.take(classes[1] + start * c)
        buf[off[1] : off[1] + states.size] = states
        for d in range(2, len(parents)):
            if not states.any():
                break
            idx = states.take(parents[d])
            idx += classes[d]
            states = flat.take(idx)
            buf[off[d] : off[d] + states.size] = states
        return buf.take(self.string_node)


def _build_subtree_memo(trie: TokenTrie, flat: _FlatNodes) -> _SubtreeMemo | None:
    """:meth:`TokenTrie._subtree_memo` by the kernel's ``subtree_memo`` (O(nodes) in C, ~2-4
    ms on Llama-3); None without it.  tests/vocab/test_trie_subtree_memo.py checks it
    against a numpy reference."""
    if _KERNEL is None or not hasattr(_KERNEL, "subtree_memo") or trie.num_levels == 0:
        return None
    first, count, byte, end, parent, _ = flat
    n = int(first.size)
    pos = np.empty(n, dtype=np.int32)
    pbyte = np.empty(n, dtype=np.uint8)
    depth = np.empty(n, dtype=np.uint16)
    size = np.empty(n, dtype=np.int32)
    own = np.empty(n, dtype=np.uint8)
    strs = np.empty(n + 1, dtype=np.int32)
    sel = np.empty(n, dtype=np.int32)
    sets = np.empty((n, 4), dtype=np.uint64)
    k = _KERNEL.subtree_memo(
        first,
        count,
        byte,
        end,
        parent,
        _MEMO_MIN_BELOW,
        pos,
        pbyte,
        depth,
        size,
        own,
        strs,
        sel,
        sets,
    )
    text: tuple[np.ndarray | None, ...] = (None, None, None, None, None)
    if hasattr(_KERNEL, "text_memo"):
        kset = np.zeros(256, dtype=bool)
        kset[list(_TEXT_BYTES)] = True
        bits = np.packbits(kset, bitorder="little").view(np.uint64).copy()
        flag = np.empty(n, dtype=np.uint8)
        nxt = np.empty(n + 1, dtype=np.int32)
        brk = np.empty(n, dtype=np.int32)
        pre = np.empty(n, dtype=np.uint32)
        m = _KERNEL.text_memo(pbyte, depth, own, bits, flag, nxt, brk, pre)
        text = (flag, nxt, brk[:m].copy(), pre[:m].copy(), bits)
    return _SubtreeMemo(
        pos,
        pbyte,
        depth,
        size,
        own,
        strs,
        sel,
        sets[:k],  # (a view: the rows past k are never written, their pages never touched)
        int(trie.num_levels),
        _NATIVE_WALK_MAX_REACH,
        *text,
    )
