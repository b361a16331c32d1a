"""``ConstraintSpec``: one value for "what to compile", whatever door it came through.

Every way of naming a constraint — a regex, grammar text (GBNF / Lark), a JSON Schema, any
JSON value, a list of choices, a structural tag, a :mod:`formcast.constraints` object, a
grammar IR — is one frozen dataclass here.  Each variant has

* :meth:`ConstraintSpec.cache_key`: a digest of what the compiled grammar depends on (``None``:
  it cannot be keyed exactly, and is compiled every time); the compiler's cache key is that of
  :meth:`ConstraintSpec.key_parts` with the vocabulary's fingerprint
  (:func:`~formcast.index.compiled.grammar_key`), unchanged from the ``compile_*`` methods;
* :meth:`ConstraintSpec.lower`: the grammar IR, which carries everything the compiled grammar
  needs — its run-time ``uniqueItems`` checks (``Grammar.marks``) and its program settings
  (``Grammar.hints``) — so that :meth:`GrammarCompiler.compile
  <formcast.index.compiler.GrammarCompiler.compile>`, the one compile path, builds the
  program from the IR alone.

Specs are picklable (a compile worker receives them; a spec holding something that cannot be
pickled, such as a Pydantic class defined in a function, compiles in-process) and cheap to
build: a JSON Schema is read and checked once, when its spec is made
(:func:`~formcast.frontends.jsonschema.source.load_schema`); a structural tag or a choice
list is turned into its constraint object then.  Lowering costs the front-end's work and runs
inside the compile's budget.

Lifetime: immutable values; build one per request (or keep one: equal specs have equal keys).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigurationError
from ..frontends.jsonschema.options import JsonSchemaOptions
from ..frontends.regex import parse_regex
from ..ir.nodes import GRAMMAR_HINTS, REGEX_HINTS, Grammar, Rule
from ..limits import CompileLimits, WorkBudget, compile_scope

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint
    from ..frontends.jsonschema.source import LoadedSchema

__all__ = [
    "AnyJsonSpec",
    "ChoiceSpec",
    "CombinatorSpec",
    "ConstraintSpec",
    "GrammarIRSpec",
    "GrammarTextSpec",
    "JsonSchemaSpec",
    "KeyedSpec",
    "LoweredSpec",
    "RegexSpec",
    "StructuralTagSpec",
    "as_spec",
]


@dataclass(frozen=True)
class LoweredSpec:
    """A spec lowered to the grammar IR.

    Attributes:
        grammar: the IR, with its ``marks`` and ``hints``.
        warnings: what a lenient JSON Schema compile ignored.
        empty_message: the message of the ``UnsatisfiableGrammarError`` when a one-DFA
            grammar (``hints.one_dfa``) matches nothing (None: the compiler's own).
    """

    grammar: Grammar
    warnings: tuple[str, ...] = ()
    empty_message: str | None = None


class ConstraintSpec:
    """Base class of the constraint specs (see the module docstring).  Immutable."""

    __slots__ = ()
    #: the spec's kind, for messages
    kind: ClassVar[str] = "spec"
    #: whether a compile worker may compile it (else it always compiles in-process)
    remote: ClassVar[bool] = True

    def key_parts(self) -> tuple[str, str, str | None]:  # pragma: no cover - abstract
        """``(kind, source, options)`` of the compiler's cache key; ``options`` None: the
        spec cannot be keyed exactly (compiled, never cached)."""
        raise NotImplementedError

    def record(self) -> tuple[str, str, str]:
        """``(kind, source, options)`` as the :class:`CompiledGrammar` records them (its
        ``fingerprint`` is computed from them); by default the key parts."""
        kind, source, options = self.key_parts()
        return kind, source, options or ""

    def lower(self, limits: CompileLimits) -> LoweredSpec:  # pragma: no cover - abstract
        """The grammar IR (runs the front-end: call it inside the compile's budget).

        Raises the front-end's errors (GrammarSyntaxError, UnsupportedFeatureError,
        UnsatisfiableGrammarError, LimitExceededError, ConstraintError)."""
        raise NotImplementedError

    def max_seconds(self) -> float | None:
        """An extra wall-clock cap on this compile (JSON Schema's ``max_compile_seconds``)."""
        return None

    def cache_key(self) -> str | None:
        """SHA-256 of :meth:`key_parts` (None when it cannot be keyed).  O(size of the
        source) per call."""
        kind, source, options = self.key_parts()
        if options is None:
            return None
        h = hashlib.sha256()
        for part in (kind, source, options):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()


@dataclass(frozen=True, slots=True)
class RegexSpec(ConstraintSpec):
    """A regular expression, fullmatch semantics (``dialect``: ``"ecma"`` or ``"python"``;
    see docs/regex.md).  Parsed when lowered."""

    pattern: str
    dialect: str = "ecma"
    kind: ClassVar[str] = "regex"

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise ConfigurationError(f"pattern must be str, got {type(self.pattern).__name__}")

    def key_parts(self) -> tuple[str, str, str | None]:
        return "regex", self.pattern, f"dialect={self.dialect}"

    def lower(self, limits: CompileLimits) -> LoweredSpec:
        node = parse_regex(self.pattern, dialect=self.dialect, limits=limits)
        return LoweredSpec(
            Grammar((Rule("regex", node),), "regex", hints=REGEX_HINTS),
            empty_message=f"the regex {self.pattern!r} matches no string at all",
        )


@dataclass(frozen=True, slots=True)
class GrammarTextSpec(ConstraintSpec):
    """Grammar text: GBNF (llama.cpp; start rule ``root`` by default) or Lark (the llguidance
    dialect; start rule ``start`` by default)."""

    text: str
    syntax: str = "gbnf"
    start: str | None = None
    kind: ClassVar[str] = "grammar"

    def __post_init__(self) -> None:
        if self.syntax not in ("gbnf", "lark"):
            raise ConfigurationError(
                f"unknown grammar syntax {self.syntax!r}; use 'gbnf' or 'lark'"
            )

    def key_parts(self) -> tuple[str, str, str | None]:
        return self.syntax, self.text, f"start={self.start}"

    def lower(self, limits: CompileLimits) -> LoweredSpec:
        if self.syntax == "gbnf":
            from ..frontends.gbnf import parse_gbnf

            return LoweredSpec(parse_gbnf(self.text, start=self.start or "root"))
        from ..frontends.lark import parse_lark

        return LoweredSpec(parse_lark(self.text, start=self.start or "start"))


_DEFAULT_SCHEMA_OPTIONS: list[tuple[JsonSchemaOptions, str | None]] = []


def _default_schema_options() -> tuple[JsonSchemaOptions, str | None]:
    """``JsonSchemaOptions()`` and its cache key, made once (the options are frozen)."""
    if not _DEFAULT_SCHEMA_OPTIONS:
        opts = JsonSchemaOptions()
        _DEFAULT_SCHEMA_OPTIONS.append((opts, opts.cache_key()))
    return _DEFAULT_SCHEMA_OPTIONS[0]


@dataclass(frozen=True, slots=True)
class JsonSchemaSpec(ConstraintSpec):
    """A JSON Schema, read and checked once (build it with :meth:`of`).

    Attributes:
        loaded: the schema as read (:class:`~formcast.frontends.jsonschema.source.LoadedSchema`:
            its value, canonical text and the local files its ``$ref``s read).
        options: the front-end's options.
        options_key: ``options.cache_key()`` (None: not cacheable).
        base_uri: where relative ``$ref``s resolved (informational: ``loaded`` holds what was
            read).
    """

    loaded: LoadedSchema
    options: JsonSchemaOptions
    options_key: str | None
    base_uri: str | None = None
    kind: ClassVar[str] = "json_schema"

    @classmethod
    def of(
        cls,
        schema: Any,
        options: JsonSchemaOptions | None = None,
        *,
        base_uri: str | os.PathLike[str] | None = None,
    ) -> JsonSchemaSpec:
        """Read ``schema`` (a file path, dict, JSON text, bool, or a Pydantic model class) with
        :func:`~formcast.frontends.jsonschema.source.load_schema`; see
        ``GrammarCompiler.compile_json_schema`` for what is read and how ``base_uri`` works.

        Raises:
            ConfigurationError (malformed schema, options of another type),
            LimitExceededError (too deep / too large), the reading's errors.
        """
        # only the reader: the front-end is imported by the first ``lower`` (a grammar loaded
        # from the disk cache needs the schema's key, never the front-end's import)
        from ..frontends.jsonschema.source import load_schema

        opts = options if options is not None else _default_schema_options()[0]
        if not isinstance(opts, JsonSchemaOptions):
            raise ConfigurationError(
                f"options must be a JsonSchemaOptions, got {type(opts).__name__}"
            )
        loaded = load_schema(schema, opts, base_uri=base_uri)
        # the default options' key is computed once (frozen, and without a registry)
        key = _default_schema_options()[1] if options is None else opts.cache_key()
        base = None if base_uri is None else os.fspath(base_uri)
        return cls(loaded, opts, key, base)

    def key_parts(self) -> tuple[str, str, str | None]:
        return "json_schema", self.loaded.cache_text, self.options_key

    def record(self) -> tuple[str, str, str]:
        key = self.options_key
        return "json_schema", self.loaded.canonical, key if key is not None else repr(self.options)

    def max_seconds(self) -> float | None:
        return self.options.max_compile_seconds

    def lower(self, limits: CompileLimits) -> LoweredSpec:
        # the front-end imported outside the compile's fuel (importing it builds IR constants,
        # which must charge neither this compile nor the next: compile_work stays exact)
        with compile_scope(WorkBudget(1 << 62, None)):
            from ..frontends.jsonschema.api import schema_to_grammar

        # marks allowed: the grammar carries its run-time uniqueItems checks
        grammar, ignored = schema_to_grammar(self.loaded, self.options, marks=[])
        return LoweredSpec(grammar, tuple(ignored))


@dataclass(frozen=True, slots=True)
class AnyJsonSpec(ConstraintSpec):
    """Any JSON value (RFC 8259), the builtin JSON grammar
    (:func:`~formcast.frontends.builtin_json.builtin_json_grammar`)."""

    kind: ClassVar[str] = "any_json"

    def key_parts(self) -> tuple[str, str, str | None]:
        return "builtin_json", "json", ""

    def lower(self, limits: CompileLimits) -> LoweredSpec:
        from ..frontends.builtin_json import builtin_json_grammar

        # built outside the compile's fuel, as it always was (the same grammar every time)
        with compile_scope(WorkBudget(1 << 62, None)):
            return LoweredSpec(builtin_json_grammar())


@dataclass(frozen=True, slots=True)
class CombinatorSpec(ConstraintSpec):
    """A :mod:`formcast.constraints` object (combinators, state machines).  Keyed by
    ``Constraint.cache_key`` (None: a part cannot be keyed, compiled every time)."""

    constraint: Constraint
    kind: ClassVar[str] = "constraint"

    def __post_init__(self) -> None:
        from ..constraints.core import Constraint as _Constraint

        if not isinstance(self.constraint, _Constraint):
            raise ConfigurationError(
                f"CombinatorSpec takes a formcast.constraints constraint, got "
                f"{type(self.constraint).__name__}"
            )

    def key_parts(self) -> tuple[str, str, str | None]:
        key = self.constraint.cache_key()
        return "constraint", key or "", "" if key is not None else None

    def record(self) -> tuple[str, str, str]:
        key = self.constraint.cache_key()
        src = key if key is not None else f"<{self.constraint.kind} without a cache key>"
        return "constraint", src, ""

    def lower(self, limits: CompileLimits) -> LoweredSpec:
        from ..constraints.core import lower_constraint

        lowered = lower_constraint(self.constraint, limits)
        return LoweredSpec(
            lowered.grammar, lowered.warnings, "the constraint matches no string at all"
        )


@dataclass(frozen=True, slots=True)
class ChoiceSpec(CombinatorSpec):
    """Exactly one of ``choices`` (strings), compiled as the constraint
    ``select([literal(c) for c in choices])`` (same key)."""

    choices: tuple[str, ...] = ()
    kind: ClassVar[str] = "choice"

    @classmethod
    def of(cls, choices: Sequence[str]) -> ChoiceSpec:
        """Raises ConfigurationError when ``choices`` is empty or holds a non-string."""
        from ..constraints.core import literal, select

        if isinstance(choices, str) or not all(isinstance(c, str) for c in choices):
            raise ConfigurationError("choices must be a list of strings")
        items = tuple(choices)
        if not items:
            raise ConfigurationError("choices must hold at least one string")
        return cls(select([literal(c) for c in items]), items)


@dataclass(frozen=True, slots=True)
class StructuralTagSpec(CombinatorSpec):
    """A structural tag (:mod:`formcast.index.structural_tag`: typed, a bare format, or
    xgrammar's JSON), compiled as its constraint object (same key); ``json_options`` apply to
    its JSON Schema parts that carry none.  Build it with :meth:`of`."""

    tag: Any = None
    json_options: JsonSchemaOptions | None = None
    kind: ClassVar[str] = "structural_tag"

    @classmethod
    def of(cls, tag: Any, *, json_options: JsonSchemaOptions | None = None) -> StructuralTagSpec:
        """Raises ConstraintError (malformed tag, with its path), UnsupportedFeatureError
        (token-level formats)."""
        from .structural_tag import structural_tag_constraint

        return cls(structural_tag_constraint(tag, json_options=json_options), tag, json_options)


@dataclass(frozen=True, slots=True)
class GrammarIRSpec(ConstraintSpec):
    """A grammar IR as built (what every front-end produces; its ``marks`` and ``hints`` are
    used as they are).  Keyed by ``source`` (default: ``repr(grammar)``, plus its marks and
    hints when it has any); compiled in-process (IR is not sent to workers)."""

    grammar: Grammar
    label: str = "grammar"
    source: str | None = None
    warnings: tuple[str, ...] = ()
    _source: str = field(init=False, repr=False, default="")
    kind: ClassVar[str] = "grammar_ir"
    remote: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not isinstance(self.grammar, Grammar):
            raise ConfigurationError(
                f"GrammarIRSpec takes a formcast.ir Grammar, got {type(self.grammar).__name__}"
            )
        src = self.source
        if src is None:
            g = self.grammar
            src = repr(g)
            if g.marks or g.hints != GRAMMAR_HINTS:
                src += f"\0marks={g.marks!r}\0hints={g.hints!r}"
        object.__setattr__(self, "_source", src)

    def key_parts(self) -> tuple[str, str, str | None]:
        return self.label, self._source, ""

    def lower(self, limits: CompileLimits) -> LoweredSpec:
        # a lazy terminal (``Rule.lazy``) gets its meaning here as in the Lark reader: an IR
        # built by hand must not have the option dropped (a grammar without one is unchanged)
        from ..frontends.lark_lazy import apply_lazy_lexemes

        return LoweredSpec(apply_lazy_lexemes(self.grammar), self.warnings)


@dataclass(frozen=True, slots=True)
class KeyedSpec:
    """A spec with its compile-cache key for one vocabulary, computed once
    (``GrammarCompiler.keyed(spec)`` makes it): ``GrammarCompiler.cached`` and ``compile`` /
    ``compile_async`` take it and key nothing again — a caller that looks a constraint up
    and then compiles the miss (a server's event loop, vLLM's scheduler) keys it once.

    Attributes:
        spec: the spec.
        key: its :func:`~formcast.index.compiled.grammar_key` for the vocabulary whose
            fingerprint is ``fingerprint`` (None: the spec cannot be keyed, never cached).
        fingerprint: that vocabulary's fingerprint; a compiler of another vocabulary ignores
            ``key`` and keys ``spec`` itself.

    Lifetime: an immutable value, picklable as its spec is.
    """

    spec: ConstraintSpec
    key: str | None
    fingerprint: str


def as_spec(value: Any) -> ConstraintSpec:
    """``value`` as a spec: a :class:`ConstraintSpec` as it is (a :class:`KeyedSpec`'s spec),
    a :mod:`formcast.constraints` object wrapped in a :class:`CombinatorSpec`, a grammar IR
    in a :class:`GrammarIRSpec`.

    Raises:
        ConfigurationError: anything else (text is ambiguous: build the spec that says what
            it is, e.g. ``RegexSpec(text)`` or ``JsonSchemaSpec.of(text)``).
    """
    if isinstance(value, ConstraintSpec):
        return value
    if isinstance(value, KeyedSpec):
        return value.spec
    from ..constraints.core import Constraint

    if isinstance(value, Constraint):
        return CombinatorSpec(value)
    if isinstance(value, Grammar):
        return GrammarIRSpec(value)
    raise ConfigurationError(
        f"compile() takes a ConstraintSpec or a formcast.constraints constraint, got "
        f"{type(value).__name__}: build one with RegexSpec / GrammarTextSpec / "
        "JsonSchemaSpec.of / AnyJsonSpec / ChoiceSpec.of / StructuralTagSpec.of "
        "(formcast.index.spec), or with formcast.constraints"
    )
