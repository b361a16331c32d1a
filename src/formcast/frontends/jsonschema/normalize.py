"""Raw JSON Schema → normalized nodes (:mod:`.nodes`): keywords, ``$ref``, merging, negation.

:class:`Normalizer` walks a schema once.  For each schema object it builds the per-type node of
its own keywords, then intersects it (:meth:`Normalizer.conj`) with the nodes of ``$ref``,
``allOf``, ``anyOf``, ``oneOf``, ``enum``/``const``, ``not``, ``if``/``then``/``else`` and the
dependency keywords, and finally applies ``unevaluated*``.

* ``$ref`` is resolved with the ``referencing`` library (the draft's own rules for ``$id``,
  anchors and JSON pointers); each target becomes a named definition (:class:`~.nodes.SRef`), so
  recursion is a grammar rule, never unrolled.  Merging a definition that is still being
  normalized (a recursive one) is deferred until it is complete.
* Intersection distributes over unions, filters constant sets with an exact value check
  (:meth:`Normalizer.accepts`) and merges same-type nodes field by field.
* Negation (``not``, ``if`` without the matching branch, exact ``oneOf``) is built per type from
  the node's atomic constraints; anything it cannot negate exactly fails closed.

Lifetime: one :class:`Normalizer` per compile; it holds the definitions table used later by the
emitter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any

from ...errors import (
    CompileBudgetError,
    ConfigurationError,
    GrammarError,
    LimitExceededError,
    UnsupportedFeatureError,
)
from ...ir.nodes import ANY_CHAR, Nothing
from ...limits import charge, metered_cache
from . import formats as json_formats
from .keywords import is_annotation, keyword_info, suggest
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
    dedupe_values,
    json_equal,
    to_decimal,
)
from .options import JsonSchemaOptions
from .regexlang import node_matches, pattern_node, restrict_length

__all__ = ["Normalizer"]

_DRAFT_URIS = {
    "http://json-schema.org/draft-04/schema": "4",
    "http://json-schema.org/draft-06/schema": "6",
    "http://json-schema.org/draft-07/schema": "7",
    "https://json-schema.org/draft/2019-09/schema": "2019-09",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}
_LEGACY = ("4", "6", "7")
_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")

_NUM_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STR_KEYS = ("minLength", "maxLength", "pattern", "format")
_ARR_KEYS = (
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
)
_OBJ_KEYS = (
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "propertyNames",
    "minProperties",
    "maxProperties",
)


class _Pending(Exception):
    """A definition was needed while it is still being normalized (recursion)."""


class _OutOfBudget(Exception):
    """A disjointness proof took too much work (the branches are then treated as overlapping)."""


#: conj() calls one ``oneOf`` disjointness proof may make.
_DISJOINT_BUDGET = 2_000


def _value_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _escape_pointer(seg: str) -> str:
    return seg.replace("~", "~0").replace("/", "~1")


def _pointer(path: tuple[str | int, ...]) -> str:
    return "#" + "".join("/" + _escape_pointer(str(s)) for s in path)


def check_json(schema: Any) -> None:
    """Raise :class:`ConfigurationError` naming the JSON pointer of the first part of
    ``schema`` that is not JSON: a key that is not a string, a value of another Python type
    (set, tuple, bytes, Decimal...), NaN or an infinity (``json.loads`` reads ``NaN`` and
    ``Infinity``, but they have no JSON spelling, so no output could be one).  Iterative: any
    depth is safe."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        v, path = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise ConfigurationError(
                        f"invalid schema at {_pointer(path)}: the key {k!r} is a "
                        f"{type(k).__name__}, not a string (JSON object keys are strings)"
                    )
                stack.append((x, (*path, k)))
        elif isinstance(v, list):
            stack.extend((x, (*path, i)) for i, x in enumerate(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ConfigurationError(
                    f"invalid schema at {_pointer(path)}: {v!r} is not a JSON number (NaN and "
                    "the infinities have no JSON spelling)"
                )
        elif not isinstance(v, (str, int)) and v is not None:  # (bool is an int)
            raise ConfigurationError(
                f"invalid schema at {_pointer(path)}: a {type(v).__name__} is not a JSON value"
            )


def _printable(where: str) -> str:
    """``where`` with lone surrogates (a property name may hold one) written as ``\\udXXX``, so
    that an error message can be printed or logged as UTF-8."""
    return where.encode("utf-8", "backslashreplace").decode("utf-8")


def _lone_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def _check_utf8_value(v: Any, where: str, feature: str) -> None:
    """Fail closed on a string (or key) of ``v`` with a lone surrogate: it has no UTF-8 form,
    so it could only be written as a ``\\uXXXX`` escape, which formcast never generates."""
    stack = [v]
    while stack:
        x = stack.pop()
        texts: list[str] = []
        if isinstance(x, str):
            texts = [x]
        elif isinstance(x, dict):
            texts = list(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        if any(_lone_surrogate(s) for s in texts):
            raise UnsupportedFeatureError(
                feature,
                _printable(where),
                "a string with a lone surrogate has no UTF-8 form (JSON text can only spell it "
                "as a \\u escape, which formcast does not generate)",
            )


@dataclass(frozen=True)
class Ctx:
    """Where a subschema is: resolver (base URI), draft, JSON pointer, nesting depth."""

    resolver: Any
    draft: str
    pointer: str
    depth: int

    def child(self, *segments: str | int) -> Ctx:
        ptr = self.pointer + "".join("/" + _escape_pointer(str(s)) for s in segments)
        return Ctx(self.resolver, self.draft, ptr, self.depth + 1)


def _spec_for(draft: str) -> Any:
    import referencing.jsonschema as rj

    return {
        "4": rj.DRAFT4,
        "6": rj.DRAFT6,
        "7": rj.DRAFT7,
        "2019-09": rj.DRAFT201909,
        "2020-12": rj.DRAFT202012,
    }[draft]


def _draft_of(schema: Any, default: str) -> str:
    if isinstance(schema, dict):
        uri = schema.get("$schema")
        if isinstance(uri, str):
            return _DRAFT_URIS.get(uri.rstrip("#"), default)
    return default


def _resource_draft(resolver: Any, default: str) -> str:
    """The draft of the resource ``resolver`` is in: its ``$schema``, else the default
    specification it was registered with (``referencing`` keeps it per resource); ``default``
    when that is unknown (a specification formcast does not read)."""
    base = getattr(resolver, "_base_uri", None)
    registry = getattr(resolver, "_registry", None)
    if not isinstance(base, str) or registry is None:
        return default
    # never the registry's ``retrieve`` (a user's may fetch): the resource is already there,
    # or among the subresources a crawl finds (cheap once crawled)
    resource = registry.get(base)
    if resource is None:
        resource = registry.crawl().get(base)
    spec = getattr(resource, "_specification", None)
    for draft in ("4", "6", "7", "2019-09", "2020-12"):
        if spec is _spec_for(draft):
            return draft
    return default


def _whole(kind: str) -> S:
    return {
        "null": SNull(),
        "boolean": SBool(),
        "number": SNum(),
        "string": SStr(),
        "array": SArr(),
        "object": SObj(),
    }[kind]


def _kind(s: S) -> str | None:
    if isinstance(s, SNull):
        return "null"
    if isinstance(s, SBool):
        return "boolean"
    if isinstance(s, SNum):
        return "number"
    if isinstance(s, SStr):
        return "string"
    if isinstance(s, SArr):
        return "array"
    if isinstance(s, SObj):
        return "object"
    return None


def _others(kind: str) -> list[S]:
    return [
        _whole(k) for k in ("null", "boolean", "number", "string", "array", "object") if k != kind
    ]


def _nonneg_int(v: Any, where: str, key: str) -> int:
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
        or v < 0
        or v != int(v)
    ):
        raise ConfigurationError(f"invalid schema at {where}: {key} must be a non-negative integer")
    return int(v)


class Normalizer:
    """Normalizes one schema (see the module docstring)."""

    def __init__(self, schema: Any, options: JsonSchemaOptions) -> None:
        check_json(schema)
        try:
            import referencing
            import referencing.exceptions
            import referencing.jsonschema
        except ImportError as e:  # pragma: no cover - a declared dependency of the extra
            raise ConfigurationError(
                "JSON Schema support needs the 'referencing' package: "
                "pip install 'jsonschema>=4.20'"
            ) from e
        self.options = options
        self.ignored: list[str] = []
        self.defs: dict[str, S] = {}
        self.def_names: dict[str, str] = {}
        self._pending: set[str] = set()
        self._thunks: dict[str, Callable[[], S]] = {}
        self._ref_depth = 0
        self._keep: list[S] = []  # nodes whose id() names a deferred definition
        self._budget: int | None = None  # conj() calls left for a disjointness proof
        #: ids of the KeyRules whose ``additional`` comes from an absent additionalProperties
        self.implicit_rules: set[int] = set()
        draft = _draft_of(schema, options.default_draft)
        spec = _spec_for(draft)
        resource = referencing.Resource.from_contents(schema, default_specification=spec)
        registry: Any = options.registry
        if registry is None:
            registry = referencing.Registry()
        try:
            from jsonschema_specifications import REGISTRY as META

            registry = META.combine(registry)
        except ImportError:  # pragma: no cover - optional
            pass
        resolver = registry.resolver_with_root(resource)
        self.root_ctx = Ctx(resolver, draft, "#", 0)
        self.root_schema = schema

    # -- failure helpers ----------------------------------------------------------------------
    def unsupported(self, feature: str, where: str, hint: str = "") -> None:
        """Fail closed, or (lenient) record the ignored feature and let the caller go on."""
        where = _printable(where)
        if self.options.lenient:
            self.ignored.append(f"{feature} at {where}" + (f" ({hint})" if hint else ""))
            return
        raise UnsupportedFeatureError(feature, where, hint)

    # -- definitions --------------------------------------------------------------------------
    def resolve(self, key: str) -> S:
        """The node of a definition; raises :class:`_Pending` while it is being built."""
        got = self.defs.get(key)
        if got is not None:
            return got
        thunk = self._thunks.get(key)
        if thunk is not None and key not in self._pending:
            self._pending.add(key)
            try:
                value = thunk()
            finally:
                self._pending.discard(key)
            self.defs[key] = value
            del self._thunks[key]
            return value
        raise _Pending(key)

    def definition(self, key: str) -> S:
        """The node of a definition once normalization is over (deferred ones built now)."""
        try:
            return self.resolve(key)
        except _Pending:
            raise UnsupportedFeatureError(
                "$ref", self.def_names.get(key, key), "a definition that merges with itself"
            ) from None

    def _lookup(self, ref: str, ctx: Ctx) -> S:
        import referencing.exceptions as rex

        try:
            resolved = ctx.resolver.lookup(ref)
        except rex.Unresolvable as e:
            self.unsupported(
                "$ref",
                ctx.pointer,
                f"cannot resolve {ref!r} ({type(e).__name__}); remote references need a "
                "registry in JsonSchemaOptions.registry",
            )
            return ANY
        contents = resolved.contents
        key = f"d{id(contents)}"
        if key in self.defs or key in self._pending:
            return SRef(key)
        if len(self.def_names) >= self.options.max_rules:
            raise LimitExceededError("max_rules", self.options.max_rules, "too many $ref targets")
        self.def_names[key] = ref
        self._pending.add(key)
        target_ctx = Ctx(
            resolved.resolver,
            # the target is read in the draft of the resource it lies in (a draft-7 remote
            # keeps draft 7's rules: ``$ref`` ignores a sibling ``$id``), not the referrer's
            _draft_of(contents, _resource_draft(resolved.resolver, ctx.draft)),
            ref,
            ctx.depth + 1,
        )
        try:
            # the resolver returned by lookup() is already inside the target's own $id
            value = self.normalize(contents, target_ctx, entered=True)
        finally:
            self._pending.discard(key)
        self.defs[key] = value
        return SRef(key)

    # -- entry --------------------------------------------------------------------------------
    def run(self) -> S:
        return self.normalize(self.root_schema, self.root_ctx, entered=True)

    def normalize(self, schema: Any, ctx: Ctx, *, entered: bool = False) -> S:
        charge(24 + (3 * len(schema) if isinstance(schema, dict) else 0))  # the compile's fuel
        """Normalize ``schema`` found at ``ctx`` (``entered``: ctx.resolver already applies the
        schema's own ``$id``)."""
        if ctx.depth > self.options.max_depth:
            raise LimitExceededError("max_depth", self.options.max_depth, f"at {ctx.pointer}")
        if schema is True:
            return ANY
        if schema is False:
            return NOTHING_S
        if not isinstance(schema, dict):
            raise ConfigurationError(
                f"invalid schema at {ctx.pointer}: expected an object or a boolean, "
                f"got {type(schema).__name__}"
            )
        draft = _draft_of(schema, ctx.draft) if "$schema" in schema else ctx.draft
        if not entered:
            spec = _spec_for(draft)
            try:
                resolver = ctx.resolver.in_subresource(spec.create_resource(schema))
            except (AttributeError, TypeError):
                # a malformed identifier ("id": {...}, a property map written in the wrong
                # place): it identifies nothing, so the base URI stays the enclosing one
                resolver = ctx.resolver
            ctx = Ctx(resolver, draft, ctx.pointer, ctx.depth)
        elif draft != ctx.draft:
            ctx = Ctx(ctx.resolver, draft, ctx.pointer, ctx.depth)
        if "$ref" in schema and draft in _LEGACY:
            ref = schema["$ref"]
            if isinstance(ref, str):
                return self._lookup(ref, ctx)
        self._check_keywords(schema, ctx)
        # the parts are merged in the order their keywords appear in the schema object, so that
        # properties are generated in the order a reader sees them ("$ref" first when written
        # first, the schema's own "properties" first when they come before "allOf"...)
        keys = list(schema)
        typed_at = min(
            (
                keys.index(k)
                for k in ("type", *_NUM_KEYS, *_STR_KEYS, *_ARR_KEYS, *_OBJ_KEYS)
                if k in schema
            ),
            default=0,
        )
        ordered: list[tuple[int, int, S]] = []

        def add(keyword: str, part: S) -> None:
            pos = keys.index(keyword) if keyword in schema else len(keys)
            ordered.append((pos, len(ordered), part))

        ordered.append((typed_at, 0, self._typed(schema, ctx)))
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: $ref must be a string")
            add("$ref", self._lookup(ref, ctx.child("$ref")))
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in schema:
                self.unsupported(kw, ctx.pointer, "dynamic references are not compiled")
        if "allOf" in schema:
            for i, sub in enumerate(self._schema_list(schema, "allOf", ctx)):
                add("allOf", self.normalize(sub, ctx.child("allOf", i)))
        if "anyOf" in schema:
            subs = self._schema_list(schema, "anyOf", ctx)
            add(
                "anyOf",
                self.union([self.normalize(s, ctx.child("anyOf", i)) for i, s in enumerate(subs)]),
            )
        if "oneOf" in schema:
            subs = self._schema_list(schema, "oneOf", ctx)
            branches = [self.normalize(s, ctx.child("oneOf", i)) for i, s in enumerate(subs)]
            add("oneOf", self.one_of(branches, ctx.child("oneOf")))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: enum must be an array")
            if len(values) > self.options.max_enum:
                raise LimitExceededError(
                    "max_enum",
                    self.options.max_enum,
                    f"enum of {len(values)} values at {ctx.pointer}",
                )
            _check_utf8_value(values, ctx.child("enum").pointer, "enum")
            add("enum", SConst(dedupe_values(values)))
        if "const" in schema:
            _check_utf8_value(schema["const"], ctx.child("const").pointer, "const")
            add("const", SConst((schema["const"],)))
        if "not" in schema:
            inner = self.normalize(schema["not"], ctx.child("not"))
            add("not", self._negate_or_fail(inner, ctx.child("not"), "not"))
        if "if" in schema and ("then" in schema or "else" in schema):
            add("if", self._if_then_else(schema, ctx))
        for kw, part in self._dependencies(schema, ctx):
            add(kw, part)
        parts = [part for _, _, part in sorted(ordered, key=lambda t: (t[0], t[1]))]
        result = self.conj_all(parts, ctx)
        if "unevaluatedProperties" in schema:
            u = self.normalize(schema["unevaluatedProperties"], ctx.child("unevaluatedProperties"))
            result = self._unevaluated(result, u, "object", ctx.child("unevaluatedProperties"))
        if "unevaluatedItems" in schema:
            u = self.normalize(schema["unevaluatedItems"], ctx.child("unevaluatedItems"))
            result = self._unevaluated(result, u, "array", ctx.child("unevaluatedItems"))
        return result

    def _schema_list(self, schema: dict[str, Any], key: str, ctx: Ctx) -> list[Any]:
        v = schema[key]
        if not isinstance(v, list) or not v:
            raise ConfigurationError(
                f"invalid schema at {ctx.pointer}: {key} must be a non-empty array"
            )
        return v

    def _check_keywords(self, schema: dict[str, Any], ctx: Ctx) -> None:
        for key in schema:
            if not isinstance(key, str):
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: non-string keyword")
            if is_annotation(key):
                continue
            info = keyword_info(key)
            if info is None:
                guess = suggest(key)
                if guess:
                    hint = (
                        f"unknown keyword; did you mean {guess!r}? validators ignore a misspelt "
                        "keyword, so formcast fails closed"
                    )
                    self.unsupported(key, ctx.pointer, hint)
                elif self.options.unknown_keywords == "error":
                    self.unsupported(key, ctx.pointer, "unknown keyword (unknown_keywords='error')")
                else:
                    self.ignored.append(
                        f"{key} at {ctx.pointer} (unknown keyword, treated as an annotation)"
                    )
            elif info.status == "unsupported" and key not in ("$dynamicRef", "$recursiveRef"):
                self.unsupported(key, ctx.pointer, info.note)

    def _foreign_keyword(self, key: str, ctx: Ctx) -> None:
        """``key`` is a keyword of another draft than ``ctx.draft``, where it would change the
        meaning of this draft's keywords: an annotation there (as for validators), listed in the
        warnings, or fails closed with ``unknown_keywords="error"``."""
        hint = f"not a keyword of draft {ctx.draft}"
        if self.options.unknown_keywords == "error":
            self.unsupported(key, ctx.pointer, f"{hint} (unknown_keywords='error')")
        else:
            self.ignored.append(f"{key} at {ctx.pointer} ({hint}, treated as an annotation)")

    # -- per-type keywords --------------------------------------------------------------------
    def _typed(self, schema: dict[str, Any], ctx: Ctx) -> S:
        t = schema.get("type")
        if t is None:
            types = set(_TYPES)
            has_type_kw = any(k in schema for k in (*_NUM_KEYS, *_STR_KEYS, *_ARR_KEYS, *_OBJ_KEYS))
            if not has_type_kw:
                return ANY
        else:
            tl = [t] if isinstance(t, str) else t
            if not isinstance(tl, list) or not all(isinstance(x, str) and x in _TYPES for x in tl):
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: bad type {t!r}")
            types = set(tl)
        nodes: list[S] = []
        if "null" in types:
            nodes.append(SNull())
        if "boolean" in types:
            nodes.append(SBool())
        if "number" in types or "integer" in types:
            nodes.append(self._number(schema, "number" not in types, ctx))
        if "string" in types:
            nodes.append(self._string(schema, ctx))
        if "array" in types:
            nodes.append(self._array(schema, ctx))
        if "object" in types:
            nodes.append(self._object(schema, ctx))
        return self.union(nodes)

    def _num_value(self, schema: dict[str, Any], key: str, ctx: Ctx) -> Decimal:
        v = schema[key]
        # (an int is never tested with isfinite: 10**400 does not fit a float)
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and not math.isfinite(v))
        ):
            raise ConfigurationError(f"invalid schema at {ctx.pointer}: {key} must be a number")
        return to_decimal(v)

    def _number(self, schema: dict[str, Any], integer: bool, ctx: Ctx) -> S:
        node = SNum(integer=integer)
        if "minimum" in schema:
            node = _tighten(node, self._num_value(schema, "minimum", ctx), False, low=True)
        if "maximum" in schema:
            node = _tighten(node, self._num_value(schema, "maximum", ctx), False, low=False)
        for key, low, base in (
            ("exclusiveMinimum", True, "minimum"),
            ("exclusiveMaximum", False, "maximum"),
        ):
            if key not in schema:
                continue
            v = schema[key]
            if isinstance(v, bool):
                if v and base in schema:  # draft-4 modifier
                    node = _tighten(node, self._num_value(schema, base, ctx), True, low=low)
            else:
                node = _tighten(node, self._num_value(schema, key, ctx), True, low=low)
        if "multipleOf" in schema:
            m = self._num_value(schema, "multipleOf", ctx)
            if m <= 0:
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: multipleOf must be > 0")
            node = replace(node, multiples=(Fraction(m),))
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in json_formats.NUMBER_FORMATS:
            lo, hi = json_formats.NUMBER_FORMATS[fmt]
            node = _tighten(node, Decimal(lo), False, low=True)
            node = _tighten(node, Decimal(hi), False, low=False)
        return node

    def _string(self, schema: dict[str, Any], ctx: Ctx) -> S:
        node = SStr()
        if "minLength" in schema:
            node = replace(node, min_len=_nonneg_int(schema["minLength"], ctx.pointer, "minLength"))
        if "maxLength" in schema:
            node = replace(node, max_len=_nonneg_int(schema["maxLength"], ctx.pointer, "maxLength"))
        if "pattern" in schema:
            p = schema["pattern"]
            if not isinstance(p, str):
                raise ConfigurationError(
                    f"invalid schema at {ctx.pointer}: pattern must be a string"
                )
            if self._pattern_ok(p, ctx.child("pattern")) and not _universal_pattern(p):
                node = replace(node, patterns=(p,))
        if "format" in schema and self.options.format_assertion:
            f = schema["format"]
            if not isinstance(f, str):
                raise ConfigurationError(
                    f"invalid schema at {ctx.pointer}: format must be a string"
                )
            if json_formats.format_node(f) is not None:
                if f not in json_formats.ANNOTATION_FORMATS:
                    node = replace(node, formats=(f,))
            elif f not in json_formats.NUMBER_FORMATS:
                self.unsupported(
                    "format", ctx.child("format").pointer, f"unknown format {f!r} (fails closed)"
                )
        return node

    def _pattern_ok(self, p: str, ctx: Ctx) -> bool:
        try:
            pattern_node(p)
        except CompileBudgetError:
            raise
        except GrammarError as e:
            self.unsupported("pattern", ctx.pointer, f"{p!r}: {e}")
            return False
        return True

    def _array(self, schema: dict[str, Any], ctx: Ctx) -> S:
        node = SArr(where=ctx.pointer)
        items = schema.get("items")
        prefix_src: list[Any] | None = None
        rest_src: Any = None
        rest_key = ""
        # not a keyword before 2020-12: a schema-form ``items`` applies to every item there
        # (reading it as 2020-12 would exempt the first items from ``items``)
        own_prefix = ctx.draft == "2020-12"
        if not own_prefix and "prefixItems" in schema:
            self._foreign_keyword("prefixItems", ctx)
        if isinstance(items, list):
            prefix_src = items
            prefix_key = "items"
            if "additionalItems" in schema:
                rest_src, rest_key = schema["additionalItems"], "additionalItems"
        else:
            if own_prefix and isinstance(schema.get("prefixItems"), list):
                prefix_src = schema["prefixItems"]
                prefix_key = "prefixItems"
            if "items" in schema:
                rest_src, rest_key = items, "items"
        if prefix_src is not None:
            prefix = tuple(
                self.normalize(s, ctx.child(prefix_key, i)) for i, s in enumerate(prefix_src)
            )
            node = replace(node, prefix=prefix, eval_prefix=len(prefix))
        if rest_key:
            node = replace(node, items=self.normalize(rest_src, ctx.child(rest_key)), eval_all=True)
        if "minItems" in schema:
            node = replace(node, min_items=_nonneg_int(schema["minItems"], ctx.pointer, "minItems"))
        if "maxItems" in schema:
            node = replace(node, max_items=_nonneg_int(schema["maxItems"], ctx.pointer, "maxItems"))
        if schema.get("uniqueItems") is True:
            node = replace(node, unique=True)
        if "contains" in schema:
            c = self.normalize(schema["contains"], ctx.child("contains"))
            lo, hi = 1, None
            if ctx.draft not in _LEGACY:
                if "minContains" in schema:
                    lo = _nonneg_int(schema["minContains"], ctx.pointer, "minContains")
                if "maxContains" in schema:
                    hi = _nonneg_int(schema["maxContains"], ctx.pointer, "maxContains")
            if lo > 0 or hi is not None:
                node = replace(node, contains=((c, lo, hi),))
        return node

    def _object(self, schema: dict[str, Any], ctx: Ctx) -> S:
        props_src = schema.get("properties", {})
        if not isinstance(props_src, dict):
            raise ConfigurationError(
                f"invalid schema at {ctx.pointer}: properties must be an object"
            )
        pats_src = schema.get("patternProperties", {})
        if not isinstance(pats_src, dict):
            raise ConfigurationError(
                f"invalid schema at {ctx.pointer}: patternProperties must be an object"
            )
        patterns: list[tuple[str, S]] = []
        for p, sub in pats_src.items():
            pctx = ctx.child("patternProperties", p)
            value = self.normalize(sub, pctx)
            if self._pattern_ok(p, pctx):
                patterns.append((p, value))
            # lenient: an unusable pattern's schema is dropped (its keys fall to additional)
        if "additionalProperties" in schema:
            additional = self.normalize(
                schema["additionalProperties"], ctx.child("additionalProperties")
            )
            implicit = False
        else:
            additional, implicit = ANY, True
        rule = KeyRule(tuple(patterns), additional, frozenset())
        names: tuple[S, ...] = ()
        if "propertyNames" in schema:
            names = (self.normalize(schema["propertyNames"], ctx.child("propertyNames")),)
        obj = SObj(
            rules=(rule,),
            names=names,
            eval_keys=frozenset(props_src),
            eval_patterns=tuple(p for p, _ in patterns),
            eval_all="additionalProperties" in schema,
            where=ctx.pointer,
            declared=tuple(props_src),
        )
        if implicit:
            self.implicit_rules.add(id(rule))
        for k in props_src:
            if _lone_surrogate(k):
                _check_utf8_value(k, ctx.child("properties", k).pointer, "properties")
        props: dict[str, S] = {}
        for k, sub in props_src.items():
            value = self.normalize(sub, ctx.child("properties", k))
            props[k] = self.conj(value, self._rule_patterns(rule, k), ctx)
            props[k] = self.conj(props[k], self._names_gate(names, k, ctx), ctx)
        req_src = schema.get("required", [])
        if isinstance(req_src, bool):  # draft 3 style: ignore (not a draft we compile)
            req_src = []
        if not isinstance(req_src, list) or not all(isinstance(x, str) for x in req_src):
            raise ConfigurationError(
                f"invalid schema at {ctx.pointer}: required must be a list of strings"
            )
        _check_utf8_value(req_src, ctx.child("required").pointer, "required")
        for k in req_src:
            if k not in props:
                props[k] = self.conj(self._key_effect(obj, k, ctx), ANY, ctx)
        obj = replace(obj, props=props, required=frozenset(req_src))
        if "minProperties" in schema:
            obj = replace(
                obj, min_props=_nonneg_int(schema["minProperties"], ctx.pointer, "minProperties")
            )
        if "maxProperties" in schema:
            obj = replace(
                obj, max_props=_nonneg_int(schema["maxProperties"], ctx.pointer, "maxProperties")
            )
        return obj

    def _rule_patterns(self, rule: KeyRule, key: str) -> S:
        """The conjunction of the pattern schemas of ``rule`` whose pattern matches ``key``."""
        out: S = ANY
        for p, sub in rule.patterns:
            if node_matches(pattern_node(p), key):
                out = sub if isinstance(out, SAny) else self.conj(out, sub, None)
        return out

    def rule_effect(self, rule: KeyRule, key: str) -> S:
        """What ``rule`` requires of the value of an undeclared ``key``."""
        if key in rule.exempt:
            return ANY
        matched = [sub for p, sub in rule.patterns if node_matches(pattern_node(p), key)]
        if not matched:
            return rule.additional
        return self.conj_all(matched, None)

    def _names_gate(self, names: tuple[S, ...], key: str, ctx: Ctx | None) -> S:
        for n in names:
            if not self.accepts(n, key, ctx):
                return NOTHING_S
        return ANY

    def _key_effect(self, obj: SObj, key: str, ctx: Ctx | None) -> S:
        """The schema an object node imposes on the value of ``key`` (declared or not)."""
        if key in obj.props:
            return obj.props[key]
        out = self._names_gate(obj.names, key, ctx)
        for rule in obj.rules:
            if isinstance(out, SNothing):
                break
            out = self.conj(out, self.rule_effect(rule, key), ctx)
        return out

    # -- dependencies, conditionals, unevaluated ----------------------------------------------
    def _dependencies(self, schema: dict[str, Any], ctx: Ctx) -> list[tuple[str, S]]:
        out: list[tuple[str, S]] = []
        deps: list[tuple[str, Any, str]] = []
        for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            src = schema.get(kw)
            if src is None:
                continue
            if not isinstance(src, dict):
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: {kw} must be an object")
            for k, v in src.items():
                names = [k, v if isinstance(v, list) else []]
                _check_utf8_value(names, ctx.child(kw, k).pointer, kw)
                deps.append((k, v, kw))
        for key, v, kw in deps:
            if isinstance(v, list):
                if not all(isinstance(x, str) for x in v):
                    raise ConfigurationError(
                        f"invalid schema at {ctx.pointer}: {kw}/{key} must list strings"
                    )
                # the dependencies first: a document usually states them before the key
                order = dict.fromkeys([*v, key])
                present: S = SObj(props=dict.fromkeys(order, ANY), required=frozenset(order))
            else:
                sub = self.normalize(v, ctx.child(kw, key))
                present = self.conj(SObj(props={key: ANY}, required=frozenset([key])), sub, ctx)
            absent = SObj(props={key: NOTHING_S})
            out.append((kw, self.union([*_others("object"), absent, present])))
        return out

    def _if_then_else(self, schema: dict[str, Any], ctx: Ctx) -> S:
        cond = self.normalize(schema["if"], ctx.child("if"))
        then = self.normalize(schema["then"], ctx.child("then")) if "then" in schema else None
        other = self.normalize(schema["else"], ctx.child("else")) if "else" in schema else None
        if then is None:
            assert other is not None
            # (if ∧ ⊤) ∨ (¬if ∧ else) = if ∨ else; else's annotations dropped (conservative)
            return self.union([cond, strip_eval(other)])
        branch_then = self.conj(cond, then, ctx)
        neg = self._negate_or_fail(cond, ctx.child("if"), "if")
        branch_else = neg if other is None else self.conj(neg, other, ctx)
        return self.union([branch_then, branch_else])

    def _unevaluated(self, s: S, u: S, kind: str, ctx: Ctx) -> S:
        """Apply ``unevaluatedProperties``/``unevaluatedItems`` = ``u`` to every branch."""
        if isinstance(u, SAny):
            return mark_all_evaluated(s, kind)
        if isinstance(s, SRef):
            try:
                s = self.resolve(s.key)
            except _Pending:
                raise UnsupportedFeatureError(
                    f"unevaluated{'Properties' if kind == 'object' else 'Items'}",
                    ctx.pointer,
                    "combined with a recursive $ref",
                ) from None
            return self._unevaluated(s, u, kind, ctx)
        if isinstance(s, SAny):
            return self._unevaluated(self.union([_whole(k) for k in _all_kinds()]), u, kind, ctx)
        if isinstance(s, SUnion):
            return self.union([self._unevaluated(i, u, kind, ctx) for i in s.items])
        if isinstance(s, SConst):
            keep: list[Any] = []
            for v in s.values:
                if kind == "object" and isinstance(v, dict):
                    if all(self.accepts(u, x, ctx) for x in v.values()):
                        keep.append(v)
                elif kind == "array" and isinstance(v, list):
                    if all(self.accepts(u, x, ctx) for x in v):
                        keep.append(v)
                else:
                    keep.append(v)
            return SConst(tuple(keep))
        if kind == "object" and isinstance(s, SObj) and not s.eval_all:
            props = {}
            for k, v in s.props.items():
                evaluated = k in s.eval_keys or any(
                    node_matches(pattern_node(p), k) for p in s.eval_patterns
                )
                props[k] = v if evaluated else self.conj(v, u, ctx)
            rule = KeyRule(tuple((p, ANY) for p in s.eval_patterns), u, s.eval_keys)
            return replace(s, props=props, rules=(*s.rules, rule), eval_all=True)
        if kind == "array" and isinstance(s, SArr) and not s.eval_all:
            n = max(len(s.prefix), s.eval_prefix)
            prefix = tuple(
                s.at(i) if i < s.eval_prefix else self.conj(s.at(i), u, ctx) for i in range(n)
            )
            return replace(s, prefix=prefix, items=self.conj(s.items, u, ctx), eval_all=True)
        return s

    def _negate_or_fail(self, s: S, ctx: Ctx, keyword: str) -> S:
        try:
            return self.negate(s, ctx)
        except _Pending:
            self.unsupported(keyword, ctx.pointer, "negation of a recursive $ref")
            return ANY
        except UnsupportedFeatureError as e:
            if self.options.lenient:
                self.ignored.append(f"{keyword} at {ctx.pointer} ({e})")
                return ANY
            raise

    # -- oneOf --------------------------------------------------------------------------------
    def one_of(self, branches: list[S], ctx: Ctx) -> S:
        n = len(branches)
        overlaps: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                if not self.disjoint(branches[i], branches[j], ctx):
                    overlaps[i].append(j)
                    overlaps[j].append(i)
        if not any(overlaps):
            return self.union(branches)
        try:
            out = []
            for i, b in enumerate(branches):
                parts = [b] + [strip_eval(self.negate(branches[j], ctx)) for j in overlaps[i]]
                out.append(self.conj_all(parts, ctx))
            return self.union(out)
        except CompileBudgetError:
            raise
        except (UnsupportedFeatureError, _Pending, LimitExceededError) as e:
            if self.options.oneof_as_anyof:
                self.ignored.append(f"oneOf at {ctx.pointer} compiled as anyOf")
                return self.union(branches)
            hint = (
                "its branches may overlap and their exact exclusion cannot be built "
                f"({e}); set JsonSchemaOptions(oneof_as_anyof=True) to accept any branch"
            )
            self.unsupported("oneOf", ctx.pointer, hint)
            return self.union(branches)

    def disjoint(self, a: S, b: S, ctx: Ctx | None) -> bool:
        """True only when no value matches both (False: maybe overlapping)."""
        quick = self._quick_disjoint(a, b, 0)
        if quick is not None:
            return quick
        saved = self._budget
        self._budget = _DISJOINT_BUDGET
        try:
            return self.is_empty(self.conj(a, b, ctx))
        except CompileBudgetError:
            raise
        except (UnsupportedFeatureError, _Pending, LimitExceededError, _OutOfBudget):
            return False
        finally:
            self._budget = saved

    def _top(self, s: S, depth: int) -> S | None:
        if isinstance(s, SRef):
            if depth > 20:
                return None
            try:
                return self._top(self.resolve(s.key), depth + 1)
            except _Pending:
                return None
        return s

    def _kinds(self, s: S, depth: int = 0) -> set[str] | None:
        """The JSON types ``s`` may have (None: unknown)."""
        s2 = self._top(s, depth)
        if s2 is None:
            return None
        if isinstance(s2, SAny):
            return set(_all_kinds())
        if isinstance(s2, SNothing):
            return set()
        if isinstance(s2, SUnion):
            out: set[str] = set()
            for i in s2.items:
                got = self._kinds(i, depth + 1)
                if got is None:
                    return None
                out |= got
            return out
        if isinstance(s2, SConst):
            return {_value_kind(v) for v in s2.values}
        kind = _kind(s2)
        return {kind} if kind else None

    def _quick_disjoint(self, a: S, b: S, depth: int) -> bool | None:
        """Cheap proofs: different types, or an object discriminator (a required key whose
        constant values differ).  None when undecided."""
        ka, kb = self._kinds(a), self._kinds(b)
        if ka is not None and kb is not None and not (ka & kb):
            return True
        ta, tb = self._top(a, depth), self._top(b, depth)
        if isinstance(ta, SObj) and isinstance(tb, SObj):
            for k in ta.props.keys() & tb.props.keys():
                if k not in ta.required and k not in tb.required:
                    continue
                va, vb = self._top(ta.props[k], depth), self._top(tb.props[k], depth)
                if (
                    isinstance(va, SConst)
                    and isinstance(vb, SConst)
                    and not any(json_equal(x, y) for x in va.values for y in vb.values)
                ):
                    return True
        return None

    # -- union / intersection -----------------------------------------------------------------
    def union(self, items: Iterable[S]) -> S:
        charge(6)  # the compile's fuel (and deadline)
        flat: list[S] = []
        for it in items:
            parts = it.items if isinstance(it, SUnion) else (it,)
            for p in parts:
                if isinstance(p, SNothing):
                    continue
                if isinstance(p, SConst) and not p.values:
                    continue
                flat.append(p)
        charge(3 * len(flat))
        if not flat:
            return NOTHING_S
        if len(flat) == 1:
            return flat[0]
        if len(flat) > self.options.max_union:
            raise LimitExceededError(
                "max_union", self.options.max_union, "alternatives after distributing combinators"
            )
        return SUnion(tuple(flat))

    def conj_all(self, parts: list[S], ctx: Ctx | None) -> S:
        out: S = ANY
        for p in parts:
            out = self.conj(out, p, ctx)
            if isinstance(out, SNothing):
                break
        return out

    def conj(self, a: S, b: S, ctx: Ctx | None) -> S:
        charge(18)  # the compile's fuel (and deadline; measured: ~10 us a call with its merges)
        if self._budget is not None:
            self._budget -= 1
            if self._budget < 0:
                raise _OutOfBudget
        if isinstance(a, SNothing) or isinstance(b, SNothing):
            return NOTHING_S
        if isinstance(a, SAny):
            return b
        if isinstance(b, SAny):
            return a
        if isinstance(a, SRef) or isinstance(b, SRef):
            if isinstance(a, SRef) and isinstance(b, SRef) and a.key == b.key:
                return a
            if isinstance(a, SRef):
                return self._conj_ref(a, b, ctx, ref_first=True)
            assert isinstance(b, SRef)
            return self._conj_ref(b, a, ctx, ref_first=False)
        if isinstance(a, SUnion):
            return self.union(self.conj(i, b, ctx) for i in a.items)
        if isinstance(b, SUnion):
            return self.union(self.conj(a, i, ctx) for i in b.items)
        if isinstance(a, SConst):
            return SConst(tuple(_typed_value(v, b) for v in a.values if self.accepts(b, v, ctx)))
        if isinstance(b, SConst):
            return SConst(tuple(_typed_value(v, a) for v in b.values if self.accepts(a, v, ctx)))
        if type(a) is not type(b):
            return NOTHING_S
        if isinstance(a, (SNull, SBool)):
            return a
        if isinstance(a, SNum) and isinstance(b, SNum):
            return _merge_num(a, b)
        if isinstance(a, SStr) and isinstance(b, SStr):
            return _merge_str(a, b)
        if isinstance(a, SArr) and isinstance(b, SArr):
            return self._merge_arr(a, b, ctx)
        if isinstance(a, SObj) and isinstance(b, SObj):
            return self._merge_obj(a, b, ctx)
        raise AssertionError(f"conj of {type(a).__name__}")  # pragma: no cover

    def _conj_ref(self, ref: SRef, other: S, ctx: Ctx | None, *, ref_first: bool) -> S:
        """``ref ∧ other`` (or ``other ∧ ref``: the order decides the property order)."""
        self._ref_depth += 1
        try:
            if self._ref_depth > self.options.max_ref_depth:
                raise LimitExceededError(
                    "max_ref_depth", self.options.max_ref_depth, "merging $ref chains"
                )
            try:
                target = self.resolve(ref.key)
            except _Pending:
                key = f"{ref.key}&{id(other)}" if ref_first else f"{id(other)}&{ref.key}"
                if key not in self.defs and key not in self._thunks:
                    self._keep.append(other)
                    self.def_names[key] = self.def_names.get(ref.key, ref.key) + " (merged)"
                    if ref_first:
                        self._thunks[key] = lambda: self.conj(self.resolve(ref.key), other, ctx)
                    else:
                        self._thunks[key] = lambda: self.conj(other, self.resolve(ref.key), ctx)
                return SRef(key)
            return self.conj(target, other, ctx) if ref_first else self.conj(other, target, ctx)
        finally:
            self._ref_depth -= 1

    def _merge_arr(self, a: SArr, b: SArr, ctx: Ctx | None) -> S:
        n = max(len(a.prefix), len(b.prefix))
        prefix = tuple(self.conj(a.at(i), b.at(i), ctx) for i in range(n))
        lo = max(a.min_items, b.min_items)
        his = [h for h in (a.max_items, b.max_items) if h is not None]
        return SArr(
            prefix=prefix,
            items=self.conj(a.items, b.items, ctx),
            min_items=lo,
            max_items=min(his) if his else None,
            contains=a.contains + b.contains,
            unique=a.unique or b.unique,
            eval_prefix=max(a.eval_prefix, b.eval_prefix),
            eval_all=a.eval_all or b.eval_all,
            where=a.where or b.where,
        )

    def _merge_obj(self, a: SObj, b: SObj, ctx: Ctx | None) -> S:
        declared = a.declared + tuple(k for k in b.declared if k not in a.declared)
        order = dict.fromkeys([*declared, *a.props, *b.props])
        props: dict[str, S] = {}
        for k in order:
            props[k] = self.conj(self._key_effect(a, k, ctx), self._key_effect(b, k, ctx), ctx)
        his = [h for h in (a.max_props, b.max_props) if h is not None]
        return SObj(
            props=props,
            required=a.required | b.required,
            rules=a.rules + b.rules,
            names=a.names + b.names,
            min_props=max(a.min_props, b.min_props),
            max_props=min(his) if his else None,
            eval_keys=a.eval_keys | b.eval_keys,
            eval_patterns=a.eval_patterns
            + tuple(p for p in b.eval_patterns if p not in a.eval_patterns),
            eval_all=a.eval_all or b.eval_all,
            where=a.where or b.where,
            declared=declared,
            witnesses=a.witnesses + b.witnesses,
        )

    # -- value check --------------------------------------------------------------------------
    def accepts(self, s: S, v: Any, ctx: Ctx | None, depth: int = 0) -> bool:
        """Exact: is the JSON value ``v`` in the language of ``s``?"""
        if depth > self.options.max_ref_depth + 200:
            raise LimitExceededError(
                "max_ref_depth", self.options.max_ref_depth, "checking a value"
            )
        if isinstance(s, SAny):
            return True
        if isinstance(s, SNothing):
            return False
        if isinstance(s, SRef):
            try:
                target = self.resolve(s.key)
            except _Pending:
                raise UnsupportedFeatureError(
                    "enum/const", ctx.pointer if ctx else "", "checked against a recursive $ref"
                ) from None
            return self.accepts(target, v, ctx, depth + 1)
        if isinstance(s, SUnion):
            return any(self.accepts(i, v, ctx, depth + 1) for i in s.items)
        if isinstance(s, SConst):
            return any(json_equal(v, w) for w in s.values)
        if isinstance(s, SNull):
            return v is None
        if isinstance(s, SBool):
            return isinstance(v, bool)
        if isinstance(s, SNum):
            return _num_accepts(s, v)
        if isinstance(s, SStr):
            return self._str_accepts(s, v)
        if isinstance(s, SArr):
            return self._arr_accepts(s, v, ctx, depth)
        if isinstance(s, SObj):
            return self._obj_accepts(s, v, ctx, depth)
        raise AssertionError(type(s).__name__)  # pragma: no cover

    def _str_accepts(self, s: SStr, v: Any) -> bool:
        if not isinstance(v, str):
            return False
        n = len(v)
        if n < s.min_len or (s.max_len is not None and n > s.max_len):
            return False
        if v in s.excluded:
            return False
        for p in s.patterns:
            if not node_matches(pattern_node(p), v):
                return False
        for p in s.neg_patterns:
            if node_matches(pattern_node(p), v):
                return False
        for f in s.formats:
            fn = json_formats.format_node(f)
            if fn is None or not node_matches(fn, v):
                return False
        for f in s.neg_formats:
            fn = json_formats.format_node(f)
            if fn is None or node_matches(fn, v):
                return False
        return True

    def _arr_accepts(self, s: SArr, v: Any, ctx: Ctx | None, depth: int) -> bool:
        if not isinstance(v, list):
            return False
        n = len(v)
        if n < s.min_items or (s.max_items is not None and n > s.max_items):
            return False
        if not all(self.accepts(s.at(i), x, ctx, depth + 1) for i, x in enumerate(v)):
            return False
        for c, lo, hi in s.contains:
            k = sum(1 for x in v if self.accepts(c, x, ctx, depth + 1))
            if k < lo or (hi is not None and k > hi):
                return False
        if s.unique:
            for i in range(n):
                for j in range(i + 1, n):
                    if json_equal(v[i], v[j]):
                        return False
        return True

    def _obj_accepts(self, s: SObj, v: Any, ctx: Ctx | None, depth: int) -> bool:
        if not isinstance(v, dict):
            return False
        n = len(v)
        if n < s.min_props or (s.max_props is not None and n > s.max_props):
            return False
        if not s.required <= v.keys():
            return False
        for w in s.witnesses:
            if not any(
                k not in w.excluded
                and not self.accepts(self.rule_effect(w.rule, k), x, ctx, depth + 1)
                for k, x in v.items()
            ):
                return False
        for k, x in v.items():
            if k in s.props:
                if not self.accepts(s.props[k], x, ctx, depth + 1):
                    return False
                continue
            for nm in s.names:
                if not self.accepts(nm, k, ctx, depth + 1):
                    return False
            for rule in s.rules:
                if not self.accepts(self.rule_effect(rule, k), x, ctx, depth + 1):
                    return False
        return True

    # -- emptiness ----------------------------------------------------------------------------
    def is_empty(self, s: S, seen: frozenset[str] = frozenset()) -> bool:
        """True only when ``s`` certainly has no instance (False means "maybe not empty")."""
        if isinstance(s, SNothing):
            return True
        if isinstance(s, SConst):
            return not s.values
        if isinstance(s, SUnion):
            return all(self.is_empty(i, seen) for i in s.items)
        if isinstance(s, SRef):
            if s.key in seen:
                return False
            try:
                target = self.resolve(s.key)
            except _Pending:
                return False
            return self.is_empty(target, seen | {s.key})
        if isinstance(s, SNum):
            return num_empty(s)
        if isinstance(s, SStr):
            if s.max_len is not None and s.min_len > s.max_len:
                return True
            if s.content_free():
                return False
            parts = len(s.patterns) + len(s.formats) + len(s.neg_patterns) + len(s.neg_formats)
            if parts == 1 and not s.neg_patterns and not s.neg_formats and not s.excluded:
                # one positive regular constraint: emptiness only through the length bounds
                node = (
                    pattern_node(s.patterns[0])
                    if s.patterns
                    else json_formats.format_node(s.formats[0])
                )
                if node is None:
                    return False
                got = restrict_length(node, s.min_len, s.max_len)
                if got is not None:
                    return isinstance(got, Nothing)
            from .emit import string_dfa

            try:
                return string_dfa(s, self.options).is_empty()
            except CompileBudgetError:
                raise
            except GrammarError:
                return False
        if isinstance(s, SArr):
            lo, hi = s.min_items, s.max_items
            if hi is not None and lo > hi:
                return True
            # (items past the prefix share one schema: never a loop over a huge minItems)
            if any(self.is_empty(s.at(i), seen) for i in range(min(lo, len(s.prefix) + 1))):
                return True
            return any(m > 0 and self.is_empty(c, seen) for c, m, _ in s.contains)
        if isinstance(s, SObj):
            if s.max_props is not None and (
                s.min_props > s.max_props or len(s.required) > s.max_props
            ):
                return True
            return any(self.is_empty(s.props[k], seen) for k in s.required)
        return False

    # -- negation -----------------------------------------------------------------------------
    def negate(self, s: S, ctx: Ctx | None) -> S:
        """The complement of ``s`` among all JSON values (no annotations survive)."""
        where = ctx.pointer if ctx else ""
        if isinstance(s, SAny):
            return NOTHING_S
        if isinstance(s, SNothing):
            return ANY
        if isinstance(s, SRef):
            # a definition of its own, built lazily: a recursive schema negates recursively
            key = f"not({s.key})"
            if key not in self.defs and key not in self._thunks:
                self.def_names[key] = "not " + self.def_names.get(s.key, s.key)
                target = s.key
                self._thunks[key] = lambda: self.negate(self.resolve(target), ctx)
                try:
                    self.resolve(key)  # eagerly when possible: errors surface here
                except _Pending:
                    pass  # the target is being built: negated when first needed
                except Exception:
                    self._thunks.pop(key, None)
                    raise
            return SRef(key)
        if isinstance(s, SUnion):
            return self.conj_all([self.negate(i, ctx) for i in s.items], ctx)
        if isinstance(s, SConst):
            return self._negate_const(s, where)
        kind = _kind(s)
        assert kind is not None
        atoms: list[S] = list(_others(kind))
        if isinstance(s, SNum):
            atoms.extend(_negate_num(s))
        elif isinstance(s, SStr):
            atoms.extend(_negate_str(s))
        elif isinstance(s, SArr):
            atoms.extend(self._negate_arr(s, ctx, where))
        elif isinstance(s, SObj):
            atoms.extend(self._negate_obj(s, ctx, where))
        return self.union(atoms)

    def _negate_const(self, s: SConst, where: str) -> S:
        nulls = any(v is None for v in s.values)
        bools = {v for v in s.values if isinstance(v, bool)}
        nums = tuple(
            to_decimal(v)
            for v in s.values
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        )
        strs = frozenset(v for v in s.values if isinstance(v, str))
        structured = [v for v in s.values if isinstance(v, (list, dict))]
        out: list[S] = []
        if structured:
            arrays: S = SArr()
            objects: S = SObj()
            for v in structured:
                if isinstance(v, list):
                    arrays = self.conj(arrays, self._not_array_value(v, where), None)
                else:
                    objects = self.conj(objects, self._not_object_value(v, where), None)
            out.extend([arrays, objects])
        else:
            out.extend([SArr(), SObj()])
        if not nulls:
            out.append(SNull())
        if not bools:
            out.append(SBool())
        elif len(bools) == 1:
            out.append(SConst((not next(iter(bools)),)))
        out.append(SNum(excluded=nums) if nums else SNum())
        out.append(SStr(excluded=strs) if strs else SStr())
        return self.union(out)

    def _not_value(self, v: Any, where: str) -> S:
        return self._negate_const(SConst((v,)), where)

    def _not_array_value(self, v: list[Any], where: str) -> S:
        """Arrays different from ``v``: another length, or some item different."""
        n = len(v)
        out: list[S] = [SArr(min_items=n + 1)]
        if n:
            out.append(SArr(max_items=n - 1))
        for i, x in enumerate(v):
            out.append(SArr(prefix=(ANY,) * i + (self._not_value(x, where),), min_items=i + 1))
        return self.union(out)

    def _not_object_value(self, v: dict[str, Any], where: str) -> S:
        """Objects different from ``v``: a key missing, a value different, or a key more.

        "A key more" is a member whose key is not one of ``v``'s (a witness that any value
        satisfies), not ``minProperties: len(v) + 1``: members may repeat a key, and an object
        that repeats one of ``v``'s keys can still equal ``v`` once a validator keeps the last
        value (``{"a":2,"a":1}`` is ``{"a":1}``)."""
        out: list[S] = [SObj(witnesses=(Witness(frozenset(v), KeyRule((), NOTHING_S)),))]
        for k, x in v.items():
            out.append(SObj(props={k: NOTHING_S}))
            out.append(SObj(props={k: self._not_value(x, where)}, required=frozenset([k])))
        return self.union(out)

    def _negate_arr(self, s: SArr, ctx: Ctx | None, where: str) -> list[S]:
        out: list[S] = []
        if s.min_items > 0:
            out.append(SArr(max_items=s.min_items - 1))
        if s.max_items is not None:
            out.append(SArr(min_items=s.max_items + 1))
        for i, p in enumerate(s.prefix):
            if not isinstance(p, SAny):
                neg = self.negate(p, ctx)
                out.append(SArr(prefix=(ANY,) * i + (neg,), min_items=i + 1))
        if not isinstance(s.items, SAny):
            if s.prefix:
                raise UnsupportedFeatureError(
                    "not", where, "negation of items after prefixItems is not compiled"
                )
            out.append(SArr(contains=((self.negate(s.items, ctx), 1, None),)))
        for c, lo, hi in s.contains:
            if lo > 0:
                out.append(SArr(contains=((c, 0, lo - 1),)))
            if hi is not None:
                out.append(SArr(contains=((c, hi + 1, None),)))
        if s.unique:
            raise UnsupportedFeatureError("not", where, "negation of uniqueItems is not compiled")
        return out

    def _negate_obj(self, s: SObj, ctx: Ctx | None, where: str) -> list[S]:
        out: list[S] = []
        for k, v in s.props.items():
            order = (k,) if k in s.declared else ()
            if not isinstance(v, SAny):
                out.append(
                    SObj(props={k: self.negate(v, ctx)}, required=frozenset([k]), declared=order)
                )
        for k in s.required:
            out.append(SObj(props={k: NOTHING_S}, declared=(k,) if k in s.declared else ()))
        if s.witnesses:
            raise UnsupportedFeatureError(
                "not", where, "negation of a negated additionalProperties is not compiled"
            )
        for rule in s.rules:
            trivial = isinstance(rule.additional, SAny) and all(
                isinstance(sub, SAny) for _, sub in rule.patterns
            )
            if not trivial:
                # some member outside the declared keys breaks the rule
                out.append(SObj(witnesses=(Witness(frozenset(s.props), rule),)))
        if any(not isinstance(n, SAny) for n in s.names):
            raise UnsupportedFeatureError("not", where, "negation of propertyNames is not compiled")
        if s.min_props > 0:
            out.append(SObj(max_props=s.min_props - 1))
        if s.max_props is not None:
            out.append(SObj(min_props=s.max_props + 1))
        return out


# -- helpers on nodes -----------------------------------------------------------------------------
class IntegerValue(int):
    """An ``enum``/``const`` number that ``type: integer`` also constrains: written without
    the ``N.0`` spelling (draft 4 does not count ``1.0`` as an integer; in later drafts it is
    one, so leaving it out only narrows the output)."""


def _typed_value(v: Any, other: S) -> Any:
    integral = isinstance(v, (int, float)) and not isinstance(v, bool)
    if integral and isinstance(other, SNum) and other.integer:
        return IntegerValue(int(to_decimal(v)))
    return v


def _all_kinds() -> tuple[str, ...]:
    return ("null", "boolean", "number", "string", "array", "object")


@metered_cache(4096)
def _universal_pattern(p: str) -> bool:
    """True when every string contains a match of ``p`` (e.g. ``""``, ``"a*"``, ``"(x)?"``)."""
    return _universal_pattern_uncached(p)


def _universal_pattern_uncached(p: str) -> bool:
    from ...automata import charfa

    try:
        d = charfa.dfa_from_node(pattern_node(p), 2_000)
    except CompileBudgetError:
        raise
    except GrammarError:
        return False
    return (
        d.num_states == 1
        and d.accept[0]
        and [(lo, hi) for lo, hi, _ in d.trans[0]] == list(ANY_CHAR.ranges)
    )


def strip_eval(s: S) -> S:
    """``s`` with no key/item counted as evaluated (conservative for ``unevaluated*``)."""
    if isinstance(s, SObj) and (s.eval_keys or s.eval_patterns or s.eval_all):
        return replace(s, eval_keys=frozenset(), eval_patterns=(), eval_all=False)
    if isinstance(s, SArr) and (s.eval_prefix or s.eval_all):
        return replace(s, eval_prefix=0, eval_all=False)
    if isinstance(s, SUnion):
        return SUnion(tuple(strip_eval(i) for i in s.items))
    return s


def mark_all_evaluated(s: S, kind: str) -> S:
    if isinstance(s, SAny):
        whole = SObj(eval_all=True) if kind == "object" else SArr(eval_all=True)
        return SUnion((*(k for k in map(_whole, _all_kinds()) if _kind(k) != kind), whole))
    if kind == "object" and isinstance(s, SObj):
        return replace(s, eval_all=True)
    if kind == "array" and isinstance(s, SArr):
        return replace(s, eval_all=True)
    if isinstance(s, SUnion):
        return SUnion(tuple(mark_all_evaluated(i, kind) for i in s.items))
    return s


def _tighten(node: SNum, v: Decimal, excl: bool, *, low: bool) -> SNum:
    if low:
        if node.lo is None or v > node.lo or (v == node.lo and excl):
            return replace(node, lo=v, lo_excl=excl)
        return node
    if node.hi is None or v < node.hi or (v == node.hi and excl):
        return replace(node, hi=v, hi_excl=excl)
    return node


def _lcm(a: Fraction, b: Fraction) -> Fraction:
    """The least positive rational whose multiples are the common multiples of ``a`` and ``b``."""
    return Fraction(math.lcm(a.numerator, b.numerator), math.gcd(a.denominator, b.denominator))


def _merge_num(a: SNum, b: SNum) -> S:
    multiples = a.multiples + b.multiples
    if len(multiples) > 1:
        m = multiples[0]
        for x in multiples[1:]:
            m = _lcm(m, x)
        multiples = (m,)
    out = replace(
        a,
        integer=a.integer or b.integer,
        non_integer=a.non_integer or b.non_integer,
        multiples=multiples,
        non_multiples=a.non_multiples
        + tuple(m for m in b.non_multiples if m not in a.non_multiples),
        excluded=a.excluded + tuple(x for x in b.excluded if x not in a.excluded),
    )
    if b.lo is not None:
        out = _tighten(out, b.lo, b.lo_excl, low=True)
    if b.hi is not None:
        out = _tighten(out, b.hi, b.hi_excl, low=False)
    if out.integer and out.non_integer:
        return NOTHING_S
    if num_empty(out):
        return NOTHING_S
    return out


def _merge_str(a: SStr, b: SStr) -> S:
    his = [h for h in (a.max_len, b.max_len) if h is not None]
    out = SStr(
        min_len=max(a.min_len, b.min_len),
        max_len=min(his) if his else None,
        patterns=a.patterns + tuple(p for p in b.patterns if p not in a.patterns),
        neg_patterns=a.neg_patterns + tuple(p for p in b.neg_patterns if p not in a.neg_patterns),
        formats=a.formats + tuple(f for f in b.formats if f not in a.formats),
        neg_formats=a.neg_formats + tuple(f for f in b.neg_formats if f not in a.neg_formats),
        excluded=a.excluded | b.excluded,
    )
    if out.max_len is not None and out.min_len > out.max_len:
        return NOTHING_S
    if set(out.patterns) & set(out.neg_patterns) or set(out.formats) & set(out.neg_formats):
        return NOTHING_S
    return out


def int_bounds(s: SNum) -> tuple[int | None, int | None]:
    """The integer range ``[lo, hi]`` allowed by the bounds of ``s`` (None: unbounded)."""
    lo: int | None = None
    hi: int | None = None
    if s.lo is not None:
        c = int(s.lo.to_integral_value(rounding=ROUND_CEILING))
        lo = c + 1 if (s.lo_excl and c == s.lo) else c
    if s.hi is not None:
        f = int(s.hi.to_integral_value(rounding=ROUND_FLOOR))
        hi = f - 1 if (s.hi_excl and f == s.hi) else f
    return lo, hi


def num_empty(s: SNum) -> bool:
    if s.integer and s.non_integer:
        return True
    if (
        s.lo is not None
        and s.hi is not None
        and (s.lo > s.hi or (s.lo == s.hi and (s.lo_excl or s.hi_excl)))
    ):
        return True
    if s.integer:
        lo, hi = int_bounds(s)
        if lo is not None and hi is not None and lo > hi:
            return True
    if len(s.multiples) == 1 and s.lo is not None and s.hi is not None:
        m = s.multiples[0]
        k_lo = math.ceil(Fraction(s.lo) / m)
        k_hi = math.floor(Fraction(s.hi) / m)
        if s.lo_excl and k_lo * m == Fraction(s.lo):
            k_lo += 1
        if s.hi_excl and k_hi * m == Fraction(s.hi):
            k_hi -= 1
        if k_lo > k_hi:
            return True
    return False


def _num_accepts(s: SNum, v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not math.isfinite(v):
        return False
    d = to_decimal(v)
    is_int = d == d.to_integral_value()
    if s.integer and not is_int:
        return False
    if s.non_integer and is_int:
        return False
    if s.lo is not None and (d < s.lo or (s.lo_excl and d == s.lo)):
        return False
    if s.hi is not None and (d > s.hi or (s.hi_excl and d == s.hi)):
        return False
    f = Fraction(d)
    for m in s.multiples:
        if (f / m).denominator != 1:
            return False
    for m in s.non_multiples:
        if (f / m).denominator == 1:
            return False
    return all(d != x for x in s.excluded)


def _negate_num(s: SNum) -> list[S]:
    out: list[S] = []
    if s.integer:
        out.append(SNum(non_integer=True))
    if s.non_integer:
        out.append(SNum(integer=True))
    if s.lo is not None:
        out.append(SNum(hi=s.lo, hi_excl=not s.lo_excl))
    if s.hi is not None:
        out.append(SNum(lo=s.hi, lo_excl=not s.hi_excl))
    for m in s.multiples:
        out.append(SNum(non_multiples=(m,)))
    for m in s.non_multiples:
        out.append(SNum(multiples=(m,)))
    if s.excluded:
        out.append(SConst(tuple(_decimal_to_json(x) for x in s.excluded)))
    return out


def _decimal_to_json(d: Decimal) -> int | float:
    if d == d.to_integral_value():
        return int(d)
    return float(d)


def _negate_str(s: SStr) -> list[S]:
    out: list[S] = []
    if s.min_len > 0:
        out.append(SStr(max_len=s.min_len - 1))
    if s.max_len is not None:
        out.append(SStr(min_len=s.max_len + 1))
    out.extend(SStr(neg_patterns=(p,)) for p in s.patterns)
    out.extend(SStr(patterns=(p,)) for p in s.neg_patterns)
    out.extend(SStr(neg_formats=(f,)) for f in s.formats)
    out.extend(SStr(formats=(f,)) for f in s.neg_formats)
    if s.excluded:
        out.append(SConst(tuple(sorted(s.excluded))))
    return out


def describe(s: S) -> str:  # pragma: no cover - debugging aid
    """A short text form of a node, for error messages and debugging."""
    if isinstance(s, SUnion):
        return "(" + " | ".join(describe(i) for i in s.items) + ")"
    if isinstance(s, SConst):
        return "const" + json.dumps(list(s.values), ensure_ascii=False, default=str)
    return type(s).__name__
