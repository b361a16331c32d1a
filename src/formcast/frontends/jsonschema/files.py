"""``$ref`` to local files: sibling schemas read from disk, never from the network.

Two ways in, both bounded in files and bytes:

* :func:`local_resources` — a schema read from a file (or given with ``base_uri``): its
  references are followed, and every target that names a file (relative to the schema's
  location, or to the directory its own ``$id`` names, see below) is read, then *its*
  references, until none is left.  Only files inside one directory (``root``: the schema
  file's directory unless given) are ever read: a reference that leaves it (``../../x.json``,
  a symbolic link out of it) is recorded as a problem, not read.  What cannot be read (a
  missing file, one outside the directory, one that is not JSON) is recorded too, and
  reported by the front-end only if the compile actually needs it (with the reference, its
  JSON pointer and the path); the crawl over-approximates on purpose (it does not apply every
  draft's ``$id`` rules), so a recorded problem that no lookup needs is harmless.
* :func:`json_schema_registry` — every ``*.json`` file under a directory, registered by its
  ``file:`` URI and by its ``$id``: a ``referencing.Registry`` for
  :attr:`JsonSchemaOptions.registry <formcast.frontends.jsonschema.options.JsonSchemaOptions>`.
  An ``http(s)`` reference resolves when a registered file has that ``$id``; otherwise it
  stays refused (formcast never fetches).

The ``$id`` rule: a file whose ``$id`` is an absolute URI (``https://json.schemastore.org/
pyproject.json``) is taken to have been read from the directory that URI names, so a relative
reference inside it (``partial-setuptools.json`` → ``https://json.schemastore.org/
partial-setuptools.json``) is looked up next to it on disk.  This is the layout of SchemaStore
and of most repositories of schemas; an ``http(s)`` target with no such file stays refused.

Lifetime: pure functions; the result is immutable.  Cost: one ``stat`` and one read + parse
per file (limits: ``JsonSchemaOptions.max_ref_files`` / ``max_ref_bytes``) and one walk of
each document's keywords; the registry's content digest (for the compile cache key) is
computed once per registry object.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urldefrag, urljoin, urlsplit

from ...errors import ConfigurationError, LimitExceededError

__all__ = [
    "LocalResources",
    "as_base_uri",
    "crawlable_resource",
    "file_uri",
    "json_schema_registry",
    "local_resources",
    "registry_digest",
]

#: keywords whose values are data, not subschemas (no ``$ref`` inside them is a reference)
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})
#: keywords whose values map names to subschemas (their keys are names, not keywords)
_NAME_MAPS = frozenset(
    {"properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies"}
)


def file_uri(path: Path, *, directory: bool = False) -> str:
    """The ``file:`` URI of an absolute ``path`` (a trailing ``/`` for a directory)."""
    uri = "file://" + quote(path.as_posix(), safe="/:")
    if directory and not uri.endswith("/"):
        uri += "/"
    return uri


def _uri_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI (None for any other scheme)."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    return Path(unquote(parts.path))


def as_base_uri(base: str | os.PathLike[str]) -> str:
    """``base`` as an absolute URI: a path (``str`` without a scheme, or ``PathLike``) becomes
    a ``file:`` URI (a directory's with a trailing ``/``, so that ``x.json`` resolves inside
    it); a URI is kept as it is."""
    if not isinstance(base, (str, os.PathLike)):
        raise ConfigurationError(
            f"base_uri must be a path or a URI string, got {type(base).__name__}"
        )
    text = os.fspath(base)
    if isinstance(base, str) and len(urlsplit(text).scheme) > 1:  # not a drive letter
        return text
    path = Path(text).expanduser().absolute()
    return file_uri(path, directory=path.is_dir())


@dataclass(frozen=True)
class LocalResources:
    """The local files a schema's references reach (:func:`local_resources`).

    Attributes:
        base_uri: the root document's retrieval URI (a ``file:`` URI or what the caller gave).
        root: the directory files may be read from (None: no file is read).
        resources: ``(uri, contents)`` of every file read, by the URI it is referenced by (a
            file reached by two URIs is one contents object under both).
        problems: target URI (no fragment) → why it was not read (missing, outside ``root``,
            not JSON); reported by the front-end only when a lookup needs it.
        nbytes: bytes read.
    """

    base_uri: str
    root: Path | None
    resources: tuple[tuple[str, Any], ...] = ()
    problems: dict[str, str] = field(default_factory=dict)
    nbytes: int = 0

    def digest(self) -> str:
        """SHA-256 of the base URI, the root and every resource (URI and contents): part of
        the compile cache key, so a changed sibling file never reuses an old grammar."""
        h = hashlib.sha256()
        h.update(json.dumps([self.base_uri, str(self.root)]).encode())
        for uri, contents in self.resources:
            h.update(b"\0" + uri.encode("utf-8", "surrogatepass") + b"\0")
            h.update(json.dumps(contents, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        return h.hexdigest()


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def _refs_of(doc: Any, base: str) -> Iterator[str]:
    """The absolute target URIs (no fragment) of the ``$ref``s in ``doc`` read at ``base``:
    each ``$id`` on the way changes the base (the target against the outer base is yielded
    too, since drafts 4-7 ignore an ``$id`` next to ``$ref``); ``enum``/``const``/``default``/
    ``examples`` are data and not walked.  Iterative."""
    stack: list[tuple[Any, tuple[str, ...], bool]] = [(doc, (base,), False)]
    while stack:
        node, bases, names = stack.pop()
        if isinstance(node, list):
            stack.extend((v, bases, False) for v in node)
            continue
        if not isinstance(node, dict):
            continue
        if names:  # a map of names to subschemas
            stack.extend((v, bases, False) for v in node.values())
            continue
        ident = node.get("$id", node.get("id"))
        if isinstance(ident, str) and not ident.startswith("#"):
            bases = (urljoin(bases[0], ident), *bases[:1])
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            for b in bases:
                yield urldefrag(urljoin(b, ref))[0]
        for k, v in node.items():
            if k not in _DATA_KEYWORDS and k != "$ref":
                stack.append((v, bases, k in _NAME_MAPS))


class _Crawl:
    """The state of one :func:`local_resources` call."""

    def __init__(self, root: Path | None, known: Any, max_files: int, max_bytes: int) -> None:
        self.root = root
        self.known = known  # URIs already resolvable (the caller's registry)
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.prefixes: list[tuple[str, Path]] = []  # URI directory -> local directory
        self.by_path: dict[Path, Any] = {}
        self.resources: list[tuple[str, Any]] = []
        self.problems: dict[str, str] = {}
        self.seen: set[str] = set()
        self.nbytes = 0

    def local_path(self, uri: str) -> Path | None:
        path = _uri_path(uri)
        if path is not None:
            return path
        for prefix, directory in self.prefixes:
            if uri.startswith(prefix):
                return directory / unquote(uri[len(prefix) :])
        return None

    def note_id(self, doc: Any, directory: Path) -> None:
        """A document read from ``directory`` whose ``$id`` is an absolute non-file URI names
        that directory (see the module docstring)."""
        ident = doc.get("$id", doc.get("id")) if isinstance(doc, dict) else None
        if not isinstance(ident, str) or ident.startswith("#"):
            return
        parts = urlsplit(ident)
        if parts.scheme in ("", "file") or not parts.netloc:
            return
        prefix = urljoin(urldefrag(ident)[0], ".")
        if all(p != prefix for p, _ in self.prefixes):
            self.prefixes.append((prefix, directory))

    def read(self, uri: str, path: Path) -> Any:
        """The contents of ``path`` (read once), or None with a problem recorded."""
        if self.root is None:
            self.problems[uri] = f"{path}: no directory to read local files from was given"
            return None
        if not _inside(path, self.root):
            self.problems[uri] = (
                f"{path} is outside the directory local references may read ({self.root}); "
                "set JsonSchemaOptions.local_ref_root to a directory that holds both"
            )
            return None
        key = path.resolve()
        if key in self.by_path:
            return self.by_path[key]
        if not key.is_file():
            hint = ""
            if not path.suffix and path.with_name(path.name + ".json").is_file():
                hint = f" ({path.name}.json exists: write the reference with its extension)"
            self.problems[uri] = f"no such file: {path}{hint}"
            return None
        size = key.stat().st_size
        if len(self.by_path) + 1 > self.max_files:
            raise LimitExceededError(
                "max_ref_files", self.max_files, f"reading {path} for the $ref {uri!r}"
            )
        if self.nbytes + size > self.max_bytes:
            raise LimitExceededError(
                "max_ref_bytes",
                self.max_bytes,
                f"{path} ({size} bytes) after {self.nbytes} bytes of referenced files",
            )
        self.nbytes += size
        try:
            doc = json.loads(key.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            self.problems[uri] = f"{path} is not a readable JSON file ({exc})"
            return None
        self.by_path[key] = doc
        self.note_id(doc, key.parent)
        return doc

    def run(self, doc: Any, base: str) -> None:
        todo: list[tuple[Any, str]] = [(doc, base)]
        while todo:
            node, at = todo.pop()
            targets = list(dict.fromkeys(_refs_of(node, at)))
            for uri in reversed(targets):
                if uri in self.seen or uri == "" or _known(self.known, uri):
                    continue
                self.seen.add(uri)
                path = self.local_path(uri)
                if path is None:
                    continue  # remote: refused by the front-end unless the registry has it
                got = self.read(uri, path)
                if got is None:
                    continue
                fresh = all(c is not got for _, c in self.resources)
                self.resources.append((uri, got))
                if fresh:
                    todo.append((got, uri))


def _known(registry: Any, uri: str) -> bool:
    if registry is None:
        return False
    try:
        return registry.get(uri) is not None or registry.crawl().get(uri) is not None
    except Exception:  # a user's registry: any failure means "not known"
        return False


def local_resources(
    schema: Any,
    base_uri: str,
    *,
    root: Path | None = None,
    registry: Any = None,
    max_files: int,
    max_bytes: int,
) -> LocalResources:
    """The local files ``schema``'s references reach, read at ``base_uri``.

    Args:
        schema: the root document (as Python values).
        base_uri: its retrieval URI (:func:`as_base_uri`).
        root: the directory files may be read from; default: ``base_uri``'s directory when it
            is a ``file:`` URI (else no file is read).
        registry: the caller's ``referencing.Registry``: URIs it already resolves are not read.
        max_files, max_bytes: the limits (``JsonSchemaOptions.max_ref_files`` /
            ``max_ref_bytes``).

    Raises:
        LimitExceededError: ``max_ref_files`` or ``max_ref_bytes``.
    """
    base_path = _uri_path(base_uri)
    if root is None and base_path is not None:
        root = base_path if base_uri.endswith("/") else base_path.parent
    crawl = _Crawl(root, registry, max_files, max_bytes)
    if base_path is not None:
        crawl.note_id(schema, base_path if base_uri.endswith("/") else base_path.parent)
    crawl.run(schema, base_uri)
    return LocalResources(
        base_uri, root, tuple(crawl.resources), dict(crawl.problems), crawl.nbytes
    )


def json_schema_registry(
    directory: str | os.PathLike[str],
    *,
    max_files: int = 1_000,
    max_bytes: int = 100_000_000,
    default_draft: str = "2020-12",
) -> Any:
    """A ``referencing.Registry`` of every ``*.json`` file under ``directory`` (recursively,
    in path order), each registered by its ``file:`` URI and, when it has one, by its
    ``$id``.  Pass it as ``JsonSchemaOptions(registry=...)``: ``$ref``s to those URIs (and
    ``http(s)`` ones that are some file's ``$id``) resolve locally; nothing is ever fetched.

    Args:
        directory: the folder to read.
        max_files: at most this many files (default 1,000).
        max_bytes: at most this many bytes in all (default 100 MB).
        default_draft: the draft a file without ``$schema`` is read in.

    Raises:
        ConfigurationError: ``directory`` is not a directory, or a file is not JSON (named).
        LimitExceededError: ``max_files`` / ``max_bytes`` (named ``max_ref_files`` /
            ``max_ref_bytes``, as in :class:`JsonSchemaOptions`).
    """
    import referencing
    import referencing.jsonschema as rj

    folder = Path(os.fspath(directory)).expanduser().absolute()
    if not folder.is_dir():
        raise ConfigurationError(f"json_schema_registry: {folder} is not a directory")
    specs = {"4": rj.DRAFT4, "6": rj.DRAFT6, "7": rj.DRAFT7, "2019-09": rj.DRAFT201909}
    spec = specs.get(default_draft, rj.DRAFT202012)
    resources: list[tuple[str, Any]] = []
    total = 0
    paths = sorted(folder.rglob("*.json"))
    if len(paths) > max_files:
        raise LimitExceededError(
            "max_ref_files", max_files, f"{len(paths)} JSON files under {folder}"
        )
    for path in paths:
        if not _inside(path, folder) or not path.is_file():
            continue  # a link out of the folder is not read
        total += path.stat().st_size
        if total > max_bytes:
            raise LimitExceededError(
                "max_ref_bytes", max_bytes, f"the JSON files under {folder}, at {path}"
            )
        try:
            contents = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ConfigurationError(f"json_schema_registry: {path} is not JSON: {exc}") from None
        resource = referencing.Resource.from_contents(contents, default_specification=spec)
        resources.append((file_uri(path), resource))
        ident = contents.get("$id", contents.get("id")) if isinstance(contents, dict) else None
        if isinstance(ident, str) and len(urlsplit(ident).scheme) > 1:
            resources.append((urldefrag(ident)[0], resource))
    # crawled once here (every subresource's $id and anchors indexed), not by every compile;
    # should a document break the crawl, each is checked and the bad ones made opaque
    try:
        registry = referencing.Registry().with_resources(resources).crawl()
    except (AttributeError, TypeError, KeyError, ValueError):
        safe = [(uri, crawlable_resource(r.contents, spec)) for uri, r in resources]
        registry = referencing.Registry().with_resources(safe).crawl()
    _DIGESTS[id(registry)] = (weakref.ref(registry), _digest_of(registry))
    return registry


def crawlable_resource(contents: Any, spec: Any) -> Any:
    """``referencing.Resource.from_contents(contents, default_specification=spec)``, unless
    ``referencing`` cannot crawl it (a keyword of the wrong type where its draft has a
    subschema: ``"items": [...]`` read as 2020-12): then the document is registered opaque
    (reachable by its URI and JSON pointers, its inner ``$id``s and anchors not indexed), so
    that one malformed file cannot break every lookup of a registry."""
    import referencing

    resource = referencing.Resource.from_contents(contents, default_specification=spec)
    try:
        referencing.Registry().with_resource("urn:formcast:probe", resource).crawl()
    except (AttributeError, TypeError, KeyError, ValueError):
        return referencing.Specification.OPAQUE.create_resource(contents)
    return resource


#: id(registry) -> (a weak reference to it, its digest): registries are immutable, so a
#: digest is computed once (a SchemaStore registry holds 30 MB of JSON)
_DIGESTS: dict[int, tuple[Any, str | None]] = {}


def _digest_of(registry: Any) -> str | None:
    try:
        h = hashlib.sha256()
        for uri in sorted(registry):
            resource = registry[uri]
            spec = getattr(resource, "_specification", None)
            h.update(json.dumps([uri, getattr(spec, "name", repr(spec))]).encode())
            h.update(b"\0")
            text = json.dumps(resource.contents, ensure_ascii=False)
            h.update(text.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()
    except (TypeError, ValueError, RecursionError, AttributeError):
        return None


def registry_digest(registry: Any) -> str | None:
    """SHA-256 of a registry's resources (sorted by URI), computed once per registry object;
    None when its contents are not JSON."""
    hit = _DIGESTS.get(id(registry))
    if hit is not None and hit[0]() is registry:
        return hit[1]
    digest = _digest_of(registry)
    for key in [k for k, (ref, _) in _DIGESTS.items() if ref() is None]:
        del _DIGESTS[key]
    with contextlib.suppress(TypeError):  # not weak-referenceable: not cached
        _DIGESTS[id(registry)] = (weakref.ref(registry), digest)
    return digest
