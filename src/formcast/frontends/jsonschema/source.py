"""Reading a schema, once: a file, JSON text, a dict, a boolean or a Pydantic model class → a
:class:`LoadedSchema` (the checked value, its canonical text and the local files its
``$ref``s reach).

Every way in (``generate(schema=...)``, ``GrammarCompiler.compile_json_schema``,
``schema_to_grammar``) reads the schema here, with one set of checks and messages: the text's
size (``max_schema_bytes``), that it is JSON, that it is an object or a boolean, that it can
be written back as JSON (``json.dumps`` recursion: a depth limit that names the deepest
pointer), and its size as compact JSON.  A schema read from a file (a ``pathlib.Path``), or
given a ``base_uri``, has the sibling files its references name read here too
(:func:`~.files.local_resources`: bounded by ``max_ref_files``/``max_ref_bytes``, confined to
one directory, never the network).  The JSON-ness of every member (NaN, non-string keys)
is checked with JSON pointers by the normalizer (:func:`~.checks.check_json`).

Lifetime: pure functions; a load costs two ``json.dumps`` of the schema (the canonical text
is the compile cache's key) and one ``json.loads`` of a text (plus, with local references,
one read, parse and keyword walk per file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigurationError, LimitExceededError
from .files import LocalResources, as_base_uri, file_uri, local_resources
from .options import JsonSchemaOptions

__all__ = ["LoadedSchema", "load_schema", "pydantic_model_class"]


@dataclass(frozen=True, slots=True)
class LoadedSchema:
    """A schema read and checked by :func:`load_schema`.

    Attributes:
        value: the schema (an object or a boolean), as Python values.
        canonical: ``json.dumps(value, ensure_ascii=False)``: the schema's key order kept
            (properties are generated in schema order), the compile cache's key.
        local: the schema's base URI and the local files its references reach (None: the
            schema was given as a value with no ``base_uri``).
    """

    value: dict[str, Any] | bool
    canonical: str
    local: LocalResources | None = None

    @property
    def cache_text(self) -> str:
        """The compile cache's key text: :attr:`canonical`, plus the digest of the base URI
        and of every local file read when there are any.  A schema whose ``$ref``s are all
        same-document fragments (``#...``) reads no file and its grammar cannot depend on the
        base URI: its key is :attr:`canonical` alone, so the same schema compiled from a file
        and from a value shares one cache entry (``formcast compile`` fills what a server
        loads)."""
        if self.local is None or (not self.local.resources and not _uses_uri_refs(self.value)):
            return self.canonical
        return self.canonical + "\0local=sha256:" + self.local.digest()


_URI_KEYS = frozenset({"$ref", "$dynamicRef", "$recursiveRef", "$id", "id"})


def _uses_uri_refs(value: Any) -> bool:
    """Whether a ``$ref``/``$dynamicRef``/``$recursiveRef`` string or an ``$id`` anywhere in
    ``value`` names more than a fragment of the same document (so resolution may depend on
    the base URI).  Linear in the schema's size."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, item in node.items():
                if isinstance(item, str):
                    # a false positive (an instance member called "id") only costs a cache miss
                    if key in _URI_KEYS and not item.startswith("#"):
                        return True
                else:
                    stack.append(item)
        elif isinstance(node, list):
            stack.extend(node)
    return False


def pydantic_model_class(schema: Any) -> Any:
    """``schema`` if it is a Pydantic model class (``BaseModel`` subclass, v2), else ``None``.

    Duck-typed (a class with ``model_json_schema`` and ``model_validate_json``), so pydantic is
    never imported here."""
    if (
        isinstance(schema, type)
        and callable(getattr(schema, "model_json_schema", None))
        and callable(getattr(schema, "model_validate_json", None))
    ):
        return schema
    return None


def load_schema(
    schema: Any, options: JsonSchemaOptions, *, base_uri: str | os.PathLike[str] | None = None
) -> LoadedSchema:
    """Read ``schema`` (a file path, a dict, a boolean, JSON text or a Pydantic model class)
    once.

    Args:
        schema: a ``pathlib.Path`` (or other ``os.PathLike``) is a file to read (a ``str`` is
            always JSON text); anything else as above.
        options: the limits and ``local_ref_root``.
        base_uri: where relative ``$ref``s resolve: a file or directory path, or an absolute
            URI; default: the schema file's path (None for a schema given as a value:
            relative references then resolve against its ``$id`` only).  With one, the local
            files the references name are read (:func:`~.files.local_resources`).

    Raises:
        ConfigurationError: not JSON text, not an object or a boolean, not JSON-serializable;
            a schema file that cannot be read.
        LimitExceededError: ``max_schema_bytes`` (the text, or the schema as compact JSON),
            ``max_depth`` (nested deeper than ``json`` can read or write), ``max_ref_files``
            / ``max_ref_bytes`` (the local files its references reach).
    """
    if isinstance(schema, LoadedSchema):
        if base_uri is not None:
            raise ConfigurationError(
                "base_uri applies when a schema is read, not to a LoadedSchema"
            )
        return schema
    if isinstance(schema, os.PathLike):
        path = Path(os.fspath(schema)).expanduser().absolute()
        try:
            size = path.stat().st_size
            if size > options.max_schema_bytes:
                raise LimitExceededError(
                    "max_schema_bytes", options.max_schema_bytes, f"{path} has {size} bytes"
                )
            schema = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read the schema file {path}: {exc}") from None
        if base_uri is None:
            base_uri = file_uri(path)
    loaded = _load_value(schema, options)
    if base_uri is None:
        return loaded
    base = as_base_uri(base_uri)
    root = None
    if options.local_ref_root is not None:
        root = Path(options.local_ref_root).expanduser().absolute()
        if not root.is_dir():
            raise ConfigurationError(f"JsonSchemaOptions.local_ref_root: {root} is not a directory")
    local = local_resources(
        loaded.value,
        base,
        root=root,
        registry=options.registry,
        max_files=options.max_ref_files,
        max_bytes=options.max_ref_bytes,
    )
    return LoadedSchema(loaded.value, loaded.canonical, local)


def _load_value(schema: Any, options: JsonSchemaOptions) -> LoadedSchema:
    if pydantic_model_class(schema) is not None:
        schema = schema.model_json_schema()
    if isinstance(schema, str):
        if len(schema.encode("utf-8", "surrogatepass")) > options.max_schema_bytes:
            raise LimitExceededError(
                "max_schema_bytes", options.max_schema_bytes, "schema text too large"
            )
        try:
            schema = json.loads(schema)
        except RecursionError:
            raise _too_deep(_text_depth(schema), "", options.max_depth) from None
        except ValueError as exc:
            raise ConfigurationError(f"the schema is not valid JSON: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise ConfigurationError(
            "schema must be a JSON Schema object or boolean, JSON text or a Pydantic model "
            f"class, got {type(schema).__name__}"
        )
    try:
        canonical = json.dumps(schema, ensure_ascii=False)
        # as compact JSON: never longer than ``canonical`` (the same text less the spaces
        # after separators), so written only when that could exceed the limit
        size = len(canonical)
        if size > options.max_schema_bytes:
            size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))
    except RecursionError:
        depth, pointer = _deepest(schema)
        raise _too_deep(depth, pointer, options.max_depth) from None
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"the schema is not JSON-serializable: {exc}") from None
    if size > options.max_schema_bytes:
        raise LimitExceededError(
            "max_schema_bytes", options.max_schema_bytes, f"schema has {size} bytes"
        )
    return LoadedSchema(schema, canonical)


def _too_deep(depth: int, pointer: str, max_depth: int) -> LimitExceededError:
    where = f" at {pointer}" if pointer else ""
    return LimitExceededError(
        "max_depth",
        max_depth,
        f"the schema is nested {depth} levels deep{where}, deeper than JSON can be read here",
    )


def _text_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text (outside strings); iterative."""
    depth = best = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def _deepest(value: Any) -> tuple[int, str]:
    """The nesting depth of a JSON value and the JSON pointer of its deepest container;
    iterative (values too deep for ``json.dumps`` are what it is for)."""
    best, where = 0, ""
    todo: list[tuple[Any, int, str]] = [(value, 1, "")]
    seen: set[int] = set()
    while todo:
        v, d, ptr = todo.pop()
        if not isinstance(v, (dict, list)) or id(v) in seen:
            continue
        seen.add(id(v))  # a cyclic value is as deep as json.dumps could go
        if d > best:
            best, where = d, ptr
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for k, child in items:
            esc = str(k).replace("~", "~0").replace("/", "~1")
            todo.append((child, d + 1, f"{ptr}/{esc}"))
    return best, where or "/"
