"""``JsonSchemaOptions``: how a JSON Schema is turned into a grammar (one frozen dataclass)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from ...errors import ConfigurationError
from .files import registry_digest

__all__ = ["JsonSchemaOptions"]

#: the digit bounds of numbers (None: unbounded)
_DIGIT_BOUNDS = ("max_integer_digits", "max_fraction_digits", "max_exponent_digits")
#: limits that may be 0
_ZERO_OK = ("max_whitespace", "max_fraction_digits", "max_exponent_digits")
#: :meth:`JsonSchemaOptions.cache_key` not computed yet (its value may be None)
_UNSET: Any = object()


@dataclass(frozen=True)
class JsonSchemaOptions:
    """Options of :func:`~formcast.frontends.jsonschema.api.schema_to_grammar`.

    Output shape:
        whitespace: ``"compact"`` (default: no whitespace at all) or ``"flexible"`` (up to
            ``max_whitespace`` characters of ``[ \\t\\n\\r]`` around every ``{ } [ ] , :`` —
            never unbounded, so a model cannot spend its budget on newlines).
        max_whitespace: characters allowed in one whitespace gap with ``"flexible"``.
        max_integer_digits: digits of a number's integer part (default 20: every 64-bit
            integer, signed or unsigned; the 53-digit "bignums" of the JSON-Schema-Test-Suite
            need ``None`` or a larger bound — each digit of the bound is a lexer state that the
            token index refines once, so the default is kept to what real data needs).  Like
            whitespace, numbers are bounded so that a model cannot spend its budget on
            ``1000000…`` or ``1.000000…``: at the bound no further digit is allowed.  A
            bound, excluded value or ``multipleOf`` of the schema that needs more raises the
            bound for that number (one digit beyond the schema's longest, so a range keeps its
            values); ``const``/``enum`` values are always written in full.  ``None``: unbounded.
        max_fraction_digits: digits after the decimal point (default 20: every double that
            Python prints without an exponent, ``0.00012345678901234567``), trailing zeros
            included, raised like ``max_integer_digits``.  ``None``: unbounded.
        max_exponent_digits: digits of an exponent, where one is written (only numbers with
            no constraint but their type are; default 3: every double's exponent).  ``None``:
            unbounded.
        item_sep: the separator between array items / object members: ``","`` plus optional
            spaces (``", "`` gives ``json.dumps``' default look).
        key_sep: the separator between a key and its value: ``":"`` plus optional spaces.
        indent: ``None`` or a number of spaces: pretty-printed layout (a newline and
            ``indent × depth`` spaces after ``{``, ``[`` and each separator, before ``}``/``]``).
            Values of unconstrained type (``{}``) and ``const``/``enum`` values stay compact.
            Nesting below ``max_indent_depth`` keeps that depth's indentation.
        max_indent_depth: see ``indent``.

    Semantics:
        lenient: False (default) — a keyword or feature that formcast cannot enforce raises
            :class:`~formcast.errors.UnsupportedFeatureError` naming it and its JSON pointer.
            True — such keywords are ignored and listed in the second return value
            (the grammar may then accept instances the schema rejects).
        oneof_as_anyof: compile a ``oneOf`` whose branches are not provably disjoint (and whose
            exact form needs a negation formcast cannot build) as ``anyOf`` — it may then accept
            an instance that matches two branches.  Default False: fail closed.
        allow_extra_properties: None (default) follows the spec — when ``additionalProperties``
            is absent, properties not declared may be generated (any value).  False: when it is
            absent, generate declared properties only (a subset of the valid documents: always
            sound).  True is the same as None (an explicit ``additionalProperties: false`` is
            always honoured).
        unknown_keywords: what a keyword in no known vocabulary means.  ``"annotate"``
            (default): an annotation, as the specification says (validators ignore it, so the
            language is unchanged); each one is listed in the returned warnings.  ``"error"``:
            fail closed with :class:`~formcast.errors.UnsupportedFeatureError`.  Either way a
            probable misspelling of a constraining keyword (``"maxLenght"``) and the
            constraining keywords of other vocabularies (draft 3, ajv-keywords...) fail closed.
        format_assertion: True (default) — ``format`` constrains strings (known formats are
            exact or a documented subset; unknown formats fail closed).  False — ``format`` is
            an annotation, as in the 2019-09/2020-12 default vocabulary.
        default_draft: the draft assumed when the schema has no ``$schema``: one of
            ``"4"``, ``"6"``, ``"7"``, ``"2019-09"``, ``"2020-12"`` (default).
        registry: a :class:`referencing.Registry` with the remote resources ``$ref`` may use
            (:func:`formcast.json_schema_registry` builds one from a directory of files).
            Without it, references outside the schema (except the official meta-schemas and
            the local files below) fail closed; nothing is ever fetched from the network.
        local_ref_root: the directory that ``$ref``s to local files may read from, when the
            schema is compiled from a file (``compile_json_schema(Path(...))``) or with a
            ``base_uri``; default ``None``: the schema file's directory (or ``base_uri``'s).
            A reference that leaves it (``../../x.json``, a link out of it) fails closed.

    Limits (each raises :class:`~formcast.errors.LimitExceededError` naming the field):
        max_compile_seconds: an extra wall-clock cap on one ``compile_json_schema``
            (front-end, automata and token index together); ``None`` (default): only the
            compiler's ``CompileLimits.max_compile_seconds`` safety net (30 s).  The default
            limit is the deterministic ``CompileLimits.max_compile_work`` fuel (about 2 s of
            work on the reference machine, the same outcome on any machine); a wall-clock cap
            depends on the machine and its load, so set one only where bounded latency
            matters more than reproducible compiles.
        max_schema_bytes: size of the schema as compact JSON.
        max_depth: nesting depth of subschemas.
        max_ref_depth: ``$ref`` chains followed while merging (``allOf`` with ``$ref`` etc.).
        max_enum: values of one ``enum``.
        max_union: branches after distributing ``anyOf``/``oneOf``/``allOf`` combinations.
        max_rules: grammar rules produced.
        max_automaton_states: states of any automaton built to combine string or number
            constraints (``pattern`` + ``maxLength``, ``patternProperties``...).
        max_expression_size: size of a regular expression read back from such an automaton.
        max_count_states: states used to count object members / array items when
            ``minProperties``/``maxProperties``/``contains`` need counting.
        max_ref_files: local files read to resolve ``$ref``s (default 100).
        max_ref_bytes: bytes of those files in all (default 10 MB).
    """

    lenient: bool = False
    whitespace: str = "compact"
    max_whitespace: int = 4
    max_integer_digits: int | None = 20
    max_fraction_digits: int | None = 20
    max_exponent_digits: int | None = 3
    item_sep: str = ","
    key_sep: str = ":"
    indent: int | None = None
    max_indent_depth: int = 32
    oneof_as_anyof: bool = False
    allow_extra_properties: bool | None = None
    unknown_keywords: str = "annotate"
    format_assertion: bool = True
    default_draft: str = "2020-12"
    registry: Any = None
    local_ref_root: str | None = None
    max_compile_seconds: float | None = None
    max_schema_bytes: int = 10_000_000
    max_depth: int = 128
    max_ref_depth: int = 64
    max_enum: int = 10_000
    max_union: int = 1_000
    max_rules: int = 100_000
    max_automaton_states: int = 10_000
    max_expression_size: int = 5_000
    max_count_states: int = 10_000
    max_ref_files: int = 100
    max_ref_bytes: int = 10_000_000

    def cache_key(self) -> str | None:
        """A text that differs whenever two options may give different grammars: every field
        (``repr``), with the registry replaced by a digest of its resources (URI,
        specification, contents in their order).  ``None`` when the registry cannot be
        digested (it can retrieve resources on demand, or its contents are not JSON): such a
        compile is not cached.

        Computed on the first call and kept on the object (the options are frozen, and so is
        a ``referencing.Registry``): later calls are an attribute read."""
        got = self.__dict__.get("_cache_key", _UNSET)
        if got is _UNSET:
            got = self._cache_key_uncached()
            object.__setattr__(self, "_cache_key", got)
        return got  # type: ignore[no-any-return]

    def _cache_key_uncached(self) -> str | None:
        """:meth:`cache_key`, computed."""
        parts: list[str] = []
        for name in _FIELD_NAMES:
            value = getattr(self, name)
            if name == "registry" and value is not None:
                digest = _registry_digest(value)
                if digest is None:
                    return None
                parts.append(f"registry=sha256:{digest}")
            else:
                parts.append(f"{name}={value!r}")
        return "JsonSchemaOptions(" + ", ".join(parts) + ")"

    def __post_init__(self) -> None:
        if self.whitespace not in ("compact", "flexible"):
            raise ConfigurationError(
                f"JsonSchemaOptions.whitespace must be 'compact' or 'flexible', "
                f"got {self.whitespace!r}"
            )
        if self.item_sep.strip() != "," or self.item_sep.replace(",", "").strip(" \t\n\r"):
            raise ConfigurationError(
                f"JsonSchemaOptions.item_sep must be ',' with optional whitespace, "
                f"got {self.item_sep!r}"
            )
        if self.key_sep.strip() != ":" or self.key_sep.replace(":", "").strip(" \t\n\r"):
            raise ConfigurationError(
                f"JsonSchemaOptions.key_sep must be ':' with optional whitespace, "
                f"got {self.key_sep!r}"
            )
        if self.indent is not None and (
            isinstance(self.indent, bool) or not isinstance(self.indent, int) or self.indent < 0
        ):
            raise ConfigurationError(
                f"JsonSchemaOptions.indent must be None or an int >= 0, got {self.indent!r}"
            )
        if self.indent is not None and self.whitespace == "flexible":
            raise ConfigurationError(
                "JsonSchemaOptions: indent and whitespace='flexible' exclude each other"
            )
        if self.unknown_keywords not in ("annotate", "error"):
            raise ConfigurationError(
                f"JsonSchemaOptions.unknown_keywords must be 'annotate' or 'error', "
                f"got {self.unknown_keywords!r}"
            )
        if self.default_draft not in ("4", "6", "7", "2019-09", "2020-12"):
            raise ConfigurationError(
                f"JsonSchemaOptions.default_draft must be one of 4, 6, 7, 2019-09, 2020-12; "
                f"got {self.default_draft!r}"
            )
        secs = self.max_compile_seconds
        if secs is not None and (
            isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs <= 0
        ):
            raise ConfigurationError(
                f"JsonSchemaOptions.max_compile_seconds must be None or a positive number, "
                f"got {secs!r}"
            )
        for name in _LIMIT_NAMES:
            v = getattr(self, name)
            if type(v) is int and v >= 1:  # (the usual value: valid for every limit)
                continue
            if v is None and name in _DIGIT_BOUNDS:
                continue
            lowest = 0 if name in _ZERO_OK else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < lowest:
                none = " or None" if name in _DIGIT_BOUNDS else ""
                raise ConfigurationError(
                    f"JsonSchemaOptions.{name} must be an int >= {lowest}{none}, got {v!r}"
                )
        root = self.local_ref_root
        if root is not None and not isinstance(root, str):
            if isinstance(root, os.PathLike):
                object.__setattr__(self, "local_ref_root", os.fspath(root))
            else:
                raise ConfigurationError(
                    "JsonSchemaOptions.local_ref_root must be None or a directory path, "
                    f"got {type(root).__name__}"
                )
        for name in ("lenient", "oneof_as_anyof", "format_assertion"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"JsonSchemaOptions.{name} must be a bool")


def _registry_digest(registry: Any) -> str | None:
    """SHA-256 of a :class:`referencing.Registry`'s resources (sorted by URI; contents as
    JSON in their own key order; computed once per registry object by
    :func:`.files.registry_digest`), or None when it has a ``retrieve`` hook (its resources
    are then not all known in advance) or is not a registry of JSON resources."""
    try:
        import referencing

        if not isinstance(registry, referencing.Registry):
            return None
        # a registry made with ``retrieve=`` may fetch resources the digest cannot see
        default_retrieve = getattr(referencing.Registry(), "_retrieve", None)
        if getattr(registry, "_retrieve", None) is not default_retrieve:
            return None
    except (ImportError, AttributeError):
        return None
    return registry_digest(registry)


#: the field names of :class:`JsonSchemaOptions`, in order (``dataclasses.fields``, read once)
_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(JsonSchemaOptions))
#: the integer limits that ``__post_init__`` checks (every ``max_`` field but the seconds)
_LIMIT_NAMES: tuple[str, ...] = tuple(
    n for n in _FIELD_NAMES if n.startswith("max_") and n != "max_compile_seconds"
)
