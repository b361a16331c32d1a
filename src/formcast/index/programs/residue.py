"""Run-time ``multipleOf`` on integers: :class:`ResidueProgram` (``kind="residue"`` marks).

The exact automaton of "multiples of ``M``" needs a state per residue class, times the digit
positions (``multipleOf: 1024`` ran out of compile fuel).  The JSON Schema front-end emits such
an integer as the plain range automaton in a rule of its own, *marked*
(:mod:`formcast.frontends.jsonschema.residue`), and this program keeps the residue:

* **Which stacks.**  The marked rule reads only the number's bytes (``-`` and digits, no
  sub-rules), so a stack is inside a marked number exactly when its top frame is a marked
  rule's frame; the digits it has read are kept beside the parser state, per such frame
  (``track``).  A frame at the rule's start state has read nothing yet.
* **The check, per byte.**  A marked frame reads a byte only when, after it, some multiple of
  ``M`` in the rule's integers is still spelled by a completion
  (:meth:`~formcast.frontends.jsonschema.residue.ResidueSpec.viable`: window arithmetic,
  O(digits), whatever ``M``); and the stacks *after* the number (the rule's return: the
  parent's continuation, and acceptance at the top level) are kept only when the digits read
  so far are a multiple.  So a token that ends a number (``,``, ``}``, ``00}``) is refused
  exactly when the number is not a multiple, and the end of input likewise.  Other stacks
  (another ``anyOf`` branch) step as the grammar says.
* **No dead end.**  Every state this program produces has a marked frame only when a multiple
  is still reachable within the digit bound, and the rule's return only when the number is
  one: what the grammar allows from the filtered state can always be completed.
* **The mask.**  The grammar's mask of the (filtered) parser state is exact for every token
  that no marked frame reads.  The others are simulated byte by byte: tokens that read a
  number byte (``0-9 -``, outside strings) after another byte, and -- when a marked frame is
  a top -- tokens that start with a number byte but are not all digits.  Tokens of digits
  only are decided per token length: while a window of ``10^t >= M`` completions lies inside
  the range, every digit token of that length is fine
  (:meth:`~formcast.frontends.jsonschema.residue.ResidueSpec.safe`); only the lengths near
  the digit bound or a range bound are simulated.

JSON's lexical mode (outside a string, in one, after a backslash) is read off the bytes as in
the ``uniqueItems`` programs: it only picks the tokens to simulate; :meth:`advance` also checks
that no marked frame read bytes unchecked (a JSON part embedded right after other digits).

States are ``(ParserState, lexical mode, track)`` of immutable values (``track``: a tuple of
``(marked frame, negative, digits)``), so ``rollback``, ``fork`` and ``validate_tokens`` stay
exact.  Lifetime: one program per compiled grammar, shared by its requests (thread-safe: the
memo is a dict of pure results); per-vocabulary token tables built once per vocabulary
context (O(V): the :data:`NUMBER_TABLES` slot of :mod:`formcast.index.context`).
"""

from __future__ import annotations

import threading
import weakref
from fractions import Fraction

import numpy as np

from ...automata.dfa import DEAD
from ...automata.pda import Frame, ParserState
from ...bitmask import bitmask_to_ids
from ...errors import UnsupportedFeatureError
from ...frontends.jsonschema.residue import ResidueSpec, residue_mark_intervals
from ...ir.marks import UniqueItemsMark
from ...vocab.vocabulary import Vocabulary
from ..cfg_program import CfgProgram
from ..context import ContextSlot
from ..program import LimitStop
from .checked import CheckedProgram
from .unique.lexer import ESC, IN, OUT, _lex, _packed

__all__ = ["ResidueProgram"]

_Track = tuple[tuple[Frame, bool, str], ...]
_RState = tuple[ParserState, int, _Track]

_DIGITS = frozenset(b"0123456789")
_NUMBER = frozenset(b"0123456789-.")
_MINUS = 0x2D
_MEMO_CAP = 1 << 16
_SUSPECT_CAP = 4096  # parser states whose suspect tokens are remembered (then cleared)


class _NumberTables:
    """Per vocabulary, bitmasks of the tokens a marked number may read, and every token's
    lexical end mode (read-only; O(V)).

    ``end[mode][t]``: JSON's lexical mode after token ``t`` read from ``mode``;
    ``later[mode]``: read from ``mode``, a number byte outside strings follows another byte
    that is not one (a number may start inside the token); ``lead``: read from outside strings,
    the first byte is a number byte and the token is not all digits; ``pure[k]``: the tokens of
    ``k`` digits and nothing else."""

    def __init__(self, vocab: Vocabulary) -> None:
        size = vocab.vocab_size
        later = [np.zeros(size, dtype=bool) for _ in range(3)]
        lead = np.zeros(size, dtype=bool)
        pure: dict[int, np.ndarray] = {}
        stops = set(vocab.stop_token_ids)  # (never simulated: the grammar decides them)
        ends = [[OUT] * size, [IN] * size, [IN] * size]
        for tid in range(min(size, len(vocab.tokens))):
            data = vocab.token_bytes(tid)
            if not data:
                ends[ESC][tid] = ESC
            elif 0x22 in data or 0x5C in data:
                for start in (OUT, IN, ESC):
                    ends[start][tid] = _lex(start, data)[0]
            if not data or _NUMBER.isdisjoint(data) or tid in stops:
                continue
            if _DIGITS.issuperset(data):
                pure.setdefault(len(data), np.zeros(size, dtype=bool))[tid] = True
            elif data[0] in _NUMBER:
                lead[tid] = True
            for start in (OUT, IN, ESC):
                mode, prev_number = start, True  # (the first byte is the caller's business)
                for b in data:
                    if mode == OUT:
                        if b in _NUMBER and not prev_number:
                            later[start][tid] = True
                            break
                        prev_number = b in _NUMBER
                        if b == 0x22:
                            mode = IN
                    elif mode == IN:
                        prev_number = False
                        mode = OUT if b == 0x22 else ESC if b == 0x5C else IN
                    else:
                        mode = IN
        self.end = ends
        self.later = [_packed(m, size) for m in later]
        self.lead = _packed(lead, size)
        self.pure = {k: _packed(m, size) for k, m in sorted(pure.items())}


#: the number tables of a vocabulary (one entry per vocabulary context)
NUMBER_TABLES: ContextSlot[None, _NumberTables] = ContextSlot(
    "json_number_tables", lambda vocab, _: _NumberTables(vocab)
)


class _Rule:
    """A marked rule: its DFA (as lists, for the byte loop) and its arithmetic."""

    __slots__ = ("accept", "spec", "start", "table")

    def __init__(self, table: list[list[int]], accept: list[bool], start: int, spec: ResidueSpec):
        self.table = table
        self.accept = accept
        self.start = start
        self.spec = spec


class ResidueProgram(CheckedProgram[_RState]):
    """The matcher program of a grammar with ``kind="residue"`` marks: the grammar's
    :class:`CfgProgram` plus the run-time residue of marked integers (see the module
    docstring).  States are ``(ParserState, lexical mode, track)``.  Lifetime: one per compiled
    grammar, shared by its requests."""

    _stat = "residue_simulated"

    def __init__(self, cfg: CfgProgram, marks: tuple[UniqueItemsMark, ...]) -> None:
        self.cfg = cfg
        self.vocab = cfg.vocab
        self.marks = marks
        auto = cfg.auto
        names = {name: i for i, name in enumerate(auto.names)}
        self._rules: dict[int, _Rule] = {}
        for m in marks:
            rid = names.get(m.rule)
            if rid is None:  # (a mark whose number the grammar dropped as unreachable)
                continue
            if any(auto.refs[rid]) or auto.count_of(rid) is not None:
                raise UnsupportedFeatureError(
                    "multipleOf",
                    m.pointer,
                    "the integer checked at run time compiled to a rule with sub-rules",
                )
            dfa = auto.dfas[rid]
            spec = ResidueSpec(m.min_len, residue_mark_intervals(m), m.max_len)
            self._rules[rid] = _Rule(
                dfa.table.tolist(), [bool(x) for x in dfa.accepting], int(dfa.start), spec
            )
        self._num = NUMBER_TABLES.of(cfg.vocab, None)
        self._tops: weakref.WeakKeyDictionary[ParserState, frozenset[Frame]] = (
            weakref.WeakKeyDictionary()
        )
        self._viable: dict[tuple[int, bool, str], bool] = {}
        self._suspect_memo: dict[
            tuple[ParserState, int], tuple[list[int], list[int], dict[int, np.ndarray]]
        ] = {}
        self._lock = threading.Lock()
        self.simulated = 0  # tokens checked byte by byte (a statistic)

    # -- stacks ---------------------------------------------------------------------------------
    def _marked(self, ps: ParserState) -> frozenset[Frame]:
        """The stack tops of ``ps`` in a marked rule (memoized per state)."""
        got = self._tops.get(ps)
        if got is None:
            rules = self._rules
            got = frozenset(f for f in ps.frames if f.rule in rules)
            with self._lock:
                self._tops[ps] = got
        return got

    def _is_viable(self, rid: int, neg: bool, digits: str) -> bool:
        key = (rid, neg, digits)
        got = self._viable.get(key)
        if got is None:
            got = self._rules[rid].spec.viable(neg, digits)
            if len(self._viable) > _MEMO_CAP:
                self._viable.clear()
            self._viable[key] = got
        return got

    def _step_marked(
        self, ps: ParserState, tops: frozenset[Frame], track: _Track, b: int
    ) -> tuple[ParserState, _Track] | LimitStop | None:
        """One byte from a state with marked tops: the others step as the grammar says; a
        marked frame steps only to a viable prefix, and returns only on a multiple."""
        pda = self.cfg.pda
        step = pda.step
        new: set[Frame] = set()
        accepting = False
        others = ps.frames - tops
        if others:
            s = step(pda.state_of(others, False), b)
            if s.error:
                return LimitStop(s.error)
            new.update(s.frames)
            accepting = s.accepting
        entries: list[tuple[Frame, bool, str]] = []
        for f in tops:
            rule = self._rules[f.rule]
            q2 = rule.table[f.state][b]
            if q2 == DEAD:
                continue
            if f.state == rule.start:
                neg, digits = False, ""
            else:
                found = [(n, d) for fr, n, d in track if fr is f]
                if not found:  # (never: every marked top past its start is tracked)
                    continue
                neg, digits = found[0]
            if b == _MINUS:
                neg = True
            else:
                digits += chr(b)
            if not self._is_viable(f.rule, neg, digits):
                continue
            s = step(pda.state_of(frozenset((f,)), False), b)
            if s.error:
                return LimitStop(s.error)
            inside = [fr for fr in s.frames if fr.rule == f.rule and fr.parent is f.parent]
            if rule.accept[q2] and digits and rule.spec.complete(digits):
                new.update(s.frames)  # a multiple: the number may end here
                accepting = accepting or s.accepting
            else:
                new.update(inside)
            entries.extend((fr, neg, digits) for fr in inside)
        if not new and not accepting:
            return None
        return pda.state_of(frozenset(new), accepting), tuple(entries)

    def _run(self, state: _RState, data: bytes) -> _RState | LimitStop | None:
        """The state after ``data``, byte by byte, with the check (the exact path)."""
        ps, mode, track = state
        step = self.cfg.pda.step
        for b in data:
            tops = self._marked(ps) if ps.frames else frozenset()
            if tops:
                got = self._step_marked(ps, tops, track, b)
                if not isinstance(got, tuple):
                    return got
                ps, track = got
            else:
                nxt = step(ps, b)
                if nxt.is_dead:
                    return LimitStop(nxt.error) if nxt.error else None
                ps, track = nxt, ()
            if mode == OUT:
                if b == 0x22:
                    mode = IN
            elif mode == IN:
                mode = OUT if b == 0x22 else ESC if b == 0x5C else IN
            else:
                mode = IN
        return (ps, mode, track)

    def _unchecked(self, ps: ParserState) -> bool:
        """Whether a marked frame of ``ps`` has read bytes (a fast step skipped the check)."""
        return any(f.state != self._rules[f.rule].start for f in self._marked(ps))

    # -- the program protocol (the rest: CheckedProgram) ----------------------------------------
    def initial_state(self) -> _RState:
        return (self.cfg.initial_state(), OUT, ())

    def advance(self, state: _RState, token_id: int) -> _RState | LimitStop | None:
        data = self.vocab.token_bytes(token_id)
        if not data:
            return None
        ps, mode, _ = state
        if not self._marked(ps) and not self._bit(self._num.later[mode], token_id):
            nxt = self.cfg.advance(ps, token_id)
            if not isinstance(nxt, ParserState):
                return nxt
            if not self._unchecked(nxt):
                return (nxt, self._num.end[mode][token_id], ())
        self.simulated += 1
        return self._run(state, data)

    def token_mask(self, state: _RState) -> np.ndarray:
        """The grammar's mask of the (filtered) parser state, less the tokens a marked number
        refuses: the tokens a marked frame may read are simulated, but digit-only tokens of a
        length every completion of which can still reach a multiple (see the module
        docstring)."""
        ps, mode, track = state
        words = self.cfg.token_mask(ps)
        later, lead, pure = self._suspects(ps, mode, words)
        slow = later
        tops = self._marked(ps)
        if tops:
            slow = later + lead
            prefixes = []
            for f in tops:
                rule = self._rules[f.rule]
                if f.state == rule.start:
                    prefixes.append((rule.spec, False, ""))
                else:
                    found = [(n, d) for fr, n, d in track if fr is f]
                    neg, digits = found[0] if found else (False, "0")
                    prefixes.append((rule.spec, neg, digits))
            for k, ids in pure.items():
                if not all(spec.safe(neg, digits, k) for spec, neg, digits in prefixes):
                    slow = slow + ids.tolist()
        if not slow:
            return words
        data = self.vocab.token_bytes
        self.simulated += len(slow)
        refused = [t for t in slow if not isinstance(self._run(state, data(t)), tuple)]
        if not refused:
            return words
        out: np.ndarray = words.copy()
        bits = out.view(np.uint32)
        for t in refused:
            bits[t >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))
        out.setflags(write=False)
        return out

    def _suspects(
        self, ps: ParserState, mode: int, words: np.ndarray
    ) -> tuple[list[int], list[int], dict[int, np.ndarray]]:
        """The allowed tokens of ``ps`` (``words``) a marked frame may read: ``later`` and
        ``lead`` of :class:`_NumberTables` as id lists, ``pure`` by length as id arrays.
        Memoized per (state, mode), at most :data:`_SUSPECT_CAP` states."""
        key = (ps, mode)
        got = self._suspect_memo.get(key)
        if got is None:
            num = self._num
            later = bitmask_to_ids(words & num.later[mode]).tolist()
            lead: list[int] = []
            pure: dict[int, np.ndarray] = {}
            if self._marked(ps):
                lead = bitmask_to_ids(words & num.lead).tolist()
                for k, bits in num.pure.items():
                    ids = bitmask_to_ids(words & bits).astype(np.int32)
                    if len(ids):
                        pure[k] = ids  # (an array: a digit state allows many; listed if unsafe)
            got = (later, lead, pure)
            with self._lock:
                if len(self._suspect_memo) > _SUSPECT_CAP:
                    self._suspect_memo.clear()
                self._suspect_memo[key] = got
        return got

    def expected(self, state: _RState) -> tuple[str, tuple[int, ...]]:
        desc, nxt = self.cfg.expected(state[0])
        tops = self._marked(state[0])
        if tops:
            specs = [self._rules[f.rule].spec for f in tops]
            ms = sorted({str(Fraction(s.m, 10 ** (s.scale or 0))) for s in specs})
            desc += " (a multiple of " + " or ".join(ms) + ")"
        return desc, nxt
