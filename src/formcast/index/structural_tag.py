"""Structural tags: free text until a trigger, then a tagged structure, then free text again.

A *structural tag* describes an output that is mostly unconstrained but contains constrained
parts, the way tool calls sit in a model's prose: ``Let me check.<tool_call>{...}</tool_call>``.
This module holds the typed description (frozen dataclasses: :class:`StructuralTag` and its
formats :class:`TriggeredTags`, :class:`Tag`, :class:`JsonSchema`, ...), a reader of xgrammar's
JSON formats as vLLM and SGLang send them (:func:`parse_structural_tag`: the legacy
``{"type": "structural_tag", "structures": [...], "triggers": [...]}`` and the newer
``{"type": "structural_tag", "format": {...}}``), and the lowering to a
:mod:`formcast.constraints` object (:func:`structural_tag_constraint`), which
:meth:`~formcast.index.compiler.GrammarCompiler.compile_structural_tag` compiles into an ordinary
:class:`~formcast.index.compiled.CompiledGrammar`: the same runtime, masks and matcher as any
grammar, with the stop token allowed only where the whole output is complete.

How free text is compiled: the text between tags is the language "no trigger occurs", built as
an Aho-Corasick automaton over the characters of the triggers (and of ``excludes`` and, inside a
tag, of its end strings), written as a :class:`~formcast.constraints.StateMachine` whose
completing transitions lead into the tag.  So a trigger's first occurrence commits the output to
one of its tags (the name in ``<function=get_weather>`` selects that tag's schema), a partial
trigger at the end of the output is just text, and the free-text states are a handful of DFA
states whose masks (nearly the whole vocabulary) are computed once per state and then cached.

Semantics follow xgrammar's (checked differentially against xgrammar in the tests):
``triggered_tags`` allows any text where no trigger occurs; ``at_least_one`` makes the output
*start* with a tag; ``stop_after_first`` ends the output right after the first tag.  formcast
adds ``max_tags`` (at most that many tags; afterwards the triggers may not occur).  Token-level
formats (``token``, ``any_tokens``, ``token_triggered_tags``, ``dispatch``...) and the non-JSON
argument styles (``qwen_xml``...) fail closed with
:class:`~formcast.errors.UnsupportedFeatureError`.

Lifetime: the dataclasses are immutable values; lowering is a pure function.
"""

from __future__ import annotations

import json as _json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..constraints import core as C
from ..constraints.core import Constraint, _Lowering
from ..constraints.machine import StateMachine
from ..errors import ConstraintError, UnsupportedFeatureError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..ir import nodes as ir

__all__ = [
    "AnyText",
    "Choice",
    "ConstString",
    "Format",
    "GrammarFormat",
    "JsonSchema",
    "OptionalFormat",
    "Plus",
    "RegexFormat",
    "RepeatFormat",
    "Sequence",
    "Star",
    "StructuralTag",
    "Tag",
    "TagsWithSeparator",
    "TriggeredTags",
    "parse_structural_tag",
    "structural_tag_constraint",
]


def _tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return (value,)
    return tuple(value)


# -- the typed formats ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ConstString:
    """Exactly ``value``."""

    value: str


@dataclass(frozen=True)
class JsonSchema:
    """A JSON value valid against ``schema`` (dict, bool, JSON text or Pydantic model class),
    compiled as :meth:`~formcast.index.compiler.GrammarCompiler.compile_json_schema` does
    (``options``: its :class:`~formcast.frontends.jsonschema.options.JsonSchemaOptions`;
    ``None``: the compile's ``json_options``, else the defaults)."""

    schema: Any
    options: JsonSchemaOptions | None = None


@dataclass(frozen=True)
class RegexFormat:
    """A string ``pattern`` fully matches (ECMA-262, as ``compile_regex``)."""

    pattern: str


@dataclass(frozen=True)
class GrammarFormat:
    """A sentence of a GBNF (``syntax="ebnf"`` or ``"gbnf"``) or Lark (``"lark"``) grammar."""

    grammar: str
    syntax: str = "ebnf"


@dataclass(frozen=True)
class AnyText:
    """Any text in which none of ``excludes`` occurs.  As the whole content of a :class:`Tag`,
    the text also may not contain the tag's end strings: it runs until the first end."""

    excludes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "excludes", _tuple(self.excludes))


@dataclass(frozen=True)
class Sequence:
    """``elements`` one after the other."""

    elements: tuple[Format, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", _tuple(self.elements))


@dataclass(frozen=True)
class Choice:
    """Exactly one of ``elements`` (xgrammar's ``"or"``)."""

    elements: tuple[Format, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", _tuple(self.elements))


@dataclass(frozen=True)
class Tag:
    """``begin``, then ``content``, then one of the ``end`` strings."""

    begin: str
    content: Format
    end: str | tuple[str, ...] = ""

    @property
    def ends(self) -> tuple[str, ...]:
        return (self.end,) if isinstance(self.end, str) else tuple(self.end)


@dataclass(frozen=True)
class TriggeredTags:
    """Free text in which each occurrence of a trigger starts one of its tags.

    Args:
        triggers: strings that start a tag (each tag's ``begin`` starts with exactly one).
        tags: the tags; after a trigger, the rest of one of its tags' ``begin`` must follow
            (so ``<function=`` + the name selects the tag, and so the schema).
        at_least_one: the output must start with a tag (xgrammar's meaning).
        stop_after_first: the output ends right after the first tag.
        max_tags: at most this many tags (``None``: unbounded); afterwards the triggers may
            no longer occur in the text.
        excludes: strings that may not occur in the free text.
    """

    triggers: tuple[str, ...]
    tags: tuple[Tag, ...]
    at_least_one: bool = False
    stop_after_first: bool = False
    max_tags: int | None = None
    excludes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("triggers", "tags", "excludes"):
            object.__setattr__(self, name, _tuple(getattr(self, name)))


@dataclass(frozen=True)
class TagsWithSeparator:
    """Tags only (no other text), ``separator`` between consecutive ones; none at all unless
    ``at_least_one``; at most one with ``stop_after_first``."""

    tags: tuple[Tag, ...]
    separator: str = ""
    at_least_one: bool = False
    stop_after_first: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", _tuple(self.tags))


@dataclass(frozen=True)
class OptionalFormat:
    """``content`` or nothing."""

    content: Format


@dataclass(frozen=True)
class Star:
    """``content`` zero or more times."""

    content: Format


@dataclass(frozen=True)
class Plus:
    """``content`` one or more times."""

    content: Format


@dataclass(frozen=True)
class RepeatFormat:
    """``content`` between ``min`` and ``max`` times (``max=None`` or ``-1``: unbounded)."""

    content: Format
    min: int = 0
    max: int | None = None


Format = (
    ConstString
    | JsonSchema
    | RegexFormat
    | GrammarFormat
    | AnyText
    | Sequence
    | Choice
    | Tag
    | TriggeredTags
    | TagsWithSeparator
    | OptionalFormat
    | Star
    | Plus
    | RepeatFormat
)
_FORMAT_TYPES: tuple[type, ...] = Format.__args__


@dataclass(frozen=True)
class StructuralTag:
    """A whole output described by ``format`` (what ``compile_structural_tag`` compiles)."""

    format: Format

    @staticmethod
    def from_structures(
        structures: Iterable[Mapping[str, Any] | Tag], triggers: Iterable[str]
    ) -> StructuralTag:
        """The legacy form (xgrammar's ``StructuralTagItem`` list): each structure is
        ``{"begin", "schema", "end"}``; the output is text with these tags triggered by
        ``triggers``."""
        tags = []
        for i, s in enumerate(structures):
            if isinstance(s, Tag):
                tags.append(s)
                continue
            tags.append(_legacy_tag(s, f"structures[{i}]"))
        return StructuralTag(TriggeredTags(tuple(triggers), tuple(tags)))


# -- reading xgrammar's JSON ---------------------------------------------------------------------
def _bad(path: str, message: str) -> ConstraintError:
    return ConstraintError(f"structural tag: {message}", path=path)


def _field(obj: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...]) -> Any:
    if key not in obj:
        raise _bad(f"{path}.{key}", f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _bad(f"{path}.{key}", f"{key!r} must be {want}, got {type(value).__name__}")
    return value


def _opt(obj: Mapping[str, Any], key: str, path: str, kind: type, default: Any) -> Any:
    if obj.get(key) is None:
        return default
    return _field(obj, key, path, kind)


def _strings(obj: Mapping[str, Any], key: str, path: str, default: Any = ()) -> tuple[str, ...]:
    if obj.get(key) is None:
        if default is None:
            raise _bad(f"{path}.{key}", f"missing field {key!r}")
        return tuple(default)
    value = obj[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(f"{path}.{key}", f"{key!r} must be a list of strings")
    return tuple(value)


def _schema_value(value: Any, path: str) -> Any:
    if isinstance(value, str):
        try:
            return _json.loads(value)
        except ValueError as exc:
            raise _bad(path, f"the schema text is not JSON: {exc}") from None
    if not isinstance(value, (Mapping, bool)):
        raise _bad(path, f"a schema is an object, a bool or JSON text, got {type(value).__name__}")
    return value


def _legacy_tag(s: Mapping[str, Any], path: str) -> Tag:
    if not isinstance(s, Mapping):
        raise _bad(path, f"a structure is an object {{begin, schema, end}}, got {type(s).__name__}")
    begin = _field(s, "begin", path, str)
    end = _field(s, "end", path, str)
    if "schema" not in s:
        raise _bad(f"{path}.schema", "missing field 'schema'")
    return Tag(begin, JsonSchema(_schema_value(s["schema"], f"{path}.schema")), end)


_TOKEN_FORMATS = frozenset(
    {"token", "exclude_token", "any_tokens", "token_triggered_tags", "token_dispatch", "dispatch"}
)


def _read_format(obj: Any, path: str) -> Format:
    if not isinstance(obj, Mapping):
        raise _bad(path, f"a format is an object with a 'type', got {type(obj).__name__}")
    kind = obj.get("type")
    if kind == "const_string":
        return ConstString(_field(obj, "value", path, str))
    if kind == "json_schema":
        style = obj.get("style", "json")
        if style != "json":
            raise UnsupportedFeatureError(
                f"json_schema style {style!r}", path, "only style 'json' is supported"
            )
        if "json_schema" not in obj:
            raise _bad(f"{path}.json_schema", "missing field 'json_schema'")
        for key in ("any_order", "excludes"):
            if obj.get(key):
                raise UnsupportedFeatureError(f"json_schema {key}", path)
        options = None
        mw = obj.get("max_whitespace_cnt")
        if mw is not None:
            options = JsonSchemaOptions(
                whitespace="flexible",
                max_whitespace=_field(obj, "max_whitespace_cnt", path, int),
            )
        return JsonSchema(_schema_value(obj["json_schema"], f"{path}.json_schema"), options)
    if kind == "regex":
        if obj.get("excludes"):
            raise UnsupportedFeatureError("regex excludes", path)
        return RegexFormat(_field(obj, "pattern", path, str))
    if kind == "grammar":
        syntax = _opt(obj, "syntax", path, str, "ebnf")
        if syntax not in ("ebnf", "gbnf", "lark"):
            raise _bad(f"{path}.syntax", f"grammar syntax must be 'ebnf' or 'lark', got {syntax!r}")
        return GrammarFormat(_field(obj, "grammar", path, str), syntax)
    if kind == "any_text":
        for key in ("max_tokens", "max_chars"):
            if obj.get(key) is not None:
                raise UnsupportedFeatureError(
                    f"any_text {key}",
                    path,
                    "bound the text with GrammarCompiler.compile_reasoning(max_thinking_tokens=...)"
                    " or a regex such as [^]{0,N}",
                )
        return AnyText(_strings(obj, "excludes", path))
    if kind in ("sequence", "or"):
        elements = _field(obj, "elements", path, list)
        parts = tuple(_read_format(e, f"{path}.elements[{i}]") for i, e in enumerate(elements))
        if not parts:
            raise _bad(f"{path}.elements", f"a {kind} needs at least one element")
        return Sequence(parts) if kind == "sequence" else Choice(parts)
    if kind == "tag":
        return _read_tag(obj, path)
    if kind == "triggered_tags":
        tags = _field(obj, "tags", path, list)
        max_tags = obj.get("max_tags")
        if max_tags is not None:
            max_tags = _field(obj, "max_tags", path, int)
        return TriggeredTags(
            _strings(obj, "triggers", path, None),
            tuple(_read_tag(t, f"{path}.tags[{i}]") for i, t in enumerate(tags)),
            at_least_one=bool(_opt(obj, "at_least_one", path, bool, False)),
            stop_after_first=bool(_opt(obj, "stop_after_first", path, bool, False)),
            max_tags=max_tags,
            excludes=_strings(obj, "excludes", path),
        )
    if kind == "tags_with_separator":
        tags = _field(obj, "tags", path, list)
        return TagsWithSeparator(
            tuple(_read_tag(t, f"{path}.tags[{i}]") for i, t in enumerate(tags)),
            _field(obj, "separator", path, str),
            at_least_one=bool(_opt(obj, "at_least_one", path, bool, False)),
            stop_after_first=bool(_opt(obj, "stop_after_first", path, bool, False)),
        )
    if kind in ("optional", "star", "plus"):
        if "content" not in obj:
            raise _bad(f"{path}.content", "missing field 'content'")
        content = _read_format(obj["content"], f"{path}.content")
        if kind == "optional":
            return OptionalFormat(content)
        return Star(content) if kind == "star" else Plus(content)
    if kind == "repeat":
        if "content" not in obj:
            raise _bad(f"{path}.content", "missing field 'content'")
        lo = _field(obj, "min", path, int)
        hi = _field(obj, "max", path, int)
        return RepeatFormat(
            _read_format(obj["content"], f"{path}.content"), lo, None if hi < 0 else hi
        )
    if kind in _TOKEN_FORMATS or kind == "qwen_xml_parameter":
        raise UnsupportedFeatureError(
            f"structural tag format {kind!r}",
            path,
            "formcast constrains text: use string begins/triggers (a special token's text is "
            "not a text token) and JSON arguments",
        )
    raise _bad(f"{path}.type", f"unknown format type {kind!r}")


def _read_tag(obj: Any, path: str) -> Tag:
    if not isinstance(obj, Mapping):
        raise _bad(path, f"a tag is an object, got {type(obj).__name__}")
    if obj.get("type", "tag") != "tag":
        raise _bad(f"{path}.type", f"expected a format of type 'tag', got {obj.get('type')!r}")
    begin = obj.get("begin")
    if not isinstance(begin, str):
        if isinstance(begin, Mapping):
            raise UnsupportedFeatureError(
                "tag begin as a token", f"{path}.begin", "give the begin as a string"
            )
        raise _bad(f"{path}.begin", "'begin' must be a string")
    end = obj.get("end")
    if isinstance(end, list) and end and all(isinstance(e, str) for e in end):
        ends: str | tuple[str, ...] = tuple(end)
    elif isinstance(end, str):
        ends = end
    elif isinstance(end, Mapping):
        raise UnsupportedFeatureError("tag end as a token", f"{path}.end", "give it as a string")
    else:
        raise _bad(f"{path}.end", "'end' must be a string or a non-empty list of strings")
    if "content" not in obj:
        raise _bad(f"{path}.content", "missing field 'content'")
    return Tag(begin, _read_format(obj["content"], f"{path}.content"), ends)


def parse_structural_tag(value: Any) -> StructuralTag:
    """Read a structural tag: a :class:`StructuralTag` or format value as it is; a ``dict``
    or JSON text in xgrammar's formats (the legacy ``{"type": "structural_tag", "structures":
    [{"begin", "schema", "end"}], "triggers": [...]}``, or ``{"type": "structural_tag",
    "format": {...}}``, or a bare format object ``{"type": "triggered_tags", ...}``).

    Raises:
        ConstraintError: malformed (the message names the field, e.g. ``format.tags[1].begin``).
        UnsupportedFeatureError: a token-level format, a non-JSON argument style.
    """
    if isinstance(value, StructuralTag):
        return value
    if isinstance(value, _FORMAT_TYPES):
        return StructuralTag(value)  # type: ignore[arg-type]
    if isinstance(value, (str, bytes)):
        try:
            value = _json.loads(value)
        except ValueError as exc:
            raise _bad("", f"the structural tag text is not JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise _bad(
            "",
            "expected a StructuralTag, a format value, or xgrammar's JSON (a dict or text), "
            f"got {type(value).__name__}",
        )
    if "structures" in value:
        structures = _field(value, "structures", "", list)
        return StructuralTag(
            TriggeredTags(
                _strings(value, "triggers", "", None),
                tuple(_legacy_tag(s, f"structures[{i}]") for i, s in enumerate(structures)),
            )
        )
    if value.get("type") == "structural_tag" or "format" in value:
        if "format" not in value:
            raise _bad("format", "missing field 'format' (or 'structures' and 'triggers')")
        return StructuralTag(_read_format(value["format"], "format"))
    return StructuralTag(_read_format(value, ""))


# -- lowering to constraint objects -------------------------------------------------------------
_SURROGATES = (0xD800, 0xDFFF)


@dataclass(frozen=True, slots=True, eq=False)
class _Chars(Constraint):
    """One character not in ``excluded`` (a code-point class; surrogates never)."""

    excluded: str
    kind: ClassVar[str] = "chars"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        ranges = ir.merge_ranges([(ord(c), ord(c)) for c in self.excluded] + [_SURROGATES])
        return ir.CharSet(ranges).negate()

    def _digest_parts(self) -> list[str] | None:
        return ["st-chars", self.excluded]


@dataclass(frozen=True, slots=True, eq=False)
class _GrammarPart(Constraint):
    """A sentence of an embedded GBNF or Lark grammar."""

    text: str
    syntax: str
    kind: ClassVar[str] = "grammar"
    _digest: str | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._set_digest()

    def _lower(self, lo: _Lowering, path: str) -> ir.Node:
        if self.syntax == "lark":
            from ..frontends.lark import parse_lark

            grammar = parse_lark(self.text, start="start")
        else:
            from ..frontends.gbnf import parse_gbnf

            grammar = parse_gbnf(self.text, start="root")
        return lo.embed(grammar, grammar.start)

    def _digest_parts(self) -> list[str] | None:
        return ["st-grammar", self.syntax, self.text]


class _Ctx:
    def __init__(self, json_options: JsonSchemaOptions | None) -> None:
        self.json_options = json_options
        self.machines = 0


def _text_machine(
    ctx: _Ctx,
    path: str,
    *,
    triggers: Mapping[str, Constraint],
    excludes: Iterable[str] = (),
    ends: Iterable[str] = (),
    at_least_one: Constraint | None = None,
    stop_after_first: bool = False,
    max_tags: int | None = None,
) -> Constraint:
    """Free text (no pattern occurs in it) with ``triggers`` leading into their constraint.

    States are ``(phase, prefix)``: ``prefix`` is the Aho-Corasick state (the longest suffix
    of the text that is a proper prefix of a pattern), ``phase`` the number of tags so far
    (capped where ``max_tags`` no longer matters).  With ``ends``, the text must finish with
    one of them (the end of an enclosing tag); without, every text state is accepting.
    ``at_least_one``: the output starts with that constraint (no text before it)."""
    ends = tuple(ends)
    excludes = tuple(excludes)
    patterns: dict[str, tuple[str, Constraint | None]] = {}
    for e in excludes:
        patterns.setdefault(e, ("exclude", None))
    for e in ends:
        patterns[e] = ("end", None)
    for t, after in triggers.items():
        if t in patterns:
            raise _bad(path, f"the trigger {t!r} is also an excluded string or an end string")
        patterns[t] = ("trigger", after)
    if any(not p for p in patterns):
        raise _bad(path, "triggers, excludes and end strings must not be empty")
    prefixes = {""}
    for p in patterns:
        for i in range(1, len(p)):
            prefixes.add(p[:i])
    alphabet = sorted({c for p in patterns for c in p})

    def step(prefix: str, c: str) -> tuple[str, str | None]:
        s = prefix + c
        done = [p for p in patterns if s.endswith(p)]
        if done:
            return "done", max(done, key=len)
        k = max(len(q) for q in prefixes if s.endswith(q))
        return "go", s[len(s) - k :]

    # phases: 0, 1, ..., cap; a trigger in the last phase is forbidden when max_tags is reached
    unbounded = max_tags is None
    first = 1 if at_least_one is not None else 0
    last = first if unbounded else max_tags
    assert last is not None
    transitions: list[tuple[Any, Any, Any]] = []
    accepting: list[Any] = []
    end_state = ("end",)
    stop_state = ("stop",)
    used_stop = False

    def state(phase: int, prefix: str) -> tuple[Any, ...]:
        return ("text", phase, prefix)

    for phase in range(first, (last if last >= first else first) + 1):
        for prefix in sorted(prefixes):
            src = state(phase, prefix)
            if not ends:
                accepting.append(src)
            special = ""
            for c in alphabet:
                what, arg = step(prefix, c)
                if what == "go":
                    assert arg is not None
                    if arg == "":
                        continue  # into the class of ordinary characters below
                    special += c
                    transitions.append((src, c, state(phase, arg)))
                    continue
                special += c
                assert arg is not None
                kind, then = patterns[arg]
                if kind == "exclude":
                    continue
                if kind == "end":
                    transitions.append((src, c, end_state))
                    continue
                assert then is not None
                can_take = unbounded or phase < last
                if not can_take:
                    continue  # max_tags reached: the trigger may not occur any more
                if stop_after_first:
                    transitions.append((src, C.seq(c, then), stop_state))
                    used_stop = True
                else:
                    nxt = phase if unbounded else phase + 1
                    transitions.append((src, C.seq(c, then), state(nxt, "")))
            transitions.append((src, _Chars(special), state(phase, "")))
    if ends:
        accepting.append(end_state)
    if used_stop or (at_least_one is not None and stop_after_first):
        if ends:  # the enclosing tag's end still has to follow
            transitions.append((stop_state, C.select(list(ends)), end_state))
        else:
            accepting.append(stop_state)
    start: Any = state(first, "")
    if at_least_one is not None:
        start = ("first",)
        target = stop_state if stop_after_first else state(first, "")
        transitions.append((start, at_least_one, target))
    # drop states that cannot be reached (e.g. prefixes only reachable through a forbidden
    # trigger do not exist, but phases past max_tags=0 may): StateMachine refuses them
    reach = {start}
    changed = True
    while changed:
        changed = False
        for s, _, d in transitions:
            if s in reach and d not in reach:
                reach.add(d)
                changed = True
    transitions = [t for t in transitions if t[0] in reach]
    accepting = [a for a in dict.fromkeys(accepting) if a in reach]
    if not accepting:
        raise _bad(path, "this text admits no output at all")
    ctx.machines += 1
    return StateMachine(start, accepting, transitions)


def _tag_body(ctx: _Ctx, tag: Tag, path: str, skip: int = 0) -> Constraint:
    """``tag`` without the first ``skip`` characters of its begin."""
    ends = tag.ends
    if not ends or any(not isinstance(e, str) for e in ends):
        raise _bad(f"{path}.end", "a tag's end is a string or a non-empty list of strings")
    begin = tag.begin[skip:]
    content = tag.content
    if isinstance(content, AnyText) and any(ends):
        if not all(ends):
            raise _bad(f"{path}.end", "an any_text content needs non-empty end strings")
        text = _text_machine(
            ctx, f"{path}.content", triggers={}, excludes=content.excludes, ends=ends
        )
        return C.seq(begin, text)
    if isinstance(content, TriggeredTags) and any(ends):
        inner = _triggered(ctx, content, f"{path}.content", ends=ends)
        return C.seq(begin, inner)
    return C.seq(begin, _lower(ctx, content, f"{path}.content"), C.select(list(ends)))


def _triggered(
    ctx: _Ctx, fmt: TriggeredTags, path: str, ends: tuple[str, ...] = ()
) -> Constraint:
    triggers = fmt.triggers
    if not triggers:
        raise _bad(f"{path}.triggers", "triggered_tags needs at least one trigger")
    if not fmt.tags:
        raise _bad(f"{path}.tags", "triggered_tags needs at least one tag")
    for i, a in enumerate(triggers):
        if not isinstance(a, str) or not a:
            raise _bad(f"{path}.triggers[{i}]", "a trigger is a non-empty string")
        for j, b in enumerate(triggers):
            if i != j and b.startswith(a):
                raise _bad(
                    f"{path}.triggers[{i}]",
                    f"the trigger {a!r} is a prefix of the trigger {b!r}: a trigger's first "
                    "occurrence must decide which triggers it is",
                )
    if fmt.max_tags is not None and (isinstance(fmt.max_tags, bool) or fmt.max_tags < 0):
        raise _bad(f"{path}.max_tags", "max_tags is an int >= 0 or None")
    groups: dict[str, list[Constraint]] = {t: [] for t in triggers}
    for i, tag in enumerate(fmt.tags):
        where = f"{path}.tags[{i}]"
        if not isinstance(tag, Tag):
            raise _bad(where, f"triggered_tags' tags are Tag values, got {type(tag).__name__}")
        owners = [t for t in triggers if tag.begin.startswith(t)]
        if len(owners) != 1:
            raise _bad(
                f"{where}.begin",
                f"the begin {tag.begin!r} must start with exactly one trigger "
                f"(of {list(triggers)!r}), it starts with {len(owners)}",
            )
        # the machine consumes the trigger (its last character on the completing transition)
        groups[owners[0]].append(_tag_body(ctx, tag, where, skip=len(owners[0])))
    after = {t: C.select(g) for t, g in groups.items() if g}
    first = None
    if fmt.at_least_one:
        first = C.select(
            [_tag_body(ctx, tag, f"{path}.tags[{i}]") for i, tag in enumerate(fmt.tags)]
        )
    max_tags = fmt.max_tags
    if first is not None and max_tags == 0:
        raise _bad(f"{path}.max_tags", "at_least_one with max_tags=0 admits no output")
    return _text_machine(
        ctx,
        path,
        triggers=after,
        excludes=fmt.excludes,
        ends=ends,
        at_least_one=first,
        stop_after_first=fmt.stop_after_first,
        max_tags=max_tags,
    )


def _lower(ctx: _Ctx, fmt: Any, path: str) -> Constraint:
    if isinstance(fmt, ConstString):
        return C.literal(fmt.value)
    if isinstance(fmt, JsonSchema):
        return C.json(fmt.schema, options=fmt.options or ctx.json_options)
    if isinstance(fmt, RegexFormat):
        return C.regex(fmt.pattern)
    if isinstance(fmt, GrammarFormat):
        if fmt.syntax not in ("ebnf", "gbnf", "lark"):
            raise _bad(
                f"{path}.syntax", f"grammar syntax must be 'ebnf' or 'lark', got {fmt.syntax!r}"
            )
        return _GrammarPart(fmt.grammar, "lark" if fmt.syntax == "lark" else "gbnf")
    if isinstance(fmt, AnyText):
        return _text_machine(ctx, path, triggers={}, excludes=fmt.excludes)
    if isinstance(fmt, Sequence):
        return C.seq(*(_lower(ctx, e, f"{path}.elements[{i}]") for i, e in enumerate(fmt.elements)))
    if isinstance(fmt, Choice):
        return C.select(
            [_lower(ctx, e, f"{path}.elements[{i}]") for i, e in enumerate(fmt.elements)]
        )
    if isinstance(fmt, Tag):
        return _tag_body(ctx, fmt, path)
    if isinstance(fmt, TriggeredTags):
        return _triggered(ctx, fmt, path)
    if isinstance(fmt, TagsWithSeparator):
        if not fmt.tags:
            raise _bad(f"{path}.tags", "tags_with_separator needs at least one tag")
        one = C.select([_tag_body(ctx, t, f"{path}.tags[{i}]") for i, t in enumerate(fmt.tags)])
        return C.repeat(
            one,
            1 if fmt.at_least_one else 0,
            1 if fmt.stop_after_first else None,
            sep=fmt.separator or None,
        )
    if isinstance(fmt, OptionalFormat):
        return C.optional(_lower(ctx, fmt.content, f"{path}.content"))
    if isinstance(fmt, Star):
        return C.repeat(_lower(ctx, fmt.content, f"{path}.content"), 0, None)
    if isinstance(fmt, Plus):
        return C.repeat(_lower(ctx, fmt.content, f"{path}.content"), 1, None)
    if isinstance(fmt, RepeatFormat):
        hi = None if fmt.max is None or fmt.max < 0 else fmt.max
        return C.repeat(_lower(ctx, fmt.content, f"{path}.content"), fmt.min, hi)
    if isinstance(fmt, StructuralTag):
        return _lower(ctx, fmt.format, path)
    raise _bad(path, f"not a structural-tag format: {type(fmt).__name__}")


def structural_tag_constraint(
    tag: Any, *, json_options: JsonSchemaOptions | None = None
) -> Constraint:
    """The :mod:`formcast.constraints` object of a structural tag (anything
    :func:`parse_structural_tag` reads); ``json_options`` apply to the JSON Schema parts that
    do not carry their own.  ``GrammarCompiler.compile(...)`` of the result is what
    ``compile_structural_tag`` returns.

    Raises:
        ConstraintError: a malformed tag (path named), triggers that are prefixes of each
            other, a tag's begin that does not start with exactly one trigger.
        UnsupportedFeatureError: token-level formats.
    """
    st = parse_structural_tag(tag)
    return _lower(_Ctx(json_options), st.format, "format")
