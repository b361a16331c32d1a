"""``$ref`` resolution: drafts, ``$id`` / anchors / JSON pointers, and the definitions table.

``$ref`` is resolved with the ``referencing`` library (the draft's own rules for ``$id``,
anchors and JSON pointers); each target becomes a named definition (:class:`~.nodes.SRef`), so
recursion is a grammar rule, never unrolled.  :class:`Definitions` holds the table (and the
deferred definitions: merging a definition that is still being normalized, a recursive one, is
deferred until it is complete) and the fail-closed / lenient reporting every stage shares.
``referencing`` is imported when a schema is compiled, never at ``import formcast``.
Local files (:mod:`.files`) join the registry as resources; a reference that cannot be
resolved is reported with the reference, its JSON pointer, the URI it resolved to, why (a
missing file, one outside the allowed directory, a remote URI: never fetched) and what to do.

Lifetime: one :class:`Definitions` per compile (the base of :class:`~.normalize.Normalizer`);
a lookup costs what ``referencing`` costs (a crawl of the registry at most once per resource).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

from ...errors import ConfigurationError, LimitExceededError, UnsupportedFeatureError
from .files import LocalResources, crawlable_resource
from .nodes import ANY, S, SRef
from .options import JsonSchemaOptions

__all__ = [
    "LEGACY_DRAFTS",
    "Ctx",
    "Definitions",
    "Pending",
    "draft_of",
    "enter_resource",
    "escape_pointer",
    "printable",
    "root_context",
    "spec_for",
]

_DRAFT_URIS = {
    "http://json-schema.org/draft-04/schema": "4",
    "http://json-schema.org/draft-06/schema": "6",
    "http://json-schema.org/draft-07/schema": "7",
    "https://json-schema.org/draft/2019-09/schema": "2019-09",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}
LEGACY_DRAFTS = ("4", "6", "7")
"""The drafts whose ``$ref`` replaces its sibling keywords."""


class Pending(Exception):
    """A definition was needed while it is still being normalized (recursion)."""


def escape_pointer(seg: str) -> str:
    return seg.replace("~", "~0").replace("/", "~1")


def printable(where: str) -> str:
    """``where`` with lone surrogates (a property name may hold one) written as ``\\udXXX``, so
    that an error message can be printed or logged as UTF-8."""
    return where.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Ctx:
    """Where a subschema is: resolver (base URI), draft, JSON pointer, nesting depth."""

    resolver: Any
    draft: str
    pointer: str
    depth: int

    def child(self, *segments: str | int) -> Ctx:
        ptr = self.pointer
        for s in segments:
            seg = s if type(s) is str else str(s)
            ptr += "/" + (escape_pointer(seg) if "~" in seg or "/" in seg else seg)
        return Ctx(self.resolver, self.draft, ptr, self.depth + 1)


def spec_for(draft: str) -> Any:
    import referencing.jsonschema as rj

    return {
        "4": rj.DRAFT4,
        "6": rj.DRAFT6,
        "7": rj.DRAFT7,
        "2019-09": rj.DRAFT201909,
        "2020-12": rj.DRAFT202012,
    }[draft]


def draft_of(schema: Any, default: str) -> str:
    if isinstance(schema, dict):
        uri = schema.get("$schema")
        if isinstance(uri, str):
            return _DRAFT_URIS.get(uri.rstrip("#"), default)
    return default


def _resource_draft(resolver: Any, default: str) -> str:
    """The draft of the resource ``resolver`` is in: its ``$schema``, else the default
    specification it was registered with (``referencing`` keeps it per resource); ``default``
    when that is unknown (a specification formcast does not read)."""
    # ``referencing`` (0.37) has no public accessor for a resolver's base URI, its registry or a
    # resource's specification: these reads of its private attributes are isolated here (and,
    # for a registry's digest, in :func:`.options._registry_digest`), each with a fallback
    # (``default``) should they disappear
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
        if spec is spec_for(draft):
            return draft
    return default


def _with_meta(registry: Any) -> Any:
    """``registry`` with the drafts' meta-schemas (when jsonschema_specifications is there)."""
    try:
        from jsonschema_specifications import REGISTRY as META
    except ImportError:  # pragma: no cover - optional
        return registry
    return META.combine(registry)


#: :func:`_meta_registry`, once made (an immutable ``referencing.Registry``)
_META_REGISTRY: list[Any] = []


def _meta_registry() -> Any:
    """An empty registry with the drafts' meta-schemas: made once (a registry is immutable:
    its ``with_*``, ``combine`` and crawls return new ones)."""
    if not _META_REGISTRY:
        import referencing

        _META_REGISTRY.append(_with_meta(referencing.Registry()))
    return _META_REGISTRY[0]


def root_context(
    schema: Any, options: JsonSchemaOptions, local: LocalResources | None = None
) -> Ctx:
    """The context of the root of ``schema``: its draft (``$schema``, else
    ``options.default_draft``) and a resolver over ``options.registry``, the local files of
    ``local`` (read in the root's draft unless they say otherwise) and the drafts'
    meta-schemas, whose base URI is ``local.base_uri`` (joined with the root's ``$id``)."""
    try:
        import referencing
        import referencing.exceptions
        import referencing.jsonschema
    except ImportError as e:  # pragma: no cover - a declared dependency of the extra
        raise ConfigurationError(
            "JSON Schema support needs the 'referencing' package: pip install 'jsonschema>=4.20'"
        ) from e
    draft = draft_of(schema, options.default_draft)
    spec = spec_for(draft)
    resource = referencing.Resource.from_contents(schema, default_specification=spec)
    registry: Any = options.registry
    if registry is None and (local is None or not local.resources):
        registry = _meta_registry()  # (the usual case: made once, registries are immutable)
    else:
        if registry is None:
            registry = referencing.Registry()
        if local is not None and local.resources:
            registry = registry.with_resources(
                (uri, crawlable_resource(c, spec)) for uri, c in local.resources
            )
        registry = _with_meta(registry)
    if local is None:
        resolver = registry.resolver_with_root(resource)
        return Ctx(resolver, draft, "#", 0)
    ident = resource.id()
    base = urldefrag(urljoin(local.base_uri, ident))[0] if ident else local.base_uri
    registry = registry.with_resource(local.base_uri, resource)
    if base != local.base_uri:
        registry = registry.with_resource(base, resource)
    return Ctx(registry.resolver(base), draft, "#", 0)


def enter_resource(ctx: Ctx, schema: dict[str, Any], draft: str) -> Ctx:
    """``ctx`` moved into ``schema``'s own resource (its ``$id``), read in ``draft``."""
    if "$id" not in schema and "id" not in schema:
        # no identifier (most subschemas): every draft's ``id_of`` reads only these two keys,
        # so ``in_subresource`` would return the same resolver; skip building the resource
        return ctx if draft == ctx.draft else Ctx(ctx.resolver, draft, ctx.pointer, ctx.depth)
    spec = spec_for(draft)
    try:
        resolver = ctx.resolver.in_subresource(spec.create_resource(schema))
    except (AttributeError, TypeError):
        # a malformed identifier ("id": {...}, a property map written in the wrong
        # place): it identifies nothing, so the base URI stays the enclosing one
        resolver = ctx.resolver
    return Ctx(resolver, draft, ctx.pointer, ctx.depth)


class Definitions:
    """The definitions table of one compile, and the failure reporting every stage shares."""

    def __init__(self, options: JsonSchemaOptions) -> None:
        self.options = options
        #: the local files read for this schema (set by the normalizer), for error messages
        self.local: LocalResources | None = None
        self.ignored: list[str] = []
        self.defs: dict[str, S] = {}
        self.def_names: dict[str, str] = {}
        self._pending: set[str] = set()
        self._thunks: dict[str, Callable[[], S]] = {}
        self._keep: list[S] = []  # nodes whose id() names a deferred definition

    def normalize(self, schema: Any, ctx: Ctx, *, entered: bool = False) -> S:
        """The normalized node of ``schema`` (:class:`~.normalize.Normalizer`)."""
        raise NotImplementedError  # pragma: no cover

    # -- failure helpers ----------------------------------------------------------------------
    def unsupported(self, feature: str, where: str, hint: str = "") -> None:
        """Fail closed, or (lenient) record the ignored feature and let the caller go on."""
        where = printable(where)
        if self.options.lenient:
            self.ignored.append(f"{feature} at {where}" + (f" ({hint})" if hint else ""))
            return
        raise UnsupportedFeatureError(feature, where, hint)

    # -- definitions --------------------------------------------------------------------------
    def resolve(self, key: str) -> S:
        """The node of a definition; raises :class:`Pending` while it is being built."""
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
        raise Pending(key)

    def definition(self, key: str) -> S:
        """The node of a definition once normalization is over (deferred ones built now)."""
        try:
            return self.resolve(key)
        except Pending:
            raise UnsupportedFeatureError(
                "$ref", self.def_names.get(key, key), "a definition that merges with itself"
            ) from None

    def _lookup(self, ref: str, ctx: Ctx) -> S:
        import referencing.exceptions as rex

        try:
            resolved = ctx.resolver.lookup(ref)
        except rex.Unresolvable as e:
            self.unsupported("$ref", ctx.pointer, self._unresolvable(ref, ctx, e))
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
            draft_of(contents, _resource_draft(resolved.resolver, ctx.draft)),
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

    def _unresolvable(self, ref: str, ctx: Ctx, exc: Exception) -> str:
        """Why ``ref`` (at ``ctx``) cannot be resolved, and what to do."""
        import referencing.exceptions as rex

        base = getattr(ctx.resolver, "_base_uri", "")  # private in referencing 0.37: see above
        base = base if isinstance(base, str) else ""
        target = urldefrag(urljoin(base, ref))[0] if not ref.startswith("#") else base
        fragment = urldefrag(ref)[1]
        where = f"cannot resolve {ref!r}" + (f" (-> {target})" if target and target != ref else "")
        problems = self.local.problems if self.local is not None else {}
        if isinstance(exc, (rex.PointerToNowhere, rex.NoSuchAnchor)):
            return f"{where}: {target or 'the schema'} has no {'#' + fragment!r}"
        if target in problems:
            return f"{where}: {problems[target]}"
        scheme = urlsplit(target).scheme
        if scheme in ("http", "https"):
            return (
                f"{where}: a remote reference, and formcast never fetches over the network; "
                "keep the file on disk and pass JsonSchemaOptions(registry="
                "formcast.json_schema_registry(directory)) (a file is found by its $id), "
                "or add it to JsonSchemaOptions.registry"
            )
        if scheme == "file":
            return f"{where}: the file is not among those read"
        if len(scheme) <= 1:
            return (
                f"{where}: a relative reference with no base URI; compile the schema from its "
                "file (compile_json_schema(pathlib.Path(...))) or pass base_uri= to read the "
                "files next to it"
            )
        return f"{where} ({type(exc).__name__}); add the resource to JsonSchemaOptions.registry"
