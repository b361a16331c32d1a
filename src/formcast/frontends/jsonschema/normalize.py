"""Raw JSON Schema → normalized nodes (:mod:`.nodes`): the keyword translation.

:class:`Normalizer` walks a schema once.  For each schema object it builds the per-type node of
its own keywords, then intersects it (:meth:`~.algebra.Algebra.conj`) with the nodes of
``$ref``, ``allOf``, ``anyOf``, ``oneOf``, ``enum``/``const``, ``not``, ``if``/``then``/``else``
and the dependency keywords, and finally applies ``unevaluated*``.  It is the top of four
layers, one module each: :mod:`.refs` (``$ref`` / ``$id`` / anchors / drafts and the
definitions table), :mod:`.checks` (the schema is JSON; exact instance checks),
:mod:`.algebra` (union, intersection, negation, emptiness of nodes) and this module.

Lifetime: one :class:`Normalizer` per compile; it holds the definitions table used later by the
emitter.
"""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ...errors import (
    CompileBudgetError,
    ConfigurationError,
    GrammarError,
    LimitExceededError,
    UnsupportedFeatureError,
)
from ...ir.nodes import ANY_CHAR
from ...limits import charge, metered_cache
from . import formats as json_formats
from .algebra import Algebra, all_kinds, mark_all_evaluated, others, strip_eval, tighten, whole_kind
from .checks import check_json, check_utf8_value, lone_surrogate
from .files import LocalResources
from .keywords import check_shapes, is_annotation, keyword_info, suggest
from .nodes import (
    ANY,
    NOTHING_S,
    KeyRule,
    S,
    SAny,
    SArr,
    SBool,
    SConst,
    SNull,
    SNum,
    SObj,
    SRef,
    SStr,
    SUnion,
    dedupe_values,
    to_decimal,
)
from .options import JsonSchemaOptions
from .refs import LEGACY_DRAFTS, Ctx, Pending, draft_of, enter_resource, root_context
from .regexlang import leading_lookaheads, node_matches, pattern_node

__all__ = ["Normalizer"]

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

#: the keywords of one type (what ``type`` would otherwise say); with ``type``
_TYPE_KEYWORDS = frozenset((*_NUM_KEYS, *_STR_KEYS, *_ARR_KEYS, *_OBJ_KEYS))
_TYPED_KEYS = _TYPE_KEYWORDS | {"type"}


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


class Normalizer(Algebra):
    """Normalizes one schema (see the module docstring)."""

    def __init__(
        self, schema: Any, options: JsonSchemaOptions, local: LocalResources | None = None
    ) -> None:
        check_json(schema)
        root = root_context(schema, options, local)
        super().__init__(options)
        self.local = local
        #: ids of the KeyRules whose ``additional`` comes from an absent additionalProperties
        self.implicit_rules: set[int] = set()
        self.root_ctx = root
        self.root_schema = schema
        #: :func:`.keywords.suggest` of each unknown keyword met (a schema repeats its own
        #: vendor keywords at many places); lives with the normalizer
        self._suggested: dict[str, str | None] = {}

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
        draft = draft_of(schema, ctx.draft) if "$schema" in schema else ctx.draft
        if not entered:
            ctx = enter_resource(ctx, schema, draft)
        elif draft != ctx.draft:
            ctx = Ctx(ctx.resolver, draft, ctx.pointer, ctx.depth)
        if "$ref" in schema and draft in LEGACY_DRAFTS:
            ref = schema["$ref"]
            if isinstance(ref, str):
                return self._lookup(ref, ctx)
        self._check_keywords(schema, ctx)
        # the parts are merged in the order their keywords appear in the schema object, so that
        # properties are generated in the order a reader sees them ("$ref" first when written
        # first, the schema's own "properties" first when they come before "allOf"...)
        keys = list(schema)
        typed_at = next((i for i, k in enumerate(keys) if k in _TYPED_KEYS), 0)
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
        lifted: tuple[Ctx, list[S]] | None = None
        if "allOf" in schema:
            for i, sub in enumerate(self._schema_list(schema, "allOf", ctx)):
                sctx = ctx.child("allOf", i)
                if lifted is None and "oneOf" not in schema and _only_one_of(sub):
                    # ``allOf [..., {oneOf}]`` is ``oneOf`` beside this object's other
                    # keywords: told apart inside them (the context of :meth:`one_of`)
                    self._check_keywords(sub, sctx)
                    subs = self._schema_list(sub, "oneOf", sctx)
                    branches = [
                        self.normalize(s, sctx.child("oneOf", k)) for k, s in enumerate(subs)
                    ]
                    lifted = (sctx.child("oneOf"), branches)
                    one_of_slot = len(ordered)
                    add("allOf", ANY)  # replaced below, as an own oneOf is
                    continue
                add("allOf", self.normalize(sub, sctx))
        if "anyOf" in schema:
            subs = self._schema_list(schema, "anyOf", ctx)
            add(
                "anyOf",
                self.union([self.normalize(s, ctx.child("anyOf", i)) for i, s in enumerate(subs)]),
            )
        if "oneOf" in schema:
            subs = self._schema_list(schema, "oneOf", ctx)
            one_of_branches = [self.normalize(s, ctx.child("oneOf", i)) for i, s in enumerate(subs)]
            one_of_slot = len(ordered)
            add("oneOf", ANY)  # replaced below, once the other keywords' parts are known
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
            check_utf8_value(values, ctx.child("enum").pointer, "enum")
            add("enum", SConst(dedupe_values(values)))
        if "const" in schema:
            check_utf8_value(schema["const"], ctx.child("const").pointer, "const")
            add("const", SConst((schema["const"],)))
        if "not" in schema:
            inner = self.normalize(schema["not"], ctx.child("not"))
            add("not", self._negate_or_fail(inner, ctx.child("not"), "not"))
        if "if" in schema and ("then" in schema or "else" in schema):
            add("if", self._if_then_else(schema, ctx))
        for kw, part in self._dependencies(schema, ctx):
            add(kw, part)
        ordered.sort(key=lambda t: (t[0], t[1]))
        if "oneOf" in schema or lifted is not None:
            # the other keywords' parts bound the values where the branches must be told apart
            if lifted is not None:
                one_ctx, one_of_branches = lifted
            else:
                one_ctx = ctx.child("oneOf")
            at = next(i for i, t in enumerate(ordered) if t[1] == one_of_slot)
            before = [t[2] for t in ordered[:at]]
            after = [t[2] for t in ordered[at + 1 :]]
            part = self.one_of(
                one_of_branches,
                one_ctx,
                lambda: (self.conj_all(before, ctx), self.conj_all(after, ctx)),
            )
            ordered[at] = (ordered[at][0], ordered[at][1], part)
        parts = [part for _, _, part in ordered]
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
        check_shapes(schema, ctx.draft, ctx.pointer)  # the meta-schema's value shapes (#29)
        for key in schema:
            if not isinstance(key, str):
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: non-string keyword")
            info = keyword_info(key)
            if info is not None and info.status == "annotation":
                continue
            if info is None and is_annotation(key):
                continue
            if info is None:
                if key in self._suggested:
                    guess = self._suggested[key]
                else:
                    guess = self._suggested[key] = suggest(key)
                if guess:
                    hint = (
                        f"unknown keyword; did you mean {guess!r}? (validators would silently "
                        "ignore the misspelt keyword)"
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
            has_type_kw = not _TYPE_KEYWORDS.isdisjoint(schema)
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
            node = tighten(node, self._num_value(schema, "minimum", ctx), False, low=True)
        if "maximum" in schema:
            node = tighten(node, self._num_value(schema, "maximum", ctx), False, low=False)
        for key, low, base in (
            ("exclusiveMinimum", True, "minimum"),
            ("exclusiveMaximum", False, "maximum"),
        ):
            if key not in schema:
                continue
            v = schema[key]
            if isinstance(v, bool):
                if v and base in schema:  # draft-4 modifier
                    node = tighten(node, self._num_value(schema, base, ctx), True, low=low)
            else:
                node = tighten(node, self._num_value(schema, key, ctx), True, low=low)
        if "multipleOf" in schema:
            m = self._num_value(schema, "multipleOf", ctx)
            if m <= 0:
                raise ConfigurationError(f"invalid schema at {ctx.pointer}: multipleOf must be > 0")
            node = replace(node, multiples=(Fraction(m),))
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in json_formats.NUMBER_FORMATS:
            lo, hi = json_formats.NUMBER_FORMATS[fmt]
            node = tighten(node, Decimal(lo), False, low=True)
            node = tighten(node, Decimal(hi), False, low=False)
        return node

    def _string(self, schema: dict[str, Any], ctx: Ctx) -> S:
        # the node's fields as the keywords are read, then one node (what a chain of
        # ``dataclasses.replace`` from ``SStr()`` would make, without the copies)
        kw: dict[str, Any] = {}
        if "minLength" in schema:
            kw["min_len"] = _nonneg_int(schema["minLength"], ctx.pointer, "minLength")
        if "maxLength" in schema:
            kw["max_len"] = _nonneg_int(schema["maxLength"], ctx.pointer, "maxLength")
        if "pattern" in schema:
            p = schema["pattern"]
            if not isinstance(p, str):
                raise ConfigurationError(
                    f"invalid schema at {ctx.pointer}: pattern must be a string"
                )
            split = leading_lookaheads(p)
            if split is not None:
                pos, neg = split
                ok = all(self._pattern_ok(x, ctx.child("pattern")) for x in (*pos, *neg))
                if ok:
                    pos = [x for x in pos if not _universal_pattern(x)]
                    kw["patterns"] = tuple(pos)
                    kw["neg_patterns"] = tuple(neg)
            elif self._pattern_ok(p, ctx.child("pattern")) and not _universal_pattern(p):
                kw["patterns"] = (p,)
        if "format" in schema and self.options.format_assertion:
            f = schema["format"]
            if not isinstance(f, str):
                raise ConfigurationError(
                    f"invalid schema at {ctx.pointer}: format must be a string"
                )
            if json_formats.format_node(f) is not None:
                if f not in json_formats.ANNOTATION_FORMATS:
                    kw["formats"] = (f,)
            elif f not in json_formats.NUMBER_FORMATS:
                self.unsupported("format", ctx.child("format").pointer, f"unknown format {f!r}")
        return SStr(**kw)

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
        # the node's fields as the keywords are read, then one node (as in :meth:`_string`)
        kw: dict[str, Any] = {"where": ctx.pointer}
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
            kw["prefix"] = prefix
            kw["eval_prefix"] = len(prefix)
        if rest_key:
            kw["items"] = self.normalize(rest_src, ctx.child(rest_key))
            kw["eval_all"] = True
        if "minItems" in schema:
            kw["min_items"] = _nonneg_int(schema["minItems"], ctx.pointer, "minItems")
        if "maxItems" in schema:
            kw["max_items"] = _nonneg_int(schema["maxItems"], ctx.pointer, "maxItems")
        if schema.get("uniqueItems") is True:
            kw["unique"] = True
        if "contains" in schema:
            c = self.normalize(schema["contains"], ctx.child("contains"))
            lo, hi = 1, None
            if ctx.draft not in LEGACY_DRAFTS:
                if "minContains" in schema:
                    lo = _nonneg_int(schema["minContains"], ctx.pointer, "minContains")
                if "maxContains" in schema:
                    hi = _nonneg_int(schema["maxContains"], ctx.pointer, "maxContains")
            if lo > 0 or hi is not None:
                kw["contains"] = ((c, lo, hi),)
        return SArr(**kw)

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
        # the node's fields but its members (the node without them is what a required key
        # that is not declared gets, :meth:`_key_effect`)
        kw: dict[str, Any] = {
            "rules": (rule,),
            "names": names,
            "eval_keys": frozenset(props_src),
            "eval_patterns": tuple(p for p, _ in patterns),
            "eval_all": "additionalProperties" in schema,
            "where": ctx.pointer,
            "declared": tuple(props_src),
        }
        if implicit:
            self.implicit_rules.add(id(rule))
        for k in props_src:
            if lone_surrogate(k):
                check_utf8_value(k, ctx.child("properties", k).pointer, "properties")
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
        check_utf8_value(req_src, ctx.child("required").pointer, "required")
        bare: SObj | None = None
        for k in req_src:
            if k not in props:
                if bare is None:
                    bare = SObj(**kw)
                props[k] = self.conj(self._key_effect(bare, k, ctx), ANY, ctx)
        kw["props"] = props
        kw["required"] = frozenset(req_src)
        if "minProperties" in schema:
            kw["min_props"] = _nonneg_int(schema["minProperties"], ctx.pointer, "minProperties")
        if "maxProperties" in schema:
            kw["max_props"] = _nonneg_int(schema["maxProperties"], ctx.pointer, "maxProperties")
        return SObj(**kw)

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
                check_utf8_value(names, ctx.child(kw, k).pointer, kw)
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
            out.append((kw, self.union([*others("object"), absent, present])))
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
            except Pending:
                raise UnsupportedFeatureError(
                    f"unevaluated{'Properties' if kind == 'object' else 'Items'}",
                    ctx.pointer,
                    "combined with a recursive $ref",
                ) from None
            return self._unevaluated(s, u, kind, ctx)
        if isinstance(s, SAny):
            return self._unevaluated(self.union([whole_kind(k) for k in all_kinds()]), u, kind, ctx)
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


@metered_cache(4096)
def _universal_pattern(p: str) -> bool:
    """True when every string contains a match of ``p`` (e.g. ``""``, ``"a*"``, ``"(x)?"``)."""
    return _universal_pattern_uncached(p)


def _universal_pattern_uncached(p: str) -> bool:
    from ...automata import charfa
    from ...ir.passes import node_nullable

    try:
        node = pattern_node(p)
        if not node_nullable(node, frozenset(), {}):
            return False  # (a universal pattern matches ""; this test is cheap, a DFA is not)
        d = charfa.dfa_from_node(node, 2_000)
    except CompileBudgetError:
        raise
    except GrammarError:
        return False
    return (
        d.num_states == 1
        and d.accept[0]
        and [(lo, hi) for lo, hi, _ in d.trans[0]] == list(ANY_CHAR.ranges)
    )


def _only_one_of(sub: Any) -> bool:
    """Whether the schema ``sub`` (an ``allOf`` item) is a ``oneOf`` and annotations only
    (no ``$id``, ``$anchor``...: nothing that changes how its branches resolve)."""
    return (
        isinstance(sub, dict)
        and "oneOf" in sub
        and all(
            k == "oneOf" or k == "$comment" or (is_annotation(k) and not k.startswith("$"))
            for k in sub
        )
    )
