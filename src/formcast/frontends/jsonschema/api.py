"""JSON Schema front-end: ``schema_to_grammar(schema) -> (Grammar, ignored)``.

The grammar accepts the JSON texts (compact by default, see :class:`JsonSchemaOptions`) of the
instances valid against the schema — for the keywords and cases listed as ``exact``/``partial``
in :data:`KEYWORDS` (published as ``docs/json_schema.md``).  Anything formcast cannot enforce
raises :class:`~formcast.errors.UnsupportedFeatureError` naming the keyword and its JSON
pointer (``lenient=True`` ignores it and lists it instead); a schema that admits no value
raises :class:`~formcast.errors.UnsatisfiableGrammarError`; resource limits raise
:class:`~formcast.errors.LimitExceededError`.

String content constrained by ``pattern``/``format``/``enum``/property names is generated in
the canonical JSON escaping of ``json.dumps(ensure_ascii=False)`` (see
:mod:`formcast.frontends.jsonschema.strings`).  Bounds such as ``maxLength: 100000`` become
``Repeat(x, min, max)`` nodes, never unrolled here; an automaton layer that cannot afford a
bound raises :class:`~formcast.errors.LimitExceededError` (fail closed).

Lifetime: a pure function of the schema and options; no global state besides small caches of
parsed patterns and formats.
"""

from __future__ import annotations

import os
from typing import Any

from ...errors import LimitExceededError
from ...ir.marks import UniqueItemsMark
from ...ir.nodes import Grammar
from .emit import Emitter
from .files import json_schema_registry
from .keywords import KEYWORDS, Keyword
from .normalize import Normalizer
from .options import JsonSchemaOptions
from .source import LoadedSchema, load_schema

__all__ = [
    "KEYWORDS",
    "JsonSchemaOptions",
    "Keyword",
    "LoadedSchema",
    "json_schema_registry",
    "schema_to_grammar",
]


#: the default options, made once (they are frozen)
_DEFAULT_OPTIONS = JsonSchemaOptions()


def schema_to_grammar(
    schema: LoadedSchema | dict[str, Any] | bool | str | type | os.PathLike[str],
    options: JsonSchemaOptions | None = None,
    *,
    base_uri: str | os.PathLike[str] | None = None,
    marks: list[UniqueItemsMark] | None = None,
) -> tuple[Grammar, list[str]]:
    """Compile a JSON Schema into a grammar of the JSON texts of its valid instances.

    Args:
        schema: the schema as a dict, a boolean, JSON text, a Pydantic model class, a file
            (``pathlib.Path``: its relative ``$ref``s read the files next to it), or already
            read by :func:`~.source.load_schema` (read once, then passed on).
        options: see :class:`JsonSchemaOptions` (defaults: compact output, strict).
        base_uri: where relative ``$ref``s resolve (a path or an absolute URI; default: the
            file's path): see :func:`~.source.load_schema`.
        marks: a list: allow the run-time checks a grammar alone cannot express
            (:class:`~formcast.ir.marks.UniqueItemsMark`: ``uniqueItems``); the grammar then
            carries them (``Grammar.marks``, which a compiler turns into the matcher's
            program) and the list receives them too.  None (the default): the grammar must
            say everything, and such arrays fail closed.

    Returns:
        ``(grammar, ignored)``: the IR grammar (start rule ``root``; its ``hints`` are the
        JSON Schema program settings, :data:`~formcast.ir.nodes.JSON_HINTS`) and warnings — the
        features that were ignored (``options.lenient``) and the unknown keywords treated as
        annotations (``options.unknown_keywords="annotate"``, the default).

    Raises:
        UnsupportedFeatureError: a keyword or feature that cannot be enforced (with pointer).
        UnsatisfiableGrammarError: no JSON value satisfies the schema.
        LimitExceededError: a limit of ``options`` was exceeded.
        ConfigurationError: the schema is malformed (not JSON, wrong keyword value types).
            The schema is read and checked by :func:`~.source.load_schema`.
    """
    options = options or _DEFAULT_OPTIONS
    loaded = load_schema(schema, options, base_uri=base_uri)
    norm = Normalizer(loaded.value, options, loaded.local)
    try:
        root = norm.run()
        grammar = Emitter(norm, options, marks).grammar(root)
    except RecursionError:
        # a safety net: the limits above normally stop deep schemas first
        raise LimitExceededError(
            "max_depth", options.max_depth, "the schema's structure is too deep to compile"
        ) from None
    return grammar, list(norm.ignored)
