"""Constraint objects: typed, immutable combinators over the one grammar IR.

Every combinator returns a :class:`Constraint`, a frozen value object (hashable, comparable,
safe to share between threads and reuse in any number of bigger constraints).  A constraint
does nothing until it is compiled (:meth:`GrammarCompiler.compile`,
``generate(..., constraint=c)``) or printed (:meth:`Constraint.to_gbnf`,
:meth:`Constraint.to_lark`); both start from :func:`lower_constraint`, which turns the
constraint into an IR :class:`~formcast.ir.nodes.Grammar` (the same IR the regex, GBNF, Lark
and JSON Schema front-ends build, compiled by the same code).

Semantics: the language of a constraint is a set of strings (the whole output must be one of
them).  ``literal`` is one string, ``regex`` the strings its pattern fully matches, ``json``
the JSON texts of a schema's valid instances (the JSON Schema front-end, compact by default),
``any_json`` one JSON value, ``select`` the union, ``seq`` the concatenation, ``optional`` the
union with the empty string, ``repeat`` bounded or unbounded repetition with an optional
separator, ``define``/``rule`` named (possibly recursive) sub-constraints.

Errors: anything wrong with a part of a constraint names its position in the constraint
object as a path, e.g. ``seq[2].select[1]``: child 1 of the ``select`` that is child 2 of
the outermost ``seq``.  Malformed combinations raise :class:`~formcast.errors.ConstraintError`
(with ``.path``); errors from a part's own source (a regex's syntax, a schema keyword) keep
their type and get the path in the message (``GrammarSyntaxError`` re-raised with it,
others with ``constraint_path`` set and a note).

Cost: constructing a combinator is O(its direct arguments) (a ``regex`` parses its pattern
once, to report syntax errors at the call; a ``json`` reads its schema once, for its cache
key); lowering is linear in the constraint (shared parts are lowered once) plus the
front-ends' own costs, charged to the compile's fuel like every front-end
(:mod:`formcast.limits`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json as _json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import (
    ConfigurationError,
    ConstraintError,
    GrammarError,
    GrammarSyntaxError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
)
from ..frontends._common import sep_repeat
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..frontends.regex import parse_regex
from ..ir import nodes as ir
from ..ir.marks import MARKED_RULE_PREFIX, UniqueItemsMark, is_marked_rule
from ..limits import CompileLimits

__all__ = [
    "AnyJson",
    "Constraint",
    "Define",
    "Json",
    "Literal",
    "Lowered",
    "Optional",
    "Regex",
    "Repeat",
    "RuleRef",
    "Select",
    "Seq",
    "any_json",
    "as_constraint",
    "define",
    "json",
    "literal",
    "lower_constraint",
    "optional",
    "regex",
    "repeat",
    "rule",
    "select",
    "seq",
]

#: The deepest nesting of constraint objects lowered (deeper: a ``ConstraintError``; name a
#: part with :func:`define` instead).  Sequences and selections flatten, so ``a + b + c + ...``
#: is one level however long.
MAX_NESTING = 200

_RULE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_START = "%start"  # the start rule of a lowered constraint (no user name can spell it)


def _join(path: str, seg: str) -> str:
    return f"{path}.{seg}" if path else seg


def _where(path: str) -> str:
    return path or "the constraint"


class Constraint:
    """Base class of constraint objects (immutable; ``+`` is :func:`seq`, ``|`` is
    :func:`select`).  Build them with the combinator functions of this module."""

    __slots__ = ()
    #: the name of the node in constraint paths (``seq``, ``select``...)
    kind: ClassVar[str] = "constraint"

    # -- composition ------------------------------------------------------------------------
    def __add__(self, other: Constraint | str) -> Constraint:
        return seq(self, other)

    def __radd__(self, other: str) -> Constraint:
        return seq(other, self)

    def __or__(self, other: Constraint | str) -> Constraint:
        return select([self, other])

    def __ror__(self, other: str) -> Constraint:
        return select([other, self])

    # -- lowering and printing --------------------------------------------------------------
    def to_grammar(self, limits: CompileLimits | None = None) -> ir.Grammar:
        """The IR grammar of this constraint (start rule ``%start``)."""
        return lower_constraint(self, limits).grammar

    def to_gbnf(self) -> str:
        """This constraint as GBNF text (llama.cpp's grammar format; start rule ``root``).

        The text compiles (``GrammarCompiler.compile_grammar(text)``) to the same language.
        Raises :class:`~formcast.errors.UnsupportedFeatureError` for a part GBNF cannot
        spell (raw byte sets)."""
        from .printing import grammar_to_gbnf

        return grammar_to_gbnf(_printable(self.to_grammar(), "GBNF"))

    def to_lark(self) -> str:
        """This constraint as Lark text (the llguidance dialect formcast reads; start rule
        ``start``).  The text compiles (``compile_grammar(text, syntax="lark")``) to the
        same language."""
        from .printing import grammar_to_lark

        return grammar_to_lark(_printable(self.to_grammar(), "Lark"))

    def cache_key(self) -> str | None:
        """A digest of this constraint's structure (SHA-256, computed once at construction
        from the parts' digests, so O(1) whatever the sharing), or ``None`` when a part
        cannot be keyed exactly (a ``json`` whose options have no cache key): then the
        compiler does not cache it.  Equal structures have equal keys."""
        return self._digest  # type: ignore[attr-defined, no-any-return]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Constraint):
            return NotImplemented
        if self is other:
            return True
        key = self.cache_key()
        return key is not None and key == other.cache_key()

    def __hash__(self) -> int:
        key = self.cache_key()
        return hash(key) if key is not None else id(self)

    def _set_digest(self) -> None:
        parts = self._digest_parts()
        digest = None
        if parts is not None:
            h = hashlib.sha256()
            for part in parts:
                data = part.encode("utf-8", "surrogatepass")
                h.update(f"{len(data)}:".encode())
                h.update(data)
            digest = h.hexdigest()
        object.__setattr__(self, "_digest", digest)

    # -- implemented by each kind -----------------------------------------------------------
    def _lower(self, lo: _Lowering, path: str) -> ir.Node:  # pragma: no cover - abstract
        raise NotImplementedError

    def _digest_parts(self) -> list[str] | None:  # pragma: no cover - abstract
        """The kind's tag, its own fields and its parts' digests (``None``: a part has none)."""
        raise NotImplementedError

    def _json_schema(self, path: str) -> Any:
        """The JSON Schema equivalent of this constraint when it stands in a schema's place
        (``json({"properties": {"date": regex(...)}})``), else UnsupportedFeatureError."""
        raise UnsupportedFeatureError(
            f"{self.kind} inside a JSON Schema",
            _where(path),
            "only literal, regex (ecma dialect), select of literals, json and any_json can "
            "stand in place of a schema: a JSON value must stay JSON; put other constraints "
            "around the json(...) in a seq instead",
        )


def _printable(grammar: ir.Grammar, syntax: str) -> ir.Grammar:
    """``grammar``, refused when it has run-time checks (``uniqueItems`` of a ``json`` part)
    that grammar text cannot carry."""
    if grammar.marks:
        mark = grammar.marks[0]
        raise UnsupportedFeatureError(
            {"keys": "minProperties", "residue": "multipleOf"}.get(mark.kind, "uniqueItems"),
            mark.pointer,
            f"checked at run time, which {syntax} text cannot carry: compile the constraint "
            "with GrammarCompiler.compile instead of printing it",
        )
    return grammar


def as_constraint(value: Constraint | str, path: str = "") -> Constraint:
    """``value`` as a constraint: a :class:`Constraint` as it is, a ``str`` as its
    :func:`literal`; anything else is a :class:`~formcast.errors.ConstraintError`."""
    if isinstance(value, Constraint):
        return value
    if isinstance(value, str):
        return literal(value)
    raise ConstraintError(
        f"expected a constraint or a str (a literal), got {type(value).__name__}: build parts "
        "with formcast.constraints (literal, regex, json, select, seq, ...)",
        path=path,
    )


# -- leaves ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Literal(Constraint):
    """Exactly ``text``."""

    text: str
    kind: ClassVar[str] = "literal"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        return ir.literal(self.text)

    def _digest_parts(self) -> list[str] | None:
        return ["literal", self.text]

    def _json_schema(self, path: str) -> Any:
        return {"const": self.text}


@dataclass(frozen=True, slots=True, eq=False)
class Regex(Constraint):
    """The strings ``pattern`` fully matches, in ``dialect`` (``"ecma"`` or ``"python"``,
    as ``GrammarCompiler.compile_regex``)."""

    pattern: str
    dialect: str = "ecma"
    kind: ClassVar[str] = "regex"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        return parse_regex(self.pattern, dialect=self.dialect, limits=lo.limits)

    def _digest_parts(self) -> list[str] | None:
        return ["regex", self.dialect, self.pattern]

    def _json_schema(self, path: str) -> Any:
        if self.dialect != "ecma":
            raise UnsupportedFeatureError(
                f"regex(dialect={self.dialect!r}) inside a JSON Schema",
                _where(path),
                "a schema's pattern is ECMA-262: use dialect='ecma' there",
            )
        return {"type": "string", "pattern": f"^(?:{self.pattern})$"}


def _with_parts(tag: str, parts: Iterable[Constraint]) -> list[str] | None:
    out = [tag]
    for p in parts:
        key = p.cache_key()
        if key is None:
            return None
        out.append(key)
    return out


def _canonical_json(value: Any, path: str) -> str:
    """The schema as canonical JSON text; a constraint inside stands as its digest (``""``
    when a constraint inside has none: the json is then not keyed)."""
    unkeyed: list[Constraint] = []

    def default(obj: Any) -> Any:
        if isinstance(obj, Constraint):
            if obj.cache_key() is None:
                unkeyed.append(obj)
            return {"$formcast": obj.cache_key()}
        raise ConstraintError(
            f"a schema holds a {type(obj).__name__}, which is neither JSON nor a constraint",
            path=path,
        )

    text = _json.dumps(value, sort_keys=True, ensure_ascii=False, default=default)
    return "" if unkeyed else text


def _copy_schema(value: Any) -> Any:
    """A private copy of a schema's containers (constraints and scalars are immutable)."""
    if isinstance(value, Mapping):
        return {k: _copy_schema(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_schema(v) for v in value]
    return value


def _has_constraint(value: Any) -> bool:
    if isinstance(value, Constraint):
        return True
    if isinstance(value, Mapping):
        return any(_has_constraint(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_constraint(v) for v in value)
    return False


def _substitute_schema(value: Any, pointer: str, path: str) -> Any:
    """The schema with every constraint object replaced by its JSON Schema equivalent."""
    if isinstance(value, Constraint):
        return value._json_schema(f"{path}{pointer}")
    if isinstance(value, Mapping):
        return {
            k: _substitute_schema(v, f"{pointer}/{_escape_pointer(str(k))}", path)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_substitute_schema(v, f"{pointer}/{i}", path) for i, v in enumerate(value)]
    return value


def _escape_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True, eq=False)
class Json(Constraint):
    """The JSON texts of the instances valid against a JSON Schema (a dict, bool or JSON text)
    or a Pydantic model class, as ``GrammarCompiler.compile_json_schema`` compiles them
    (compact by default; ``options`` as there).

    A schema may hold constraint objects in place of subschemas: a ``regex`` stands for a
    string whose content fully matches it (``{"type": "string", "pattern": "^(?:...)$"}``), a
    ``literal`` for ``{"const": text}``, a ``select`` of literals for an ``enum``, a ``json``
    for its schema, ``any_json()`` for ``true``.  Other constraints there are refused: the
    value must stay JSON.  The schema is copied on construction (later changes to the
    caller's dict do not reach it); treat ``.schema`` as read-only (the cache key is taken
    at construction)."""

    schema: Any
    options: JsonSchemaOptions | None = None
    _canonical: str = field(init=False, repr=False)
    _options_key: str | None = field(init=False, repr=False)
    _digest: str | None = field(init=False, repr=False, default=None)
    kind: ClassVar[str] = "json"

    def __post_init__(self) -> None:
        from ..frontends.jsonschema.source import pydantic_model_class

        schema = self.schema
        if isinstance(schema, type):
            cls = pydantic_model_class(schema)
            if cls is None:
                raise ConfigurationError(
                    f"json() takes a JSON Schema or a Pydantic model class, got the class "
                    f"{schema.__name__}"
                )
            canonical = _canonical_json(cls.model_json_schema(), "json")
        else:
            if isinstance(schema, str):
                try:
                    schema = _json.loads(schema)
                except ValueError as exc:
                    raise ConfigurationError(
                        f"json(): the schema text is not JSON: {exc}"
                    ) from None
            if not isinstance(schema, (Mapping, bool)):
                raise ConfigurationError(
                    f"json() takes a JSON Schema (dict, bool or JSON text) or a Pydantic model "
                    f"class, got {type(schema).__name__}"
                )
            schema = _copy_schema(schema)
            canonical = _canonical_json(schema, "json")
        if self.options is not None and not isinstance(self.options, JsonSchemaOptions):
            raise ConfigurationError(
                f"json(options=...) must be a JsonSchemaOptions, got {type(self.options).__name__}"
            )
        opts = self.options if self.options is not None else JsonSchemaOptions()
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "_canonical", canonical)
        object.__setattr__(self, "_options_key", opts.cache_key() if canonical else None)
        self._set_digest()

    def _digest_parts(self) -> list[str] | None:
        if self._options_key is None:
            return None
        return ["json", self._options_key, self._canonical]

    def _loaded_schema(self, path: str) -> Any:
        schema = self.schema
        if not isinstance(schema, type) and _has_constraint(schema):
            schema = _substitute_schema(schema, "#", _join(path, "json"))
        return schema

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        from ..frontends.jsonschema.api import schema_to_grammar

        key = self.cache_key() or f"#{id(self)}"
        cached = lo.json_starts.get(key)
        if cached is not None:
            return cached
        opts = self.options if self.options is not None else JsonSchemaOptions()
        # marks allowed: the grammar carries its run-time uniqueItems checks, as
        # GrammarCompiler.compile_json_schema's does
        grammar, ignored = schema_to_grammar(self._loaded_schema(path), opts, marks=[])
        lo.warnings.extend(ignored)
        ref = lo.embed(grammar, grammar.start)
        lo.json_starts[key] = ref
        return ref

    def _json_schema(self, path: str) -> Any:
        if isinstance(self.schema, type):
            from ..frontends.jsonschema.source import pydantic_model_class

            cls = pydantic_model_class(self.schema)
            assert cls is not None  # checked at construction
            return cls.model_json_schema()
        return self._loaded_schema(path)


@dataclass(frozen=True, slots=True, eq=False)
class AnyJson(Constraint):
    """Any one JSON value (RFC 8259) as the built-in JSON grammar (``grammar="json"``)
    allows it, without whitespace before or after the value (inside it, at most 20
    whitespace characters per gap; numbers' digits bounded as there)."""

    kind: ClassVar[str] = "any_json"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        from ..frontends.builtin_json import builtin_json_grammar

        cached = lo.json_starts.get("any")
        if cached is None:
            cached = lo.embed(builtin_json_grammar(), "value")
            lo.json_starts["any"] = cached
        return cached

    def _digest_parts(self) -> list[str] | None:
        return ["any_json"]

    def _json_schema(self, path: str) -> Any:
        return True


# -- composites -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Select(Constraint):
    """Any one of ``options``."""

    options: tuple[Constraint, ...]
    kind: ClassVar[str] = "select"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        if len(self.options) > lo.limits.max_alternatives:
            raise LimitExceededError(
                "max_alternatives",
                lo.limits.max_alternatives,
                f"select with {len(self.options)} options at {_where(path)}",
            )
        return ir.alt(lo.lower(o, _join(path, f"select[{i}]")) for i, o in enumerate(self.options))

    def _digest_parts(self) -> list[str] | None:
        return _with_parts("select", self.options)

    def _json_schema(self, path: str) -> Any:
        if all(isinstance(o, Literal) for o in self.options):
            return {"enum": [o.text for o in self.options if isinstance(o, Literal)]}
        return {
            "anyOf": [
                o._json_schema(_join(path, f"select[{i}]")) for i, o in enumerate(self.options)
            ]
        }


@dataclass(frozen=True, slots=True, eq=False)
class Seq(Constraint):
    """``items`` one after the other."""

    items: tuple[Constraint, ...]
    kind: ClassVar[str] = "seq"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        return ir.concat(lo.lower(c, _join(path, f"seq[{i}]")) for i, c in enumerate(self.items))

    def _digest_parts(self) -> list[str] | None:
        return _with_parts("seq", self.items)


@dataclass(frozen=True, slots=True, eq=False)
class Optional(Constraint):
    """``item`` or nothing."""

    item: Constraint
    kind: ClassVar[str] = "optional"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        return ir.repeat(lo.lower(self.item, _join(path, "optional")), 0, 1)

    def _digest_parts(self) -> list[str] | None:
        return _with_parts("optional", (self.item,))


@dataclass(frozen=True, slots=True, eq=False)
class Repeat(Constraint):
    """``item`` between ``min`` and ``max`` times (``None``: unbounded), with ``sep`` between
    consecutive copies when given."""

    item: Constraint
    min: int = 0
    max: int | None = None
    sep: Constraint | None = None
    kind: ClassVar[str] = "repeat"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        cap = lo.limits.max_repeat
        for name, v in (("min", self.min), ("max", self.max)):
            if v is not None and v > cap:
                raise LimitExceededError("max_repeat", cap, f"repeat({name}={v}) at {_where(path)}")
        item = lo.lower(self.item, _join(path, "repeat"))
        sep = None if self.sep is None else lo.lower(self.sep, _join(path, "repeat.sep"))
        return sep_repeat(item, self.min, self.max, sep)

    def _digest_parts(self) -> list[str] | None:
        parts = (self.item,) if self.sep is None else (self.item, self.sep)
        return _with_parts(f"repeat {self.min} {self.max}", parts)


@dataclass(frozen=True, slots=True, eq=False)
class RuleRef(Constraint):
    """A use of the sub-constraint named ``name`` (given by a :func:`define` somewhere in the
    same constraint): the way to write recursion."""

    name: str
    kind: ClassVar[str] = "rule"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        lo.used.setdefault(self.name, path)
        return ir.RuleRef(self.name)

    def _digest_parts(self) -> list[str] | None:
        return ["rule", self.name]


@dataclass(frozen=True, slots=True, eq=False)
class Define(Constraint):
    """The sub-constraint ``body`` named ``name``; stands for ``body`` where it is used, and
    ``rule(name)`` anywhere in the same constraint (inside ``body`` too) refers to it."""

    name: str
    body: Constraint
    kind: ClassVar[str] = "define"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        seen = lo.defined.get(self.name)
        if seen is not None:
            other, where = seen
            if other is not self and other != self:
                raise ConstraintError(
                    f"rule {self.name!r} is defined twice with different bodies (first at "
                    f"{_where(where)}): give one of them another name",
                    path=path,
                )
            return ir.RuleRef(self.name)
        lo.defined[self.name] = (self, path)
        body = lo.lower(self.body, _join(path, f"define({self.name!r})"))
        lo.rules[self.name] = ir.Rule(self.name, body)
        return ir.RuleRef(self.name)

    def _digest_parts(self) -> list[str] | None:
        return _with_parts(f"define {self.name}", (self.body,))


# -- lowering -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lowered:
    """A constraint lowered to IR.

    Attributes:
        grammar: the IR grammar (start rule ``%start``).
        node: the start rule's body when the whole constraint is regular (no rules, no JSON):
            what the one-DFA program compiles, exactly as a regex; else ``None``.
        json_like: the constraint contains a ``json``/``any_json`` part (compiled with the
            JSON Schema settings of the pushdown program).
        warnings: what a lenient JSON Schema compile ignored.

    The grammar carries the rest: the run-time checks of its ``json`` parts
    (``grammar.marks``, renamed with their rules) and the program settings
    (``grammar.hints``: one DFA when regular, the JSON Schema settings when ``json_like``,
    else the grammar settings).
    """

    grammar: ir.Grammar
    node: ir.Node | None
    json_like: bool
    warnings: tuple[str, ...]


class _Lowering:
    """The state of one lowering: rules defined and used, embedded JSON grammars, a memo of
    the parts lowered (a part shared by several parents is lowered once)."""

    def __init__(self, limits: CompileLimits) -> None:
        self.limits = limits
        self.rules: dict[str, ir.Rule] = {}
        self.defined: dict[str, tuple[Define, str]] = {}
        self.used: dict[str, str] = {}
        self.json_starts: dict[str, ir.Node] = {}
        self.marks: list[UniqueItemsMark] = []
        self.warnings: list[str] = []
        self.memo: dict[int, ir.Node] = {}
        self.depth = 0
        self.embedded = 0

    def lower(self, c: Constraint, path: str) -> ir.Node:
        if not isinstance(c, Constraint):  # a container built by hand (dataclasses.replace)
            c = as_constraint(c, path)
        hit = self.memo.get(id(c))
        if hit is not None:
            return hit
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise ConstraintError(
                    f"constraint objects nested more than {MAX_NESTING} deep: name a part "
                    "with define(...) and refer to it with rule(...)",
                    path=path,
                )
            node = _with_path(c, self, path)
        finally:
            self.depth -= 1
        self.memo[id(c)] = node
        return node

    def embed(self, grammar: ir.Grammar, start: str) -> ir.Node:
        """Add the rules of a front-end's grammar under a fresh prefix (a marked rule keeps
        :data:`~formcast.ir.marks.MARKED_RULE_PREFIX` in front, and its mark is renamed with
        it); returns the reference to its rule ``start``."""
        self.embedded += 1
        prefix = f"json{self.embedded}/"
        names = {
            r.name: (
                MARKED_RULE_PREFIX + prefix + r.name[len(MARKED_RULE_PREFIX) :]
                if is_marked_rule(r.name)
                else prefix + r.name
            )
            for r in grammar.rules
        }
        self.marks.extend(
            dataclasses.replace(m, rule=names.get(m.rule, prefix + m.rule)) for m in grammar.marks
        )

        def leaf(n: ir.Node) -> ir.Node | None:
            if isinstance(n, ir.RuleRef) and n.name in names:
                return ir.RuleRef(names[n.name])
            return None

        for r in grammar.rules:
            body = ir.rebuild(r.body, leaf, lambda n: bool(ir.node_refs(n)))
            self.rules[names[r.name]] = ir.Rule(names[r.name], body, r.terminal, r.lazy)
        return ir.RuleRef(names[start])


def _with_path(c: Constraint, lo: _Lowering, path: str) -> ir.Node:
    """``c._lower`` with the front-ends' errors located at ``path``."""
    try:
        return c._lower(lo, path)
    except ConstraintError:
        raise
    except GrammarSyntaxError as exc:
        if getattr(exc, "constraint_path", None) is not None:
            raise
        err = GrammarSyntaxError(
            f"in {c.kind} at {_where(path)}: {exc.message}",
            source=exc.source,
            position=exc.position,
        )
        err.constraint_path = path  # type: ignore[attr-defined]
        raise err from None
    except UnsupportedFeatureError as exc:
        if getattr(exc, "constraint_path", None) is not None:
            raise
        where = f"{_where(path)} ({exc.where})" if exc.where else _where(path)
        head = f"unsupported feature {exc.feature!r}"
        rest = str(exc)[len(head) :]
        if exc.where and rest.startswith(f" at {exc.where}"):
            rest = rest[len(f" at {exc.where}") :]
        new = UnsupportedFeatureError(exc.feature, where)
        new.args = (f"{head} at {where}{rest}",)
        new.constraint_path = path  # type: ignore[attr-defined]
        raise new from None
    except UnsatisfiableGrammarError as exc:
        if getattr(exc, "constraint_path", None) is not None:
            raise
        new_u = UnsatisfiableGrammarError(f"{exc} (the {c.kind} at {_where(path)})")
        new_u.constraint_path = path  # type: ignore[attr-defined]
        raise new_u from None
    except GrammarError as exc:
        if getattr(exc, "constraint_path", None) is None:
            exc.constraint_path = path  # type: ignore[attr-defined]
            exc.add_note(f"in the {c.kind} at {_where(path)} of the constraint")
        raise


def lower_constraint(constraint: Constraint, limits: CompileLimits | None = None) -> Lowered:
    """Lower ``constraint`` to IR (see :class:`Lowered`).

    Raises:
        ConstraintError: a rule used and never defined, or defined twice differently;
            nesting deeper than :data:`MAX_NESTING`; a part that is not a constraint.
        GrammarSyntaxError, UnsupportedFeatureError, LimitExceededError: from a part's own
            source, with its path.
        UnsatisfiableGrammarError: the constraint matches no string.
    """
    c = as_constraint(constraint)
    lo = _Lowering(limits or CompileLimits())
    body = lo.lower(c, "")
    for name, where in lo.used.items():
        if name not in lo.defined:
            raise ConstraintError(
                f"rule {name!r} is used but never defined: give its body with "
                f"define({name!r}, ...) somewhere in the same constraint",
                path=where,
            )
    if isinstance(body, ir.Nothing):
        raise UnsatisfiableGrammarError("the constraint matches no string at all")
    rules = (ir.Rule(_START, body), *lo.rules.values())
    regular = not lo.rules and ir.is_regular(body)
    hints = ir.REGEX_HINTS if regular else ir.JSON_HINTS if lo.json_starts else ir.GRAMMAR_HINTS
    return Lowered(
        grammar=ir.Grammar(rules, _START, marks=tuple(lo.marks), hints=hints),
        node=body if regular else None,
        json_like=bool(lo.json_starts),
        warnings=tuple(lo.warnings),
    )


# -- the combinators ------------------------------------------------------------------------------
def literal(text: str) -> Literal:
    """Exactly ``text`` (``""``: the empty string)."""
    if not isinstance(text, str):
        raise ConstraintError(f"literal() takes a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConstraintError(
            f"literal {text[:40]!r} holds a lone surrogate, which has no UTF-8 form"
        ) from None
    return Literal(text)


def regex(pattern: str, *, dialect: str = "ecma") -> Regex:
    """The strings ``pattern`` fully matches (``dialect``: ``"ecma"``, the default, or
    ``"python"``; see docs/regex.md).  The pattern is parsed here, so a syntax error is
    raised at this call (:class:`~formcast.errors.GrammarSyntaxError`)."""
    if not isinstance(pattern, str):
        raise ConstraintError(f"regex() takes a str pattern, got {type(pattern).__name__}")
    parse_regex(pattern, dialect=dialect)
    return Regex(pattern, dialect)


def json(schema: Any, *, options: JsonSchemaOptions | None = None) -> Json:
    """The JSON texts valid against ``schema`` (see :class:`Json`)."""
    return Json(schema, options)


def any_json() -> AnyJson:
    """Any one JSON value (see :class:`AnyJson`)."""
    return AnyJson()


def _flatten(parts: Iterable[Constraint | str], cls: type, what: str) -> tuple[Constraint, ...]:
    out: list[Constraint] = []
    for i, p in enumerate(parts):
        c = as_constraint(p, f"{what}[{i}]")
        if type(c) is cls:
            out.extend(getattr(c, "items" if cls is Seq else "options"))
        else:
            out.append(c)
    return tuple(out)


def select(options: Sequence[Constraint | str]) -> Constraint:
    """Any one of ``options`` (constraints, or strings as literals); nested selects flatten.
    One option is that option; none is an error."""
    if isinstance(options, (str, Constraint)) or not isinstance(options, Iterable):
        raise ConstraintError(
            "select() takes a list of options, e.g. select(['yes', 'no'])", path="select"
        )
    opts = _flatten(options, Select, "select")
    if not opts:
        raise ConstraintError("select() needs at least one option", path="select")
    return opts[0] if len(opts) == 1 else Select(opts)


def seq(*items: Constraint | str) -> Constraint:
    """``items`` one after the other (strings are literals); nested sequences flatten.
    ``seq()`` is the empty string."""
    parts = _flatten(items, Seq, "seq")
    if not parts:
        return Literal("")
    return parts[0] if len(parts) == 1 else Seq(parts)


def optional(item: Constraint | str) -> Optional:
    """``item`` or the empty string."""
    return Optional(as_constraint(item, "optional"))


def _check_count(name: str, value: Any, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConstraintError(
            f"repeat({name}={value!r}): must be an int >= 0" + (" or None" if allow_none else ""),
            path="repeat",
        )


def repeat(
    item: Constraint | str,
    min: int = 0,
    max: int | None = None,
    sep: Constraint | str | None = None,
) -> Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max=None``: no upper bound), with
    ``sep`` between consecutive copies when given (``repeat(x, 1, sep=", ")``: ``x, x, x``)."""
    _check_count("min", min, False)
    _check_count("max", max, True)
    if max is not None and max < min:
        raise ConstraintError(f"repeat(min={min}, max={max}): max is below min", path="repeat")
    return Repeat(
        as_constraint(item, "repeat"),
        min,
        max,
        None if sep is None else as_constraint(sep, "repeat.sep"),
    )


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not _RULE_NAME.match(name):
        raise ConstraintError(
            f"{what}({name!r}): a rule name is a letter then letters, digits or '_'",
            path=what,
        )


def rule(name: str) -> RuleRef:
    """A use of the sub-constraint ``define(name, ...)`` (which may contain this use:
    recursion)."""
    _check_name(name, "rule")
    return RuleRef(name)


def define(name: str, body: Constraint | str) -> Define:
    """``body`` named ``name``: it stands for ``body``, and ``rule(name)`` refers to it
    anywhere in the same constraint (recursion: ``rule(name)`` inside ``body``)."""
    _check_name(name, "define")
    return Define(name, as_constraint(body, f"define({name!r})"))
