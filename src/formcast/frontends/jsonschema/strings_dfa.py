"""The automaton of the strings a normalized string node accepts (:func:`string_dfa`).

Patterns and formats are intersected, negated ones subtracted, excluded values removed and the
length bounds applied, as character automata (:mod:`formcast.automata.charfa`).  Used by the
set algebra (exact emptiness of string nodes, :mod:`.algebra`) and by the emitter (string
content and key classes, :mod:`.emit`).

Lifetime: a process-wide cache of :data:`STRING_DFA_CACHE_SIZE` automata (least recently used
evicted, :class:`~formcast.cache.LruCache`), keyed by the node's content; each entry keeps the
fuel of its own work and the cached calls it made, and a hit charges what a fresh build would
cost in the current compile (:func:`~formcast.limits.cached_work`), so whether a compile fits
``max_compile_work`` does not depend on what was compiled before; within one compile the cost
is charged once and a repeat is a lookup (:func:`~formcast.limits.compile_memo`).  A build
costs the automaton products (bounded by ``options.max_automaton_states``).
"""

from __future__ import annotations

from collections.abc import Hashable

from ...automata import charfa
from ...cache import LruCache
from ...errors import GrammarError
from ...ir.nodes import Node, alt
from ...limits import CachedWork, cached_work, compile_memo
from . import formats as json_formats
from .nodes import SStr
from .options import JsonSchemaOptions
from .regexlang import pattern_node

__all__ = ["STRING_DFA_CACHE_SIZE", "string_dfa", "string_parts"]

STRING_DFA_CACHE_SIZE = 256
"""Automata kept by :func:`string_dfa` (entries; the least recently used is evicted)."""

# values: the automaton with its build's own fuel and nested cached calls (a hit charges what a
# fresh build would in the current compile, so whether a compile fits max_compile_work does
# not depend on what was compiled before)
_DFA_CACHE: LruCache[Hashable, CachedWork[charfa.CharDFA]] = LruCache(STRING_DFA_CACHE_SIZE)


def string_parts(s: SStr) -> tuple[list[Node], list[Node]]:
    """The IR of the positive and of the negated patterns and formats of ``s``."""
    pos: list[Node] = [pattern_node(p) for p in s.patterns]
    neg: list[Node] = [pattern_node(p) for p in s.neg_patterns]
    for f in s.formats:
        n = json_formats.format_node(f)
        if n is None:  # pragma: no cover - checked by the normalizer
            raise GrammarError(f"unknown format {f!r}")
        pos.append(n)
    for f in s.neg_formats:
        n = json_formats.format_node(f)
        if n is None:  # pragma: no cover
            raise GrammarError(f"unknown format {f!r}")
        neg.append(n)
    return pos, neg


#: the automata of single patterns and formats (negated ones complemented), shared by the
#: combinations :func:`string_dfa` builds: a schema whose ``oneOf`` branches are strings with
#: patterns intersects and subtracts the same few parts in many combinations
_PART_CACHE: LruCache[Hashable, CachedWork[charfa.CharDFA]] = LruCache(4 * STRING_DFA_CACHE_SIZE)


def _part_dfa(kind: str, text: str, negated: bool, mx: int) -> charfa.CharDFA:
    """The automaton of one ``pattern`` (``kind="pattern"``) or ``format`` — of the strings
    it does not accept when ``negated`` — memoized like :func:`string_dfa`."""

    def build() -> charfa.CharDFA:
        node = pattern_node(text) if kind == "pattern" else json_formats.format_node(text)
        if node is None:  # pragma: no cover - checked by the normalizer
            raise GrammarError(f"unknown format {text!r}")
        d = charfa.dfa_from_node(node, mx)
        return charfa.complement(d, mx) if negated else d

    key = (kind, text, negated, mx)
    return cached_work(_PART_CACHE, key, ("string_part_dfa", key), build, compile_memo())


def _union_dfa(parts: tuple[tuple[str, str], ...], mx: int) -> charfa.CharDFA:
    """The automaton of the strings that match any of the ``(kind, text)`` patterns and
    formats, built from one alternation (one subset construction instead of one product and
    one minimization per part: a ``not`` of 48 ``pattern`` keywords costs a tenth); memoized
    like :func:`_part_dfa`."""

    def build() -> charfa.CharDFA:
        nodes: list[Node] = []
        for kind, text in parts:
            node = pattern_node(text) if kind == "pattern" else json_formats.format_node(text)
            if node is None:  # pragma: no cover - checked by the normalizer
                raise GrammarError(f"unknown format {text!r}")
            nodes.append(node)
        return charfa.dfa_from_node(alt(nodes), mx)

    key = ("union", parts, mx)
    return cached_work(_PART_CACHE, key, ("string_union_dfa", key), build, compile_memo())


def string_dfa(s: SStr, options: JsonSchemaOptions) -> charfa.CharDFA:
    """The automaton of the decoded strings ``s`` accepts (memoized by content)."""
    key = (
        s.min_len,
        s.max_len,
        s.patterns,
        s.neg_patterns,
        s.formats,
        s.neg_formats,
        tuple(sorted(s.excluded)),
        options.max_automaton_states,
    )
    return cached_work(
        _DFA_CACHE, key, ("string_dfa", key), lambda: _string_dfa(s, options), compile_memo()
    )


def _string_dfa(s: SStr, options: JsonSchemaOptions) -> charfa.CharDFA:
    mx = options.max_automaton_states
    d: charfa.CharDFA | None = None
    parts = [("pattern", p) for p in s.patterns] + [("format", f) for f in s.formats]
    for kind, text in parts:
        pd = _part_dfa(kind, text, False, mx)
        d = pd if d is None else charfa.intersect(d, pd, mx)
    if d is None:
        d = charfa.any_string_dfa()
    negs = [("pattern", p) for p in s.neg_patterns] + [("format", f) for f in s.neg_formats]
    if len(negs) == 1:
        d = charfa.intersect(d, _part_dfa(*negs[0], True, mx), mx)
    elif negs:  # one automaton of their union, subtracted once (not one product per part)
        d = charfa.difference(d, _union_dfa(tuple(negs), mx), mx)
    if s.excluded:
        d = charfa.difference(d, charfa.finite_set_dfa(sorted(s.excluded), mx), mx)
    lo, hi = s.min_len, s.max_len
    if (lo, hi) != (0, None) and not d.is_empty():
        a, b = charfa.length_bounds(d)
        if not (a >= lo and (hi is None or (b is not None and b <= hi))):
            if hi is None:
                d = charfa.intersect(d, charfa.length_dfa(lo, hi, mx), mx)
            else:  # the same automaton as the intersection, built directly (acyclic)
                d = charfa.restrict_length(d, lo, hi, mx)
    return d
