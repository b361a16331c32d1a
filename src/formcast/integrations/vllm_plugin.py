"""The vLLM plug-in: makes ``structured_outputs_config={"backend": "formcast"}`` work.

vLLM (0.32) has no registry of structured-output backends: the name is a ``Literal`` in
``StructuredOutputsConfig``, ``SamplingParams._validate_structured_outputs`` dispatches request
validation on it, and ``StructuredOutputManager.grammar_init`` builds the backend in an
``if/elif``.  :func:`register` -- the ``vllm.general_plugins`` entry point ``formcast``, which
vLLM calls in every process it starts (front-end, engine core, workers) -- patches exactly
those places, each only for the name ``"formcast"`` (every other backend name goes to
vLLM's own code, unchanged):

1. ``StructuredOutputsConfig.backend`` also accepts ``"formcast"`` (the pydantic dataclass is
   rebuilt with the widened ``Literal``);
2. ``SamplingParams._validate_structured_outputs``: for ``"formcast"``, vLLM's
   backend-independent checks (copied from 0.32: empty specs, JSON nesting, NUL in a regex,
   request-level backend selection...) and then formcast's own front-end check
   (:func:`formcast.integrations.vllm.check_request`), so that a constraint formcast cannot
   serve fails with a ``VLLMValidationError`` (HTTP 400 from the server) naming the
   unsupported feature, before it reaches the engine;
3. ``StructuredOutputManager.grammar_init`` creates a
   :class:`~formcast.integrations.vllm.FormcastBackend` when the request's backend is
   ``"formcast"``; and ``StructuredOutputManager.__init__``, when the engine is configured with
   ``"formcast"``, starts building that backend (the vocabulary and its token trie, about 1-2 s
   for a 128k vocabulary) in a daemon thread, so that the engine's first structured requests do
   not wait for it (a build that fails is retried at the first request, which then gets the
   error as before); a request whose constraint formcast's compiler holds in memory gets its
   grammar there and then (vLLM's compile thread would hand it over only after the
   scheduler's first look, a step late), any other goes to vLLM's compile thread as before.

The upstream change that makes this module unnecessary: a backend registry in
``vllm/v1/structured_output/`` (``register_structured_output_backend(name, backend_cls,
validate_fn)``, as SGLang's ``register_grammar_backend``), with ``StructuredOutputsConfig.backend``
typed ``str`` and checked against the registry, ``_validate_structured_outputs`` and
``grammar_init`` looking the name up there instead of the ``if/elif`` chains.

``vllm serve`` loads the plug-in before it parses its arguments.  ``vllm.LLM(...)`` builds
its ``StructuredOutputsConfig`` *before* vLLM loads plug-ins, so offline use calls
:func:`register` first (importing :mod:`formcast.integrations.vllm_plugin` is not enough)::

    from formcast.integrations.vllm_plugin import register
    register()
    llm = vllm.LLM(model, structured_outputs_config={"backend": "formcast"})

Idempotent (vLLM may call it several times in one process); thread-safe.  Imports vLLM when
called, never when imported.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from concurrent.futures import Future
from typing import Any

__all__ = ["TESTED_VLLM_VERSIONS", "register"]

logger = logging.getLogger(__name__)

BACKEND_NAME = "formcast"
TESTED_VLLM_VERSIONS = ("0.32",)
"""vLLM minor versions whose sources the patches were written against (and tested on)."""

_lock = threading.Lock()
_done = False


def register() -> None:
    """Patch vLLM so that ``"formcast"`` is a structured-output backend (see the module
    docstring).  Idempotent.  Cost: one pydantic schema rebuild, once per process.

    Raises:
        ImportError: vLLM is not installed.
    """
    global _done
    with _lock:
        if _done:
            return
        import vllm

        version = str(getattr(vllm, "__version__", "?"))
        if not version.startswith(TESTED_VLLM_VERSIONS):
            logger.warning(
                "formcast's vLLM plug-in was written for vLLM %s; this is vLLM %s: if "
                "'formcast' is not accepted as a backend, vLLM's internals changed",
                "/".join(TESTED_VLLM_VERSIONS),
                version,
            )
        _patch_config()
        _patch_validation()
        _patch_manager()
        _done = True


# -- 1. the Literal in StructuredOutputsConfig --------------------------------------------------
def _patch_config() -> None:
    from typing import Literal, get_args

    from pydantic.dataclasses import rebuild_dataclass
    from vllm.config import structured_outputs as so

    cls: Any = so.StructuredOutputsConfig
    names = get_args(cls.__dataclass_fields__["backend"].type)
    if not names:  # vLLM made it a plain str: nothing to widen
        return
    if BACKEND_NAME in names:
        return
    choices = (*names, BACKEND_NAME)
    widened = Literal[choices]  # type: ignore[valid-type]
    so.StructuredOutputsBackend = widened
    cls.__annotations__["backend"] = widened
    cls.__dataclass_fields__["backend"].type = widened
    pydantic_fields = getattr(cls, "__pydantic_fields__", None)
    if pydantic_fields is not None and "backend" in pydantic_fields:
        pydantic_fields["backend"].annotation = widened
    rebuild_dataclass(cls, force=True)


# -- 2. request validation -----------------------------------------------------------------------
def _patch_validation() -> None:
    from vllm.sampling_params import SamplingParams

    original = SamplingParams._validate_structured_outputs
    if getattr(original, "_formcast", False):
        return

    @functools.wraps(original)
    def validate(
        self: Any, model_config: Any, structured_outputs_config: Any, tokenizer: Any
    ) -> None:
        if (
            structured_outputs_config is None
            or self.structured_outputs is None
            or structured_outputs_config.backend != BACKEND_NAME
        ):
            original(self, model_config, structured_outputs_config, tokenizer)
            return
        _validate_for_formcast(self, model_config, tokenizer)

    validate._formcast = True  # type: ignore[attr-defined]
    SamplingParams._validate_structured_outputs = validate


def _validate_for_formcast(params: Any, model_config: Any, tokenizer: Any) -> None:
    """vLLM 0.32's backend-independent checks, then formcast's front-end check."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import check_json_nesting

    from ..errors import FormcastError
    from .vllm import check_request

    so = params.structured_outputs
    if getattr(model_config, "is_diffusion", False):
        raise VLLMValidationError(
            "Structured outputs are not yet supported for diffusion language models. Remove "
            "the structured output constraint from the request."
        )
    if tokenizer is None:
        raise VLLMValidationError(
            "Structured outputs requires a tokenizer so it can't be used with "
            "'skip_tokenizer_init'"
        )
    if so._backend and so._backend != BACKEND_NAME:
        raise VLLMValidationError(
            "Request-level structured output backend selection is not supported. The "
            f"request specified '{so._backend}', but vLLM was initialised with "
            f"'{BACKEND_NAME}'. This error can be resolved by removing '_backend' from the "
            "request."
        )
    so._backend = BACKEND_NAME
    if isinstance(so.choice, list) and not so.choice:
        raise VLLMValidationError(f"Choice '{so.choice}' cannot be an empty list")
    for field in ("grammar", "json", "structural_tag"):
        value = getattr(so, field)
        if isinstance(value, str) and value.strip() == "":
            raise VLLMValidationError(f"structured_outputs.{field} cannot be an empty string")
    check_json_nesting(so.json)
    check_json_nesting(so.structural_tag, structural_tag=True)
    if so.json_object is False:
        raise VLLMValidationError(
            "structured_outputs.json_object must be True if set; omit structured_outputs to "
            "disable structured outputs"
        )
    if so.regex and "\x00" in so.regex:
        raise VLLMValidationError(
            "structured_outputs.regex must not contain a NUL character ('\\x00')"
        )

    kind, spec = _request_key(so)
    try:
        check_request(kind, spec)
    except FormcastError as exc:
        raise VLLMValidationError(
            f"formcast cannot serve this {kind.lower()} constraint: {exc}"
        ) from exc
    except ValueError as exc:  # malformed JSON text and the like
        raise VLLMValidationError(f"Invalid {kind.lower()} specification: {exc}") from exc
    so.__post_init__()


def _request_key(so: Any) -> tuple[str, str]:
    """The (request type, spec) vLLM's engine will send: ``get_structured_output_key``."""
    if so.json is not None:
        return "JSON", so.json if isinstance(so.json, str) else json.dumps(so.json)
    if so.json_object:
        return "JSON_OBJECT", ""
    if so.regex is not None:
        return "REGEX", so.regex
    if so.choice is not None:
        return "CHOICE", so.choice if isinstance(so.choice, str) else json.dumps(so.choice)
    if so.grammar is not None:
        return "GRAMMAR", so.grammar
    return "STRUCTURAL_TAG", so.structural_tag


# -- 3. the backend's construction -----------------------------------------------------------------
def _patch_manager() -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    original_init = StructuredOutputManager.__init__
    if not getattr(original_init, "_formcast", False):

        @functools.wraps(original_init)
        def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, vllm_config, *args, **kwargs)
            self._formcast_backend = _start_backend(self)

        __init__._formcast = True  # type: ignore[attr-defined]
        StructuredOutputManager.__init__ = __init__

    original = StructuredOutputManager.grammar_init
    if getattr(original, "_formcast", False):
        return

    @functools.wraps(original)
    def grammar_init(self: Any, request: Any) -> None:
        if (
            self.backend is None
            and request.structured_output_request is not None
            and request.sampling_params is not None
            and request.sampling_params.structured_outputs._backend == BACKEND_NAME
        ):
            self.backend = _take_backend(self)
        if _ready_grammar(self, request):
            return
        original(self, request)

    grammar_init._formcast = True  # type: ignore[attr-defined]
    StructuredOutputManager.grammar_init = grammar_init


def _ready_grammar(manager: Any, request: Any) -> bool:
    """Hand ``request`` its grammar now when formcast's compiler holds it in memory (a
    constraint seen before): vLLM's compile thread would deliver it only after the scheduler
    first looked, so the request would start a step late (docs/notes/vllm32.md).  A miss, or
    another backend: False, and vLLM's own path (the compile thread) runs."""
    from .vllm import FormcastBackend

    backend = manager.backend
    so = request.structured_output_request
    if so is None or not isinstance(backend, FormcastBackend):
        return False
    request_type, spec = so.structured_output_key
    params = request.sampling_params
    stop = params.all_stop_token_ids if params is not None else None
    grammar = backend.cached_grammar(request_type, spec, stop_token_ids=stop)
    if grammar is None:
        return False
    so.grammar = grammar
    return True


def _new_backend(manager: Any) -> Any:
    from .vllm import FormcastBackend

    return FormcastBackend(
        manager.vllm_config,
        tokenizer=manager.tokenizer,
        vocab_size=manager.vllm_config.model_config.get_vocab_size(),
    )


def _start_backend(manager: Any) -> Future[Any] | None:
    """When the engine is configured with ``backend="formcast"``: build the backend (the
    vocabulary, ~1 s for 128k tokens, and the token trie every compile needs) in a daemon thread
    while the engine starts and waits for requests, instead of in the first structured request's
    path.  ``None`` for another backend or an engine without a tokenizer."""
    config = getattr(manager.vllm_config, "structured_outputs_config", None)
    if getattr(config, "backend", None) != BACKEND_NAME:
        return None
    if getattr(manager, "tokenizer", None) is None:  # skip_tokenizer_init: no structured output
        return None
    future: Future[Any] = Future()

    def build() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            backend = _new_backend(manager)
            backend.warm_up()
        except BaseException as exc:  # handed to the first request (see _take_backend)
            future.set_exception(exc)
        else:
            future.set_result(backend)

    threading.Thread(target=build, name="formcast-backend", daemon=True).start()
    return future


def _take_backend(manager: Any) -> Any:
    """The backend started by :func:`_start_backend` (waiting for it if needed), or one built
    now; a failed early build is retried here, so its error reaches the request as before."""
    future = getattr(manager, "_formcast_backend", None)
    manager._formcast_backend = None
    if future is not None:
        try:
            return future.result()
        except Exception:
            logger.warning("formcast: the backend built at engine start failed; building it again")
    return _new_backend(manager)
