"""Token masks for context-free grammars.

The mask of a parser state is built from two parts:

1. **Context-independent tokens.** For each scan-ready stack top ``(rule, state)`` the whole
   vocabulary is walked once (vectorized trie walk) through the call-expanded lexer, on an
   augmented table that also remembers whether the walk passed a *boundary* (a state where the
   rule may return) after its first byte.  Tokens that stay alive are allowed whatever the
   stack below holds; tokens that die without passing a boundary are rejected; tokens that die
   after passing one are *candidates*.  This classification depends only on the stack top:
   it is computed once and shared by every request.  Three classifiers produce it:
   :class:`_ExitSplitClassifier` on the expanded lexer, where the walk of the tokens without
   the program's *exit byte* (JSON's ``"``, given by the compiler) is shared further, by every
   position (and every grammar on the vocabulary) whose lexer agrees once that byte is cut;
   :class:`_RuleClassifier` per rule automaton where the lexer is too large to determinize;
   :class:`_CountedClassifier` for the stack tops of counted rules, on window automata (see
   :mod:`formcast.automata.counted`).
2. **Candidates** (tokens that cross a return) are verified by running the pushdown automaton
   over their bytes from the actual state, with memoized byte steps (large candidate sets one
   byte position at a time, each distinct (state, byte) pair once: :func:`_verify_by_levels`).

The finished mask is cached per (interned, count-clipped) parser state, so a state seen before
costs one dict lookup.  Lifetime: per (grammar, vocabulary); thread-safe.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import sys
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Container, Hashable
from dataclasses import replace
from typing import ClassVar, NamedTuple, Protocol, TypeVar

import numpy as np

from .._native import interpreted_class, mypyc_attr
from ..automata.analysis import counted_splits, split_bytes
from ..automata.counted import (
    NarrowItem,
    countdown_window,
    iterations_overlap,
    narrow_item,
    subset_window,
    window_table,
)
from ..automata.dfa import DEAD, describe_bytes
from ..automata.equivalence import class_level, equivalence_classes, grown_classes
from ..automata.lexer import (
    ExpandedLexer,
    LazyExpandedLexer,
    LexerStateCapError,
    build_expanded_lexer,
)
from ..automata.pda import ParserState, PushdownAutomaton, measure_shares
from ..automata.rules import GrammarAutomaton
from ..bitmask import bitmask_has_many, bitmask_words, ids_to_bitmask
from ..cache import LruCache, StepMemo
from ..columns import column_classes
from ..limits import (
    CACHE_ENTRY_BYTES,
    CacheLimits,
    ParserLimits,
    WorkBudget,
    charge,
    check_deadline,
)
from ..vocab.trie import (
    TokenTrie,
    WalkRows,
    ahead_states,
    classify_walk_rows,
    note_column_classes,
    walks_write_rows,
    write_walk_rows,
    write_walk_state,
)
from ..vocab.vocabulary import Vocabulary
from .context import ContextSlot, TokenIndexContext, context_for
from .program import LimitStop, mask_weight

__all__ = ["CfgProgram", "Classification"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Classification(NamedTuple):
    """A stack top's classification."""

    #: the tokens allowed whatever the stack below holds, as read-only bitmask words
    words: np.ndarray
    #: the trie's string indices that cross a return: verified from the parser state
    candidates: np.ndarray


def _walk(vocab: Vocabulary, table: np.ndarray, start: int) -> Classification:
    """Walk the vocabulary through an augmented table from ``start``."""
    trie = vocab.trie
    n = (table.shape[0] - 1) // 3
    idx, ends = trie.walk_pairs(table, start)
    sink = ends == 3 * n
    size = vocab.vocab_size
    words = trie.token_words(idx[~sink], size)
    words.setflags(write=False)
    return Classification(words, idx[sink])


def _class_bytes(c: Classification) -> int:
    return c.words.nbytes + c.candidates.nbytes + CACHE_ENTRY_BYTES


@mypyc_attr(serializable=True)  # loaded by cls.__new__ (formcast._native)
class _RuleClassifier:
    """Classifies stack tops on each rule's own automaton: the plain position classifier,
    used where the expanded lexer is too large to determinize (a call is a candidate there).
    Classifications are kept per ``(rule, state)``.  Costs: one augmented table per rule at
    construction (O(rule states x 256)); one vocabulary walk per new position."""

    __slots__ = ("_aug", "_auto", "_by_position", "_lock", "_vocab")

    def __init__(
        self, auto: GrammarAutomaton, vocab: Vocabulary, spend: Callable[[int], None]
    ) -> None:
        self._auto = auto
        self._vocab = vocab
        spend(12 * auto.num_states)
        self._aug = [_augmented_table(d.table, sb) for d, sb in zip(auto.dfas, split_bytes(auto))]
        self._by_position: dict[tuple[int, int], Classification] = {}
        self._lock = threading.Lock()

    def classify(self, rule: int, state: int) -> Classification:
        key = (rule, state)
        hit = self._by_position.get(key)
        if hit is not None:
            return hit
        n = self._auto.dfas[rule].table.shape[0]
        hit = _walk(self._vocab, self._aug[rule], state + 2 * n)
        with self._lock:
            self._by_position[key] = hit
        return hit

    def __len__(self) -> int:
        return len(self._by_position)

    def cache_bytes(self) -> int:
        return sum(_class_bytes(c) for c in list(self._by_position.values()))

    def table_bytes(self) -> int:
        return sum(a.nbytes for a in self._aug)


@mypyc_attr(serializable=True)  # loaded by cls.__new__ (formcast._native)
class _ExitSplitClassifier:
    """Classifies stack tops on the call-expanded lexer, split at the exit byte.

    Tokens without the exit byte are classified on the lexer with that byte cut (its column
    dead): there, for JSON's ``"``, every string body is the same automaton whatever follows
    the closing quote, so one walk serves every string-valued position, and positions whose
    cut futures agree share it (per class of the cut lexer, and per canonical digest across
    grammars: :data:`SHARED_WALKS`).  Tokens with the exit byte (a few thousand) are walked
    per position on the full lexer, over a trie of their own.  Exact for any exit byte;
    ``None`` cuts nothing (every token is walked on the shared walk of its class).

    Classifications are kept per lexer start state and per cut-lexer class.  Costs at
    construction: two augmented tables, the cut copies and one equivalence pass
    (O(lexer states x 256) each, charged to the compile's fuel by the caller); one walk per
    new class plus one walk of the exit-byte tokens per new start state.

    The augmented tables and the cut copies (``_derived``) are functions of the lexer: a
    serialized grammar (:mod:`formcast.index.serialize`) omits them and rebuilds them on the
    first walk after loading (a loaded grammar whose masks are cached never needs them).
    """

    #: attributes :mod:`formcast.index.serialize` writes as None (rebuilt on first use)
    _serialize_omit: ClassVar[frozenset[str]] = frozenset({"_derived"})

    __slots__ = (
        "_by_class",
        "_by_start",
        "_class_rep",
        "_derived",
        "_digest_class",
        "_exit",
        "_lex_class",
        "_lock",
        "_vocab",
        "exit_byte",
        "lexer",
    )

    def __init__(
        self,
        lexer: ExpandedLexer,
        vocab: Vocabulary,
        exit_byte: int | None,
        budget: WorkBudget | None,
    ) -> None:
        self.lexer = lexer
        self.exit_byte = exit_byte
        self._vocab = vocab
        self._derived: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        _, cut, cut_split, _ = self._derive()
        # the exit byte's tokens: (their trie, their string indices, per string: has it)
        self._exit: tuple[TokenTrie, np.ndarray, np.ndarray] | None = None
        if exit_byte is not None:
            exit_trie, exit_idx = vocab.trie.with_byte(exit_byte)
            has_exit = np.zeros(vocab.trie.num_strings + 1, dtype=bool)
            has_exit[exit_idx] = True
            self._exit = exit_trie, exit_idx, has_exit
        # start positions with the same (cut) future over the longest token share that
        # walk: states labelled by their outgoing split flags (a Mealy machine whose
        # outputs are the flags), so that equal futures mean equal augmented walks
        split_class, _ = column_classes(np.ascontiguousarray(cut_split.T))
        check_deadline()
        labels = split_class + 1
        labels[DEAD] = 0
        # at least _STABLE_ROUNDS rounds: counters (a number's bounded digits) need as
        # many rounds as they count to converge, and only converged classes share walks
        depth = max(vocab.trie.max_len, _STABLE_ROUNDS)
        self._lex_class, stable = equivalence_classes(cut, labels, depth, work=budget)
        # walk digests are taken on the quotient by stable classes (a congruence), so
        # positions with one future share a digest whatever their automata look like
        # (every object's undeclared-key position, whatever its declared keys); on the
        # cut lexer itself when the classes are only depth-bounded
        self._digest_class = self._lex_class if stable else np.arange(cut.shape[0], dtype=np.int64)
        self._class_rep: np.ndarray | None = None
        self._by_start: dict[int, Classification] = {}
        self._by_class: dict[int, Classification] = {}
        self._lock = threading.Lock()

    def _derive(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(lexer's augmented table, cut table, cut split flags, cut augmented table)``,
        built once (single numpy passes over the lexer: a compile's deadline is checked
        between them; a large lexer takes a tenth of a second per pass)."""
        lexer, exit_byte = self.lexer, self.exit_byte
        check_deadline()
        lex_aug = _augmented_table(lexer.table, lexer.split)
        check_deadline()
        if exit_byte is None:  # nothing cut: the cut lexer is the lexer
            derived = (lex_aug, lexer.table, lexer.split, lex_aug)
        else:
            cut = lexer.table.copy()
            cut[:, exit_byte] = DEAD
            cut_split = lexer.split.copy()
            cut_split[:, exit_byte] = False
            check_deadline()
            derived = (lex_aug, cut, cut_split, _augmented_table(cut, cut_split))
            check_deadline()
        self._derived = derived  # two threads may race here: both build equal tables
        return derived

    @property
    def _lex_aug(self) -> np.ndarray:
        return (self._derived or self._derive())[0]

    @property
    def _cut(self) -> np.ndarray:
        return (self._derived or self._derive())[1]

    @property
    def _cut_split(self) -> np.ndarray:
        return (self._derived or self._derive())[2]

    @property
    def _cut_aug(self) -> np.ndarray:
        return (self._derived or self._derive())[3]

    def classify(self, rule: int, state: int) -> Classification:
        """Classification of the lexer state entered at ``(rule, state)``: the shared walk of
        the tokens without the exit byte (per class of the cut lexer) plus a walk of the
        tokens with it."""
        start = self.lexer.entry(rule, state)
        hit = self._by_start.get(start)
        if hit is not None:
            return hit
        n = self._lex_aug.shape[0] // 3
        cls = int(self._lex_class[start])
        base = self._by_class.get(cls)
        if base is None:
            base = self._shared_walk(start, n)
            with self._lock:
                self._by_class[cls] = base
        exit_tokens = self._exit
        if exit_tokens is not None:
            hit = self._with_exit_tokens(base, start, n, exit_tokens[0], exit_tokens[1])
        else:
            hit = base
        with self._lock:
            self._by_start[start] = hit
        return hit

    def _shared_walk(self, start: int, n: int) -> Classification:
        """The walk of the tokens without the exit byte from ``start`` on the cut lexer, from
        its vocabulary's :data:`SHARED_WALKS` where a grammar already did it."""
        # only permissive states (a dense walk ahead) are worth a digest
        wide = np.count_nonzero(self._cut[start]) >= _SHARED_WALK_MIN_BYTES
        sig = self.cut_signature(start) if wide else None
        base = None if sig is None else _shared_walks(self._vocab).get(sig)[1]
        if base is None:
            words, cands = _walk(self._vocab, self._cut_aug, start + 2 * n)
            if self._exit is not None:
                cands = cands[~self._exit[2][cands]]
            base = Classification(words, cands)
            if sig is not None:
                _shared_walks(self._vocab).put(sig, base)
        return base

    def _with_exit_tokens(
        self,
        base: Classification,
        start: int,
        n: int,
        exit_trie: TokenTrie,
        exit_idx: np.ndarray,
    ) -> Classification:
        """``base`` plus the tokens with the exit byte, walked from this very state."""
        sub, ends = exit_trie.walk_pairs(self._lex_aug, start + 2 * n)
        idx = exit_idx[sub]
        sink = ends == 3 * n
        vocab = self._vocab
        size = vocab.vocab_size
        alive_x = idx[~sink]
        words = base.words
        if alive_x.size:
            words = vocab.trie.token_words(alive_x, size, base=words)
        words.setflags(write=False)
        cands = np.concatenate((base.candidates, idx[sink])) if sink.any() else base.candidates
        return Classification(words, cands)

    def cut_signature(self, start: int) -> bytes | None:
        """A canonical digest of what the cut lexer can do from ``start``: the states of its
        quotient by stable classes reachable from ``start``'s class, numbered breadth-first
        in byte order, their rows and return flags, with the vocabulary and the exit byte;
        None past :data:`_SHARED_WALK_STATES` reachable classes.  Equal digests mean equal
        walks, in any grammar: a JSON string body, a number, an undeclared key is walked once
        per process and vocabulary.  O(reachable classes x 256)."""
        part = self._digest_class
        if self._class_rep is None:  # a member of each class (its rows stand for the class)
            rep = np.zeros(int(part.max()) + 1, dtype=np.int64)
            rep[part[::-1]] = np.arange(part.size - 1, -1, -1)
            self._class_rep = rep
        rep = self._class_rep
        cut = self._cut
        states = _reachable_classes(part, cut, rep, start)
        if states is None:
            return None
        renumber = np.full(rep.size, -1, dtype=np.int64)
        renumber[states] = np.arange(states.size)
        h = hashlib.blake2b(digest_size=16)
        h.update(self._vocab.fingerprint.encode())
        # the base walks drop the exit byte's candidates: programs cutting different bytes
        # (or none) must not share them
        h.update(b"" if self.exit_byte is None else bytes([self.exit_byte]))
        h.update(_renumbered_bytes(renumber[part[cut[rep[states]]]]))
        h.update(np.packbits(self._cut_split[rep[states]]).tobytes())
        return h.digest()

    def __len__(self) -> int:
        return len(self._by_start) + len(self._by_class)

    def cache_bytes(self) -> int:
        kept = [*self._by_start.values(), *self._by_class.values()]
        return sum(_class_bytes(c) for c in kept)

    def table_bytes(self) -> int:
        """The lexer, its augmented tables and the cut copies (each array once)."""
        if self._derived is None:  # loaded, not rebuilt yet
            return int(self.lexer.table.nbytes)
        lex_aug, cut, cut_split, cut_aug = self._derived
        arrays = [self.lexer.table, lex_aug]
        if self.exit_byte is not None:  # else the cut arrays are the lexer's own
            arrays += [cut_aug, cut, cut_split]
        return sum(a.nbytes for a in arrays)


@mypyc_attr(serializable=True)  # loaded by cls.__new__ (formcast._native)
class _LazyExitSplitClassifier:
    """:class:`_ExitSplitClassifier` on a :class:`~formcast.automata.lexer.LazyExpandedLexer`:
    lexer rows, their augmented and cut rows, are made when a walk first reaches them.

    Walks run on tables whose unbuilt rows are sentinels (every byte leads back to the state
    itself: see the lexer): a token path that meets one ends on it, so after a walk the end
    states whose rows are not built are exactly where it was cut short; those rows are built
    (:meth:`_ensure`) and the walk is run again, until no end state is a sentinel — then no
    path went through one, and the walk is the eager walk's (the same strings alive, the same
    candidates).  Shared walks: a wide start state (at least :data:`_SHARED_WALK_MIN_BYTES`
    live first bytes on the cut lexer) in no region yet refines the states it reaches, its
    region, as the eager build refines the whole lexer (:meth:`_new_region`); start states
    of one class of a region share a walk, wide ones across grammars by the digest of their
    quotient (:data:`SHARED_WALKS`).  Past the lexer's
    state cap the classifier continues on the per-rule automata (:class:`_RuleClassifier`,
    calls become candidates): masks are the same either way.

    The walk tables (``_derived``: :class:`_LazyWalkTables`) hold only the rows of the
    states walks made ready and of the states those rows lead to, on dense ids, so a first
    visit pays for the rows it reaches, never for the lexer's capacity, and the lexer growing
    moves no row.  They are functions of the lexer's rows and the ready list: omitted by
    :mod:`formcast.index.persist` and rebuilt on first use.  Thread-safe: one lock per
    classifier around every miss (walks of tables that grow in place).
    """

    _serialize_omit: ClassVar[frozenset[str]] = frozenset(
        {"_derived", "_noted", "_past", "_past_states", "_region_of", "_succ", "_too_wide"}
    )

    __slots__ = (
        "_by_class",
        "_by_start",
        "_cut_classes",
        "_derived",
        "_exit",
        "_fallback",
        "_lock",
        "_noted",
        "_past",
        "_past_states",
        "_ready_list",
        "_region_of",
        "_regions",
        "_succ",
        "_too_wide",
        "_vocab",
        "exit_byte",
        "lexer",
    )

    def __init__(self, lexer: LazyExpandedLexer, vocab: Vocabulary, exit_byte: int | None) -> None:
        self.lexer = lexer
        self.exit_byte = exit_byte
        self._vocab = vocab
        self._derived: _LazyWalkTables | None = None
        #: what the pure build's walks were last told the column classes of (see
        #: :meth:`_walk_table`)
        self._noted: tuple[int, int] | None = None
        self._ready_list: list[int] = []
        self._exit: tuple[TokenTrie, np.ndarray, np.ndarray] | None = None
        if exit_byte is not None:
            exit_trie, exit_idx = vocab.trie.with_byte(exit_byte)
            has_exit = np.zeros(vocab.trie.num_strings + 1, dtype=bool)
            has_exit[exit_idx] = True
            self._exit = exit_trie, exit_idx, has_exit
        cmap, first = lexer.classes
        if exit_byte is not None and int(np.count_nonzero(cmap == cmap[exit_byte])) > 1:
            cut_map = cmap.copy()
            cut_map[exit_byte] = first.size
            _, first_cut, inverse = np.unique(cut_map, return_index=True, return_inverse=True)
            self._cut_classes = (inverse.reshape(-1).astype(np.int64), first_cut.astype(np.int64))
        else:
            self._cut_classes = (cmap, first)
        self._by_start: dict[int, Classification] = {}
        self._by_class: dict[bytes | int, Classification] = {}
        self._fallback: _RuleClassifier | None = None
        #: the regions of :meth:`_new_region`, in the order made: (start state, its states
        #: (local id -> lexer state; 0: dead, 1: the start), class per local state, the
        #: classes the digests use, the cut rows on local ids and their split flags on one
        #: column per byte class, a member of each digest class); grows, never changes
        self._regions: list[_Region] = []
        #: lexer state -> (region, local id) in the first region that met it; a function
        #: of ``_regions`` (None after a load: rebuilt on first use)
        self._region_of: dict[int, tuple[int, int]] | None = {}
        #: per region, the digest classes each digest class leads to, distinct, in column
        #: order (what :func:`_reachable_classes` meets, kept: a later digest walks the
        #: classes an earlier one met without numpy); a function of ``_regions``
        self._succ: dict[int, dict[int, list[int]]] | None = None
        #: per region, the digest classes known to reach past :data:`_SHARED_WALK_STATES`
        #: classes (the start's class, and each class whose digest was None): at most the
        #: region's classes; a function of ``_regions`` (None after a load: rebuilt)
        self._past: dict[int, set[int]] | None = None
        #: the lexer states known to reach past :data:`_SHARED_WALK_STATES` classes in every
        #: region (the members of the classes ``_past`` holds in stable regions: a state's
        #: count is its futures', region-independent; see :meth:`_region_digest`); a
        #: function of ``_regions`` and the digests asked (None after a load: empty again)
        self._past_states: set[int] | None = set()
        #: the starts whose regions :meth:`_new_region` found past
        #: :data:`_LOCAL_DIGEST_STATES` states (a start reaching one is past it too: its
        #: region holds that one's); a memo of the lexer's (None after a load: empty again)
        self._too_wide: set[int] | None = set()
        self._lock = threading.RLock()

    # -- tables ---------------------------------------------------------------------------------
    def _tables(self) -> _LazyWalkTables:
        """The walk tables (:class:`_LazyWalkTables`), made on first use (after a load: the
        ready rows rewritten, O(ready states x 256)) and extended to the lexer's capacity."""
        tables = self._derived
        if tables is None:
            tables = _LazyWalkTables(self.lexer.capacity, self.exit_byte)
            self._derived = tables
            self._noted = None
            if self._ready_list:
                self._write_rows(tables, np.asarray(self._ready_list, dtype=np.int64))
        else:
            tables.fit(self.lexer.capacity)
        return tables

    def _write_rows(self, tables: _LazyWalkTables, states: np.ndarray) -> None:
        """Write the walk rows of ``states`` (distinct, live, built) into both tables."""
        lexer = self.lexer
        tables.write(states, lexer.table[states], lexer.split[states])

    def _walk_table(self, tables: _LazyWalkTables, cut: bool) -> np.ndarray:
        """The (cut) table for a walk, its column classes told to the pure build's walks
        first where its rows changed since (the lexer's classes, the exit byte apart on the
        cut table: O(table rows x classes), once per change; nothing in the compiled build)."""
        lex, cut_table = tables.walk_tables()
        mark = (id(tables), tables.version)
        if self._noted != mark:
            note_column_classes(lex, self.lexer.classes)
            if cut_table is not lex:
                note_column_classes(cut_table, self._cut_classes)
            self._noted = mark
        return cut_table if cut else lex

    def _ensure(self, states: np.ndarray, ahead: int = 0) -> None:
        """Make the walk rows of ``states`` (building their lexer rows first), and of the
        states up to ``ahead`` bytes further whose lexer rows are built already (a walk that
        stopped on a sentinel usually goes on: writing rows is cheap, a walk is not), at most
        :data:`_LAZY_AHEAD_ROWS` rows in all (level by level, in the order met);
        raises :class:`~formcast.automata.lexer.LexerStateCapError` past the lexer's cap.
        Cost: O(rows written x 256) plus O(lexer capacity) bytes, never a pass over the
        tables."""
        ready = self._tables().ready
        states = np.asarray(states, dtype=np.int64)
        if states.size > 1:
            states = np.unique(states)
        states = states[~ready[states]]
        if not states.size:
            return
        lexer = self.lexer
        try:
            lexer.ensure(states)
        finally:  # the lexer's arrays may have been replaced (also on the cap's error)
            tables = self._tables()
        if ahead <= 0:  # (the compiled walks write the rows they meet themselves)
            self._write_rows(tables, states)
            self._ready_list.extend(states.tolist())
            return
        ready = tables.ready
        parts = [states]
        # states already ready, or not built (their rows wait for a walk to need them)
        skip = ready | ~lexer.built[: ready.size]
        skip[states] = True
        frontier = states
        table = lexer.table
        # the successors met, each once: O(frontier x 256) per byte of look-ahead, with no
        # pass over every lexer state and no sort (most frontiers are a handful of states);
        # ``slot`` is read only where written (scratch kept by the tables: no O(states) fill,
        # and its pages are touched once, not on every call)
        slot = tables.slot
        budget = _LAZY_AHEAD_ROWS - int(states.size)
        got = ahead_states(table, skip, states, ahead, budget, slot)  # the compiled build
        if got is not None:
            if got.size:
                parts.append(got)
            ahead = 0  # (done)
        for _ in range(ahead):
            if budget <= 0:
                break
            met = table[frontier].reshape(-1)
            met = met[~skip[met]]
            if not met.size:
                break
            order = np.arange(met.size)
            slot[met] = order
            succ = met[slot[met] == order]  # one occurrence of each state (the one written)
            succ = succ[:budget]  # (in the order met: deterministic)
            skip[succ] = True
            parts.append(succ)
            frontier = succ
            budget -= int(succ.size)
        rows = np.concatenate(parts) if len(parts) > 1 else states
        self._write_rows(tables, rows)
        self._ready_list.extend(rows.tolist())

    def _walk_pairs(
        self, trie: TokenTrie, cut: bool, start: int, ahead: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``trie.walk_pairs`` on the (cut) walk table from lexer state ``start``, building
        the rows it reaches (and ``ahead`` bytes further: :meth:`_ensure`) until no path
        stops on a sentinel: ``(string indices, end rows)`` (:data:`_LAZY_SINK`: died after
        a plausible split; ``ahead`` default: :data:`_LAZY_AHEAD`).  Caller holds the lock."""
        if ahead is None:
            ahead = _LAZY_AHEAD
        while True:
            tables = self._tables()
            table = self._walk_table(tables, cut)
            idx, ends = trie.walk_pairs(table, tables.start(start))
            # one gather of a flag per end row: most walks stop on no sentinel (this test was
            # ~15-20% of a c_lang classification as a gather of states, then of ready flags)
            stopped = tables.pending[ends]
            if not stopped.any():
                return idx, ends
            self._ensure(np.unique(tables.end_states(ends[stopped])), ahead)

    def _walk_words(
        self,
        trie: TokenTrie,
        cut: bool,
        start: int,
        ahead: int,
        base: np.ndarray | None,
        string_map: np.ndarray | None,
        drop: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`_walk_pairs` and what :meth:`_classify` makes of its strings, in one C call
        per walk (:func:`~formcast.vocab.trie.classify_walk`): ``(bitmask words of the live
        strings' tokens OR-ed into a copy of ``base``, candidates)``, the strings mapped by
        ``string_map`` (a sub-trie's indices in the vocabulary's trie) and the candidates
        flagged in ``drop`` left out; None where the kernel does not apply (the pure
        package): the caller walks with :meth:`_walk_pairs`.  Caller holds the lock."""
        vocab = self._vocab
        if string_map is not None and (
            string_map.dtype != np.int64 or not string_map.flags.c_contiguous
        ):
            string_map = np.ascontiguousarray(string_map, dtype=np.int64)
        resumed = self._walk_resumed(trie, cut, start, base, string_map, drop)
        if resumed is not None:
            return resumed
        while True:
            tables = self._tables()
            if base is None:
                words = np.zeros(bitmask_words(vocab.vocab_size), dtype=np.int32)
            else:
                words = base.copy()
            # the whole tables: the kernel writes the rows of the sentinels it meets whose
            # lexer rows are built, as it goes (no rows written ahead, no walk run again)
            rows = self._walk_rows(tables)
            got = classify_walk_rows(
                trie,
                cut,
                tables.start(start),
                _LAZY_SINK,
                vocab.trie,
                words,
                string_map,
                drop,
                rows,
            )
            if got is None:
                return None
            cands, stopped, written, count = got
            if count != tables.count:  # (ids may be given where no row was written: no room)
                tables.wrote(count)
            if written.size:
                self._ready_list.extend(written.tolist())
            if not stopped.size:
                return words, cands
            # the sentinels of unbuilt lexer rows (or past the tables' room): built here,
            # and the walk runs again
            self._ensure(np.unique(tables.states[stopped // 3]), 0)

    def _walk_resumed(
        self,
        trie: TokenTrie,
        cut: bool,
        start: int,
        base: np.ndarray | None,
        string_map: np.ndarray | None,
        drop: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`_walk_words` by resumable walks (:func:`~formcast.vocab.trie.
        classify_walk_resume`): a walk stopped by unbuilt lexer rows goes on from its stops
        once :meth:`_ensure` built them, never again from the start (each live node walked
        once, a stop's subtree not walked in sentinel state).  The same words and candidates
        (sorted: the union of the walk's and its resumes').  None where the kernel lacks
        resumable walks (nothing done).  Caller holds the lock."""
        vocab = self._vocab
        if base is None:
            words = np.zeros(bitmask_words(vocab.vocab_size), dtype=np.int32)
        else:
            words = base.copy()
        # the kernel's walks bound once a walk (:meth:`~formcast.vocab.trie.TokenTrie.
        # classify_walker`: no per-call look-ups, checks or wrappers: a walk's glue)
        walker = trie.classify_walker(vocab.trie, int(words.size), string_map is None)
        if walker is None:
            return None
        parts: list[np.ndarray] = []
        resume: np.ndarray | None = None
        # (the start row read once: rows never move)
        tables = self._tables()
        row = 3 * int(tables.ids[start]) + 2  # (:meth:`_LazyWalkTables.start`)
        if row <= 0:  # (no id: never made ready; the caller walks another way)
            return None
        while True:
            pending = tables.pending
            rows = self._walk_rows(tables)
            got = walker.walk(
                tables.cut if cut else tables.lex,
                row,
                pending,
                _LAZY_SINK,
                words,
                string_map,
                drop,
                rows,
                resume,
            )
            cands, stops, written, count = got
            if count != tables.count:  # (ids may be given where no row was written: no room)
                tables.wrote(count)
            if written:
                self._ready_list.extend(written)
            if cands.size:
                parts.append(cands)
            if not stops.size:
                break
            # the sentinels of unbuilt lexer rows (or past the tables' room): built here,
            # and the walk goes on from its stops (rows never move: a stop's row stays);
            # stops without a node (-1: met on the first bytes, nothing walked): walked
            # again from the start
            self._build_stops(tables, tables.states[stops[1::2] // 3])
            resume = None if stops[0] < 0 else stops
            tables = self._tables()
        if not parts:
            return words, np.zeros(0, dtype=np.int64)
        if len(parts) == 1:
            return words, parts[0]
        return words, np.sort(np.concatenate(parts))

    def _build_stops(self, tables: _LazyWalkTables, states: np.ndarray) -> None:
        """Before a resumed walk (:meth:`_walk_resumed`): build the lexer rows of the stops'
        ``states`` (not ready), and no walk rows where ``tables`` have room for every id
        those rows may give: the resumed walk writes a stop's rows itself on arriving at it
        (:func:`~formcast.vocab.trie.classify_walk_resume`), so writing them here first was
        a second pass over each row (~30 us a call of :meth:`_LazyWalkTables.write`, one
        per resume).  Else :meth:`_ensure` writes them (the tables grown): a stop the
        kernel met again unwritten had no room then (the count was past ``size - 256``),
        so the next call writes it and no walk stops twice on one row for want of room.
        Raises :class:`~formcast.automata.lexer.LexerStateCapError` past the lexer's cap.
        Caller holds the lock.  Cost: the lexer rows built."""
        if tables.count + 257 * int(states.size) > tables.states.size:
            self._ensure(states, 0)
            return
        try:
            self.lexer.ensure(states)
        finally:  # (the lexer's arrays may have been replaced: the tables follow its size)
            self._tables()

    def _walk_rows(self, tables: _LazyWalkTables) -> WalkRows:
        """What the compiled walks need to write walk rows themselves (views of the lexer's
        and ``tables``' arrays: for one call, under the lock)."""
        lexer = self.lexer
        xb = self.exit_byte
        # (``tuple.__new__``: the named tuple made in C, not by its Python ``__new__``)
        return tuple.__new__(
            WalkRows,
            (
                lexer.table,
                lexer.split,
                lexer.built,
                tables.ids,
                tables.ready,
                tables.states,
                tables.lex,
                tables.cut,
                tables.pending,
                tables.count,
                -1 if xb is None else xb,
            ),
        )

    # -- classification -------------------------------------------------------------------------
    def classify(self, rule: int, state: int) -> Classification:
        """As :meth:`_ExitSplitClassifier.classify`, building what the walks reach."""
        start = self.lexer.entry(rule, state)
        hit = self._by_start.get(start)
        if hit is not None:
            return hit
        with self._lock:
            if self._fallback is not None:
                return self._fallback.classify(rule, state)
            try:
                hit = self._classify(start)
            except LexerStateCapError:
                self._fallback = _RuleClassifier(self.lexer.auto, self._vocab, charge)
                return self._fallback.classify(rule, state)
            self._by_start[start] = hit
        return hit

    def _classify(self, start: int) -> Classification:
        # the grammar's first classification (its first mask: the compile's time to first
        # mask) writes rows a few bytes ahead only; later ones :data:`_LAZY_AHEAD` bytes
        ahead = _LAZY_AHEAD if self._by_start else _LAZY_FIRST_AHEAD
        tables = self._tables()
        if not tables.ready[start]:
            # the compiled build: its row written in one call where its lexer row is built
            # (entry states mostly are), and none ahead (the walks write the rows they meet)
            got = write_walk_state(self._walk_rows(tables), start, _LAZY_SINK)
            if got is not None and got[0] != tables.count:
                tables.wrote(got[0])  # (ids may be given where no row was written: no room)
            if got is not None and got[1]:
                self._ready_list.append(start)
            else:
                first = 0 if walks_write_rows() else ahead
                self._ensure(np.asarray([start], dtype=np.int64), first)
            tables = self._tables()
        wide = np.count_nonzero(tables.cut[tables.start(start)]) >= _SHARED_WALK_MIN_BYTES
        # a start in a region takes its class there; a wide one out of every region makes
        # its own (:meth:`_new_region`); the others are walked on their own
        at = self._region_at(start)
        if at is None and wide:
            at = self._new_region(start)
        key: bytes | int = start if at is None else self._region_key(at)
        base = self._by_class.get(key)
        if base is None:
            sig = None if at is None or not wide else self._region_digest(at)
            base = None if sig is None else _shared_walks(self._vocab).get(sig)[1]
            if base is None:
                drop = None if self._exit is None else self._exit[2]
                fused = self._walk_words(self._vocab.trie, True, start, ahead, None, None, drop)
                if fused is not None:  # the compiled build: one C call per walk
                    words, cands = fused
                else:
                    idx, ends = self._walk_pairs(self._vocab.trie, True, start, ahead)
                    sink = ends == _LAZY_SINK
                    words = self._vocab.trie.token_words(idx[~sink], self._vocab.vocab_size)
                    cands = idx[sink]
                    if drop is not None:
                        cands = cands[~drop[cands]]
                words.setflags(write=False)
                base = Classification(words, cands)
                if sig is not None:
                    _shared_walks(self._vocab).put(sig, base)
            self._by_class[key] = base
        exit_tokens = self._exit
        if exit_tokens is None:
            return base
        exit_trie, exit_idx, _ = exit_tokens
        fused = self._walk_words(exit_trie, False, start, ahead, base.words, exit_idx, None)
        if fused is not None:  # the compiled build
            words, more = fused
            words.setflags(write=False)
            cands = np.concatenate((base.candidates, more)) if more.size else base.candidates
            return Classification(words, cands)
        sub, ends = self._walk_pairs(exit_trie, False, start, ahead)
        idx = exit_idx[sub]
        sink = ends == _LAZY_SINK
        alive_x = idx[~sink]
        words = base.words
        if alive_x.size:
            words = self._vocab.trie.token_words(alive_x, self._vocab.vocab_size, base=words)
        words.setflags(write=False)
        cands = np.concatenate((base.candidates, idx[sink])) if sink.any() else base.candidates
        return Classification(words, cands)

    def _region_at(self, start: int) -> tuple[int, int] | None:
        """``(region, local index)`` of ``start`` in the first :meth:`_new_region` that
        reached it, else None (the map rebuilt from the regions after a load: O(their
        states))."""
        where = self._region_of
        if where is None:
            where = {}
            for rid, region in enumerate(self._regions):
                for i, q in enumerate(region[1].tolist()):
                    where.setdefault(q, (rid, i))
            self._region_of = where
        return where.get(start)

    def _new_region(self, start: int) -> tuple[int, int] | None:
        """The region of ``start``: the states it reaches in the cut lexer (their rows built
        first: :meth:`LazyExpandedLexer.ensure`, as the walks would), refined as the eager
        build refines the whole lexer (the cut lexer labelled by split flags, ``max(longest
        token, _STABLE_ROUNDS)`` rounds, on one column per byte class), kept with
        ``(start, its states, class per state, the classes digests use, the cut rows and
        split flags on local ids, a member of each digest class)``; returns ``(region,
        1)`` (``start``'s local index), or None past :data:`_LOCAL_DIGEST_STATES` states or
        :data:`_REGION_ROW_BUDGET` rows to build (nothing kept: ``start`` is walked on its
        own, building only the rows its walk meets).  A start past the states' bound is
        noted (``_too_wide``), and a later search that meets it stops there: its region
        would hold that start's, so it is past the bound too (repeated searches of ~1k
        states each, 1.4 ms compiled, were a MaskBench schema's slow masks).  Caller holds
        the lock.

        A region is closed (a state's successors are in it), and a state's classes (to any
        depth) depend only on the states it reaches: the partition of a region is the
        whole lexer's on it, so a later start inside a region takes its class from there,
        with no refinement and no pass over the lexer (the whole-lexer refinement of the
        previous build, one 10-20 ms step inside one mask on 4k-8k-state lexers, was
        MaskBench's TBM max: issue #31).  Where the refinement converges the classes are
        Myhill-Nerode classes and the digests (:meth:`_region_digest`) the eager build's;
        otherwise the classes are depth-bounded (still equal walks) and the digests are of
        the region itself.  Raises :class:`~formcast.automata.lexer.LexerStateCapError`
        past the lexer's cap (the caller's fallback).  Cost: O(reached states x 256) and a
        refinement of them, once per region.

        With :data:`_GROW_REGIONS`, the search does not go on through states of earlier
        regions; where it met some, the region it reaches is grown instead
        (:meth:`_grown_region`, or by a copy: :func:`_copied_region`), else made as before
        (the search going on from the states it met in regions: the same states, in another
        order)."""
        return self._search_region(start, _GROW_REGIONS)

    def _search_region(self, start: int, grow: bool) -> tuple[int, int] | None:
        """:meth:`_new_region`; ``grow``: the states of earlier regions met, not searched
        (the region grown, or the search gone on through them)."""
        too_wide = self._too_wide
        if too_wide is None:
            too_wide = self._too_wide = set()
        if start in too_wide:
            return None
        # (``grow``: states of earlier regions are met, not searched: :meth:`_grown_region`)
        where = None
        if grow and self._regions:
            where = self._region_of
            if where is None:
                self._region_at(start)  # (rebuilds the map)
                where = self._region_of
        inside: set[int] = set()
        lexer = self.lexer
        cols, col_of_byte = self._cut_columns()
        xc = -1 if self.exit_byte is None else int(col_of_byte[self.exit_byte])
        # the columns a search level by level follows (the exit byte's leads to DEAD on the
        # cut lexer), made when first needed (not on a small lexer)
        step: np.ndarray | None = None
        index: dict[int, int] = {DEAD: 0, start: 1}
        states = [DEAD, start]
        frontier = [start]
        budget = _REGION_ROW_BUDGET
        # breadth first, building the rows met (the lexer may grow), the new states of a
        # level numbered in ascending order, by set operations on rows as lists (a handful
        # of states a level: no ``np.unique``, whose fixed cost was most of a level in a
        # grammar's first mask); on a small lexer (at most :data:`_REGION_SNAPSHOT_CELLS`
        # cells on ``cols``) from one gather of all its rows per ``ensure`` (``snap``: the
        # rows change only there), else one gather of the frontier's rows a level (distinct
        # by ``np.unique`` past that many cells)
        snap: np.ndarray | None = None
        rows: list[list[int]] = []
        # (``grow``: a first pass does not go on through states of earlier regions; where it
        # met some and no region grows (:meth:`_grown_region`, :func:`_copied_region`), a
        # second pass goes on from them: their rows are built and lead only to states of
        # regions, so it calls no ``ensure`` and ends with the states a search without
        # ``grow`` numbers, in another order, the first pass's work not done twice)
        while True:
            while frontier:
                built = lexer.built
                unbuilt = [q for q in frontier if not built[q]]
                if unbuilt:
                    if budget < len(unbuilt):  # a region this costly is not made: ``start``
                        return None  # walks alone
                    # every row the call builds counts, those it builds ahead of the asked
                    # ones too (one ``ensure`` builds up to ~50 more, and a rule's rows when a
                    # row first meets it: counting the asked ones only, o55827's failed search
                    # built ~1,000 rows, 12 calls, 10-20 ms inside one mask, for a 256 budget)
                    before = int(np.count_nonzero(lexer.built))
                    lexer.ensure(unbuilt)
                    budget -= int(np.count_nonzero(lexer.built)) - before
                    snap = None
                if lexer.size * cols.size <= _REGION_SNAPSHOT_CELLS:
                    if snap is None:
                        snap = lexer.table[: lexer.size].take(cols, axis=1)
                        if xc >= 0:
                            snap[:, xc] = DEAD
                        rows = snap.tolist()
                    met: set[int] = set()
                    for q in frontier:
                        met.update(rows[q])
                else:
                    snap = None
                    if step is None:
                        step = cols if xc < 0 else cols[np.arange(cols.size) != xc]
                    block = lexer.table.take(frontier, axis=0).take(step, axis=1)
                    # (:func:`_level_targets`: without its rows' runs of equal targets)
                    met = set(_level_targets(block))
                met.difference_update(index)
                if where is not None:
                    met_in = where.keys() & met
                    if met_in:
                        inside |= met_in
                        met -= met_in
                if not met:
                    break
                if not too_wide.isdisjoint(met):  # its region is in this one: past the bound
                    too_wide.add(start)
                    return None
                frontier = sorted(met)
                for q in frontier:
                    index[q] = len(states)
                    states.append(q)
                if len(states) > _LOCAL_DIGEST_STATES:
                    too_wide.add(start)
                    return None
            if not inside or where is None:
                break
            grown = self._grown_region(states, inside)
            if grown is None:
                grown = _copied_region(self, states, inside)
            if grown is not None:
                return grown
            where = None
            met = inside.difference(index)
            if not too_wide.isdisjoint(met):  # (as the search without ``grow`` stops)
                too_wide.add(start)
                return None
            frontier = sorted(met)
            for q in frontier:
                index[q] = len(states)
                states.append(q)
            if len(states) > _LOCAL_DIGEST_STATES:
                too_wide.add(start)
                return None
        idx = np.asarray(states, dtype=np.int64)
        cut_split = lexer.split.take(idx, axis=0).take(cols, axis=1)
        # (``snap``: taken after the last ``ensure``, still the lexer's rows)
        cut = lexer.table.take(idx, axis=0).take(cols, axis=1) if snap is None else snap[idx]
        if xc >= 0:
            cut[:, xc] = DEAD
            cut_split[:, xc] = False
        local = np.zeros(max(int(idx.max()) + 1, 1), dtype=np.int32)
        local[idx] = np.arange(idx.size, dtype=np.int32)
        sub = local.take(cut)
        cut_split[DEAD] = False
        labels = _split_labels(cut_split)
        depth = max(self._vocab.trie.max_len, _STABLE_ROUNDS)
        part, stable = equivalence_classes(sub, labels, depth)
        dpart = part if stable else np.arange(idx.size, dtype=np.int64)
        rep = np.zeros(int(dpart.max()) + 1, dtype=np.int64)  # a member of each class
        rep[dpart[::-1]] = np.arange(dpart.size - 1, -1, -1)
        rid = len(self._regions)
        self._regions.append((start, idx, part, dpart, sub, cut_split, rep))
        where = self._region_of
        if where is not None:
            for i, q in enumerate(states):
                where.setdefault(q, (rid, i))
        return rid, 1

    def _grown_region(self, states: list[int], inside: set[int]) -> tuple[int, int] | None:
        """The region of ``states[1]`` (:meth:`_new_region`'s result) made by growing a
        region it reaches, or None where this does not apply (the caller then searches as
        before).  ``states``: the dead state, then the states ``states[1]`` reaches in no
        region, as the search numbers them; ``inside``: the states it meets in regions.

        Where ``inside`` lies in one region ``R`` whose partition is stable (converged: the
        classes are the states' futures, no two classes alike, their quotient closed), the
        new states are appended to ``R`` (states, cut rows, split flags) and classed against
        it (:func:`~formcast.automata.equivalence.grown_classes`: ``R``'s classes keep their
        numbers, a new state alike to a class of ``R`` takes that class, the others new
        numbers in the order of their first new state, that state their member).  ``R`` is
        then a closed set holding ``start``'s region, its partition the whole lexer's on it
        (a state's future depends only on the states it reaches) and stable, so the keys and
        digests are those a search of ``start``'s own region gives where its refinement
        converges (grammar_bench's c1_arith: its 2nd region is the 1st + 2 states, which a
        search re-reads and refines whole).  Not applied (None) where ``inside`` lies in two
        regions or an unstable one, past :data:`_GROW_STATES` new states or
        :data:`_GROW_CELLS` (new states x ``R``'s classes), where ``R`` would pass
        :data:`_LOCAL_DIGEST_STATES` states, or pass :data:`_SHARED_WALK_STATES` classes
        from at most that many (``R``'s start's digest is then counted as None: it must
        reach them).  Replaces ``R``'s entry of ``_regions`` (``_succ`` stays valid: the old
        classes' rows are the same).  Caller holds the lock.  Cost: O(new states x 256 + new
        states x R's classes), once."""
        where = self._region_of
        assert where is not None
        rids = {where[q][0] for q in inside}
        new = states[1:]
        if len(rids) != 1 or len(new) > _GROW_STATES:
            return None
        rid = rids.pop()
        lexer = self.lexer
        cols, col_of_byte = self._cut_columns()
        xc = -1 if self.exit_byte is None else int(col_of_byte[self.exit_byte])
        r_start, idx, part, dpart, sub, cut_split, rep = self._regions[rid]
        n_old, n_cls, k = idx.size, rep.size, len(new)
        if dpart is not part or n_old + k > _LOCAL_DIGEST_STATES or k * n_cls > _GROW_CELLS:
            return None
        new_of = {q: i for i, q in enumerate(new)}
        block = lexer.table.take(new, axis=0).take(cols, axis=1)
        if xc >= 0:
            block[:, xc] = DEAD
        rows = block.tolist()
        # the new states' rows on the grown region's local ids (old: their ids in R)
        part_of = part.tolist()
        local: list[list[int]] = []
        codes: list[list[int]] = []  # per new state: R's class of each target, or n_cls + i
        for row in rows:
            ids = []
            code = []
            for t in row:
                i = new_of.get(t)
                if i is not None:
                    ids.append(n_old + i)
                    code.append(n_cls + i)
                elif t == DEAD:
                    ids.append(0)
                    code.append(part_of[0])
                else:
                    at = where[t]
                    if at[0] != rid:
                        return None
                    ids.append(at[1])
                    code.append(part_of[at[1]])
            local.append(ids)
            codes.append(code)
        new_idx = np.asarray(new, dtype=np.int64)
        new_split = lexer.split.take(new_idx, axis=0).take(cols, axis=1)
        if xc >= 0:
            new_split[:, xc] = False
        width = cols.size
        flags = np.ascontiguousarray(new_split).view(np.uint8).tobytes()
        old_flags = np.ascontiguousarray(cut_split.take(rep, axis=0)).view(np.uint8).tobytes()
        class_rows = part.take(sub.take(rep, axis=0)).tolist()
        grown = grown_classes(
            n_cls,
            class_rows,
            [old_flags[c * width : (c + 1) * width] for c in range(n_cls)],
            codes,
            [flags[i * width : (i + 1) * width] for i in range(k)],
        )
        if grown is None:
            return None
        new_part, new_rep = grown
        total = n_cls + len(new_rep)
        if n_cls - 1 <= _SHARED_WALK_STATES < total - 1:
            return None  # (the start's digest would be counted as None wrongly)
        grown_part = np.concatenate((part, np.asarray(new_part, dtype=part.dtype)))
        self._regions[rid] = (
            r_start,
            np.concatenate((idx, new_idx)),
            grown_part,
            grown_part,
            np.concatenate((sub, np.asarray(local, dtype=sub.dtype).reshape(k, width))),
            np.concatenate((cut_split, new_split)),
            np.concatenate((rep, np.asarray([n_old + i for i in new_rep], dtype=rep.dtype))),
        )
        for q, i in new_of.items():
            where.setdefault(q, (rid, n_old + i))
        return rid, n_old

    def _cut_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """``(a byte per class of the cut lexer, in byte order; the column of each byte)``
        (O(256))."""
        cmap, first = self._cut_classes
        order = np.argsort(first, kind="stable")
        cols = np.asarray(first, dtype=np.int64)[order]
        col_of_class = np.empty(order.size, dtype=np.int64)
        col_of_class[order] = np.arange(order.size)
        return cols, col_of_class[cmap]

    def _region_key(self, at: tuple[int, int]) -> bytes:
        """The walk key of the state at ``at`` (:meth:`_region_at`): its region's start and
        its class there (both functions of the lexer alone: a load keeps them valid)."""
        region = self._regions[at[0]]
        return b"r%d.%d" % (region[0], int(region[2][at[1]]))

    def _region_digest(self, at: tuple[int, int]) -> bytes | None:
        """:meth:`cut_signature` of the state at ``at`` (:meth:`_region_at`), on its
        region's classes; None past :data:`_SHARED_WALK_STATES` reachable classes: for a
        state of the start's class counted, O(1); for a state that is, or whose row leads
        to, a lexer state known past the bound (``_past_states``), O(256); else found by
        the breadth-first walk of the classes, which stops at a class known to be past the
        bound (a class reaches all the classes its successors reach: it is past the bound
        too).

        Kept per region (functions of ``_regions``, never changed: a grown region's old
        classes keep their rows): in ``_succ``, the classes' successors
        (:func:`_reachable_classes`); in ``_past``, the classes known past the bound (the
        start's class, and each class whose digest was None).  Kept per classifier, in
        ``_past_states``: the lexer states of the classes ``_past`` holds in *stable*
        regions (partition converged: the classes are the states' futures, so a state's
        count of reachable classes is the number of distinct futures it reaches, the same
        in every stable region; in an unstable one the classes are the states themselves,
        a count at least as large): a state met there is past the bound in any region (a
        134-class region's first digest, 100-150 us of successor lists, ended None at its
        start's first level in grammar_bench's json_gbnf warm run).  Caller holds the
        lock."""
        rid, q = at
        _, idx, part, dpart, sub, cut_split, rep = self._regions[rid]
        known = self._past_states
        if known is None:
            known = self._past_states = set()
        stable = dpart is part
        if dpart[q] == dpart[1] and rep.size - 1 > _SHARED_WALK_STATES:
            # the class of the region's start reaches every class but the dead one's (every
            # state was met from the start; the dead state's label is its own): past the
            # bound, known without the breadth-first walk of the classes (~100 us on a
            # JSON value's region of 140 classes, in a grammar's first mask)
            if stable and int(idx[1]) not in known:
                known.update(idx[dpart == dpart[1]].tolist())
            return None
        succ = self._succ
        if succ is None:
            succ = self._succ = {}
        cache = succ.get(rid)
        if cache is None:
            cache = succ[rid] = {}
        pasts = self._past
        if pasts is None:
            pasts = self._past = {}
        past = pasts.get(rid)
        if past is None:
            past = pasts[rid] = set()
            if rep.size - 1 > _SHARED_WALK_STATES:
                past.add(int(dpart[1]))
                if stable and int(idx[1]) not in known:
                    known.update(idx[dpart == dpart[1]].tolist())
        cls = int(dpart[q])
        if cls in past:
            return None
        if known and (int(idx[q]) in known or not known.isdisjoint(idx.take(sub[q]).tolist())):
            past.add(cls)  # (``q``'s own lexer state, or one its row leads to, is past)
            return None
        digest = _quotient_digest(
            self._vocab,
            self.exit_byte,
            dpart,
            sub,
            cut_split,
            q,
            self._cut_columns()[1],
            rep,
            cache,
            past,
        )
        if digest is None:
            past.add(cls)
            if stable:
                known.update(idx[dpart == cls].tolist())
        return digest

    def cut_signature(self, start: int) -> bytes | None:
        """A canonical digest of what the cut lexer can do from ``start`` (equal digests
        mean equal walks, in any grammar), as :meth:`_ExitSplitClassifier.cut_signature`, on
        the classes of ``start``'s region (:meth:`_new_region`, made now if need be); None
        past :data:`_SHARED_WALK_STATES` reachable classes or :data:`_LOCAL_DIGEST_STATES`
        reachable states."""
        with self._lock:
            at = self._region_at(start)
            if at is None:
                at = self._new_region(start)
            return None if at is None else self._region_digest(at)

    def __len__(self) -> int:
        return (
            len(self._by_start)
            + len(self._by_class)
            + (len(self._fallback) if self._fallback is not None else 0)
        )

    def cache_bytes(self) -> int:
        kept = [*self._by_start.values(), *self._by_class.values()]
        extra = self._fallback.cache_bytes() if self._fallback is not None else 0
        return sum(_class_bytes(c) for c in kept) + extra

    def table_bytes(self) -> int:
        """The lexer and its augmented tables (each array once)."""
        total = self.lexer.nbytes()
        if self._derived is not None:
            total += self._derived.nbytes()
        if self._fallback is not None:
            total += self._fallback.table_bytes()
        return total


#: a region of :meth:`_LazyExitSplitClassifier._new_region` (see its ``_regions`` attribute)
_Region = tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _copied_region(
    cl: _LazyExitSplitClassifier, states: list[int], inside: set[int]
) -> tuple[int, int] | None:
    """The region of ``states[1]`` made by growing an earlier region ``R`` by a copy of
    itself (grow40), or None where none is found (the caller then searches on):
    :meth:`_LazyExitSplitClassifier._grown_region`'s arguments and result.

    Where ``start = states[1]`` and its new states (``states[1:]``) are a copy of the start
    of a region ``R`` with a stable partition and of states of ``R`` -- a map ``phi`` of the
    new states into ``R`` (``phi(start)``: ``R``'s start) under which each new state has the
    split flags of its image and, on every column, moves into a new state whose image is in
    the class of where its image moves, or into the very lexer state its image moves into
    (``inside`` is then in ``R``) -- each new state is alike to its image (the pairs and the
    identity are a bisimulation of the cut lexer; ``R``'s stable classes are the lexer's),
    so the new states are appended to ``R`` in their images' classes: no new class, no
    refinement, ``R`` closed, its partition the lexer's on it and stable.  ``start`` then
    has the walk key of ``R``'s start (one walk for both) and the digest a search of its
    own region gives (equal classes reach equal quotients).  grammar_bench's json_gbnf: a
    newline's ``[ \t]{0,20}`` after four rule positions makes four 22-state chains into one
    112-state part of a 268-class region, too many pairs for the grow (22 x 268 > 4,096):
    each was searched and refined again (134 states, ~300 us), its walk not shared.

    Tries the stable regions, latest first, whose start has ``start``'s split flags and
    moves as ``start`` into the states that are not new.
    Replaces ``R``'s entry of ``_regions`` (``_succ`` and ``_past`` stay valid: no new
    class, the old rows unchanged).  Caller holds the lock.  Cost: O(columns) per region
    tried past the flags, O(new states x columns + R's states) past the start's row."""
    new = states[1:]
    k = len(new)
    where = cl._region_of
    if k == 0 or where is None:
        return None
    lexer = cl.lexer
    cols, col_of_byte = cl._cut_columns()
    xc = -1 if cl.exit_byte is None else int(col_of_byte[cl.exit_byte])
    width = cols.size
    start_split = lexer.split[new[0]].take(cols)
    if xc >= 0:
        start_split[xc] = False
    first = start_split.tobytes()  # (bool: one byte a flag)
    new_idx = np.asarray(new, dtype=np.int64)
    # the new states' rows and flags, made for the first region whose start's flags match
    new_split: np.ndarray | None = None
    flags = b""
    block: list[list[int]] | None = None
    new_of: dict[int, int] = {}
    for rid in range(len(cl._regions) - 1, -1, -1):
        r_start, idx, part, dpart, sub, cut_split, rep = cl._regions[rid]
        n_old = idx.size
        if dpart is not part or n_old + k > _LOCAL_DIGEST_STATES:
            continue
        if cut_split[1].tobytes() != first:
            continue
        if block is None or new_split is None:
            got = lexer.table.take(new_idx, axis=0).take(cols, axis=1)
            new_split = lexer.split.take(new_idx, axis=0).take(cols, axis=1)
            if xc >= 0:
                got[:, xc] = DEAD
                new_split[:, xc] = False
            block = got.tolist()
            flags = new_split.tobytes()
            new_of = {q: i for i, q in enumerate(new)}
        # (first the start's row, in one gather: most regions tried fail there, before the
        # lists of their states and classes are made)
        first_row: list[int] = idx.take(sub[1]).tolist()
        if any(t != first_row[j] and t not in new_of for j, t in enumerate(block[0])):
            continue
        # the copy map, breadth first from (start, R's start); each new state's row on R's
        # local ids as it will be appended
        phi = [-1] * k
        phi[0] = 1
        local: list[list[int]] = [[] for _ in range(k)]
        order = [0]
        at = 0
        ok = True
        ids = idx.tolist()
        part_of = part.tolist()
        old_flags = cut_split.tobytes()
        while at < len(order) and ok:
            i = order[at]
            at += 1
            s = phi[i]
            if old_flags[s * width : (s + 1) * width] != flags[i * width : (i + 1) * width]:
                ok = False
                break
            srow: list[int] = sub[s].tolist()
            out = local[i]
            for j, t in enumerate(block[i]):
                s2 = srow[j]
                m = new_of.get(t, -1)
                if m < 0:
                    if ids[s2] != t:
                        ok = False
                        break
                    out.append(s2)
                    continue
                if s2 == DEAD:  # (the dead state's label is its own: alike to no state)
                    ok = False
                    break
                if phi[m] < 0:
                    phi[m] = s2
                    order.append(m)
                elif part_of[phi[m]] != part_of[s2]:
                    ok = False
                    break
                out.append(n_old + m)
        if not ok or len(order) != k:
            continue
        grown_part = np.concatenate((part, np.asarray([part_of[p] for p in phi], dtype=part.dtype)))
        cl._regions[rid] = (
            r_start,
            np.concatenate((idx, new_idx)),
            grown_part,
            grown_part,
            np.concatenate((sub, np.asarray(local, dtype=sub.dtype).reshape(k, width))),
            np.concatenate((cut_split, new_split)),
            rep,
        )
        for q, i in new_of.items():
            where.setdefault(q, (rid, n_old + i))
        return rid, n_old
    return None


def _row_classes(rows: np.ndarray) -> np.ndarray:
    """Classes of the equal rows of ``rows`` (``uint8[n, w]``), numbered in the order of the
    rows' values: the ``return_inverse`` of ``np.unique(rows, axis=0)``, exactly, but one
    integer sort per 8 bytes of row rather than a sort of the rows as byte strings (which
    was most of a refinement's time on a later first visit).  O(n log n x w / 8)."""
    n, w = rows.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    width = max(8, -(-w // 8) * 8)
    padded = np.zeros((n, width), dtype=np.uint8)
    padded[:, :w] = rows
    words = padded.view(">u8")  # big-endian: word order is the byte strings' order
    cls = np.zeros(n, dtype=np.int64)
    for j in range(words.shape[1]):
        _, inv = np.unique(words[:, j], return_inverse=True)
        inv = inv.reshape(-1).astype(np.int64)
        if j == 0:  # (the classes of the first word: already dense, in value order)
            cls = inv
            continue
        key = cls * (int(inv.max()) + 1) + inv  # below n * n: no overflow
        _, cls = np.unique(key, return_inverse=True)
        cls = cls.reshape(-1).astype(np.int64)
    return cls


def _level_targets(block: np.ndarray) -> list[int]:
    """The targets of a search level's rows ``block`` (any shape), each distinct value at
    least once (the caller makes a set): past :data:`_REGION_RUN_CELLS` cells without the
    runs of equal values (a string's body leads most bytes to one state: fewer Python ints),
    then past :data:`_REGION_SNAPSHOT_CELLS` left, distinct by a sort (``np.unique``).
    O(cells), plus O(n log n) past that bound."""
    flat = block.ravel()
    if flat.size > _REGION_RUN_CELLS:
        flat = flat[np.concatenate(([True], flat[1:] != flat[:-1]))]
        if flat.size > _REGION_SNAPSHOT_CELLS:
            flat = np.unique(flat)
    out: list[int] = flat.tolist()
    return out


def _split_labels(split: np.ndarray) -> np.ndarray:
    """The labels a region's refinement starts from (:meth:`_LazyExitSplitClassifier.
    _new_region`): 0 for the dead state (row 0), else 1 + the class of the state's split
    flags (``bool[n, w]``, ``w >= 1``) among the distinct rows, numbered in the rows' value
    order: ``_row_classes(np.packbits(split, axis=1)) + 1`` exactly (packed MSB first, the
    bytes of equal-length rows compare as the flags do, lexicographically).  Up to
    :data:`_SMALL_LABEL_ROWS` rows by a sort of the rows as Python bytes (a region of a few
    dozen states: no numpy call per 8 bytes of row, whose fixed cost was most of the labels
    in a grammar's first mask), else by :func:`_row_classes`.  O(n log n x w)."""
    n, w = split.shape
    if n > _SMALL_LABEL_ROWS or w == 0:
        labels = _row_classes(np.packbits(split, axis=1)) + 1
    else:
        data = np.ascontiguousarray(split).view(np.uint8).tobytes()
        keys = [data[i : i + w] for i in range(0, n * w, w)]
        rank = {k: r for r, k in enumerate(sorted(set(keys)), 1)}
        labels = np.array([rank[k] for k in keys], dtype=np.int64)
    labels[DEAD] = 0
    return labels


def _reachable_classes(
    part: np.ndarray,
    cut: np.ndarray,
    rep: np.ndarray,
    start: int,
    succ: dict[int, list[int]] | None = None,
    past: Container[int] = (),
) -> np.ndarray | None:
    """The classes of ``part`` reachable in ``cut`` from ``start``'s class (the dead class
    left out), numbered breadth-first one level at a time in byte order (``rep[c]``: a
    member state of class ``c``); None past :data:`_SHARED_WALK_STATES` classes.
    ``succ``: per class, the classes its row leads to (distinct, in column order), filled
    here for the classes met and read for those met before (the same ``part``, ``cut`` and
    ``rep`` on every call); a first call on a region of at most :data:`_FILL_CLASSES`
    classes fills every class in one gather (its row's distinct classes:
    :func:`_distinct_successors`).  ``past``: classes known to reach more than
    :data:`_SHARED_WALK_STATES` classes (None as soon as a level meets one: a class reaches
    what its successors reach).  O(reachable classes x 256), or O(classes x columns) once."""
    dead = int(part[DEAD])
    first_cls = int(part[start])
    seen = {dead, first_cls}
    order = [first_cls]
    frontier = order
    # per level, the new classes in the order of their first occurrence (frontier order, then
    # column order: the order of ``np.unique``'s first indices) found in Python on the
    # classes' successor lists, one gather for the classes no call met before (a whitespace
    # count is a chain of one-class levels: numpy cost ~10 us a level)
    if succ is None:
        succ = {}
    width = cut.shape[1]
    while frontier:
        missing = [c for c in frontier if c not in succ]
        if missing:
            if not succ and rep.size <= _FILL_CLASSES:
                # a first digest of the region: every class's row in one gather (not one a
                # level: a region's first digest meets most of its classes)
                succ.update(enumerate(_distinct_successors(part.take(cut.take(rep, axis=0)))))
            else:
                rows = part.take(cut.take(rep.take(missing), axis=0))
                succ.update(zip(missing, _distinct_successors(rows)))
        frontier = class_level(succ, frontier, seen, width)
        order.extend(frontier)
        if len(order) > _SHARED_WALK_STATES:
            return None
        if past:
            for c in frontier:
                if c in past:
                    return None
    return np.asarray(order, dtype=np.int64)


def _distinct_successors(rows: np.ndarray) -> list[list[int]]:
    """Per row of ``rows`` (``int[n, w]``, values >= 0), its distinct values in the order of
    their first occurrence (column order): ``list(dict.fromkeys(row))`` of each row, exactly,
    found in numpy from :data:`_DISTINCT_MIN_CELLS` cells up to :data:`_DISTINCT_CELLS` (rows
    x values) rather than by a Python pass over every cell (a 134-class region's first
    digest: 134 x 40 cells, ~150 us in Python, 50-100 here).  No state kept.  O(n w + n x max
    value) in numpy, then O(distinct values) in Python."""
    n, w = rows.shape
    if n == 0 or w == 0:
        return [[] for _ in range(n)]
    flat = rows.reshape(-1)
    span = int(flat.max()) + 1
    if n * w < _DISTINCT_MIN_CELLS or n * span > _DISTINCT_CELLS:
        return [list(dict.fromkeys(row)) for row in rows.tolist()]
    # one key per (row, value); each key's first cell, by writing the cells in reverse
    # order (the last write of a fancy assignment stays: the first cell), read back only
    # where written
    # (int32: at most _DISTINCT_CELLS keys, n x 256 cells; half the scratch of int64)
    keys = (np.arange(n, dtype=np.int32) * span).repeat(w) + flat.astype(np.int32)
    cells = np.arange(n * w, dtype=np.int32)
    first_cell = np.empty(n * span, dtype=np.int32)
    first_cell[keys[::-1]] = cells[::-1]
    first = first_cell.take(keys) == cells
    values: list[int] = flat[first].tolist()
    ends: list[int] = np.cumsum(first.reshape(n, w).sum(axis=1)).tolist()
    out: list[list[int]] = []
    lo = 0
    for hi in ends:
        out.append(values[lo:hi])
        lo = hi
    return out


def _renumbered_bytes(rows: np.ndarray, col_of_byte: np.ndarray | None = None) -> bytes:
    """The bytes a cut signature hashes for the renumbered rows of its reachable classes
    (``rows``: class numbers below :data:`_SHARED_WALK_STATES`, -1 for the dead class), on
    256 columns (``col_of_byte``: ``rows`` hold one column per byte class), as int8."""
    small = rows.astype(np.int8, copy=False)
    if col_of_byte is not None:
        small = small.take(col_of_byte, axis=1)
    return np.ascontiguousarray(small).tobytes()


def _quotient_digest(
    vocab: Vocabulary,
    exit_byte: int | None,
    part: np.ndarray,
    cut: np.ndarray,
    cut_split: np.ndarray,
    start: int,
    col_of_byte: np.ndarray,
    rep: np.ndarray,
    succ: dict[int, list[int]],
    past: Container[int] = (),
) -> bytes | None:
    """The digest of :meth:`_ExitSplitClassifier.cut_signature` for the quotient of the
    automaton ``cut`` (state 0 dead, every row built: a region) by the congruence ``part``,
    from ``start``: its classes reachable from ``start``'s, numbered breadth-first in byte
    order, their rows and split flags, the vocabulary and the exit byte; None past
    :data:`_SHARED_WALK_STATES` classes.  ``cut`` and ``cut_split`` hold one column per byte
    class, in the order of the classes' first bytes (so first met in byte order as on 256
    columns), and byte ``b`` is column ``col_of_byte[b]``: the digest is the one of the
    256-column tables.  ``rep``: a member of each class; ``succ`` and ``past``: as
    :func:`_reachable_classes` (a cache for these ``part``, ``cut`` and ``rep``)."""
    states = _reachable_classes(part, cut, rep, start, succ, past)
    if states is None:
        return None
    sel = rep.take(states)  # a member of each reachable class, in the digest's order
    renumber = np.full(rep.size, -1, dtype=np.int8)  # (below _SHARED_WALK_STATES: int8)
    renumber[states] = np.arange(states.size, dtype=np.int8)
    h = hashlib.blake2b(digest_size=16)
    h.update(vocab.fingerprint.encode())
    h.update(b"" if exit_byte is None else bytes([exit_byte]))
    # renumbered on the table's own columns, then spread to 256 (as int8: a few times less
    # to hash than the int64 rows, which were most of a wide digest's time)
    # (``take``, not fancy indexing: ~40% less on these small rows)
    rows = _renumbered_bytes(renumber.take(part.take(cut.take(sel, axis=0))), col_of_byte)
    split_rows = cut_split.take(sel, axis=0).take(col_of_byte, axis=1)
    h.update(rows)
    h.update(np.packbits(split_rows).tobytes())
    return h.digest()


class _RowPool:
    """Process-wide free list of the lazy walk tables' memory maps, with the bytes of each
    that were written (touched) while a table used it.

    A page of a fresh anonymous map costs a page fault on its first write (measured on the
    benchmark machine: 2-25 µs per 4 KiB page, ~0.5 ms per 256 rows written, most of
    :meth:`_LazyWalkTables.write`); a grammar's walk tables die with it, and the next grammar's
    would fault the same number of fresh pages.  Maps come back here when the last array on
    them is gone (a finalizer on the root array: every view of it holds it), and are handed
    out again for tables of at most their size, so a warm process writes rows on touched
    pages.  A reused map is not cleared: :class:`_LazyWalkTables` writes every row below its
    ids' rows before any walk reads it (rows 0-2 set at construction), so no row's content
    depends on which map it got.

    Bounded: at most :data:`_POOL_MAPS` maps kept, holding at most :data:`_POOL_BYTES`
    touched bytes in all (the pages of a map past what it may keep are returned to the
    kernel with ``MADV_DONTNEED``; the smallest holders are dropped first).  Thread-safe."""

    __slots__ = ("_free", "_lock")

    def __init__(self) -> None:
        #: (map, bytes touched), oldest first
        self._free: list[tuple[mmap.mmap, int]] = []
        self._lock = threading.RLock()  # a finalizer may run inside take (on an allocation)

    def take(self, rows: int) -> tuple[np.ndarray, list[int]]:
        """``int32[rows, 256]`` on a map of the pool (the one touched most, grown in place
        where it is too short) or a fresh one, and the cell the caller keeps the rows it wrote
        in (``cell[0]``: rows from 0 on that may have been touched; ``cell[1]``: the bytes
        of the map touched before), read when the map comes back."""
        size = rows * 256 * 4
        mm: mmap.mmap | None = None
        before = 0
        with self._lock:
            best = -1
            for i, (_m, touched) in enumerate(self._free):
                if best < 0 or touched > self._free[best][1]:
                    best = i
            if best >= 0:
                mm, before = self._free.pop(best)
        if mm is not None and len(mm) < size and not _MAP_GROWS:
            mm, before = None, 0
        if mm is not None and len(mm) < size:
            # a map too short for these tables grows in place (``mremap``: its touched pages
            # move along, so the rows written on them fault no fresh page; a fresh map of the
            # size faulted every page written, ~0.6 faults per row on MaskBench)
            try:
                mm.resize(max(size, _POOL_MAP_BYTES))
            except (BufferError, OSError, SystemError, ValueError):
                mm, before = None, 0
        if mm is None:  # (at least _POOL_MAP_BYTES long: one size fits most tables later)
            mm = _anonymous_map(max(size, _POOL_MAP_BYTES))
        root = np.frombuffer(mm, dtype=np.int32, count=rows * 256)
        cell = [0, before]
        weakref.finalize(root, self._give, mm, cell)
        return root.reshape(rows, 256), cell

    def _give(self, mm: mmap.mmap, cell: list[int]) -> None:
        # the pages touched by an earlier use stay (only the pool returns pages to the kernel)
        touched = min(max(cell[0] * 1024, cell[1]), len(mm))
        keep = min(touched, _POOL_BYTES) // mmap.PAGESIZE * mmap.PAGESIZE
        if keep <= 0:
            return  # (dropped: unmapped when its last reference goes)
        if touched > keep and hasattr(mm, "madvise"):
            mm.madvise(mmap.MADV_DONTNEED, keep, len(mm) - keep)
        with self._lock:
            free = self._free
            free.append((mm, keep))
            while len(free) > _POOL_MAPS or sum(t for _, t in free) > _POOL_BYTES:
                drop = min(range(len(free)), key=lambda i: free[i][1])
                free.pop(drop)


#: the walk tables' maps kept for reuse (see :class:`_RowPool`): how many, and their
#: touched bytes in all
_POOL_MAPS = 4
_POOL_BYTES = 64 << 20
#: the pool's maps are at least this long (address space; pages are used when written), so
#: that a map given back fits the tables of most grammars (~1,300 ids: a MaskBench schema's
#: tables use ~700) without reserving much address space per live grammar
_POOL_MAP_BYTES = 4 << 20
#: whether the pool's maps grow in place (``mremap`` on Linux; private maps: a shared
#: anonymous map's pages past its first size raise SIGBUS)
_MAP_GROWS = sys.platform.startswith("linux") and hasattr(mmap, "MAP_PRIVATE")


def _anonymous_map(size: int) -> mmap.mmap:
    """A fresh anonymous map of ``size`` bytes (private where it may grow: :data:`_MAP_GROWS`)."""
    if _MAP_GROWS:
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mmap.mmap(-1, size)


_ROW_POOL = _RowPool()


class _LazyWalkTables:
    """The lazy classifier's walk tables: the augmented lexer table and its cut copy on
    *dense ids* of the lexer states a written row touched, so a first visit costs the rows
    it makes, never the lexer's capacity.

    Layout (both tables, ``int32[3 x ids capacity, 256]``): id ``k`` owns rows ``3k`` (no
    split seen), ``3k + 1`` (a plausible split was seen) and ``3k + 2`` (walk start), as the
    three blocks of :func:`_augmented_table`, interleaved; id 0 is the dead state, whose
    row ``0`` is dead, row ``2`` (a dead start) dead and row ``1`` is :data:`_LAZY_SINK`
    (died after a plausible split: absorbing).  A lexer state gets an id when its rows are
    written (it became *ready*) or when a written row leads to it; the rows of an id whose
    state is not ready are sentinels (every byte leads back to the row itself), so a walk
    that meets one ends on it (``pending`` flags those rows: a walk's end rows are tested
    with one gather).  Rows never move: new ids are appended.  The tables have room
    for as many ids as the lexer had states when they were made (maps of :data:`_ROW_POOL`:
    memory is used by the rows written only); past it they are replaced by twice as large
    ones, the used rows copied (amortized O(rows written)).  Walks run on views of the rows in use
    (:meth:`walk_tables`).

    Lifetime: per classifier, derived from its lexer and ready list (omitted from a
    serialized grammar, rebuilt on first use).  Mutated in place by :meth:`write` under the
    classifier's lock.  Costs: :meth:`write` O(states x 256) plus O(new ids x 768)."""

    __slots__ = (
        "_cells",
        "_views",
        "count",
        "cut",
        "exit_byte",
        "ids",
        "lex",
        "pending",
        "ready",
        "slot",
        "states",
        "version",
    )

    def __init__(self, capacity: int, exit_byte: int | None) -> None:
        self.exit_byte = exit_byte
        #: per lexer state, its id (-1: none yet); sized to the lexer's capacity
        self.ids = np.full(capacity, -1, dtype=np.int32)
        self.ids[DEAD] = 0
        #: per lexer state, whether its rows are written
        self.ready = np.zeros(capacity, dtype=bool)
        self.ready[DEAD] = True
        #: scratch per lexer state for :meth:`_LazyExitSplitClassifier._ensure` (read only
        #: where that call wrote it)
        self.slot = np.empty(capacity, dtype=np.int64)
        room = capacity if _LAZY_IDS is None else _LAZY_IDS
        #: per id, its lexer state
        self.states = np.zeros(room, dtype=np.int64)
        self.count = 1
        #: bumped by every change of the tables' rows
        self.version = 0
        #: per row, whether it is a sentinel's (its id's lexer state not ready)
        self.pending = np.zeros(3 * room, dtype=bool)
        # (maps of the pool: not cleared, every row below 3 x count is written before use)
        self.lex, cell = _ROW_POOL.take(3 * room)
        self._cells = [cell]
        self.lex[:3] = np.asarray((DEAD, _LAZY_SINK, DEAD), dtype=np.int32)[:, None]
        self.cut = self.lex
        if exit_byte is not None:
            self.cut, cell = _ROW_POOL.take(3 * room)
            self._cells.append(cell)
            self.cut[:3] = np.asarray((DEAD, _LAZY_SINK, DEAD), dtype=np.int32)[:, None]
        self._touch()
        self._views: tuple[int, np.ndarray, np.ndarray] | None = None

    def _touch(self) -> None:
        """Tell the pool how many rows of the tables' maps may have been written."""
        for cell in self._cells:
            cell[0] = 3 * self.count

    def fit(self, capacity: int) -> None:
        """Extend the per-lexer-state arrays to the lexer's ``capacity`` (it only grows).
        O(capacity) bytes, only when it changed."""
        old = self.ids.size
        if capacity > old:
            ids = np.full(capacity, -1, dtype=np.int32)
            ids[:old] = self.ids
            ready = np.zeros(capacity, dtype=bool)
            ready[:old] = self.ready
            self.ids, self.ready = ids, ready
            self.slot = np.empty(capacity, dtype=np.int64)

    def _assign(self, states: np.ndarray, sentinels: bool) -> None:
        """Give ids to the lexer ``states`` (distinct, live) that lack one, with sentinel
        rows if ``sentinels`` (else the caller writes their rows at once)."""
        new = states[self.ids[states] < 0]
        if not new.size:
            return
        lo = self.count
        hi = lo + int(new.size)
        if hi > self.states.size:
            self._grow(hi)
        ks = np.arange(lo, hi, dtype=np.int32)
        self.ids[new] = ks
        self.states[lo:hi] = new
        self.count = hi
        self._touch()
        if not sentinels:
            return
        fill = (3 * ks[:, None] + np.arange(3, dtype=np.int32)).reshape(-1, 1)
        self.pending[3 * lo : 3 * hi] = True
        self.lex[3 * lo : 3 * hi] = fill
        if self.cut is not self.lex:
            self.cut[3 * lo : 3 * hi] = fill

    def _grow(self, need: int) -> None:
        """Replace the arrays by ones of at least ``need`` ids (twice as many), the used rows
        copied."""
        cap = max(need, 2 * self.states.size)
        used = self.count
        states = np.zeros(cap, dtype=np.int64)
        states[:used] = self.states[:used]
        pending = np.zeros(3 * cap, dtype=bool)
        pending[: 3 * used] = self.pending[: 3 * used]
        self.pending = pending
        lex, cell = _ROW_POOL.take(3 * cap)
        cells = [cell]
        lex[: 3 * used] = self.lex[: 3 * used]
        if self.cut is self.lex:
            cut = lex
        else:
            cut, cell = _ROW_POOL.take(3 * cap)
            cells.append(cell)
            cut[: 3 * used] = self.cut[: 3 * used]
        self.states, self.lex, self.cut, self._cells = states, lex, cut, cells
        self._touch()

    def write(self, states: np.ndarray, table_rows: np.ndarray, split_rows: np.ndarray) -> None:
        """Write the rows of the lexer ``states`` (distinct, live, built; their lexer rows
        and split flags given) into both tables and mark them ready."""
        t = np.asarray(table_rows, dtype=np.int32)
        self._assign(states, sentinels=False)  # their rows are written below
        have = self.ids[t]
        lacking = t[have < 0]
        if lacking.size:  # most targets have ids already: only those without are sorted
            self._assign(np.unique(lacking.astype(np.int64)), sentinels=True)
        k = self.ids[states].astype(np.int64)
        # the compiled build: one C pass (the rows below)
        xb = self.exit_byte
        if write_walk_rows(self.ids, t, split_rows, k, self.lex, self.cut, xb, _LAZY_SINK):
            self._written(states, k)
            return
        if lacking.size:
            have = self.ids[t]
        # the three rows of each state, built in one block and written with one gather
        block = np.empty((t.shape[0], 3, 256), dtype=np.int32)
        plain, passed, first = block[:, 2], block[:, 1], block[:, 0]
        np.multiply(have, 3, out=plain)  # dead (id 0) stays 0
        np.add(plain, 1, out=passed)
        np.copyto(passed, _LAZY_SINK, where=t == DEAD)
        np.copyto(first, plain)
        np.copyto(first, passed, where=split_rows)
        self.lex.reshape(-1, 3, 256)[k] = block
        if self.cut is not self.lex:  # the exit byte's column dead, its split flag cleared
            assert xb is not None
            block[:, :, xb] = (DEAD, _LAZY_SINK, DEAD)
            self.cut.reshape(-1, 3, 256)[k] = block
        self._written(states, k)

    def wrote(self, count: int) -> None:
        """Note rows written in place by a walk (:func:`~formcast.vocab.trie.
        classify_walk_rows`: ids ``count`` given now, their rows, pending and ready flags
        written by it)."""
        self.count = count
        self._touch()
        self.version += 1

    def _written(self, states: np.ndarray, k: np.ndarray) -> None:
        self.pending.reshape(-1, 3)[k] = False
        self.ready[states] = True
        self.version += 1

    def walk_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(augmented table, cut table)`` for the walks: views of the rows of the ids given
        so far (a walk reaches no other), the same objects until ids are added (the pure
        build's walks keep a table's column classes by its identity)."""
        views = self._views
        if views is None or views[0] != self.count:
            rows = 3 * self.count
            lex = self.lex[:rows]
            cut = lex if self.cut is self.lex else self.cut[:rows]
            views = self._views = (self.count, lex, cut)
        return views[1], views[2]

    def start(self, state: int) -> int:
        """The walk-start row of the ready lexer ``state``."""
        return 3 * int(self.ids[state]) + 2

    def end_states(self, ends: np.ndarray) -> np.ndarray:
        """The lexer states of a walk's end rows (the sink's left out)."""
        out: np.ndarray = self.states[ends[ends != _LAZY_SINK] // 3]
        return out

    def nbytes(self) -> int:
        """The bytes in use: the per-state arrays and the rows of the ids given (the rest
        of the tables' room is never touched)."""
        rows = 3 * self.count * 256 * 4 * (1 if self.cut is self.lex else 2)
        return int(self.ids.nbytes + self.ready.nbytes + 11 * self.count) + rows


# loaded by cls.__new__ (formcast._native); a test's reference subclasses it (256-column windows)
@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class _CountedClassifier:
    """Classifies the stack tops of counted rules (counts already clipped), on window
    automata shared by every grammar with the same item automaton on the same vocabulary
    (:data:`COUNTED_WINDOWS`, :data:`COUNTED_CLASSES`).  Where an item's iterations overlap
    (an iteration end that can also go on: ``(\\w+-?){0,100}``) the window is determinized by
    subset construction instead (:data:`COUNTED_SUBSETS`), so that tokens crossing iterations
    stay exact rather than all becoming candidates.  ``rules``: the counted rules, each with
    the bytes that may start a callee or follow the rule.  Costs: one window table per new
    (item, bounds) window, one vocabulary walk per new position.  ``context``: the
    vocabulary's shared tables (None, and after a load: the registry's,
    :func:`~formcast.index.context.context_for`).

    Window tables are *narrow*: built on the item's byte classes
    (:func:`~formcast.automata.counted.narrow_item`, kept per rule in ``_narrow``), one column
    per class, and walked so (``TokenTrie.walk_pairs``' ``classes``): a JSON string item's
    128-level window is 0.8 MB instead of 9.4 MB of fresh memory inside one mask (issue #31's
    TBM max: huge-page faults beside another process).  The masks are those of the
    256-column windows (tests/index/test_counted_narrow_windows.py)."""

    #: the context is the process's, not the grammar's: found again after a load; the
    #: narrow items are derived from the automaton (None after a load: remade on first use)
    _serialize_omit: ClassVar[frozenset[str]] = frozenset({"_context", "_narrow"})

    __slots__ = ("_auto", "_cap", "_context", "_narrow", "_rule_aug", "_sigs", "_vocab", "rules")

    def __init__(
        self,
        auto: GrammarAutomaton,
        vocab: Vocabulary,
        cap: int,
        context: TokenIndexContext | None = None,
    ) -> None:
        self._auto = auto
        self._vocab = vocab
        self._cap = cap
        self._context = context
        self.rules = counted_splits(auto)
        self._sigs: dict[int, bytes] = {}
        self._rule_aug: dict[int, np.ndarray] = {}
        self._narrow: dict[int, NarrowItem] | None = {}

    def classify(self, rule: int, state: int, need: int, left: int) -> Classification:
        """Where neither bound is within a token's reach (deep inside a long string), one
        self-restarting level.  Otherwise two windows per item automaton serve almost every
        count: once the lower bound is met, a ``cap``-level window with the return allowed
        everywhere, entered ``left`` levels below its top; while iterations are still needed
        and the upper bound is out of reach, a ``2 * cap``-level window with the return allowed
        from level ``cap - 1`` on, entered ``need`` levels below that.  Only a narrow range
        (both bounds within reach) gets a window of its own.
        """
        key = (self._signature(rule), state, need, left)
        classes = self._cache(COUNTED_CLASSES)
        found, hit = classes.get(key)
        if found and hit is not None:
            return hit
        cap = self._cap
        far = left < 0 or left >= cap  # the upper bound is out of a token's reach
        if far and need in (0, cap):  # no bound within reach: one self-restarting level
            window, level = (need, -1), 0
        elif need == 0:
            window, level = (0, cap), cap - (cap if left < 0 else min(left, cap))
        elif far:
            window, level = (cap, 2 * cap), cap - need
        else:
            window, level = (need, left), 0
        table: np.ndarray | None = None
        dfa = self._auto.dfas[rule]
        if (
            window[1] >= 0
            and (far or left >= 1)
            and not iterations_overlap(dfa.table, dfa.accepting, dfa.start)
        ):
            # the window counted down (its table: the levels this entry needs)
            table, start = self._countdown(rule, need, left, far, state)
        else:
            table = self._window(rule, *window)
            if table is not None:
                start = level * dfa.table.shape[0] + state
            else:  # overlapping iterations: the window determinized
                table, start = self._subset_window(rule, *window, state, level)
        if table is None:  # too many subsets: every crossing token is a candidate
            table, start = self._rule_aug.get(rule), state
            if table is None:
                dfa = self._auto.dfas[rule]
                table = _augmented_table(dfa.table, split_bytes(self._auto)[rule])
                self._rule_aug[rule] = table
            hit = _walk(self._vocab, table, start + 2 * ((table.shape[0] - 1) // 3))
        else:  # a narrow window
            hit = self._walk_narrow(rule, table, start)
        classes.put(key, hit)
        return hit

    def _walk_narrow(self, rule: int, table: np.ndarray, start: int) -> Classification:
        """:func:`_walk` on a narrow augmented window of ``rule`` (one column per class of
        :meth:`_item`) from its state ``start`` of the first block (``start + 2n``: the walk
        start's block)."""
        item = self._item(rule)
        trie = self._vocab.trie
        n = (table.shape[0] - 1) // 3
        idx, ends = trie.walk_pairs(table, start + 2 * n, (item.cmap, item.reps))
        sink = ends == 3 * n
        words = trie.token_words(idx[~sink], self._vocab.vocab_size)
        words.setflags(write=False)
        return Classification(words, idx[sink])

    def _item(self, rule: int) -> NarrowItem:
        """The item automaton of ``rule`` and its splits with one column per byte class
        (:func:`~formcast.automata.counted.narrow_item`), the inputs of every window of the
        rule.  Memoized per rule (remade after a load: O(item states x 256))."""
        memo = self._narrow
        if memo is None:
            memo = self._narrow = {}
        got = memo.get(rule)
        if got is None:
            dfa = self._auto.dfas[rule]
            calls, follow = self.rules[rule]
            got = memo[rule] = narrow_item(dfa.table, dfa.start, calls, follow)
        return got

    def _cache(self, slot: ContextSlot[K, V]) -> LruCache[K, V]:
        """``slot``'s cache in the vocabulary's context."""
        ctx = self._context
        if ctx is None:  # (loaded: the registry's, the one a compiler of the vocabulary holds)
            ctx = self._context = context_for(self._vocab)
        return ctx.cache(slot)

    def _signature(self, rule: int) -> bytes:
        """What a counted rule's windows depend on in its vocabulary's context: the item
        automaton, the bytes that may start a callee or follow the rule.  Memoized per rule."""
        sig = self._sigs.get(rule)
        if sig is None:
            dfa = self._auto.dfas[rule]
            calls, follow = self.rules[rule]
            h = hashlib.blake2b(digest_size=16)
            for part in (dfa.table, dfa.accepting.astype(np.uint8), calls, follow):
                h.update(np.ascontiguousarray(part).tobytes())
            h.update(str((dfa.start, dfa.table.shape)).encode())
            sig = h.digest()
            self._sigs[rule] = sig
        return sig

    def _subset_window(
        self, rule: int, need: int, levels: int, state: int, level: int
    ) -> tuple[np.ndarray | None, int]:
        """(augmented table, walk start) of the window of a counted rule whose iterations
        overlap, determinized from every entry a classification of this window may ask for
        (:func:`~formcast.automata.counted.subset_window`): each live item state at each
        level :meth:`classify` enters this window at.  ``(None, state)`` past the subset cap,
        and for a window with both bounds within reach (``need`` not met, ``left`` below the
        cap), where levels short of ``need`` cannot be pruned.
        Shared like the deterministic windows (:data:`COUNTED_SUBSETS`).  Cost: one subset
        construction per window, bounded by the longest token (milliseconds for string and
        array items)."""
        dfa = self._auto.dfas[rule]
        n = dfa.table.shape[0]
        key = (self._signature(rule), need, levels)
        cap = self._cap
        if need and levels >= 0 and (need, levels) != (cap, 2 * cap):
            # both bounds within reach: levels below ``need`` do not prune, subsets could
            # grow with the token's length (left to the parser: the candidates' checks)
            return None, state
        subsets = self._cache(COUNTED_SUBSETS)
        found, got = subsets.get(key)
        if not found:
            if (need, levels) == (0, cap):  # entered at cap - left, 1 <= left <= cap
                entry_levels = range(cap)
            elif (need, levels) == (cap, 2 * cap):  # entered at cap - need, 0 < need < cap
                entry_levels = range(1, cap)
            else:  # one self-restarting level
                entry_levels = range(1)
            live = np.flatnonzero((dfa.table != DEAD).any(axis=1)).tolist()
            entries = [(q, i) for i in entry_levels for q in live]
            item = self._item(rule)
            built = subset_window(
                item.table,
                dfa.accepting,
                dfa.start,
                item.call_split,
                item.exit_split,
                need,
                levels,
                entries,
                self._cap - 1,
            )
            got = None
            if built is not None:
                rows = np.zeros(max(entry_levels.stop, 1) * n, dtype=np.int64)
                rows[[i * n + q for q, i in entries]] = built[2]
                got = (_augmented_table(built[0], built[1]), rows)
            subsets.put(key, got)
        if got is None:
            return None, state
        return got[0], int(got[1][level * n + state])

    def _countdown(
        self, rule: int, need: int, left: int, far: bool, state: int
    ) -> tuple[np.ndarray, int]:
        """(augmented table, walk start) of a window with a bound within reach, counted down
        (:func:`~formcast.automata.counted.countdown_window`): entered at level ``need - 1``
        of a saturating window returning at level 0 while iterations are needed and the upper
        bound is out of reach, else at level ``left - 1``, returning at the levels ``<= left -
        need``.  Each shape (item, how it returns) has one table shared by every entry below
        its top, its levels a power of two (at least 8, at most ``cap - 1``: no entry is higher)
        grown on demand, so a table has about the levels the highest entry asked for rather
        than ``cap`` or ``2 cap`` (the (cap, 2 cap) window of a 24-state string item: 19 MB
        at 256 columns, first touched inside one mask; issue #31; narrow, as every window
        here: 1.7 MB).  Non-overlapping items only (the others:
        :meth:`_subset_window`)."""
        # the key's middle field, negative (the unrolled windows' is ``need >= 0``): -2 for
        # the saturating window, -3 where every level returns, -4 - d for levels <= d
        if far:  # need in [1, cap): return once the needed iterations are done
            entry, code, saturate, exit_below = need - 1, -2, True, 0
        else:  # 1 <= left < cap
            entry, saturate, exit_below = left - 1, False, left - need
            if exit_below >= entry:  # every level the entry reaches (and any other)
                code, exit_below = -3, self._cap
            else:
                code = -4 - exit_below
        windows = self._cache(COUNTED_WINDOWS)
        sig = self._signature(rule)
        top = max(self._cap - 1, 1)
        size = min(max(8, 1 << entry.bit_length()), top)  # > entry (entry <= cap - 2)
        aug: np.ndarray | None = None
        probe = size
        while aug is None:  # the smallest table held that has the entry's level
            _, aug = windows.get((sig, code, probe))
            if probe >= top:
                break
            probe = min(probe * 2, top)
        if aug is None:
            dfa = self._auto.dfas[rule]
            item = self._item(rule)
            got = countdown_window(
                item.table,
                dfa.accepting,
                dfa.start,
                item.call_split,
                item.exit_split,
                size,
                exit_below,
                saturate,
            )
            assert got is not None  # (not overlapping: checked by the caller)
            aug = _augmented_table(*got)
            windows.put((sig, code, size), aug)
        return aug, entry * self._auto.dfas[rule].table.shape[0] + state

    def _window(self, rule: int, need: int, levels: int) -> np.ndarray | None:
        """The augmented window table of a counted rule, narrow (:meth:`_item`'s columns):
        ``levels`` levels, the return allowed from level ``need - 1`` on (shared, LRU)."""
        key = (self._signature(rule), need, levels)
        windows = self._cache(COUNTED_WINDOWS)
        found, aug = windows.get(key)
        if found:
            return aug
        dfa = self._auto.dfas[rule]
        item = self._item(rule)
        got = window_table(
            item.table, dfa.accepting, dfa.start, item.call_split, item.exit_split, need, levels
        )
        aug = None if got is None else _augmented_table(*got)
        windows.put(key, aug)
        return aug


class _Positions(Protocol):
    """What :class:`CfgProgram` calls on its position classifier (:class:`_RuleClassifier`,
    :class:`_ExitSplitClassifier` or :class:`_LazyExitSplitClassifier`).  A protocol, so the
    compiled build (mypyc reads a protocol as a plain object) also takes a loaded grammar's
    stand-in for it (:mod:`formcast.index.persist`'s lazy section, replaced on first use)
    where a union of the classes would be checked and refused."""

    def classify(self, rule: int, state: int) -> Classification: ...

    def __len__(self) -> int: ...

    def cache_bytes(self) -> int: ...

    def table_bytes(self) -> int: ...


# an ordinary class under mypyc (formcast._native; its methods are compiled): a loaded grammar
# sets its lazy fields (``_persist_lazy``) to stand-ins of another type
@interpreted_class
class CfgProgram:
    """Matcher program of a context-free grammar (see the module docstring).

    Args:
        auto: the compiled per-rule automata.
        vocab: the model's vocabulary.
        limits: run-time parser limits.
        mask_cache_size: parser states whose masks are kept (LRU), at most.
        budget: the compile's fuel and deadline (:class:`~formcast.limits.WorkBudget`),
            charged while the token index is prepared.
        cache_limits: byte budgets of the masks, token steps and parser caches
            (:class:`~formcast.limits.CacheLimits`).
        exit_byte: the byte whose column is cut for the shared walks (see
            :class:`_ExitSplitClassifier`): the byte that ends the grammar's permissive
            lexemes (JSON's ``"``); None cuts nothing.  Masks are exact for any value.
        lazy: build the call-expanded lexer and its position tables as walks reach them
            (:class:`_LazyExitSplitClassifier`) rather than at construction; None: the module
            switch :data:`LAZY_INDEX`.  Masks are the same either way (the differential
            test, tests/index/test_lazy_index_matches_eager.py, keeps them so).
        context: the vocabulary's shared tables (:class:`~formcast.index.context.
            TokenIndexContext`: shared walks, counted windows and classifications), as its
            ``GrammarCompiler`` holds it; None: :func:`~formcast.index.context.context_for`
            (``vocab``, ``cache_limits``), as a loaded grammar finds it again.
    """

    #: what a serialized grammar holds of it (formcast.index.persist): these fields, the
    #: lexer and the position classifier each in a lazy section (with what it answers unloaded)
    _persist_fields: ClassVar[tuple[str, ...]] = (
        "auto", "vocab", "cache_limits", "_cap", "pda", "lexer", "_positions", "_counted",
        "_masks", "_steps", "_stop_words", "_limit_errors", "candidates_checked",
        "mask_computations", "_context", "_loops", "_orders",
    )  # fmt: skip
    #: the context is the process's (found again through the registry after a load); the
    #: looped candidate groups are remade by the masks that need them
    _serialize_omit: ClassVar[frozenset[str]] = frozenset({"_context", "_loops", "_orders"})
    _persist_lazy: ClassVar[dict[str, tuple[str, ...]]] = {
        "lexer": (),
        "_positions": ("__len__", "cache_bytes", "table_bytes"),
    }

    def __init__(
        self,
        auto: GrammarAutomaton,
        vocab: Vocabulary,
        limits: ParserLimits | None = None,
        *,
        mask_cache_size: int = 50_000,
        budget: WorkBudget | None = None,
        cache_limits: CacheLimits | None = None,
        exit_byte: int | None = None,
        lazy: bool | None = None,
        context: TokenIndexContext | None = None,
    ) -> None:
        self.auto = auto
        self.vocab = vocab
        self.cache_limits = cache_limits = cache_limits or CacheLimits()
        if context is None:
            context = context_for(vocab, cache_limits)
        elif context.fingerprint != vocab.fingerprint:
            raise ValueError("the context is another vocabulary's (another fingerprint)")
        self._context: TokenIndexContext | None = context
        limits = limits or ParserLimits()
        by_bytes = max(cache_limits.parser_cache_bytes // _PARSER_ENTRY_BYTES, 1)
        if by_bytes < limits.max_cache_entries:
            limits = replace(limits, max_cache_entries=by_bytes)
        # counts above the cap are out of any token's reach: those states are request-specific
        self._cap = vocab.trie.max_len + 1
        self.pda = PushdownAutomaton(auto, limits, far_count=self._cap)
        spend = budget.spend if budget is not None else charge
        self.lexer: ExpandedLexer | LazyExpandedLexer | None
        self._positions: _Positions
        if LAZY_INDEX if lazy is None else lazy:
            # the lexer's rows, and their augmented and cut rows, are made when walks reach
            # them; the compile pays the global tables (measured: ~40 units per rule state)
            if auto.num_states < _LEXER_MAX_STATES:
                spend(40 * auto.num_states + 20 * len(auto.dfas))
                self.lexer = LazyExpandedLexer(auto, _LEXER_MAX_STATES)
                self._positions = _LazyExitSplitClassifier(self.lexer, vocab, exit_byte)
            else:  # as the eager build: too large to determinize
                self.lexer = None
                self._positions = _RuleClassifier(auto, vocab, spend)
        else:
            self.lexer = build_expanded_lexer(auto, _LEXER_MAX_STATES, budget=budget)
            # the compile's fuel for the numpy passes of the classifiers, charged before
            # them: the lexer's two augmented tables, the cut copies and the split classes
            # (measured: ~35 units per lexer state), else one augmented table per rule
            if self.lexer is not None:
                spend(35 * int(self.lexer.table.shape[0]))
                self._positions = _ExitSplitClassifier(self.lexer, vocab, exit_byte, budget)
            else:  # too large to determinize: classify per rule (calls become candidates)
                self._positions = _RuleClassifier(auto, vocab, spend)
        # counted rules: masks are shared by states equal up to counts clipped to the longest
        # token + 1; stack tops of counted rules are classified on window automata
        self._counted = _CountedClassifier(auto, vocab, self._cap, context)
        # the trie's strings end to end (the large candidate checks' bytes): per vocabulary,
        # kept by the trie, made by its first grammar (~5 ms, as the trie's other
        # per-vocabulary tables) rather than inside some mask; an attribute read after that
        vocab.trie.strings_end_to_end()
        self._masks: LruCache[ParserState, np.ndarray] = LruCache(
            mask_cache_size,
            max_weight=cache_limits.mask_cache_bytes,
            weight=mask_weight,
        )
        self._steps: StepMemo[tuple[ParserState, int], ParserState] = StepMemo(
            cache_limits.step_cache_bytes // CACHE_ENTRY_BYTES
        )
        self._stop_words = ids_to_bitmask(vocab.stop_token_ids, vocab.vocab_size)
        self.mask_computations = 0
        self.candidates_checked = 0
        self._limit_errors: dict[ParserState, str] = {}
        # per single stack top: its candidates grouped by their bytes after the top's DFA
        # self-loop (see _looped_groups); None after a load (remade on use)
        self._loops: dict[tuple[int, int], _LoopGroups | int] | None = {}
        # per candidate set checked token by token: its sorted order and the prefixes its
        # strings share (see _verify_in_order); None after a load (remade on use)
        self._orders: LruCache[bytes, _CheckOrder] | None = self._order_cache()

    def _order_cache(self) -> LruCache[bytes, _CheckOrder]:
        """The candidate sets' kept orders of :func:`_verify_in_order` (empty): at most
        :data:`_ORDER_SETS` sets and ``1 / _ORDER_SHARE`` of the mask cache's bytes, each
        weighed by :func:`_check_order_bytes`."""
        return LruCache(
            _ORDER_SETS,
            max_weight=self.cache_limits.mask_cache_bytes // _ORDER_SHARE,
            weight=_check_order_bytes,
        )

    @property
    def context(self) -> TokenIndexContext:
        """The vocabulary's shared tables (a loaded grammar's: the registry's, on first use)."""
        ctx = self._context
        if ctx is None:
            ctx = self._context = context_for(self.vocab, self.cache_limits)
        return ctx

    # -- GrammarProgram protocol ----------------------------------------------------------------
    def initial_state(self) -> ParserState:
        return self.pda.initial

    def advance(self, state: ParserState, token_id: int) -> ParserState | LimitStop | None:
        key = (state, token_id)
        nxt = self._steps.get(key)
        if nxt is None:
            data = self.vocab.token_bytes(token_id)
            if not data:
                return None
            nxt = self.pda.step_bytes(state, data)  # (its step memo read first)
            if not (state.far or nxt.far):  # far states are request-specific: not kept
                self._steps.remember(key, nxt)
        return _result(nxt)

    def advance_bytes(self, state: ParserState, data: bytes) -> ParserState | LimitStop | None:
        return _result(self.pda.step_bytes(state, data))

    def is_accepting(self, state: ParserState) -> bool:
        return state.accepting

    def token_mask(self, state: ParserState) -> np.ndarray:
        if self._counted.rules:
            state = self.pda.capped(state, self._cap)
        _, mask = self._masks.get(state)
        if mask is not None:
            return mask
        mask = self._compute_mask(state)
        self._masks.put(state, mask)
        return mask

    def expected(self, state: ParserState) -> tuple[str, tuple[int, ...]]:
        nb = self.pda.next_bytes(state)
        desc = describe_bytes(nb)
        if state.accepting:
            desc += " or the end of output"
        err = state.error or self._limit_errors.get(
            self.pda.capped(state, self._cap) if self._counted.rules else state
        )
        if err:
            desc += f" (tokens were cut by a parser limit: {err})"
        return desc, tuple(int(b) for b in nb)

    def forced_bytes(self, state: ParserState) -> bytes:
        out = bytearray()
        while not state.accepting and len(out) < 4096:
            nb = self.pda.next_bytes(state)
            if nb.size != 1:
                break
            b = int(nb[0])
            out.append(b)
            state = self.pda.step(state, b)
            if state.is_dead:
                break
        return bytes(out)

    def warm_up(self, should_stop: Callable[[], bool]) -> int:
        """Classify stack-top positions nearest each rule's start first, until ``should_stop()``.

        The initial state's mask comes first; then positions in breadth-first order of every
        rule's DFA (start rule first).  Thread-safe.
        """
        if should_stop():
            return 0
        self.token_mask(self.pda.initial)
        done = 1
        counted = self._counted.rules
        for rule, dfa in enumerate(self.auto.dfas):
            seen = {dfa.start}
            queue = [dfa.start]
            while queue:
                if should_stop():
                    return done
                q = queue.pop(0)
                if (dfa.table[q] != DEAD).any() and rule not in counted:
                    self.classify(rule, q)
                    done += 1
                for nxt in np.unique(dfa.table[q]).tolist():
                    if nxt != DEAD and nxt not in seen:
                        seen.add(nxt)
                        queue.append(nxt)
                for _, ret in self.auto.refs[rule][q]:
                    if ret not in seen:
                        seen.add(ret)
                        queue.append(ret)
        return done

    def cache_info(self) -> dict[str, int]:
        info = dict(self.pda.cache_info())
        info.update(
            rules=len(self.auto.dfas),
            rule_states=self.auto.num_states,
            classified_positions=len(self._positions),
            masks_cached=len(self._masks),
            mask_cache_bytes=self._masks.total_weight,
            cache_bytes=self.cache_bytes(),
            mask_computations=self.mask_computations,
            candidates_checked=self.candidates_checked,
        )
        return info

    def cache_bytes(self) -> int:
        """Bytes held by this grammar's run-time caches (masks, position classifications,
        token steps, parser caches), by formcast's accounting (see
        :class:`~formcast.limits.CacheLimits`)."""
        orders = self._orders
        return (
            self._masks.total_weight
            + (0 if orders is None else orders.total_weight)
            + self._positions.cache_bytes()
            + len(self._steps) * CACHE_ENTRY_BYTES
            + self.pda.cache_entries() * _PARSER_ENTRY_BYTES
        )

    def nbytes(self) -> int:
        """Bytes of the program: its tables (rule automata, lexer and its augmented tables)
        plus :meth:`cache_bytes`."""
        tables = sum(d.table.nbytes for d in self.auto.dfas) + self._positions.table_bytes()
        return tables + self.cache_bytes()

    # -- masks ----------------------------------------------------------------------------------
    def classify(self, rule: int, state: int) -> Classification:
        """The classification of the stack top ``(rule, state)`` (of an uncounted rule)."""
        return self._positions.classify(rule, state)

    def _compute_mask(self, state: ParserState) -> np.ndarray:
        self.mask_computations += 1
        trie = self.vocab.trie
        words: np.ndarray | None = None
        cand_parts: list[np.ndarray] = []
        counted = self._counted
        rules = counted.rules
        positions = {
            (f.rule, f.state, f.need, f.left) if f.rule in rules else (f.rule, f.state)
            for f in state.frames
        }
        for pos in positions:
            alive_words, cands = (
                counted.classify(*pos) if len(pos) == 4 else self._positions.classify(*pos)
            )
            words = alive_words.copy() if words is None else np.bitwise_or(words, alive_words)
            if cands.size:
                cand_parts.append(cands)
        if words is None:
            words = np.zeros_like(self._stop_words)
        if cand_parts:
            cands = _sorted_union(cand_parts) if len(cand_parts) > 1 else cand_parts[0]
            # a candidate some stack top already allows needs no check
            cands = cands[bitmask_has_many(words, trie.first_token[cands]) == 0]
            self.candidates_checked += int(cands.size)
            pda = self.pda
            # a capped state (counted rules) is checked with steps whose far results are
            # capped too (exact for a token's bytes: PushdownAutomaton.step_capped), so
            # a long string's steps are memoized and the same at every count
            step = pda.step_capped if rules else pda.step
            groups = (
                self._looped_groups(state, positions, cands)
                if len(positions) == 1 and cands.size < _LEVEL_VERIFY_MIN
                else None
            )
            if groups is not None:
                ok, err = _verify_looped(
                    step, _checked_state(pda, state, rules, self._cap), groups, pda.step_memo
                )
            elif cands.size >= _LEVEL_VERIFY_MIN:
                ok, err = _verify_by_levels(
                    step,
                    _checked_state(pda, state, rules, self._cap),
                    trie,
                    cands,
                    trie.strings_end_to_end(),
                    pda.step_memo,
                )
            else:  # the parser's step memo read first (see the function)
                kept = self._orders
                if kept is None and _KEEP_ORDERS:
                    kept = self._orders = self._order_cache()
                ok, err = _verify_in_order(
                    step,
                    _checked_state(pda, state, rules, self._cap),
                    trie,
                    cands,
                    pda.step_memo,
                    kept if _KEEP_ORDERS else None,
                )
            if err is not None:
                self._limit_errors[state] = err
            trie.set_string_bits(words, ok)
        if state.accepting:
            words |= self._stop_words
        words.setflags(write=False)
        return words

    def _looped_groups(
        self,
        state: ParserState,
        positions: set[tuple[int, int, int, int] | tuple[int, int]],
        cands: np.ndarray,
    ) -> _LoopGroups | None:
        """Where the state is one stack top's own closure (one frame, not accepting), each
        byte that loops on the top's DFA state steps the state to itself (the parser's step
        returns it), so a candidate's verdict is that of its bytes after its leading looping
        bytes (a string's content before ``",``: ``' ",'``, ``'!",'``, ``'#",'`` are ``'",'``).
        The candidates grouped by those bytes (a top's candidates are the same at every
        stack: a single top's mask filters them by that top's words alone), made once per
        top from its second mask (a top's first pays its classification), where they are at
        most 80% of the candidates; None where the state is not such a closure (or the top is
        counted), or not yet.  ~40% fewer strings to check on the JSON grammars' string
        tops.  Kept with the candidates they were made from, used where those come again."""
        (pos,) = positions
        if len(pos) != 2 or state.accepting or len(state.frames) != 1:
            return None  # (one lexer position may still be several stacks)
        (fr,) = state.frames
        memo = self.pda._closures.get(fr)
        if memo is None or memo[1] or memo[0] != state.frames:
            return None
        loops = self._loops
        if loops is None:
            loops = self._loops = {}
        top = (fr.rule, fr.state)
        got = loops.get(top)
        if type(got) is tuple:
            return got if got[2] == cands.tobytes() else None
        if got is None:  # a top met once (a new top's mask pays its classification) is
            if len(loops) < _LOOP_GROUPS_MAX:  # checked plainly: grouped from its second
                loops[top] = 1
            return None
        if got == 0:  # grouping does not pay (few looping bytes)
            return None
        row = self.auto.dfas[fr.rule].table[fr.state]
        looping = bytes(row == fr.state)  # per byte: 1 where it loops
        strings = self.vocab.trie.strings
        by: dict[bytes, list[int]] = {}
        for i in cands.tolist():
            data = strings[i]
            j = 0
            n = len(data)
            while j < n and looping[data[j]]:
                j += 1
            by.setdefault(data[j:], []).append(i)
        if 5 * len(by) > 4 * cands.size:
            loops[top] = 0
            return None
        keys = sorted(by)
        groups = loops[top] = (keys, [by[k] for k in keys], cands.tobytes(), _Prefixes(len(keys)))
        return groups


#: Internal switch: CfgProgram builds its lexer lazily (the default) or eagerly (the build of
#: the previous sessions, kept for the lazy/eager differential test and for A/B benchmarks:
#: ``FORMCAST_EAGER_INDEX=1`` in the environment turns it off for a whole process tree, e.g.
#: benchmarks/maskbench.py's workers).  Masks are identical either way; only time moves.
LAZY_INDEX = os.environ.get("FORMCAST_EAGER_INDEX") != "1"
#: the call-expanded lexer's state cap (past it: the per-rule classifier)
_LEXER_MAX_STATES = 30_000

#: bytes of one parser-cache entry (an interned frame or state, a closure, a byte step),
#: measured with tracemalloc on a long string: about 260
_PARSER_ENTRY_BYTES = 260
# The tables shared by every grammar on one vocabulary: slots of the vocabulary's
# :class:`~formcast.index.context.TokenIndexContext` (a program's :attr:`CfgProgram.context`),
# each bounded by its entries and the context's ``CacheLimits.shared_cache_bytes``; entries are
# put by their users (nothing rebuilds them from a manifest).

#: Window tables of counted rules, by (item signature, need, levels); None where the window is
#: not deterministic.  Few: they are large.
COUNTED_WINDOWS: ContextSlot[tuple[bytes, int, int], np.ndarray | None] = ContextSlot(
    "cfg_counted_windows",
    max_entries=6,
    weight=lambda t: (0 if t is None else t.nbytes) + CACHE_ENTRY_BYTES,
)
#: Windows of counted rules whose iterations overlap, determinized (see
#: :meth:`_CountedClassifier._subset_window`): by (item signature, need, levels), the
#: augmented table and the row of each entry (``level * item states + state``); None past the
#: subset cap.
_SubsetWindow = tuple[np.ndarray, np.ndarray]
COUNTED_SUBSETS: ContextSlot[tuple[bytes, int, int], _SubsetWindow | None] = ContextSlot(
    "cfg_counted_subsets",
    max_entries=16,
    weight=lambda t: (0 if t is None else t[0].nbytes + t[1].nbytes) + CACHE_ENTRY_BYTES,
)
#: Classifications of counted stack tops, by (item signature, state, need, left); written with
#: the grammars that use them (:mod:`formcast.index.persist`).
COUNTED_CLASSES: ContextSlot[tuple[bytes, int, int, int], Classification] = ContextSlot(
    "cfg_counted_classes", max_entries=4_096, weight=_class_bytes
)
#: Classifications of cut-lexer start states by canonical digest (see
#: :meth:`_ExitSplitClassifier.cut_signature`): shared by every grammar on the vocabulary.
SHARED_WALKS: ContextSlot[bytes, Classification] = ContextSlot(
    "cfg_shared_walks", max_entries=1_024, weight=_class_bytes
)


def _shared_walks(vocab: Vocabulary) -> LruCache[bytes, Classification]:
    """The shared walks of ``vocab``'s context (the registry's: the one its compiler holds)."""
    return context_for(vocab).cache(SHARED_WALKS)


# start states reaching more classes of the cut lexer than this are walked per grammar
_SHARED_WALK_STATES = 96  # at most 127: the digests hash class numbers as int8
# a region's split labels are sorted as Python bytes up to this many states (_split_labels):
# most wide starts' regions have a few dozen states
_SMALL_LABEL_ROWS = 256
# ... and a region's search reads every row of a lexer of at most this many cells (states x
# cut byte classes) at once, not the rows of each level (grammar_bench's c1_arith: 59 x 11)
_REGION_SNAPSHOT_CELLS = 4_096
# ... and a level of more than this many cells drops the runs of equal targets of its rows
# before its states are read as Python ints (sorted past _REGION_SNAPSHOT_CELLS left)
_REGION_RUN_CELLS = 256
# a first digest of a region of at most this many classes reads every class's successors in
# one gather (_reachable_classes; a region's first digests meet most of its classes), ...
_FILL_CLASSES = 512
# ... their successor lists made distinct in numpy from this many cells (rows x columns), up
# to this many (rows x class numbers) cells of scratch (_distinct_successors; else in Python:
# cheaper than numpy's fixed costs on a few rows); _FILL_CLASSES ** 2 fits
_DISTINCT_MIN_CELLS = 1_024
_DISTINCT_CELLS = 1 << 18
# a wide start reaching states of one stable region and new ones grows that region
# (_LazyExitSplitClassifier._grown_region) rather than searching and refining its own
_GROW_REGIONS = True
# ... with at most this many new states, and this many (new states x the region's classes)
# pairs (the classes of the new states are found on lists: equivalence.grown_classes)
_GROW_STATES = 32
_GROW_CELLS = 4_096
# a lazy lexer is refined by regions: the states a wide start reaches, at most this many
# (_LazyExitSplitClassifier._new_region; past it: no class, no digest, the start walked on its
# own)
_LOCAL_DIGEST_STATES = 1_024
# ... and whose search builds at most this many lexer rows (~9 us each): a wide start of a large
# lazy lexer whose region would build more (MaskBench o55827: 1,188 rows, 11-14 ms inside one
# mask) is walked on its own instead, its walk building only the rows its tokens reach
_REGION_ROW_BUDGET = 256
# walk rows are written this many bytes ahead of where a walk stopped (see
# _LazyExitSplitClassifier._ensure): most tokens are shorter, so most walks run once or twice
_LAZY_AHEAD = 40
# ... and this many for a grammar's first classification (its first mask, which the compile's
# time to first mask includes): the rows further ahead are written by the walks that need
# them (MaskBench, 100 schemas, compiled: first mask p50 0.6 -> 0.4 ms, the
# masks after it as before; 4 bytes: 0.33 ms, but TBM mean +3-8%)
_LAZY_FIRST_AHEAD = 12
# ... but no more than this many rows per call (level by level, in the order met): one call
# wrote up to ~1,400 rows (~10 ms, a TBM max), most of them reached by no walk; a walk that
# meets a row left unwritten stops there and is run again (MaskBench, 100 schemas, compiled:
# 256 rows leaves the total as it was and cuts a call's max from 11 ms to 3 ms)
_LAZY_AHEAD_ROWS = 256
# the row of the lazy walk tables where a walk that died after a plausible split ends
# (absorbing; :class:`_LazyWalkTables`), and the ids they have room for at first (None: the
# lexer's capacity then; untouched room costs address space, not memory)
_LAZY_SINK = 1
_LAZY_IDS: int | None = None

# refinement rounds the token index's equivalence pass may take even where the vocabulary's
# longest token is shorter: a number's digit counters (20 integer and 20 fraction digits by
# default, more where a schema's numbers need them; see JsonSchemaOptions) must converge for
# positions before a number to share walks
_STABLE_ROUNDS = 96
# ... and those with fewer live first bytes than this (their walks are sparse and cheap)
_SHARED_WALK_MIN_BYTES = 16


#: candidate sets at least this large are verified level by level (:func:`_verify_by_levels`);
#: smaller ones token by token (:func:`_verify_in_order`), which has no per-level numpy cost
#: (measured on the grammar workloads' sets of 64-300 candidates: token by token is as fast or
#: up to 35% faster; the level walk pays off on thousands of counted-rule candidates)
_LEVEL_VERIFY_MIN = 256


def _sorted_union(parts: list[np.ndarray]) -> np.ndarray:
    """The distinct values of the arrays ``parts``, sorted: ``np.unique(np.concatenate(parts))``
    (same values, same dtype) in a quarter of its time on the few hundred candidates of a
    mask's stack tops (~2.5 us against ~10: numpy 2's ``unique`` pays a fixed cost).  A new
    array; O(n log n)."""
    merged = np.concatenate(parts)
    merged.sort()
    keep = np.empty(merged.size, dtype=bool)
    keep[:1] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


#: an internal switch: the candidate checks of a capped state (counted rules) start from the
#: state with its counters above the cap relaxed (:func:`_checked_state`); off, from the
#: capped state itself (the build before; the differential test compares both)
_RELAX_CHECKS = True


def _checked_state(
    pda: PushdownAutomaton, state: ParserState, rules: Container[int], cap: int
) -> ParserState:
    """The state a mask's candidate checks start from: ``state`` (a mask's state, its
    counters clipped to ``cap``: ``CfgProgram.token_mask``) with every ``left`` of ``cap``
    (or more) unbounded (:meth:`~formcast.automata.pda.PushdownAutomaton.capped` with
    ``relax``), where the program has counted ``rules``; else ``state`` itself.

    Exact: a candidate is a token's string, at most ``cap - 1`` bytes, so it completes at
    most ``cap - 1`` iterations of any counter; a ``left`` of ``cap`` (or more, or none)
    still allows another iteration after them, so the bound is out of its reach, and the
    relaxed state accepts exactly the strings of fewer than ``cap`` bytes that the capped
    one accepts (``need`` is left as it is; the limit errors of its steps are the same too:
    the stacks are the same, only those counters differ).  Why: the checks step
    with ``step_capped``, which relaxes every state it reaches past the cap, so a string
    state's checks from the relaxed state are those the mask before it already made
    (a ``maxLength: 255`` string's first mask steps its candidates through the relaxed
    string state; the mask after the string's first token, capped at ``left == cap``,
    stepped a new state per byte and count: MaskBench o82853 step 25, 0.9 -> 0.2 ms of
    checks); with the same steps, the memo answers them.  O(stack depth) the first time
    a frame is met (``capped``'s memo), O(tops) after; nothing else kept."""
    if not rules or not _RELAX_CHECKS:
        return state
    return pda.capped(state, cap, relax=True)


def _no_memo(key: tuple[ParserState, int]) -> ParserState | None:
    return None


class _Prefixes:
    """What the checks of one list of sorted distinct strings (a candidate set's, a stack
    top's loop groups') keep between calls of :func:`_verify_strings`: per string, the
    length of the prefix it shares with the string before it (-1 until measured) and, once
    every one is measured (from the set's second check on), the strings past those
    prefixes.  Mutated by the checks in place: concurrent writes store equal values."""

    __slots__ = ("checks", "shared", "suffixes")

    def __init__(self, count: int) -> None:
        self.shared: list[int] = [-1] * count
        self.suffixes: list[bytes] | None = None
        self.checks = 0


#: a single top's candidates grouped by their bytes after the top's self-loop: the distinct
#: byte strings (sorted), the candidates (string indices) of each, and the candidates they
#: were made from (their array's bytes; see :meth:`CfgProgram._looped_groups`), and what
#: the checks of the strings keep (:class:`_Prefixes`)
_LoopGroups = tuple[list[bytes], list[list[int]], bytes, _Prefixes]


#: a candidate set checked token by token, kept by its array's bytes (see
#: :func:`_verify_in_order`): the candidates in string order, their strings, and what its
#: checks keep (:class:`_Prefixes`)
_CheckOrder = tuple[list[int], list[bytes], _Prefixes]
#: an internal switch: the checks keep what they measured of a candidate set (its order, its
#: strings' shared prefixes and suffixes: :class:`_Prefixes`) for its next check; off, every
#: check measures them again (the build before; the differential test compares both)
_KEEP_ORDERS = True
#: candidate sets whose orders a program keeps, at most, and the share of its mask cache's
#: bytes they may take (1/16: 8 MiB by default, ~100k candidates)
_ORDER_SETS = 4_096
_ORDER_SHARE = 16


def _check_order_bytes(order: _CheckOrder) -> int:
    """The weight of a kept candidate order: its lists (~64 bytes a candidate with their int
    objects, ~64 more with its suffix; the strings are the trie's) and an entry."""
    return 128 * len(order[0]) + CACHE_ENTRY_BYTES


#: tops whose groups are kept, at most (a few per grammar: the string tops)
_LOOP_GROUPS_MAX = 256


def _verify_looped(
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    groups: _LoopGroups,
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None = None,
) -> tuple[np.ndarray, str | None]:
    """:func:`_verify_in_order`'s answer from the groups of :meth:`CfgProgram._looped_groups`:
    each distinct byte string checked once, its group accepted with it."""
    keys, members, _, prefixes = groups
    oks, err = _verify_strings(step, state, keys, memo, prefixes if _KEEP_ORDERS else None)
    ok = [i for k in oks for i in members[k]]
    return np.asarray(ok, dtype=np.int64), err


def _verify_in_order(
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    trie: TokenTrie,
    cands: np.ndarray,
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None = None,
    kept: LruCache[bytes, _CheckOrder] | None = None,
) -> tuple[np.ndarray, str | None]:
    """The candidates (string indices) whose bytes the parser accepts from ``state``, and the
    error of a parser limit some step hit (else None).

    Candidates in string order (the trie's strings are sorted; the accepted ones come back in
    that order): each one resumes from the state after the prefix it shares with the
    previous one, and where a byte kills a walk, the
    candidates after it that share the dead prefix (a run in string order: a prefix the
    parser rejects at its first byte after a return, `` ])`` and its 20 extensions) are
    skipped with one binary search.  O(bytes outside shared prefixes) steps.
    ``memo``: the parser's step memo (``(state, byte) -> state``, what ``step`` returns for
    a key it holds), read first: most steps of a warm mask are memoized, and a dictionary
    look-up is a third of a ``step`` call (asked for again after each ``step``, which may
    replace it).  ``kept``: the orders of candidate sets met before (a program's, by the
    array's bytes): a set checked again (a stack top's candidates on another stack, the
    most frequent warm check) reuses its order, strings and the shared prefixes the checks
    before measured (:func:`_verify_strings`), so it costs its steps' look-ups; a new set's
    order is put there.  Nothing else kept.
    """
    key = cands.tobytes() if kept is not None else b""
    got = None if kept is None else kept.get(key)[1]
    if got is None:
        strings = trie.strings
        # in string order (a classification's candidates with its exit-split ones appended
        # are not): what the prefix sharing and the skip need (timsort: O(n) on sorted input)
        order = sorted(cands.tolist())
        got = (order, [strings[i] for i in order], _Prefixes(len(order)))
        if kept is not None:
            kept.put(key, got)
    order, data_of, prefixes = got
    oks, err = _verify_strings(step, state, data_of, memo, prefixes if kept is not None else None)
    return np.asarray([order[k] for k in oks], dtype=np.int64), err


def _verify_strings(
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    data_of: list[bytes],
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None = None,
    kept: _Prefixes | None = None,
) -> tuple[list[int], str | None]:
    """The positions in ``data_of`` (distinct byte strings in sorted order) of the strings
    the parser accepts from ``state``, and the error of a parser limit (see
    :func:`_verify_in_order`).

    Each string resumes from the state after the prefix it shares with the string walked
    before it, as far as that walk went.  ``kept`` (:class:`_Prefixes`, kept with
    ``data_of`` by the caller, filled in place): per string, the length of the prefix it
    shares with the string just before it in ``data_of``, -1 where no check measured it
    yet (a check measures those of the strings it walks, a byte compare each; the set's
    second check measures the rest and cuts the strings past them, so from its third a
    check costs its steps' look-ups: :func:`_verify_suffixes`).  With them a string whose
    shared prefix is at least the path's length shares the prefix that killed the last
    walk (the strings between share it too: each of them was skipped so): rejected, as
    the skip by binary search (the strings after a death that start with its dead
    prefix, where their shares are not known) rejects it.  Either way the steps taken,
    and so the verdicts and the error, are the same.  The loop itself runs in the parser
    (:meth:`~formcast.automata.pda.PushdownAutomaton.check_strings`, compiled with it) where
    ``step`` is a parser's step and ``memo`` its memo (:func:`_native_checks`), else here
    (:func:`_check_strings`)."""
    shared: list[int] | None = None
    if kept is not None:
        if kept.suffixes is not None:
            return _verify_suffixes(step, state, kept.shared, kept.suffixes, memo)
        shared = kept.shared
        kept.checks += 1
    native = _native_checks(step, memo)
    if native is not None:  # the same loop, compiled (PushdownAutomaton.check_strings)
        ok, err = native[0].check_strings(state, data_of, shared, native[1])
    else:
        ok, err = _check_strings(step, state, data_of, memo, shared)
    if kept is not None and shared is not None and kept.checks > 1:
        # the set's second check: the shares not measured yet, and the suffixes (compiled
        # with the parser: pda.measure_shares)
        kept.suffixes = measure_shares(data_of, shared)
    return ok, err


#: an internal switch: candidate checks on a :class:`PushdownAutomaton` run its loops
#: (``check_strings`` / ``check_suffixes``: compiled with it); off, the Python loops here (the
#: build before; the A/B benchmark and the differential test compare both)
_NATIVE_CHECKS = True


def _native_checks(
    step: Callable[[ParserState, int], ParserState],
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None,
) -> tuple[PushdownAutomaton, bool] | None:
    """Where ``step`` is a :class:`PushdownAutomaton`'s :meth:`~PushdownAutomaton.step`
    (or ``step_capped``: then True) and ``memo`` its step memo, that automaton: its
    ``check_strings`` / ``check_suffixes`` run the loops of :func:`_check_strings` /
    :func:`_verify_suffixes` with the same steps in the same order (compiled in the
    compiled build: the look-ups and byte compares of a check cost a third as much); else
    None (another step function, or no memo: the Python loops, which the tests hold the
    compiled ones to).  O(1)."""
    if memo is None or not _NATIVE_CHECKS:
        return None
    pda = getattr(step, "__self__", None)
    if type(pda) is not PushdownAutomaton or memo != pda.step_memo:
        return None
    if step == pda.step:
        return pda, False
    if step == pda.step_capped:
        return pda, True
    return None


def _check_strings(
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    data_of: list[bytes],
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None,
    shared: list[int] | None,
) -> tuple[list[int], str | None]:
    """:func:`_verify_strings`' loop (``shared``: :class:`_Prefixes`' list, written where
    measured, or None): the Python original of
    :meth:`~formcast.automata.pda.PushdownAutomaton.check_strings`, for any ``step``."""
    ok: list[int] = []
    err: str | None = None
    path = [state]  # path[i]: the state after i bytes of the last string walked (alive)
    get = _no_memo if memo is None else memo().get
    n = len(data_of)
    i = 0
    while i < n:
        data = data_of[i]
        k = -1 if shared is None else shared[i]
        if k < 0:  # the prefix shared with the string before (measured, kept)
            k = 0
            if i:
                prev = data_of[i - 1]
                limit = len(data)
                if limit > len(prev):
                    limit = len(prev)
                while k < limit and data[k] == prev[k]:
                    k += 1
            if shared is not None:
                shared[i] = k
        i += 1
        # resume after the prefix shared with the last string walked, as far as its walk
        # went: a string sharing more than the path (its dead prefix) is rejected
        m = len(path)
        if k >= m:
            continue
        if k + 1 < m:
            del path[k + 1 :]
        st = path[k]
        for b in data[k:] if k else data:
            nxt = get((st, b))
            if nxt is None:
                nxt = step(st, b)
                if memo is not None:
                    get = memo().get
            st = nxt
            if st.dead:
                if st.error:
                    err = st.error
                # the run of candidates after it that start with the dead prefix (where
                # their shared prefixes are known, each is rejected by them instead)
                if i < n and (shared is None or shared[i] < 0):
                    dead = data[: len(path)]
                    if data_of[i].startswith(dead):
                        i = bisect_left(data_of, _prefix_end(dead), i, n)
                break
            path.append(st)
        else:
            ok.append(i - 1)
    return ok, err


def _verify_suffixes(
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    shared: list[int],
    suffixes: list[bytes],
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None,
) -> tuple[list[int], str | None]:
    """:func:`_verify_strings` where every string's shared prefix is known (``shared``) and
    its bytes past it are ``suffixes``: the same steps, without the byte compares, slices
    and binary searches (a string sharing the dead prefix of the last walk is rejected
    by its shared length alone).  Nothing kept."""
    native = _native_checks(step, memo)
    if native is not None:  # the same loop, compiled
        return native[0].check_suffixes(state, shared, suffixes, native[1])
    ok: list[int] = []
    err: str | None = None
    path = [state]  # path[i]: the state after i bytes of the last string walked (alive)
    get = _no_memo if memo is None else memo().get
    i = -1
    for k, data in zip(shared, suffixes):
        i += 1
        m = len(path)
        if k >= m:
            continue
        if k + 1 < m:
            del path[k + 1 :]
        st = path[k]
        for b in data:
            nxt = get((st, b))
            if nxt is None:
                nxt = step(st, b)
                if memo is not None:
                    get = memo().get
            if nxt.dead:
                if nxt.error:
                    err = nxt.error
                break
            path.append(nxt)
            st = nxt
        else:
            ok.append(i)
    return ok, err


def _prefix_end(prefix: bytes) -> bytes:
    """The least byte string above every string that starts with ``prefix`` (for
    ``bisect_left``); ``prefix`` ends in a byte below 255 or is all 255s (then: past every
    string of its length and more, as far as a token goes)."""
    end = prefix.rstrip(b"\xff")
    if not end:
        return b"\xff" * 1024
    return end[:-1] + bytes((end[-1] + 1,))


#: a vocabulary trie's distinct strings laid end to end: the bytes (``uint8``) and each
#: string's offset in them (``int64``, one more than the strings: the end of the last), as
#: :meth:`~formcast.vocab.trie.TokenTrie.strings_end_to_end` gives them
_TrieBytes = tuple[np.ndarray, np.ndarray]
#: :func:`_verify_by_levels` finishes in Python (each candidate alive stepped byte by byte,
#: the steps read from the memo) once at most this many candidates are left: below it a
#: level's ~10 numpy calls cost more than the candidates' remaining bytes
_LEVEL_TAIL = 24


def _verify_by_levels(
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    trie: TokenTrie,
    cands: np.ndarray,
    flat: _TrieBytes,
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None = None,
    table: bool = True,
) -> tuple[np.ndarray, str | None]:
    """:func:`_verify_in_order`'s answer, stepping the candidates one byte position at a time
    together: at position ``k`` each distinct (parser state, byte) pair among the candidates
    still alive is stepped once, and candidates share it whatever their prefixes.

    Candidates that cross a counted rule's iterations (a word through ``[\\w-]{0,255}``)
    reach the same parser state by different prefixes (the counts are all that differ), so
    tens of thousands of them cost a few hundred steps, not one per trie node.  The steps
    are those :func:`_verify_in_order` takes, each taken once.

    The candidates are ordered longest first, so those with a byte at position ``k`` are a
    prefix of that order (no compaction per level; a dead candidate keeps the id -1, which
    indexes the last, all-dead row of a level's tables, and no pair of it is stepped).
    ``flat``: the trie's :meth:`~formcast.vocab.trie.TokenTrie.strings_end_to_end`.  Once
    at most :data:`_LEVEL_TAIL` candidates are left, the live ones finish byte by byte
    (``memo``: the step's memo, read first, as in :func:`_verify_strings`).  Cost: a few
    numpy passes over the candidates with a byte at each position plus one step per
    distinct pair; nothing kept.

    ``table``: a set of at least :data:`_TABLE_VERIFY_MIN` candidates checked with a
    :class:`PushdownAutomaton`'s step and memo is first walked by the vocabulary's trie
    kernel on a small table of the parser states near ``state`` (:func:`_verify_by_table`:
    the per-candidate numpy passes were most of such a check), and only the candidates
    that leave its rows are stepped here (the answers come in no particular order).
    """
    n = int(cands.size)
    if table and n >= _TABLE_VERIFY_MIN and _TABLE_CHECKS:
        pda = getattr(step, "__self__", None)
        if memo is not None and type(pda) is PushdownAutomaton and memo == pda.step_memo:
            got = _verify_by_table(pda, step, state, trie, cands, memo)
            if got is not None:
                accepted, unknown = got
                if not unknown.size:
                    return accepted, None
                # the strings that left the table's rows: stepped
                more, left_err = (
                    _verify_by_levels(step, state, trie, unknown, flat, memo, table=False)
                    if unknown.size >= _LEVEL_VERIFY_MIN
                    else _verify_in_order(step, state, trie, unknown, memo)
                )
                return (np.concatenate((accepted, more)) if more.size else accepted), left_err
    lengths = trie.lengths[cands]
    # longest first (a stable radix sort of the byte lengths: tokens are short)
    order = np.argsort(np.uint8(255) - np.minimum(lengths, 255).astype(np.uint8), kind="stable")
    lengths = lengths[order].astype(np.int64)
    buf, offsets = flat
    pos = offsets[cands[order]]
    # per candidate: its state's number among this position's states (-1: rejected)
    sid = np.zeros(n, dtype=np.int64)
    states: list[ParserState] = [state]
    err: str | None = None
    # per position k: how many candidates have a byte there (the longest-first prefix)
    longer = np.searchsorted(-lengths, -np.arange(int(lengths[0]) if n else 0), side="left")
    k = 0
    top = len(longer)
    while k < top:
        m = int(longer[k])
        if m <= _LEVEL_TAIL:
            err = _finish_levels(step, states, buf, pos, lengths, sid, k, m, err, memo)
            break
        live = sid[:m]
        code = (live << 8) | buf[pos[:m] + k]
        width = (len(states) + 1) << 8  # (the last row: the id -1's)
        seen = np.zeros(width, dtype=bool)
        seen[code] = True
        seen[-256:] = False
        pairs = np.flatnonzero(seen)
        if not pairs.size:  # every candidate with a byte here is rejected
            break
        nxt = np.full(width, -1, dtype=np.int64)
        following: list[ParserState] = []
        ids: dict[ParserState, int] = {}
        for c in pairs.tolist():
            st = step(states[c >> 8], c & 255)
            if st.dead:
                if st.error:
                    err = st.error
                continue
            i = ids.get(st)
            if i is None:
                i = ids[st] = len(following)
                following.append(st)
            nxt[c] = i
        sid[:m] = nxt[code]
        states = following
        k += 1
    ok = np.empty(n, dtype=bool)
    ok[order] = sid >= 0
    return cands[ok], err


#: an internal switch: :func:`_verify_by_levels` walks its large candidate sets on a table of
#: the parser states near the start first (:func:`_verify_by_table`); off, level by level
#: alone (the build before; the differential test compares both)
_TABLE_CHECKS = True
#: ... from this many candidates (a wide trie walk costs ~0.5 ms compiled: the level passes
#: of 35k candidates cost 1.5-2 ms, of 4k about as much as the walk)
_TABLE_VERIFY_MIN = 4_096
#: ... with at most this many parser states as rows, and this many steps to fill them (a row
#: costs a step per byte some stack top takes: a string state's ~65)
_TABLE_ROWS = 32
_TABLE_STEPS = 640
#: the rows of the table every walk has: 0 dead, 1 left the table (absorbing, alive)
_TABLE_OUT = 1


def _verify_by_table(
    pda: PushdownAutomaton,
    step: Callable[[ParserState, int], ParserState],
    state: ParserState,
    trie: TokenTrie,
    cands: np.ndarray,
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]],
) -> tuple[np.ndarray, np.ndarray] | None:
    """The candidates (string indices) the parser accepts from ``state``, and those it
    could not tell here (to be stepped), from one trie-kernel walk of the vocabulary on a
    DFA table whose rows are the parser states met breadth first from ``state``.

    Row ``r``, byte ``b``: the row of ``step(states[r], b)`` (the memo read first), 0 where
    that is dead without a limit error, :data:`_TABLE_OUT` (an absorbing live row) where it
    is a state past the table's :data:`_TABLE_ROWS` rows, a dead state carrying a limit
    error (its caller's steps find it again and report it), or a state whose own row would
    pass :data:`_TABLE_STEPS` steps (then its row is all :data:`_TABLE_OUT`).  Only the
    bytes some stack top of a state takes are stepped
    (:meth:`~formcast.automata.pda.PushdownAutomaton.next_bytes`; every other byte is dead
    for the parser too: its step's first test).  Exact: a string alive on a row other than
    :data:`_TABLE_OUT` stepped the parser through those rows' states, each byte as
    ``step`` steps it, and ends alive; a string dead on the table died in the parser
    without a limit error; a string on :data:`_TABLE_OUT` is returned as unknown.  None
    where the start state's own row does not fit the steps.  Cost: the rows' steps (those
    a level check takes first: a string state's bytes), one wide trie walk (~0.5 ms
    compiled on Llama-3) and a gather over the vocabulary's strings; nothing kept."""
    get = memo().get
    ids: dict[ParserState, int] = {state: 2}
    met: list[ParserState] = [state]
    rows: list[np.ndarray] = [
        np.zeros(256, dtype=np.int32),
        np.full(256, _TABLE_OUT, dtype=np.int32),
    ]
    spent = 0
    r = 0
    while r < len(met):
        s = met[r]
        r += 1
        live = pda.next_bytes(s).tolist()
        row = np.zeros(256, dtype=np.int32)
        if spent + len(live) > _TABLE_STEPS:
            if r == 1:
                return None
            row.fill(_TABLE_OUT)
            rows.append(row)
            continue
        spent += len(live)
        for b in live:
            nxt = get((s, b))
            if nxt is None:
                nxt = step(s, b)
                get = memo().get
            if nxt.dead:
                if nxt.error:
                    row[b] = _TABLE_OUT
                continue
            j = ids.get(nxt)
            if j is None:
                if len(met) < _TABLE_ROWS:
                    j = ids[nxt] = len(met) + 2
                    met.append(nxt)
                else:
                    j = _TABLE_OUT
            row[b] = j
        rows.append(row)
    idx, ends = trie.walk_pairs(np.stack(rows), 2)
    end = np.zeros(trie.num_strings, dtype=np.int32)
    end[idx] = ends
    at = end[cands]
    return cands[at > _TABLE_OUT], cands[at == _TABLE_OUT]


def _finish_levels(
    step: Callable[[ParserState, int], ParserState],
    states: list[ParserState],
    buf: np.ndarray,
    pos: np.ndarray,
    lengths: np.ndarray,
    sid: np.ndarray,
    k: int,
    m: int,
    err: str | None,
    memo: Callable[[], dict[tuple[ParserState, int], ParserState]] | None,
) -> str | None:
    """:func:`_verify_by_levels`' last candidates (the first ``m`` of its order, each with
    a byte at position ``k``): each live one stepped from its state over its bytes from
    ``k`` on, ``sid`` set to -1 where it dies (0 where it lives).  Returns ``err``, or the
    error of a limit some step hit."""
    get = _no_memo if memo is None else memo().get
    raw = buf.data
    for j, (s, p, n) in enumerate(zip(sid[:m].tolist(), pos[:m].tolist(), lengths[:m].tolist())):
        if s < 0:
            continue
        st = states[s]
        for b in bytes(raw[p + k : p + n]):
            nxt = get((st, b))
            if nxt is None:
                nxt = step(st, b)
                if memo is not None:
                    get = memo().get
            st = nxt
            if st.dead:
                if st.error:
                    err = st.error
                sid[j] = -1
                break
        else:
            sid[j] = 0
    return err


def _result(state: ParserState) -> ParserState | LimitStop | None:
    if not state.is_dead:
        return state
    return LimitStop(state.error) if state.error else None


def _augmented_table(table: np.ndarray, split: np.ndarray) -> np.ndarray:
    """DFA table tracking "a call or return was possible after the first byte".

    ``split[q, b]``: leaving the rule at state ``q`` and continuing with byte ``b`` is plausible
    (``b`` a column of ``table``: a byte, or a byte class of a narrow counted window, whose
    augmented table then has the same columns: each is built from its own column alone).
    States: ``q`` (no split seen), ``q + n`` (a plausible split was seen), ``q + 2n`` (walk
    start: its own calls and returns were already expanded by the parser's closure), ``3n`` =
    died after a plausible split (a candidate, absorbing).  ``0`` stays dead.

    A fresh ``int32[3n + 1, k]`` array (``k = table.shape[1]``; every cell written, so not
    zeroed first), made in gathers rather than masked writes (3x faster on the 800-6,000-row
    counted windows of long strings, built at mask time: the mask-time outliers of issue
    #31): the plain block copied, the passed block one gather through a lookup of ``n``
    entries (``q -> q + n``, dead -> the sink), the first block one gather through both
    lookups, indexed by ``plain + n * split``.  O(n x k).
    """
    n = table.shape[0]
    sink = 3 * n
    out = np.empty((3 * n + 1, table.shape[1]), dtype=np.int32)
    if n:
        plain_nxt = out[2 * n : 3 * n]  # (the walk start's block: the plain moves)
        np.copyto(plain_nxt, table, casting="unsafe")
        # lookup: [0, n) the plain state itself, [n, 2n) state q - n once a split was seen
        lut = np.arange(2 * n, dtype=np.int32)
        lut[n] = sink  # (DEAD is 0: dead after a split is the sink, q > 0 goes to q + n)
        # (mode="clip": the indices are in range; "raise" would buffer the output)
        np.take(lut[n:], plain_nxt, out=out[n : 2 * n], mode="clip")
        first = out[:n]
        np.multiply(split, np.int32(n), out=first, dtype=np.int32)
        first += plain_nxt
        np.take(lut, first, out=first, mode="clip")
    out[sink] = sink
    out[0] = DEAD
    out[n] = sink  # state 0 + n never occurs; keep it absorbing
    out[2 * n] = DEAD
    return out


#: what formcast.index.persist may write of this module (each class declares its fields beside
#: itself: ``_persist_fields`` or its ``__slots__``)
PERSISTED_CLASSES: tuple[type, ...] = (
    CfgProgram, _RuleClassifier, _ExitSplitClassifier, _LazyExitSplitClassifier, _CountedClassifier
)  # fmt: skip
PERSISTED_TUPLES: tuple[type, ...] = (Classification,)
PERSISTED_FUNCTIONS: dict[str, Callable[..., object]] = {"class_bytes": _class_bytes}
