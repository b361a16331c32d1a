"""Normalized schema nodes → grammar IR rules.

Each object and array node becomes a rule; each ``$ref`` target a rule (recursion stays a rule,
never unrolled); strings and numbers become *terminal* rules whose bodies are regular (the
lexemes of a lexer/parser runtime).

Objects are generated with the declared properties in order (required ones never skipped),
then the undeclared ("extra") members allowed by ``additionalProperties`` /
``patternProperties`` / ``propertyNames``.  Commas are placed with states ``R(i, c)`` = "members
from the ``i``-th declared key on, ``c`` members already written" (``c`` is capped where the
bounds stop caring), one rule each, so the grammar stays linear in the number of properties;
the member written after the lead (``{`` or ``,``) is one rule ``Q`` shared by both leads
(:meth:`Emitter._members_after_lead`), so the automata hold one copy of each key and value.
Undeclared keys are split into classes by which patterns they match (automaton products, see
:mod:`.charfa`), so each class gets exactly the conjunction of schemas the spec prescribes.

After emission the grammar is cleaned: rules that cannot derive any string are removed (with
every reference to them, so generation can never walk into a dead end), single-use rules are
inlined, unreachable ones dropped.  An empty start rule is an
:class:`~formcast.errors.UnsatisfiableGrammarError`.

Lifetime: one :class:`Emitter` per compile.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from ...automata import charfa
from ...errors import (
    CompileBudgetError,
    GrammarError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
)
from ...ir.marks import (
    COUNT_CAP,
    MARKED_RULE_PREFIX,
    UniqueItemsMark,
    length_count,
    state_counts,
)
from ...ir.nodes import (
    JSON_HINTS,
    NOTHING,
    CharSet,
    Grammar,
    Node,
    Nothing,
    Rule,
    RuleRef,
    alt,
    concat,
    is_regular,
    literal,
    make_rule,
    repeat,
    rule_ref,
)
from ...ir.passes import (
    drop_unproductive,
    drop_unreachable,
    inline_single_use,
    productive_rules,
    rule_refs,
)
from ...limits import charge, metered_cache
from .algebra import IntegerValue, int_bounds
from .distinct_keys import distinct_keys_object, inexhaustible_names
from .keys import not_in_set
from .layout import Layout, counted_run, extras_run
from .nodes import (
    ANY,
    NOTHING_S,
    KeyRule,
    S,
    SAny,
    SArr,
    SBool,
    SConst,
    SNothing,
    SNull,
    SNum,
    SObj,
    SRef,
    SStr,
    SUnion,
    Witness,
    to_decimal,
    value_key,
)
from .normalize import Normalizer
from .numbers import (
    any_number,
    decimal_range,
    digit_limits,
    integer_range,
    multiple_of_dfa,
    non_integer_node,
)
from .oneof import oneof_object, whole_array
from .options import JsonSchemaOptions
from .regexlang import pattern_node, restrict_length
from .residue import residue_number
from .strings import any_string_body, encode_node, encode_ranges, encode_text, quoted
from .strings_dfa import string_dfa, string_parts

__all__ = ["Emitter"]

_WS = CharSet.chars(" \t\n\r")
#: DFAs larger than this become right-linear rules directly (state elimination is cubic).
_MAX_ELIMINATION_STATES = 300
_MAX_UNIQUE_SEQUENCES = 5_000


def _pattern_cells(
    base: charfa.CharDFA, patterns: Iterable[str], mx: int
) -> list[tuple[charfa.CharDFA, frozenset[str]]]:
    """Split the key language ``base`` into the non-empty cells of the ``patterns``' Venn
    diagram, each with the set of patterns its keys match.  Cost: two products per cell and
    pattern (bounded by ``mx`` states each)."""
    cells: list[tuple[charfa.CharDFA, frozenset[str]]] = [(base, frozenset())]
    for p in patterns:
        pd = charfa.dfa_from_node(pattern_node(p), mx)
        nxt: list[tuple[charfa.CharDFA, frozenset[str]]] = []
        for cd, matched in cells:
            inside = charfa.intersect(cd, pd, mx)
            outside = charfa.difference(cd, pd, mx)
            if not inside.is_empty():
                nxt.append((inside, matched | {p}))
            if not outside.is_empty():
                nxt.append((outside, matched))
        cells = nxt
    return cells


class Emitter:
    """Builds the grammar of a normalized schema (see the module docstring)."""

    def __init__(
        self,
        norm: Normalizer,
        options: JsonSchemaOptions,
        marks: list[UniqueItemsMark] | None = None,
    ) -> None:
        """``marks``: where arrays whose ``uniqueItems`` is checked at run time are recorded
        (:class:`~formcast.ir.marks.UniqueItemsMark`); None (a caller that uses the grammar
        alone) fails closed on them instead."""
        self.norm = norm
        self.options = options
        self.marks = marks
        self.rules: dict[str, Rule] = {}
        self._memo: dict[tuple[int, int], str] = {}
        self._def_rule: dict[tuple[str, int], str] = {}
        self._terminals: dict[Node, str] = {}
        self._counter = itertools.count()
        self._layouts: dict[int | None, Layout] = {}
        self._keep: list[S] = []  # keeps memoized nodes alive (the memo is keyed by id)
        # IR of each DFA emitted, keyed by (id(dfa), stem, encoded); the value keeps the DFA
        # alive so its id is not reused.  string_dfa's cache returns one CharDFA for a repeated
        # string schema, so its right-linear rules are emitted once.  Lives with the emitter.
        self._dfa_nodes: dict[tuple[int, str, bool], tuple[charfa.CharDFA, Node]] = {}
        # the DFA of non-integer numbers (``not: {type: integer}``), built on first use
        self._non_integer_dfa: charfa.CharDFA | None = None
        # number_node's result by repr(SNum) (past the residue check); see number_node
        self._numbers: dict[str, Node] = {}

    # -- infrastructure -----------------------------------------------------------------------
    def _name(self, stem: str) -> str:
        return f"{stem}_{next(self._counter)}"

    def add_rule(self, name: str, body: Node, *, terminal: bool = False) -> None:
        if len(self.rules) >= self.options.max_rules:
            raise LimitExceededError("max_rules", self.options.max_rules, "grammar rules emitted")
        self.rules[name] = make_rule(name, body, terminal)

    def _reserve(self, name: str) -> None:
        """The slot of a rule whose body comes later (keeps the order readable): counted as
        :meth:`add_rule` counts, filled by it before the grammar is finished."""
        if len(self.rules) >= self.options.max_rules:
            raise LimitExceededError("max_rules", self.options.max_rules, "grammar rules emitted")
        self.rules[name] = _PENDING

    def layout(self, depth: int | None) -> Layout:
        key = None if self.options.indent is None else depth
        got = self._layouts.get(key)
        if got is None:
            got = self._layouts[key] = Layout(self.options, key)
        return got

    def _depth_key(self, depth: int) -> int:
        return 0 if self.options.indent is None else min(depth, self.options.max_indent_depth)

    def terminal(self, stem: str, body: Node) -> Node:
        if isinstance(body, Nothing):
            return NOTHING
        if not is_regular(body):
            return body
        name = self._terminals.get(body)
        if name is None:
            name = self._terminals[body] = self._name(stem)
            self.add_rule(name, body, terminal=True)
        return rule_ref(name)

    def _any_rules(self) -> None:
        if "any_value" in self.rules:
            return
        lay = self.layout(None)
        opt = self.options
        bodies = _any_bodies(
            lay.ksep,
            lay.lead0,
            lay.sep,
            lay.close0,
            lay.close1,
            opt.max_integer_digits,
            opt.max_fraction_digits,
            opt.max_exponent_digits,
        )
        for (name, terminal), body in zip(_ANY_RULES, bodies):
            self.add_rule(name, body, terminal=terminal)

    def _dfa_node(self, d: charfa.CharDFA, stem: str, *, encoded: bool = False) -> Node:
        """IR of ``L(d)`` (a regular node, else right-linear rules); ``encoded``: the JSON
        spelling of the strings rather than the strings themselves.

        Memoized per emitter by the identity of ``d`` (CharDFAs are immutable by convention):
        a repeated DFA returns the same node, which is valid to share since regular nodes are
        immutable and a RuleRef names its rules, emitted once.  A memo hit charges no fuel."""
        key = (id(d), stem, encoded)
        hit = self._dfa_nodes.get(key)
        if hit is not None:
            return hit[1]
        node = self._dfa_node_uncached(d, stem, encoded)
        self._dfa_nodes[key] = (d, node)
        return node

    def _dfa_node_uncached(self, d: charfa.CharDFA, stem: str, encoded: bool) -> Node:
        """:meth:`_dfa_node` without the memo."""
        label = encode_ranges if encoded else None
        try:
            if d.num_states > _MAX_ELIMINATION_STATES:
                raise LimitExceededError("max_expression_size", self.options.max_expression_size)
            return charfa.dfa_to_node(d, self.options.max_expression_size, label)
        except CompileBudgetError:
            raise
        except LimitExceededError:
            start, rules = charfa.dfa_to_rules(d, self._name(stem), label)
            for r in rules:
                self.add_rule(r.name, r.body)
            return start

    # -- entry --------------------------------------------------------------------------------
    def grammar(self, root: S) -> Grammar:
        if self.options.whitespace == "flexible":
            self.add_rule("ws", repeat(_WS, 0, self.options.max_whitespace))
        body = self.emit(root, 0)
        self.add_rule("root", body)
        rules = [r if r is not _PENDING else Rule(n, NOTHING) for n, r in self.rules.items()]
        grammar = _finish(rules, "root")
        # the grammar carries its run-time checks and the JSON Schema program settings
        marks = tuple(self.marks) if self.marks else ()
        return Grammar(grammar.rules, grammar.start, marks=marks, hints=JSON_HINTS)

    def emit(self, s: S, depth: int) -> Node:
        charge(6)  # the compile's fuel (and deadline)
        if isinstance(s, SAny):
            self._any_rules()
            return rule_ref("any_value")
        if isinstance(s, SNothing):
            return NOTHING
        if isinstance(s, SNull):
            return literal("null")
        if isinstance(s, SBool):
            return alt([literal("true"), literal("false")])
        if isinstance(s, SNum):
            return self.number(s)
        if isinstance(s, SStr):
            return self.string(s)
        if isinstance(s, SConst):
            return alt(self.const_node(v) for v in s.values)
        if isinstance(s, SUnion):
            return alt(self.emit(i, depth) for i in s.items)
        if isinstance(s, SRef):
            return self.ref(s.key, depth)
        if isinstance(s, SArr):
            if s.one_of:  # exactly one oneOf branch, checked at run time (oneof.py)
                return oneof_object(self, s, depth, self.norm.unsupported, self.norm)
            if whole_array(s):
                self._any_rules()
                return rule_ref("any_array")
            return self._structure(s, depth, "arr", self.array_body)
        if isinstance(s, SObj):
            if s.one_of:  # exactly one oneOf branch, checked at run time (oneof.py)
                return oneof_object(self, s, depth, self.norm.unsupported, self.norm)
            if _whole_object(s) and self.options.allow_extra_properties is not False:
                self._any_rules()
                return rule_ref("any_object")
            return self._structure(s, depth, "obj", self.object_body)
        raise AssertionError(type(s).__name__)  # pragma: no cover

    def _structure(self, s: Any, depth: int, stem: str, build: Any) -> Node:
        key = (id(s), self._depth_key(depth))
        name = self._memo.get(key)
        if name is None:
            name = self._memo[key] = self._name(stem)
            self._keep.append(s)
            self._reserve(name)
            self.add_rule(name, build(s, depth))
        return rule_ref(name)

    def ref(self, key: str, depth: int) -> Node:
        dk = (key, self._depth_key(depth))
        name = self._def_rule.get(dk)
        if name is None:
            label = re.sub(r"[^A-Za-z0-9_]+", "_", self.norm.def_names.get(key, ""))
            label = label.strip("_")[-40:].strip("_")
            name = self._def_rule[dk] = self._name(f"def_{label}" if label else "def")
            self._reserve(name)
            target = self.norm.definition(key)
            self.add_rule(name, self.emit(target, depth))
        return rule_ref(name)

    # -- scalars ------------------------------------------------------------------------------
    def number(self, s: SNum) -> Node:
        if s.unconstrained():
            self._any_rules()
            return rule_ref("any_number")
        return self.terminal("num", self.number_node(s))

    def number_node(self, s: SNum) -> Node:
        max_int, max_frac = digit_limits(
            (s.lo, s.hi, *s.excluded),
            (*s.multiples, *s.non_multiples),
            self.options.max_integer_digits,
            self.options.max_fraction_digits,
        )
        residue = residue_number(self, s, max_int, max_frac)  # a large multipleOf: run time
        if residue is not None:
            return residue
        # Equal number schemas (same field reprs, so the same text) share one node: the
        # products and state elimination below are the costly part (MaskBench o25771: one
        # ``not: {type: integer}`` number, 10 times).  Lives with the emitter; a hit charges
        # no fuel.
        key = repr(s)
        got = self._numbers.get(key)
        if got is None:
            got = self._numbers[key] = self._number_node_uncached(s, max_int, max_frac)
        return got

    def _number_node_uncached(self, s: SNum, max_int: int | None, max_frac: int | None) -> Node:
        """:meth:`number_node` past the run-time residue check, without its memo."""
        mx = self.options.max_automaton_states
        parts: list[Node] = []
        if s.integer:
            lo, hi = int_bounds(s)
            points = sorted({int(x) for x in s.excluded if x == x.to_integral_value()})
            cur = lo
            for p in points:
                if (cur is None or p >= cur) and (hi is None or p <= hi):
                    parts.append(integer_range(cur, p - 1, max_int))
                    cur = p + 1
            parts.append(integer_range(cur, hi, max_int))
        else:
            intervals: list[tuple[Decimal | None, bool, Decimal | None, bool]] = [
                (s.lo, s.lo_excl, s.hi, s.hi_excl)
            ]
            for x in sorted(set(s.excluded)):
                nxt: list[tuple[Decimal | None, bool, Decimal | None, bool]] = []
                for a, ax, b, bx in intervals:
                    inside = (a is None or x > a or (x == a and not ax)) and (
                        b is None or x < b or (x == b and not bx)
                    )
                    if inside:
                        nxt.append((a, ax, x, True))
                        nxt.append((x, True, b, bx))
                    else:
                        nxt.append((a, ax, b, bx))
                intervals = nxt
            parts.extend(
                decimal_range(a, ax, b, bx, max_int=max_int, max_frac=max_frac)
                for a, ax, b, bx in intervals
            )
        base = alt(parts)
        extra: list[charfa.CharDFA] = []
        for m in s.multiples:
            extra.append(multiple_of_dfa(m, s.integer, mx))
        for m in s.non_multiples:
            extra.append(charfa.complement(multiple_of_dfa(m, s.integer, mx), mx))
        if s.non_integer:
            if self._non_integer_dfa is None:  # built once per emitter (mx is per emitter)
                self._non_integer_dfa = charfa.dfa_from_node(non_integer_node(), mx)
            extra.append(self._non_integer_dfa)
        if not extra or isinstance(base, Nothing):
            return base
        d = charfa.dfa_from_node(base, mx)
        for e in extra:
            d = charfa.intersect(d, e, mx)
        return self._dfa_node(d, "numdfa")

    def string(self, s: SStr) -> Node:
        lo, hi = s.min_len, s.max_len
        if hi is not None and lo > hi:
            return NOTHING
        if s.content_free():
            if (lo, hi) == (0, None):
                self._any_rules()
                return rule_ref("any_string")
            return self.terminal("str", any_string_body(lo, hi))
        node = self.string_content(s)
        if isinstance(node, Nothing):
            return NOTHING
        return self.terminal("str", concat([literal('"'), node, literal('"')]))

    def string_content(self, s: SStr) -> Node:
        """Encoded IR of the content of the strings ``s`` accepts (regular when possible)."""
        pos, neg = string_parts(s)
        if len(pos) == 1 and not neg and not s.excluded:
            r = restrict_length(pos[0], s.min_len, s.max_len)
            if r is not None:
                return encode_node(r)
        d = string_dfa(s, self.options)
        return self._dfa_node(d, "strdfa", encoded=True)

    def const_node(self, v: Any) -> Node:
        sep, ksep = self.options.item_sep, self.options.key_sep
        if v is None:
            return literal("null")
        if isinstance(v, bool):
            return literal("true" if v else "false")
        if isinstance(v, (int, float)):
            return alt(literal(t) for t in _number_spellings(v))
        if isinstance(v, str):
            return quoted(v)
        if isinstance(v, list):
            items: list[Node] = [literal("[")]
            for i, x in enumerate(v):
                if i:
                    items.append(literal(sep))
                items.append(self.const_node(x))
            items.append(literal("]"))
            return concat(items)
        if isinstance(v, dict):
            keys = list(v)
            orders = itertools.permutations(keys) if len(keys) <= 4 else iter([tuple(keys)])
            branches: list[Node] = []
            for order in orders:
                parts: list[Node] = [literal("{")]
                for i, k in enumerate(order):
                    if i:
                        parts.append(literal(sep))
                    parts.extend([quoted(k), literal(ksep), self.const_node(v[k])])
                parts.append(literal("}"))
                branches.append(concat(parts))
            return alt(branches)
        raise GrammarError(f"enum/const value {v!r} is not JSON")

    # -- arrays -------------------------------------------------------------------------------
    def array_body(self, s: SArr, depth: int) -> Node:
        norm = self.norm
        if norm.is_empty(s):
            return NOTHING
        lo, hi = s.min_items, s.max_items
        for i, p in enumerate(s.prefix):
            if norm.is_empty(p):
                hi = i if hi is None else min(hi, i)
                break
        if norm.is_empty(s.items):
            hi = len(s.prefix) if hi is None else min(hi, len(s.prefix))
        if hi is not None and lo > hi:
            return NOTHING
        lay = self.layout(depth)
        mark: UniqueItemsMark | None = None
        if s.unique and not (hi is not None and hi <= 1):
            got = self._unique_array(s, lo, hi, depth, lay)
            if got is not None:
                return got
            found = self._unique_mark(s)
            if found is None and self.marks is not None and not s.contains:
                found = self._value_mark(s, lo)
            if found is not None and self.marks is not None:
                mark, domain = found
                if domain < lo:  # fewer distinct values than minItems
                    return NOTHING
            elif found is not None:
                norm.unsupported(
                    "uniqueItems",
                    s.where or "#",
                    "checked at run time, which a grammar alone cannot carry (a printed "
                    "grammar, schema_to_grammar without marks): compile the schema with a "
                    "GrammarCompiler (compile_json_schema(schema), or "
                    "compile(formcast.constraints.json(schema)))",
                )
            else:
                norm.unsupported(
                    "uniqueItems",
                    s.where or "#",
                    "checked at run time for arrays without `contains` whose `minItems` is at "
                    "most 1 or at most the number of distinct values every position admits; "
                    "this array has `contains`, or a `minItems` above a count that cannot be "
                    "established: remove `contains`, or lower `minItems`",
                )
        if mark is not None:
            self.add_rule(mark.rule, self._plain_array(s, lo, hi, depth, lay))
            assert self.marks is not None
            self.marks.append(mark)
            return rule_ref(mark.rule)
        return self._plain_array(s, lo, hi, depth, lay)

    def _plain_array(self, s: SArr, lo: int, hi: int | None, depth: int, lay: Layout) -> Node:
        """The array's items and bounds (``uniqueItems`` aside)."""
        if s.contains:
            return self._contains_array(s, lo, hi, depth, lay)
        item_nodes = [self.emit(p, depth + 1) for p in s.prefix]
        tail = self.emit(s.items, depth + 1)
        return concat([literal("["), _array_from(0, lo, hi, item_nodes, tail, lay)])

    def _unique_mark(self, s: SArr) -> tuple[UniqueItemsMark, int] | None:
        """The run-time ``uniqueItems`` check of ``s`` and how many distinct items exist
        (saturated at :data:`~formcast.ir.marks.COUNT_CAP`); None when its items are not all
        strings of one spelling (see :class:`~formcast.ir.marks.UniqueItemsMark`)."""
        if s.prefix or s.contains:
            return None
        item = self._string_item(s.items)
        if item is None:
            return None
        name = MARKED_RULE_PREFIX + self._name("unique")
        where = s.where or "#"
        if isinstance(item, tuple):
            lo, hi = item
            mark = UniqueItemsMark(name, where, canonical=False, min_len=lo, max_len=hi)
            return mark, length_count(0, lo, hi)
        d = charfa.trim(item)
        trans = tuple(tuple(row) for row in d.trans)
        accept = tuple(d.accept)
        mark = UniqueItemsMark(name, where, canonical=True, trans=trans, accept=accept)
        return mark, (state_counts(trans, accept)[0] if accept else 0)

    def _value_mark(self, s: SArr, lo: int) -> tuple[UniqueItemsMark, int] | None:
        """The run-time ``uniqueItems`` check of an array of any items (``kind="value"``) and
        how many distinct items it can hold for ``minItems`` (see the soundness argument in
        docs/json_schema.md, Run-time uniqueItems): the exact count when every position
        takes values from a finite enumerable set, else a lower bound per position (their
        minimum over the first ``minItems`` positions).  None (fail closed) when ``minItems``
        is 2 or more and no bound reaches it: then a run could write items it cannot follow
        with enough distinct ones."""
        positions = [*s.prefix, s.items]
        name = MARKED_RULE_PREFIX + self._name("unique")
        mark = UniqueItemsMark(name, s.where or "#", canonical=False, kind="value")
        if lo <= 1:
            return mark, lo
        if not s.prefix:
            exact = self._finite_values(s.items)
            if exact is not None:
                return mark, len({value_key(v) for v in exact})
            item = s.items
            while isinstance(item, SRef):
                item = self.norm.definition(item.key)
            ranged = isinstance(item, SNum) and item.integer and None not in (item.lo, item.hi)
            if ranged and isinstance(item, SNum) and not (item.multiples or item.excluded):
                return mark, self._domain_lb(item)  # an integer range: exact
        needed = positions[:lo] if lo <= len(s.prefix) else positions
        bound = min(self._domain_lb(p) for p in needed)
        return (mark, bound) if bound >= lo else None

    def _domain_lb(self, s: S, seen: int = 0) -> int:
        """A lower bound on the number of distinct JSON values ``s`` accepts (saturated at
        :data:`~formcast.ir.marks.COUNT_CAP`; 0 when none is established)."""
        cap = COUNT_CAP
        if seen > 50:
            return 0
        if isinstance(s, SAny):
            return cap
        if isinstance(s, SRef):
            return self._domain_lb(self.norm.definition(s.key), seen + 1)
        if isinstance(s, SUnion):
            return max((self._domain_lb(i, seen + 1) for i in s.items), default=0)
        finite = self._finite_values(s)
        if finite is not None:
            return len({value_key(v) for v in finite})
        if isinstance(s, SStr):
            got = self._string_item(s)
            if isinstance(got, tuple):
                return length_count(0, got[0], got[1])
            if isinstance(got, charfa.CharDFA):
                d = charfa.trim(got)
                if not d.accept:
                    return 0
                return state_counts(tuple(tuple(r) for r in d.trans), tuple(d.accept))[0]
            return 0
        if isinstance(s, SNum):
            if s.multiples or s.non_multiples or s.excluded:
                return 0
            if not s.integer:
                if s.lo is None or s.hi is None or s.lo < s.hi:
                    return cap
                return 0
            if s.lo is None or s.hi is None:
                return cap
            a = int(s.lo.to_integral_value(rounding=ROUND_CEILING))
            b = int(s.hi.to_integral_value(rounding=ROUND_FLOOR))
            a += 1 if s.lo_excl and a == s.lo else 0
            b -= 1 if s.hi_excl and b == s.hi else 0
            return max(b - a + 1, 0)
        return 0

    def _string_item(self, s: S, seen: int = 0) -> tuple[int, int | None] | charfa.CharDFA | None:
        """The strings an item schema accepts, when it accepts nothing else: ``(min, max)``
        length for strings written with any escapes, a code-point automaton for strings in
        the canonical spelling (patterns, formats, enums); None for anything else, or a mix
        of the two spellings."""
        mx = self.options.max_automaton_states
        if seen > 50:
            return None
        if isinstance(s, SRef):
            return self._string_item(self.norm.definition(s.key), seen + 1)
        if isinstance(s, SStr):
            if s.max_len is not None and s.min_len > s.max_len:
                return charfa.CharDFA([], [])
            if s.content_free():
                return (s.min_len, s.max_len)
            return string_dfa(s, self.options)
        if isinstance(s, SConst):
            if not all(isinstance(v, str) for v in s.values):
                return None
            return charfa.finite_set_dfa([v for v in s.values if isinstance(v, str)], mx)
        if isinstance(s, SNothing):
            return charfa.CharDFA([], [])
        if isinstance(s, SUnion):
            out = charfa.CharDFA([], [])
            for i in s.items:
                got = self._string_item(i, seen + 1)
                if not isinstance(got, charfa.CharDFA):
                    return None  # not a string, or any-escape strings beside canonical ones
                out = charfa.union(out, got, mx)
            return out
        return None

    def _finite_values(self, s: S, seen: int = 0) -> list[Any] | None:
        if seen > 50:
            return None
        if isinstance(s, SConst):
            return list(s.values)
        if isinstance(s, SNull):
            return [None]
        if isinstance(s, SBool):
            return [False, True]
        if isinstance(s, SRef):
            return self._finite_values(self.norm.definition(s.key), seen + 1)
        if isinstance(s, SUnion):
            out: list[Any] = []
            for i in s.items:
                got = self._finite_values(i, seen + 1)
                if got is None:
                    return None
                out.extend(got)
            return out
        if isinstance(s, SNothing):
            return []
        return None

    def _unique_array(
        self, s: SArr, lo: int, hi: int | None, depth: int, lay: Layout
    ) -> Node | None:
        if s.contains:
            return None
        k = len(s.prefix)
        tail_vals = self._finite_values(s.items)
        if tail_vals is None:
            return None
        pos_vals: list[list[Any]] = []
        for p in s.prefix:
            got = self._finite_values(p)
            if got is None:
                return None
            pos_vals.append(got)
        distinct = {value_key(v) for vals in [*pos_vals, tail_vals] for v in vals}
        top = len(distinct) if hi is None else min(hi, len(distinct))
        if hi is None and k > top:
            top = min(top, k)
        # count the sequences first (distinct values: at most N!/(N-n)! of length n)
        total, perm = 0, 1
        for n in range(top + 1):
            if n:
                perm *= len(distinct) - n + 1
            if n >= lo:
                total += perm
            if total > _MAX_UNIQUE_SEQUENCES:
                return None
        seqs = _UniqueSequences(self, lo, top, pos_vals, tail_vals, lay)
        body = seqs.build(0, frozenset())
        return None if body is None else concat([literal("["), body])

    def _contains_array(self, s: SArr, lo: int, hi: int | None, depth: int, lay: Layout) -> Node:
        norm = self.norm
        if len(s.contains) > 1:
            norm.unsupported("contains", s.where or "#", "several contains constraints at once")
        c, m, mc = s.contains[0]
        k = len(s.prefix)
        cap = hi if hi is not None else max(k, lo, 1)
        jcap = m if mc is None else mc + 1
        if (cap + 1) * (jcap + 1) > self.options.max_count_states:
            raise LimitExceededError(
                "max_count_states",
                self.options.max_count_states,
                f"contains at {s.where or '#'} with these item counts",
            )
        neg_c: S = ANY
        if mc is not None:
            neg_c = norm.negate(c, None)
        cache: dict[int, tuple[Node, Node]] = {}

        def items_at(i: int) -> tuple[Node, Node]:
            key = min(i, k)
            got = cache.get(key)
            if got is None:
                base = s.at(i)
                with_c = self.emit(norm.conj(base, c, None), depth + 1)
                without = self.emit(base if mc is None else norm.conj(base, neg_c, None), depth + 1)
                got = cache[key] = (with_c, without)
            return got

        stem = self._name("contains")
        for i in range(cap + 1):
            for j in range(jcap + 1):
                options: list[Node] = []
                ok_count = j >= m and (mc is None or j <= mc)
                if i >= lo and ok_count:
                    options.append(lay.close(i, "]"))
                if hi is None or i < hi:
                    with_c, without = items_at(i)
                    ni = min(i + 1, cap)
                    if mc is None or j + 1 <= mc:
                        nxt = rule_ref(f"{stem}_{ni}_{min(j + 1, jcap)}")
                        options.append(concat([lay.lead(i), with_c, nxt]))
                    options.append(concat([lay.lead(i), without, rule_ref(f"{stem}_{ni}_{j}")]))
                self.add_rule(f"{stem}_{i}_{j}", alt(options))
        state0: Node = rule_ref(f"{stem}_0_0")
        return concat([literal("["), state0])

    # -- objects ------------------------------------------------------------------------------
    def object_body(self, s: SObj, depth: int) -> Node:
        norm = self.norm
        if norm.is_empty(s):
            return NOTHING
        witness = _merge_witnesses(s.witnesses)
        if len(s.witnesses) > 1 and witness is None:
            norm.unsupported(
                "not", s.where or "#", "several negated additionalProperties constraints at once"
            )
        lay = self.layout(depth)
        # (member, member as the witness, required)
        members: list[tuple[Node, Node, bool]] = []
        for k, v in s.props.items():
            required = k in s.required
            if not required and norm.is_empty(v):
                continue
            node = concat([quoted(k), lay.ksep, self.emit(v, depth + 1)])
            wnode: Node = NOTHING
            if witness is not None and k not in witness.excluded:
                wv = self._witness_value(witness, k, v)
                if not norm.is_empty(wv):
                    wnode = concat([quoted(k), lay.ksep, self.emit(wv, depth + 1)])
            members.append((node, wnode, required))
        cells = self.extra_cells(s)
        extra: Node = alt(
            concat([key, lay.ksep, self.emit(value, depth + 1)]) for key, value, _ in cells
        )
        wextra: Node = NOTHING
        if witness is not None:
            wextra = self._witness_extras(s, witness, cells, lay, depth)
        lo, hi = s.min_props, s.max_props
        n = len(members)
        # Undeclared members may repeat a key, and validators keep only the last value of a
        # repeated key (json.loads does): so they count as one member towards ``lo`` however
        # many are written (declared keys appear at most once), and the witness of "some
        # member breaks it" is the last member, which nothing can overwrite.  ``hi`` bounds
        # the members written (at least the members a validator sees: sound).
        loose = False
        if lo > n + 1 and not isinstance(extra, Nothing):
            if (
                self.marks is not None
                and hi is None
                and witness is None
                and (lo <= self.options.max_count_states and inexhaustible_names(cells))
            ):  # distinct keys counted at run time (distinct_keys.py)
                members2 = [(node, required) for node, _, required in members]
                return distinct_keys_object(self, s.where or "#", lo, members2, extra, lay)
            norm.unsupported(
                "minProperties",
                s.where or "#",
                f"{lo} members need {lo - n} undeclared ones, and a grammar cannot keep their "
                "keys distinct (a validator keeps only the last value of a repeated key)",
            )
            loose = True  # lenient: count every member written (duplicates may be accepted)
        cap = hi if hi is not None else max(lo, 1)
        flags = (0, 1) if witness is not None else (1,)
        if (n + 2) * (cap + 1) * len(flags) > self.options.max_count_states:
            raise LimitExceededError(
                "max_count_states",
                self.options.max_count_states,
                f"object at {s.where or '#'} with {n} properties and these member counts",
            )
        stem = self._name("members")
        if witness is None and not loose:
            nodes = [(node, required) for node, _, required in members]
            return self._members_after_lead(stem, nodes, extra, lo, hi, cap, lay)

        def tail(c: int) -> Node:
            if loose:
                return counted_run(lay, c, lo, hi, extra, "}")
            return extras_run(lay, c, lo, hi, extra)

        def tail_f(c: int, f: int) -> Node:
            if f:
                return tail(c)
            # the extras still owe the witness (one undeclared member towards ``lo``)
            return rule_ref(f"{stem}_w_{c}") if loose or c + 1 >= lo else NOTHING

        if witness is not None:  # the extras still owe the witness
            # a witness that breaks a value rule is written last (a later member with its key
            # would replace its value); one that only needs its key may be followed by more
            last = not _pure_key_witness(witness)
            for c in range(cap + 1):
                options: list[Node] = []
                if hi is None or c < hi:
                    nc = min(c + 1, cap)
                    options.append(concat([lay.lead(c), extra, rule_ref(f"{stem}_w_{nc}")]))
                    if loose:
                        after = tail(nc)
                    elif last:
                        after = lay.close(1, "}")
                    else:  # ``lo`` was checked on the way in (tail_f)
                        after = extras_run(lay, nc, 0, hi, extra)
                    options.append(concat([lay.lead(c), wextra, after]))
                self.add_rule(f"{stem}_w_{c}", alt(options))

        def state(i: int, c: int, f: int) -> Node:
            return tail_f(c, f) if i == n else rule_ref(f"{stem}_{i}_{c}_{f}")

        for i in range(n - 1, -1, -1):
            node, wnode, required = members[i]
            for c in range(cap + 1):
                for f in flags:
                    options = []
                    if hi is None or c < hi:
                        nc = min(c + 1, cap)
                        options.append(concat([lay.lead(c), node, state(i + 1, nc, f)]))
                        if f == 0 and not isinstance(wnode, Nothing):
                            options.append(concat([lay.lead(c), wnode, state(i + 1, nc, 1)]))
                    if not required:
                        options.append(state(i + 1, c, f))
                    self.add_rule(f"{stem}_{i}_{c}_{f}", alt(options))
        return concat([literal("{"), state(0, 0, flags[0])])

    def _members_after_lead(
        self,
        stem: str,
        members: list[tuple[Node, bool]],
        extra: Node,
        lo: int,
        hi: int | None,
        cap: int,
        lay: Layout,
    ) -> Node:
        """The members of an object (no witness), from ``{`` on, as two families of rules:

        * ``R(i, c)`` — ``c`` members written (capped at ``cap``), declared keys from the
          ``i``-th on: the closing brace (when no required member is left and ``c >= lo``) or
          the lead (``,`` after a member) and then ``Q``;
        * ``Q(i, k)`` — right after the lead: the next member, declared (``i``-th or later,
          skipping optional ones) or undeclared, then ``R`` with the new count.

        ``Q`` depends on the count only through what follows it, so its key is the count
        after the member (``k``; with ``maxProperties`` the count itself, which bounds the
        undeclared run): the member after ``{`` and the member after a ``,`` are *one* rule,
        whose alternatives (each member with its continuation, one IR node) the automaton
        layer builds once.  Same language as one rule per ``(i, c)`` with the lead in each
        alternative; about one copy of every key and value fewer.  Cost: O(members x
        ``cap``) rules, each of O(1) nodes."""
        n = len(members)
        optional_from = [True] * (n + 1)  # no required member at or after i
        for i in range(n - 1, -1, -1):
            optional_from[i] = optional_from[i + 1] and not members[i][1]
        # built from a work list, not by recursion: an object may have thousands of members
        todo: list[tuple[str, bool, int, int]] = []  # (name, is a Q state, i, c)
        made: set[str] = set()

        def rule_name(q: bool, i: int, c: int) -> str:
            if not q:
                return f"{stem}_{i}_{c}"
            return f"{stem}_q_{i}_{min(c + 1, cap) if hi is None else c}"

        def ref(q: bool, i: int, c: int) -> Node:
            name = rule_name(q, i, c)
            if name not in made:
                made.add(name)
                self._reserve(name)
                todo.append((name, q, i, c))
            return rule_ref(name)

        start = ref(False, 0, 0)
        while todo:
            name, q, i, c = todo.pop()
            options: list[Node] = []
            if not q:
                if optional_from[i] and c >= lo:
                    options.append(lay.close(c, "}"))
                if hi is None or c < hi:
                    options.append(concat([lay.lead(c), ref(True, i, c)]))
            elif i < n:
                node, required = members[i]
                options.append(concat([node, ref(False, i + 1, min(c + 1, cap))]))
                if not required:
                    options.append(ref(True, i + 1, c))
            else:  # undeclared members (they come after the declared ones)
                room = None if hi is None else hi - c
                if c + 1 >= lo and not isinstance(extra, Nothing):
                    rest = repeat(concat([lay.sep, extra]), 0, None if room is None else room - 1)
                    options.append(concat([extra, rest, lay.close(1, "}")]))
            self.add_rule(name, alt(options))
        return concat([literal("{"), start])

    def _witness_value(self, w: Witness, key: str, value: S) -> S:
        """``value`` restricted to what breaks ``w.rule`` for ``key`` (NOTHING if unknown)."""
        try:
            return self.norm.conj(
                value, self.norm.negate(self.norm.rule_effect(w.rule, key), None), None
            )
        except UnsupportedFeatureError:
            return NOTHING_S  # cannot serve as the witness: a subset of the language, sound

    def _witness_extras(
        self,
        s: SObj,
        w: Witness,
        cells: list[tuple[Node, S, charfa.CharDFA | None]],
        lay: Layout,
        depth: int,
    ) -> Node:
        """Undeclared members that break ``w.rule``: key classes of the rule's patterns
        intersected with the object's own extra-key classes."""
        norm = self.norm
        mx = self.options.max_automaton_states
        rule = w.rule
        base = charfa.complement(charfa.finite_set_dfa(sorted(w.excluded | rule.exempt), mx), mx)
        classes = _pattern_cells(base, [p for p, _ in rule.patterns], mx)
        declared_out = charfa.complement(charfa.finite_set_dfa(sorted(s.props), mx), mx)
        branches: list[Node] = []
        for wd, matched in classes:
            subs = [sub for p, sub in rule.patterns if p in matched]
            eff = norm.conj_all(subs, None) if subs else rule.additional
            try:
                neg = norm.negate(eff, None)
            except UnsupportedFeatureError:
                continue
            if norm.is_empty(neg):
                continue
            for _, value, cell in cells:
                kd = charfa.intersect(cell if cell is not None else declared_out, wd, mx)
                if kd.is_empty():
                    continue
                val = norm.conj(value, neg, None)
                if norm.is_empty(val):
                    continue
                key = self._key_terminal(self._dfa_node(kd, "keydfa", encoded=True))
                branches.append(concat([key, lay.ksep, self.emit(val, depth + 1)]))
        return alt(branches)

    def _additional(self, rule: KeyRule) -> S:
        if self.options.allow_extra_properties is False and id(rule) in self.norm.implicit_rules:
            return NOTHING_S
        return rule.additional

    def _names_dfa(self, s: S, seen: int = 0) -> charfa.CharDFA | None:
        """Automaton of the strings ``s`` accepts (None: every string)."""
        mx = self.options.max_automaton_states
        if seen > 50:
            raise LimitExceededError("max_ref_depth", 50, "propertyNames through $ref chains")
        if isinstance(s, SAny):
            return None
        if isinstance(s, SRef):
            return self._names_dfa(self.norm.definition(s.key), seen + 1)
        if isinstance(s, SStr):
            if s.content_free() and (s.min_len, s.max_len) == (0, None):
                return None
            return string_dfa(s, self.options)
        if isinstance(s, SConst):
            return charfa.finite_set_dfa([v for v in s.values if isinstance(v, str)], mx)
        if isinstance(s, SUnion):
            out: charfa.CharDFA | None = charfa.CharDFA([], [])
            for i in s.items:
                d = self._names_dfa(i, seen + 1)
                if d is None:
                    return None
                assert out is not None
                out = charfa.union(out, d, mx)
            return out
        return charfa.CharDFA([], [])

    def extra_cells(self, s: SObj) -> list[tuple[Node, S, charfa.CharDFA | None]]:
        """Key classes for undeclared members, each with the schema its values must satisfy."""
        norm = self.norm
        mx = self.options.max_automaton_states
        declared = sorted(s.props)
        patterns: list[str] = []
        for rule in s.rules:
            for p, _ in rule.patterns:
                if p not in patterns:
                    patterns.append(p)
        names: charfa.CharDFA | None = None
        for n in s.names:
            d = self._names_dfa(n)
            if d is not None:
                names = d if names is None else charfa.intersect(names, d, mx)
        if patterns and all(
            sub == self._additional(rule) for rule in s.rules for _, sub in rule.patterns
        ):
            # every pattern asks what the undeclared keys get anyway (``"^x-": {}`` beside
            # ``additionalProperties: {}``): one class, not the patterns' Venn diagram over
            # the complement of the declared keys (same language, no automaton products)
            patterns = []
        if not patterns:
            value: S = ANY
            for rule in s.rules:
                value = norm.conj(value, self._additional(rule), None)
            if norm.is_empty(value):
                return []
            if names is None:
                return [(self._key_terminal(not_in_set(declared)), value, None)]
            cell = charfa.difference(names, charfa.finite_set_dfa(declared, mx), mx)
            if cell.is_empty():
                return []
            key = self._dfa_node(cell, "keydfa", encoded=True)
            return [(self._key_terminal(key), value, cell)]
        # the patterns' Venn diagram alone (small automata), then per class with a value:
        # the property names applied and the declared keys *of that class* removed (the
        # complement of every declared key, a product with it and its minimization are
        # costly for hundreds of keys; a class whose keys get no value costs nothing)
        out: list[tuple[Node, S, charfa.CharDFA | None]] = []
        for cd, matched in _pattern_cells(charfa.any_string_dfa(), patterns, mx):
            value = ANY
            for rule in s.rules:
                subs = [sub for p, sub in rule.patterns if p in matched]
                # (a rule's exempt keys are declared ones: never in an extra class)
                eff = norm.conj_all(subs, None) if subs else self._additional(rule)
                value = norm.conj(value, eff, None)
            if norm.is_empty(value):
                continue
            if names is not None:
                cd = charfa.intersect(cd, names, mx)
            inside = [k for k in declared if cd.matches(k)]
            if inside:
                cd = charfa.difference(cd, charfa.finite_set_dfa(inside, mx), mx)
            if cd.is_empty():
                continue
            out.append((self._key_terminal(self._dfa_node(cd, "keydfa", encoded=True)), value, cd))
        return out

    def _key_terminal(self, encoded: Node) -> Node:
        return self.terminal("key", concat([literal('"'), encoded, literal('"')]))


# -- helpers --------------------------------------------------------------------------------------
def _array_from(
    i: int, lo: int, hi: int | None, item_nodes: list[Node], tail: Node, lay: Layout
) -> Node:
    """The rest of a plain array (:meth:`Emitter._plain_array`) from its ``i``-th item on:
    the ``len(item_nodes)`` prefix items, then a counted run of ``tail``.  A module function,
    not a closure: a recursive closure is a reference cycle (its cell holds it), freed only
    by the cyclic collector with all it holds (docs/notes/ttfm37.md).  O(prefix) frames."""
    if i >= len(item_nodes):
        return counted_run(lay, i, lo, hi, tail, "]")
    options: list[Node] = []
    if i >= lo:
        options.append(lay.close(i, "]"))
    if hi is None or i < hi:
        lead = lay.lead(i)  # (before the rest, as the recursive closure did)
        rest = _array_from(i + 1, lo, hi, item_nodes, tail, lay)
        options.append(concat([lead, item_nodes[i], rest]))
    return alt(options)


class _UniqueSequences:
    """The sequences of distinct values of a ``uniqueItems`` array of finitely many values
    (:meth:`Emitter._unique_array`; made and dropped by it): a class, not a recursive closure
    (a reference cycle, freed only by the cyclic collector; docs/notes/ttfm37.md)."""

    def __init__(
        self,
        emitter: Emitter,
        lo: int,
        top: int,
        pos_vals: list[list[Any]],
        tail_vals: list[Any],
        lay: Layout,
    ) -> None:
        self.emitter = emitter
        self.lo, self.top = lo, top
        self.pos_vals, self.tail_vals = pos_vals, tail_vals
        self.lay = lay
        self.budget = _MAX_UNIQUE_SEQUENCES

    def build(self, i: int, used: frozenset[str]) -> Node | None:
        """The arrays from position ``i`` on, ``used`` the values' keys taken before it; None
        when more than :data:`_MAX_UNIQUE_SEQUENCES` calls would be needed."""
        self.budget -= 1
        if self.budget < 0:
            return None
        lay = self.lay
        options: list[Node] = []
        if i >= self.lo:
            options.append(lay.close(i, "]"))
        if i < self.top:
            vals = self.pos_vals[i] if i < len(self.pos_vals) else self.tail_vals
            for v in vals:
                key = value_key(v)
                if key in used:
                    continue
                rest = self.build(i + 1, used | {key})
                if rest is None:
                    return None
                options.append(concat([lay.lead(i), self.emitter.const_node(v), rest]))
        return alt(options)


def _pure_key_witness(w: Witness) -> bool:
    """``w`` only asks for a member whose key is not in ``w.excluded`` (any value breaks it)."""
    r = w.rule
    return not r.patterns and not r.exempt and isinstance(r.additional, SNothing)


def _merge_witnesses(ws: tuple[Witness, ...]) -> Witness | None:
    """One witness implying every one of ``ws`` (None when there is none, or when two of them
    constrain values).  A "some key outside X" witness merges into another one by excluding
    X too: one member then serves both (a subset of the language: sound)."""
    if not ws:
        return None
    valued = [w for w in ws if not _pure_key_witness(w)]
    if len(valued) > 1:
        return None
    excluded = frozenset().union(*(w.excluded for w in ws))
    return Witness(excluded, valued[0].rule if valued else ws[0].rule)


#: the body of a reserved rule slot (:meth:`Emitter._reserve`), until it is filled
_PENDING = Rule("_pending", NOTHING)

#: the rules of "any JSON value" (name, terminal), in the order they are emitted
_ANY_RULES = (
    ("any_string", True),
    ("any_number", True),
    ("any_value", False),
    ("any_object", False),
    ("any_array", False),
)


@metered_cache(64)
def _any_bodies(
    ksep: Node,
    lead0: Node,
    sep: Node,
    close0: Node,
    close1: Node,
    max_integer_digits: int | None,
    max_fraction_digits: int | None,
    max_exponent_digits: int | None,
) -> tuple[Node, ...]:
    """The bodies of :data:`_ANY_RULES` for a layout's punctuation (memoized process-wide:
    every schema with an unconstrained value builds the same five bodies)."""
    string = any_string_body()
    number = any_number(max_integer_digits, max_fraction_digits, max_exponent_digits)
    v = RuleRef("any_value")
    member = concat([RuleRef("any_string"), ksep, v])
    value = alt(
        [
            RuleRef("any_object"),
            RuleRef("any_array"),
            RuleRef("any_string"),
            RuleRef("any_number"),
            literal("true"),
            literal("false"),
            literal("null"),
        ]
    )
    out: list[Node] = [string, number, value]
    for item, o, c in ((member, "{", "}"), (v, "[", "]")):
        out.append(
            alt(
                [
                    concat([literal(o), concat([close0, literal(c)])]),
                    concat(
                        [
                            literal(o),
                            lead0,
                            item,
                            repeat(concat([sep, item]), 0, None),
                            concat([close1, literal(c)]),
                        ]
                    ),
                ]
            )
        )
    return tuple(out)


def _whole_object(s: SObj) -> bool:
    return (
        not s.props
        and not s.witnesses
        and not s.names
        and s.min_props == 0
        and s.max_props is None
        and all(
            isinstance(r.additional, SAny) and all(isinstance(x, SAny) for _, x in r.patterns)
            for r in s.rules
        )
    )


def _number_spellings(v: int | float) -> list[str]:
    if isinstance(v, IntegerValue):  # also ``type: integer``: no ``N.0`` (draft 4 rejects it)
        return [str(int(v))]
    d = to_decimal(v)
    if not d.is_finite():  # (the normalizer refuses them first, with their JSON pointer)
        raise GrammarError(f"enum/const value {v!r} is not a JSON number")
    out = [json.dumps(v)]
    if d == d.to_integral_value():
        i = int(d)
        out += [str(i), f"{i}.0"]
    else:
        out.append(format(d.normalize(), "f"))
    seen: list[str] = []
    for t in out:
        if t not in seen:
            seen.append(t)
    return seen


def encode_key(text: str) -> str:
    return '"' + encode_text(text) + '"'


# -- grammar clean-up -----------------------------------------------------------------------------
_MAX_INLINE_DEPTH = 40
_MAX_INLINE_PASSES = 8


def _finish(rules: list[Rule], start: str) -> Grammar:
    """The emitted rules cleaned up by the IR passes: unproductive rules dropped, rules used
    once inlined (keeping trees shallow: IR nodes hash recursively), unreachable rules
    dropped (see :mod:`formcast.ir.passes`)."""
    by_name = {r.name: r for r in rules}
    refs = rule_refs(by_name)
    ok = productive_rules(by_name, refs)
    if start not in ok:
        raise UnsatisfiableGrammarError(
            "the schema admits no JSON value (e.g. false, contradictory bounds, or a required "
            "property whose schema is unsatisfiable)"
        )
    drop_unproductive(by_name, refs, ok)
    inline_single_use(
        by_name, refs, start, max_depth=_MAX_INLINE_DEPTH, max_passes=_MAX_INLINE_PASSES
    )
    return drop_unreachable(by_name, refs, start)
