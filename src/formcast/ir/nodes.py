"""The one grammar IR that every front-end (regex, GBNF, Lark, JSON Schema) lowers to.

Nodes are immutable, hashable dataclasses.  A *regular* expression is a tree of nodes without
:class:`RuleRef`; a context-free :class:`Grammar` is a set of named rules whose bodies may refer
to each other with :class:`RuleRef`.

Characters are Unicode code points (:class:`CharSet`, :class:`Literal`); the automata layer lowers
them to UTF-8 byte sequences.  :class:`ByteSet` is available for raw-byte languages.

Lifetime: per grammar; never mutated.  Construction helpers normalise (flatten nested
``Concat``/``Alt``, merge ranges) in time linear in their input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from weakref import KeyedRef, ref

from .._native import interpreted_class
from ..limits import HashedKey, charge
from .marks import UniqueItemsMark

__all__ = [
    "ANY_CHAR",
    "EMPTY",
    "GRAMMAR_HINTS",
    "JSON_HINTS",
    "NOTHING",
    "REGEX_HINTS",
    "Alt",
    "ByteSet",
    "CharSet",
    "Concat",
    "Empty",
    "Grammar",
    "Literal",
    "Node",
    "Nothing",
    "ProgramHints",
    "Repeat",
    "Rule",
    "RuleRef",
    "alt",
    "concat",
    "concat2",
    "is_regular",
    "iter_nodes",
    "iter_refs",
    "literal",
    "make_rule",
    "merge_ranges",
    "new_alt",
    "node_copies",
    "node_depth",
    "node_refs",
    "node_size",
    "rebuild",
    "repeat",
    "rule_ref",
    "substitute",
]

MAX_CODEPOINT = 0x10FFFF
#: the hashes of every :class:`Empty` and every :class:`Nothing` (any two constants would do)
_EMPTY_HASH = hash(("formcast.ir.Empty",))
_NOTHING_HASH = hash(("formcast.ir.Nothing",))


@interpreted_class
class Node:
    """Base class of IR nodes."""

    __slots__ = ()


@interpreted_class
@dataclass(frozen=True, slots=True)
class Empty(Node):
    """Matches the empty string only.

    ``__hash__``/``__eq__`` written out (every ``Empty`` is equal; the dataclass's hash the
    empty tuple, interpreted), as :class:`Literal`'s."""

    def __hash__(self) -> int:
        return _EMPTY_HASH

    def __eq__(self, other: object) -> bool:
        return type(other) is Empty


@interpreted_class
@dataclass(frozen=True, slots=True)
class Nothing(Node):
    """Matches no string at all (the empty language).

    ``__hash__``/``__eq__`` written out, as :class:`Empty`'s."""

    def __hash__(self) -> int:
        return _NOTHING_HASH

    def __eq__(self, other: object) -> bool:
        return type(other) is Nothing


@interpreted_class
@dataclass(frozen=True, slots=True)
class CharSet(Node):
    """One Unicode code point from ``ranges`` (sorted, disjoint, inclusive ``(lo, hi)`` pairs).

    Surrogates (U+D800..U+DFFF) are never produced: they have no UTF-8 encoding.
    """

    ranges: tuple[tuple[int, int], ...]

    def __hash__(self) -> int:  # (written out, as :class:`Literal`'s)
        return hash(self.ranges)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is CharSet and other.ranges == self.ranges)

    @staticmethod
    def of(ranges: Iterable[tuple[int, int]]) -> CharSet:
        return CharSet(merge_ranges(ranges))

    @staticmethod
    def chars(text: str) -> CharSet:
        return CharSet(merge_ranges((ord(c), ord(c)) for c in text))

    def negate(self) -> CharSet:
        out: list[tuple[int, int]] = []
        nxt = 0
        for lo, hi in self.ranges:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_CODEPOINT:
            out.append((nxt, MAX_CODEPOINT))
        return CharSet(tuple(out))

    def __contains__(self, cp: object) -> bool:
        if not isinstance(cp, int):
            return False
        return any(lo <= cp <= hi for lo, hi in self.ranges)


@interpreted_class
@dataclass(frozen=True, slots=True)
class ByteSet(Node):
    """One raw byte from ``ranges`` (sorted, disjoint, inclusive pairs within 0..255)."""

    ranges: tuple[tuple[int, int], ...]


@interpreted_class
@dataclass(frozen=True, slots=True)
class Literal(Node):
    """An exact string (stored as text; lowered to its UTF-8 bytes).

    ``__hash__`` and ``__eq__`` are written out (the dataclass's own, which hash and compare
    one-field tuples, are the same functions of ``text``, but interpreted: a literal is hashed
    with every interned key that holds it, :func:`_make_items`)."""

    text: str

    def __hash__(self) -> int:
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Literal and other.text == self.text)


_NO_REFS: frozenset[str] = frozenset()


def _summary(items: tuple[Node, ...]) -> tuple[int, frozenset[str], int, int]:
    """(tree size, referenced rule names, most copies of a bounded repeat, nesting depth) of
    a composite node with these children.  O(len(items))."""
    size = 1
    refs = _NO_REFS
    copies = 0
    deepest = 1  # (a leaf child)
    for it in items:
        tp = type(it)
        if tp is Concat or tp is Alt or tp is Repeat:
            size += it.size  # type: ignore[attr-defined]
            r = it.refs  # type: ignore[attr-defined]
            if r and not r <= refs:
                refs = refs | r
            c = it.copies  # type: ignore[attr-defined]
            if c > copies:
                copies = c
            d = it.depth  # type: ignore[attr-defined]
            if d > deepest:
                deepest = d
        else:
            size += 1
            if tp is RuleRef:
                refs = refs | {it.name}  # type: ignore[attr-defined]
    return size, refs, copies, deepest + 1 if items else 1


@interpreted_class
class _Composite(Node):
    """Composite nodes cache their hash, tree size, referenced rule names and most copies of a
    bounded repeat under them (:func:`node_copies`) at construction,
    so hashing, equality and the automaton layer's size/reference queries are O(1) per node
    instead of a walk of the (often shared, DAG-shaped) subtree.

    The builders (:func:`concat`, :func:`alt`, :func:`repeat`) intern them (:func:`_interned`):
    while a composite node is alive, building an equal one from the same children returns it,
    so equal IR built twice (by one compile's passes, or by two compiles of similar grammars in
    one process) is the same object and the process-wide caches keyed by IR compare by
    identity instead of walking both DAGs.  Nodes made by calling the classes directly are
    not interned (equality stays structural, so nothing depends on it)."""

    __slots__ = ("__weakref__",)


@interpreted_class
@dataclass(frozen=True, slots=True, eq=False)
class _Items(_Composite):
    """A node made of a tuple of child nodes (:class:`Concat`, :class:`Alt`)."""

    items: tuple[Node, ...]
    _hash: int = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)
    refs: frozenset[str] = field(init=False, repr=False, compare=False)
    copies: int = field(init=False, repr=False, compare=False)
    depth: int = field(init=False, repr=False, compare=False)

    def __reduce__(self) -> tuple[type[_Items], tuple[Any, ...]]:
        # rebuilt through __init__: the cached hash is per process (string hashing is salted)
        return (type(self), (self.items,))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((type(self), self.items)))
        size, refs, copies, depth = _summary(self.items)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "refs", refs)
        object.__setattr__(self, "copies", copies)
        object.__setattr__(self, "depth", depth)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            type(other) is type(self)
            and other._hash == self._hash
            and _structurally_equal(self, other)
        )


@interpreted_class
@dataclass(frozen=True, slots=True, eq=False)
class Concat(_Items):
    """The items in sequence.  Use :func:`concat` to build (it flattens and simplifies)."""


@interpreted_class
@dataclass(frozen=True, slots=True, eq=False)
class Alt(_Items):
    """Any one of the items.  Use :func:`alt` to build (it flattens and simplifies)."""


@interpreted_class
@dataclass(frozen=True, slots=True, eq=False)
class Repeat(_Composite):
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Node
    min: int
    max: int | None
    _hash: int = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)
    refs: frozenset[str] = field(init=False, repr=False, compare=False)
    copies: int = field(init=False, repr=False, compare=False)
    depth: int = field(init=False, repr=False, compare=False)

    def __reduce__(self) -> tuple[type[Repeat], tuple[Any, ...]]:
        # rebuilt through __init__: the cached hash is per process (string hashing is salted)
        return (Repeat, (self.item, self.min, self.max))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((Repeat, self.item, self.min, self.max)))
        object.__setattr__(self, "size", 1 + node_size(self.item))
        object.__setattr__(self, "refs", node_refs(self.item))
        own = max(self.min, self.max if self.max is not None else self.min)
        object.__setattr__(self, "copies", max(own, node_copies(self.item)))
        object.__setattr__(self, "depth", 1 + node_depth(self.item))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            type(other) is Repeat
            and other._hash == self._hash
            and _structurally_equal(self, other)
        )


def _structurally_equal(a: _Composite, b: _Composite) -> bool:
    """Equality of two composite nodes without recursion (deep IR would overflow the stack)
    and linear in their DAGs (a pair of shared subtrees is compared once)."""
    stack: list[tuple[Node, Node]] = [(a, b)]
    seen: set[tuple[int, int]] = set()
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        tp = type(x)
        if tp is not type(y):
            return False
        if tp is Concat or tp is Alt:
            xi: tuple[Node, ...] = x.items  # type: ignore[attr-defined]
            yi: tuple[Node, ...] = y.items  # type: ignore[attr-defined]
            if x._hash != y._hash or len(xi) != len(yi):  # type: ignore[attr-defined]
                return False
            pair = (id(x), id(y))
            if pair in seen:
                continue
            seen.add(pair)
            for p, q in zip(xi, yi):
                if p is q:
                    continue
                tq = type(p)
                if tq is Concat or tq is Alt or tq is Repeat:
                    stack.append((p, q))
                elif tq is not type(q) or p != q:  # a leaf: plain fields
                    return False
        elif tp is Repeat:
            assert isinstance(x, Repeat)  # narrowing only: same type
            assert isinstance(y, Repeat)
            if x._hash != y._hash or x.min != y.min or x.max != y.max:
                return False
            pair = (id(x), id(y))
            if pair in seen:
                continue
            seen.add(pair)
            stack.append((x.item, y.item))
        elif x != y:  # a leaf: plain fields
            return False
    return True


@interpreted_class
@dataclass(frozen=True, slots=True)
class RuleRef(Node):
    """A reference to the rule called ``name`` of the enclosing :class:`Grammar`.

    ``__hash__``/``__eq__`` written out, as :class:`Literal`'s (compiled in the native build;
    the dataclass's are interpreted).  Build with :func:`rule_ref` where it is hot."""

    name: str

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is RuleRef and other.name == self.name)


@interpreted_class
@dataclass(frozen=True, slots=True)
class Rule:
    """A named rule.

    Attributes:
        name: unique within its grammar.
        body: the rule's expression.
        terminal: True when the front-end declares the rule a lexeme (e.g. Lark's upper-case
            terminals); its body must then be regular.
        lazy: for a terminal, end the lexeme at the first point it can end (llguidance's lazy
            lexemes) instead of the longest match.
    """

    name: str
    body: Node
    terminal: bool = False
    lazy: bool = False


@dataclass(frozen=True, slots=True)
class ProgramHints:
    """How a compiler should build the token program of a grammar: settings that change
    speed and compile cost, never the language (masks are exact whatever they say).

    Attributes:
        one_dfa: compile the start rule's body as one minimal DFA (the regex program), when
            it is regular and has no long counted repeat; the grammar must then be that one
            rule.  What ``compile_regex`` and regular constraint objects use.
        pushdown: the pushdown program even when the grammar is regular (JSON Schema: its
            token index walks every string body once per process through the exit-byte cut,
            where the one-DFA program walks each string position of each grammar on its own).
        expand_calls: expand small recursive rules into their callers
            (:func:`~formcast.automata.rules.compile_grammar_automaton`).
        minimize: minimize each rule's DFA.
        exit_byte: the byte the pushdown program's token index cuts its shared walks at
            (JSON's ``"``, which ends string bodies); None: no cut.

    Lifetime: immutable values (one default instance shared by every grammar).
    """

    one_dfa: bool = False
    pushdown: bool = False
    expand_calls: bool = True
    minimize: bool = True
    exit_byte: int | None = 0x22


#: the program settings of a grammar that says nothing (GBNF, Lark, the builtin JSON grammar)
GRAMMAR_HINTS = ProgramHints()
#: JSON Schema's settings (and those of constraint objects with a JSON part): the pushdown
#: program, no call-site expansion (it copies "any value" into every undeclared-member slot:
#: on MaskBench it triples compile time and does not speed masks up), no minimization
#: (measured faster end to end)
JSON_HINTS = ProgramHints(pushdown=True, expand_calls=False, minimize=False)
#: a regular expression: one minimal DFA (a long counted repeat falls back to the grammar
#: settings)
REGEX_HINTS = ProgramHints(one_dfa=True)


@interpreted_class
@dataclass(frozen=True, slots=True)
class Grammar:
    """A context-free grammar: rules by name plus the start rule's name, and everything else
    the compiled grammar needs -- the run-time checks its rules cannot express (``marks``)
    and how to build its program (``hints``).

    Attributes:
        rules, start: the rules and the start rule's name.
        marks: run-time ``uniqueItems`` checks (:class:`~formcast.ir.marks.UniqueItemsMark`,
            one per marked rule, see :mod:`formcast.ir.marks`); a consumer that cannot carry
            them (a grammar printer) must refuse a grammar that has any.
        hints: the program settings (:class:`ProgramHints`).

    ``marks`` and ``hints`` are left out of ``repr`` (which keys compiled grammars: a grammar
    without marks and with the default hints keeps its key); equality and hashing include them.
    Lifetime: an immutable value; the IR passes that rebuild a grammar keep only its rules
    (the compiler reads ``marks`` and ``hints`` from the grammar it is given).
    """

    rules: tuple[Rule, ...]
    start: str
    marks: tuple[UniqueItemsMark, ...] = field(default=(), repr=False)
    hints: ProgramHints = field(default=GRAMMAR_HINTS, repr=False)

    def rule_map(self) -> Mapping[str, Rule]:
        return {r.name: r for r in self.rules}


EMPTY = Empty()
NOTHING = Nothing()

#: the live composite nodes made by the builders, by (class, fields) (as a
#: :class:`~formcast.limits.HashedKey`: the tuple's hash, which calls every child's
#: ``__hash__``, is computed once per build, where a tuple key was hashed again by the node's
#: own hash and by the insertion): weak references that remove their own entry when their node
#: goes, so this holds no IR alive and its size is that of the live IR.  (A plain dict of
#: :class:`weakref.KeyedRef` rather than a ``WeakValueDictionary``, whose Python-level
#: ``get``/``__setitem__`` cost about a tenth of a small JSON Schema's lowering.)  Thread
#: safety: a lost race makes two equal nodes, which is still correct (equality is
#: structural); an entry is removed only while its reference is dead.
_INTERNED: dict[HashedKey, KeyedRef[HashedKey, Node]] = {}


def _forget(ref: KeyedRef[HashedKey, Node]) -> None:
    """The callback of an interned node's reference: drop its entry if it is still this dead
    one (a newer node interned under the key stays)."""
    key = ref.key
    if _INTERNED.get(key) is ref:
        _INTERNED.pop(key, None)


#: ``KeyedRef(node, _forget, key)`` without its two interpreted frames (``KeyedRef.__new__``
#: and ``__init__``, about a fifth of an interned node's cost): ``ref.__new__`` makes the
#: subclass instance with its referent and callback (all that ``__init__`` would set), then
#: the ``key`` slot is stored; see :func:`_keyed_ref`
_REF_NEW: Any = ref.__new__
_SET_REF_KEY: Any = KeyedRef.__dict__["key"].__set__


def _keyed_ref(node: Node, key: HashedKey) -> KeyedRef[HashedKey, Node]:
    """``KeyedRef(node, _forget, key)``: the same object (type, referent, callback, key)."""
    r: KeyedRef[HashedKey, Node] = _REF_NEW(KeyedRef, node, _forget)
    _SET_REF_KEY(r, key)
    return r


def _interned(key: tuple[Any, ...] | HashedKey) -> Node | None:
    """The live node interned under ``key`` (the fields tuple, or its :class:`HashedKey`),
    or None."""
    ref = _INTERNED.get(key if isinstance(key, HashedKey) else HashedKey(key))
    return None if ref is None else ref()


def _intern(key: tuple[Any, ...] | HashedKey, node: Node) -> None:
    """Intern ``node`` under ``key`` (the fields tuple, or its :class:`HashedKey`)."""
    hk = key if isinstance(key, HashedKey) else HashedKey(key)
    _INTERNED[hk] = _keyed_ref(node, hk)


#: the slot setters of :class:`_Items` (shared by :class:`Concat` and :class:`Alt`) and of
#: :class:`Rule`: what the frozen dataclasses' ``__init__`` reaches through one
#: ``object.__setattr__`` per field (a look-up of the name in the class each time), called
#: directly by :func:`_new_items` and :func:`make_rule`
_SET_ITEMS: Any = _Items.__dict__["items"].__set__
_SET_HASH: Any = _Items.__dict__["_hash"].__set__
_SET_SIZE: Any = _Items.__dict__["size"].__set__
_SET_REFS: Any = _Items.__dict__["refs"].__set__
_SET_COPIES: Any = _Items.__dict__["copies"].__set__
_SET_DEPTH: Any = _Items.__dict__["depth"].__set__
_SET_TEXT: Any = Literal.__dict__["text"].__set__
_SET_REF_NAME: Any = RuleRef.__dict__["name"].__set__
_SET_R_ITEM: Any = Repeat.__dict__["item"].__set__
_SET_R_MIN: Any = Repeat.__dict__["min"].__set__
_SET_R_MAX: Any = Repeat.__dict__["max"].__set__
_SET_R_HASH: Any = Repeat.__dict__["_hash"].__set__
_SET_R_SIZE: Any = Repeat.__dict__["size"].__set__
_SET_R_REFS: Any = Repeat.__dict__["refs"].__set__
_SET_R_COPIES: Any = Repeat.__dict__["copies"].__set__
_SET_R_DEPTH: Any = Repeat.__dict__["depth"].__set__
_SET_NAME: Any = Rule.__dict__["name"].__set__
_SET_BODY: Any = Rule.__dict__["body"].__set__
_SET_TERMINAL: Any = Rule.__dict__["terminal"].__set__
_SET_LAZY: Any = Rule.__dict__["lazy"].__set__


def _new_items(cls: type[_Items], items: tuple[Node, ...], h: int) -> _Items:
    """``cls(items)`` (``h``: ``hash((cls, items))``) with its fields set as
    ``_Items.__post_init__`` sets them, without the dataclass ``__init__``: about half the
    cost of a composite node, the front-ends' commonest allocation."""
    node: _Items = object.__new__(cls)
    _SET_ITEMS(node, items)
    _SET_HASH(node, h)
    size, refs, copies, depth = _summary(items)
    _SET_SIZE(node, size)
    _SET_REFS(node, refs)
    _SET_COPIES(node, copies)
    _SET_DEPTH(node, depth)
    return node


def _new_literal(text: str) -> Literal:
    """``Literal(text)``, without the frozen dataclass ``__init__`` (its one
    ``object.__setattr__``): equal to it, as immutable.  Cost: a slot store."""
    node: Literal = object.__new__(Literal)
    _SET_TEXT(node, text)
    return node


def new_alt(items: tuple[Node, ...]) -> Node:
    """``Alt(items)`` exactly as the class builds it (the items as given: no flattening, no
    dedup; not interned), without the frozen dataclass ``__init__``: equal to it in every
    field.  For front-ends that build an alternation whose items they know to be flat and
    distinct (:mod:`formcast.frontends.jsonschema.keys`)."""
    return _new_items(Alt, items, hash((Alt, items)))


def rule_ref(name: str) -> RuleRef:
    """``RuleRef(name)``, equal to it (and as immutable), built without the frozen dataclass
    ``__init__`` (the JSON-Schema emitter makes several per emitted rule)."""
    node: RuleRef = object.__new__(RuleRef)
    _SET_REF_NAME(node, name)
    return node


def _new_repeat(item: Node, lo: int, hi: int | None, h: int) -> Repeat:
    """``Repeat(item, lo, hi)`` (``h``: ``hash((Repeat, item, lo, hi))``) with its fields set
    as ``Repeat.__post_init__`` sets them, without the dataclass ``__init__``."""
    node: Repeat = object.__new__(Repeat)
    _SET_R_ITEM(node, item)
    _SET_R_MIN(node, lo)
    _SET_R_MAX(node, hi)
    _SET_R_HASH(node, h)
    _SET_R_SIZE(node, 1 + node_size(item))
    _SET_R_REFS(node, node_refs(item))
    own = max(lo, hi if hi is not None else lo)
    _SET_R_COPIES(node, max(own, node_copies(item)))
    _SET_R_DEPTH(node, 1 + node_depth(item))
    return node


def make_rule(name: str, body: Node, terminal: bool = False, lazy: bool = False) -> Rule:
    """``Rule(name, body, terminal, lazy)``, equal to it (and as immutable), built without
    the frozen dataclass ``__init__`` (half its cost; the JSON-Schema emitter makes one per
    emitted rule)."""
    rule: Rule = object.__new__(Rule)
    _SET_NAME(rule, name)
    _SET_BODY(rule, body)
    _SET_TERMINAL(rule, terminal)
    _SET_LAZY(rule, lazy)
    return rule


def _make_items(cls: type[_Items], items: tuple[Node, ...]) -> Node:
    """The interned ``cls(items)``: ``hash((cls, items))`` computed once, for the look-up,
    the node's own hash and the insertion."""
    key = HashedKey((cls, items))
    ref = _INTERNED.get(key)
    got = None if ref is None else ref()
    if got is None:
        got = _new_items(cls, items, key.hash)
        _INTERNED[key] = _keyed_ref(got, key)
    return got


ANY_CHAR = CharSet(((0, 0xD7FF), (0xE000, MAX_CODEPOINT)))


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort and merge overlapping or adjacent inclusive ranges.  O(n log n)."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def literal(text: str) -> Node:
    """A literal, or :data:`EMPTY` for the empty string."""
    return _new_literal(text) if text else EMPTY


def concat(items: Iterable[Node]) -> Node:
    """Sequence with flattening: nested ``Concat`` merge, ``Empty`` vanish, ``Nothing`` absorbs,
    adjacent literals join."""
    flat: list[Node] = []
    last_literal = False  # flat[-1] is a Literal
    for item in items:
        parts = item.items if type(item) is Concat else (item,)
        for p in parts:
            tp = type(p)
            if tp is Literal:
                if last_literal:
                    flat[-1] = _new_literal(flat[-1].text + p.text)  # type: ignore[attr-defined]
                else:
                    flat.append(p)
                    last_literal = True
                continue
            if tp is Empty:
                continue
            if tp is Nothing:
                return NOTHING
            flat.append(p)
            last_literal = False
    charge(1 + len(flat) // 2)  # the compile's fuel: every front-end builds its IR here
    if not flat:
        return EMPTY
    if len(flat) == 1:
        return flat[0]
    return _make_items(Concat, tuple(flat))


def concat2(a: Node, b: Node) -> Node:
    """``concat([a, b])``: the same node and the same fuel, without the generic loop where
    neither item flattens, vanishes, absorbs or joins (the emitters' commonest pair: a key
    literal and what follows it)."""
    ta = type(a)
    tb = type(b)
    if (
        ta is not Concat
        and ta is not Empty
        and ta is not Nothing
        and tb is not Concat
        and tb is not Empty
        and tb is not Nothing
        and (ta is not Literal or tb is not Literal)
    ):
        charge(2)  # concat's ``1 + len(flat) // 2``
        return _make_items(Concat, (a, b))
    return concat((a, b))


def alt(items: Iterable[Node]) -> Node:
    """Alternation with flattening: nested ``Alt`` merge, ``Nothing`` vanishes, duplicates go,
    single-character sets merge into one ``CharSet``."""
    flat: list[Node] = []
    seen: set[Node] = set()
    chars: list[tuple[int, int]] = []
    has_chars = False
    for item in items:
        parts = item.items if type(item) is Alt else (item,)
        for p in parts:
            tp = type(p)
            if tp is Nothing:
                continue
            if tp is CharSet:
                chars.extend(p.ranges)  # type: ignore[attr-defined]
                has_chars = True
                continue
            if tp is Literal and len(p.text) == 1:  # type: ignore[attr-defined]
                c = ord(p.text)  # type: ignore[attr-defined]
                chars.append((c, c))
                has_chars = True
                continue
            if p not in seen:
                seen.add(p)
                flat.append(p)
    if has_chars:
        merged = merge_ranges(chars)
        if len(merged) == 1 and merged[0][0] == merged[0][1]:
            flat.insert(0, _new_literal(chr(merged[0][0])))
        else:
            flat.insert(0, CharSet(merged))
    charge(1 + len(flat) + len(chars) // 4)  # the compile's fuel (dedup hashes each item)
    if not flat:
        return NOTHING
    if len(flat) == 1:
        return flat[0]
    return _make_items(Alt, tuple(flat))


def repeat(item: Node, lo: int, hi: int | None) -> Node:
    """``item{lo,hi}`` with trivial cases folded."""
    if hi is not None and hi < lo:
        return NOTHING
    if hi == 0 or isinstance(item, Empty):
        return EMPTY
    if isinstance(item, Nothing):
        return EMPTY if lo == 0 else NOTHING
    if lo == 1 and hi == 1:
        return item
    key = HashedKey((Repeat, item, lo, hi))  # (hashed once, as _make_items' key)
    ref = _INTERNED.get(key)
    got = None if ref is None else ref()
    if got is None:
        got = _new_repeat(item, lo, hi, key.hash)
        _INTERNED[key] = _keyed_ref(got, key)
    return got


def iter_nodes(node: Node) -> Iterator[Node]:
    """All nodes of a tree, pre-order, without recursion (safe on deep trees)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (Concat, Alt)):
            stack.extend(reversed(n.items))
        elif isinstance(n, Repeat):
            stack.append(n.item)


def iter_refs(node: Node) -> Iterator[str]:
    """The rule names of every :class:`RuleRef` under ``node``, once per occurrence in the
    tree; subtrees without references (their cached ``refs`` is empty) are skipped, so the
    cost is the size of the part of the tree that leads to references."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, RuleRef):
            yield n.name
        elif isinstance(n, (Concat, Alt)):
            stack.extend(i for i in n.items if not is_regular(i))
        elif isinstance(n, Repeat) and not is_regular(n.item):
            stack.append(n.item)


def node_size(node: Node) -> int:
    """Number of nodes in the tree under ``node`` (shared subtrees counted per use).  O(1)."""
    return node.size if isinstance(node, _Composite) else 1  # type: ignore[attr-defined]


def node_copies(node: Node) -> int:
    """Most copies (``max(min, max)``) of a bounded repeat anywhere under ``node``; unbounded
    repeats count their minimum.  O(1) (cached at construction)."""
    return node.copies if isinstance(node, _Composite) else 0  # type: ignore[attr-defined]


def node_depth(node: Node) -> int:
    """Nesting depth of the tree under ``node`` (a leaf: 1).  O(1) (cached at construction)."""
    return node.depth if isinstance(node, _Composite) else 1  # type: ignore[attr-defined]


def node_refs(node: Node) -> frozenset[str]:
    """Names of the rules referenced anywhere under ``node``.  O(1)."""
    if isinstance(node, _Composite):
        return node.refs  # type: ignore[attr-defined, no-any-return]
    if type(node) is RuleRef:
        return frozenset((node.name,))
    return _NO_REFS


def is_regular(node: Node) -> bool:
    """True when the tree contains no :class:`RuleRef`.  O(1)."""
    return not node_refs(node)


def rebuild(
    node: Node, leaf: Callable[[Node], Node | None], descend: Callable[[Node], bool]
) -> Node:
    """Post-order rebuild of ``node`` without recursion.

    ``leaf(n)`` may replace a node outright (returning None keeps going); subtrees for which
    ``descend`` is False are kept as they are, and a node whose children come back unchanged is
    kept (same object).  Shared subtrees are rebuilt once (memo by identity), so the cost is
    linear in the DAG, not the tree.
    """
    memo: dict[int, Node] = {}
    stack: list[tuple[Node, bool]] = [(node, False)]
    out: list[Node] = []
    steps = 0
    while stack:
        steps += 1
        if not steps & 1023:
            charge(1024)  # the compile's fuel (and deadline)
        n, done = stack.pop()
        if not done:
            hit = memo.get(id(n))
            if hit is not None:
                out.append(hit)
                continue
            rep = leaf(n)
            if rep is not None:
                memo[id(n)] = rep
                out.append(rep)
                continue
            if not descend(n) or not isinstance(n, (Concat, Alt, Repeat)):
                out.append(n)
                continue
            stack.append((n, True))
            if isinstance(n, Repeat):
                stack.append((n.item, False))
            else:
                stack.extend((item, False) for item in reversed(n.items))
            continue
        if isinstance(n, Repeat):
            item = out.pop()
            res: Node = n if item is n.item else repeat(item, n.min, n.max)
        else:
            assert isinstance(n, (Concat, Alt))  # narrowing only: descend() let it through
            k = len(n.items)
            items = out[-k:]
            del out[-k:]
            if all(a is b for a, b in zip(items, n.items)):
                res = n
            else:
                res = concat(items) if isinstance(n, Concat) else alt(items)
        memo[id(n)] = res
        out.append(res)
    return out[0]


def substitute(node: Node, bodies: dict[str, Node]) -> Node:
    """Replace references to rules in ``bodies`` by the bodies; subtrees that reference none of
    them are kept as they are (same object), as are nodes whose children come back unchanged.
    Linear in the part of the DAG that does (shared subtrees rebuilt once, memo by identity).

    What :func:`rebuild` with a ``bodies`` leaf and a "references one of them" descent returns,
    charging the same fuel, but one loop over each visited node's children instead of a
    task per child and two callbacks per node (``tests/ir/test_substitute_matches_rebuild.py``)."""
    names = bodies.keys()
    # (``names.isdisjoint(refs)``: a dict view iterates the smaller of the two sets, where
    # ``refs.isdisjoint(names)`` iterated every name: O(rules) per node visited when a
    # grammar's whole table of inlinable rules is substituted, rule after rule)
    if names.isdisjoint(node_refs(node)):
        return node  # (nothing to replace or descend into)
    if type(node) is RuleRef:
        return bodies[node.name]
    memo: dict[int, Node] = {}
    # one frame per composite node being rebuilt: the node, its next child, its new children
    frames: list[Node] = [node]
    nexts: list[int] = [0]
    accs: list[list[Node]] = [[]]
    steps = 1  # (rebuild's count: one per node visited, one more per node descended into)
    while True:
        n = frames[-1]
        kids: tuple[Node, ...] = (n.item,) if type(n) is Repeat else n.items  # type: ignore[attr-defined]
        acc = accs[-1]
        i = nexts[-1]
        k = len(kids)
        pushed = False
        while i < k:
            c = kids[i]
            i += 1
            steps += 1
            if not steps & 1023:
                charge(1024)  # the compile's fuel (and deadline)
            tc = type(c)
            if tc is RuleRef:
                got = bodies.get(c.name)  # type: ignore[attr-defined]
                acc.append(c if got is None else got)
            elif (tc is Concat or tc is Alt or tc is Repeat) and not names.isdisjoint(
                c.refs  # type: ignore[attr-defined]
            ):
                hit = memo.get(id(c))
                if hit is not None:
                    acc.append(hit)
                    continue
                nexts[-1] = i
                frames.append(c)
                nexts.append(0)
                accs.append([])
                pushed = True
                break
            else:
                acc.append(c)
        if pushed:
            continue
        steps += 1
        if not steps & 1023:
            charge(1024)
        res: Node
        if type(n) is Repeat:
            item = acc[0]
            res = n if item is n.item else repeat(item, n.min, n.max)
        elif all(a is b for a, b in zip(acc, kids)):
            res = n
        else:
            res = concat(acc) if type(n) is Concat else alt(acc)
        memo[id(n)] = res
        frames.pop()
        nexts.pop()
        accs.pop()
        if not frames:
            return res
        accs[-1].append(res)
