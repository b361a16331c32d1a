"""The server's options: :class:`ServerConfig` (one frozen dataclass, units in the names).

Lifetime: an immutable value, read once by :func:`formcast.server.create_app`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigurationError
from ..limits import CompileLimits

__all__ = ["ServerConfig"]


@dataclass(frozen=True)
class ServerConfig:
    """How ``formcast serve`` serves one model.

    Attributes:
        model_name: the id clients send as ``model`` and ``GET /v1/models`` lists (a request
            naming another model is a 404 ``model_not_found``).
        max_queue: requests that may wait for the model beyond those it serves (``max_batch``
            with batching, else one); one more is answered ``429`` with ``Retry-After``
            (requests compiling count as waiting).
        batching: serve requests together (continuous batching, :mod:`formcast.generation.
            batching`) when formcast has a batched decoder for the model (llama.cpp,
            transformers, ``CallableModel``): the running requests' sequences are decoded in
            one model call per step, a request joins at the next step after it arrives and
            leaves when it ends.  ``False``, or a model without a batched decoder: one
            request after another on one model thread.
        max_batch: slots of the batched decoder -- the most requests (choices) decoded
            together; more wait in the queue.  Each slot holds a whole context (llama.cpp
            allocates ``max_batch`` x the model's context of KV cells up front).
        share_prefix: with batching, a request whose prompt starts with at least this many
            tokens of a running request's prompt (the chat template's system prompt, the same
            tool definitions) copies their cache entries instead of evaluating them again
            (``ContinuousBatcher(share_prefix=)``): on a CPU, where evaluating a prompt costs
            in proportion to its tokens, simultaneous requests get their first token much
            sooner.  ``None``: every prompt is evaluated whole.  The copied entries were
            computed in another batch, so logits can differ in their last bits (as batching
            itself does).
        prompt_cache: with batching, a finished request's cache stays in its slot until the
            slot is needed (``ContinuousBatcher(prompt_cache=)``, as llama.cpp's server keeps
            its slots' prompts): a request takes the free slot whose kept sequence shares the
            longest start with its prompt and evaluates only the rest -- a retried request,
            the next turn of a conversation, a repeated system prompt or tool set.  The kept
            entries were computed in another batch: logits can differ in their last bits.
            ``False``: every slot is cleared when its request ends.
        fast_forward: decode constrained requests with ``fast_forward=True``
            (:mod:`formcast.generation.fast_forward`): the bytes the constraint forces (keys,
            punctuation, ``const`` values) are appended in the tokenizer's spelling and
            evaluated with the next token in one model call.  Fewer model calls per request;
            the spelling of forced text is the tokenizer's rather than the model's choice, so
            outputs (also greedy ones) can differ from plain masking.  A request asking for
            ``logprobs`` is decoded with plain masking (forced tokens have no
            log-probabilities).  The model needs a raw tokenizer (``encode_bytes``).  Off by
            default.
        prefill_tokens: with batching, the most prompt tokens that join in one step
            (``ContinuousBatcher(prefill_tokens=)``; ``None``: every waiting request that has
            a slot joins at once).  A bound spreads simultaneous arrivals over several steps:
            the first of them get their first token sooner, the running ones keep decoding.
        batch_nice: with batching, how much lower the OS priority of the batcher's thread
            (its model calls and masks; ``ContinuousBatcher(worker_nice=)``, Linux) is than
            the event loop's: when both are ready for a core, the loop's short,
            latency-bound work (arrivals, a forced start streamed, chunks sent) goes first;
            the steps take what is left.  0: the same priority.
        n_threads: CPU threads of the batched decoder (``None``: the cores this process may
            run on for llama.cpp; torch's own setting for transformers).  On a machine whose
            cores are busy with other work use 1 (llama.cpp's threads spin waiting for each
            other).
        request_timeout_s: wall-clock budget of one request from its arrival, queue wait
            included; when it runs out the generation stops with ``finish_reason
            "timeout"`` (the text so far is returned).  ``None``: no limit.
        compile_timeout_s: wall-clock budget of one constraint compile (a schema, a tool
            set); past it the request is a 400 naming ``compile_timeout_s``.  The compile's
            deterministic fuel (:class:`~formcast.limits.CompileLimits`) applies as well.
        compile_workers: compile processes (``GrammarCompiler(workers=N)``): a compile then
            never holds the server's GIL.  0 compiles in a thread of the server process (the
            event loop still runs, but shares the GIL with the compile).
        default_max_tokens: ``max_tokens`` of a chat request that gives none (bounded by the
            model's context).
        max_n: the largest ``n`` (choices per request) accepted.
        retry_after_s: the smallest ``Retry-After`` sent with a 429 (the server raises it
            with the work ahead in the queue).
        cache_dir: the compiled-grammar disk cache shared with ``formcast compile
            --cache-dir`` (``None``: ``$FORMCAST_CACHE_DIR`` or none).
        compile_limits: the compiler's limits (``None``: :class:`~formcast.limits.CompileLimits`
            defaults: about 2 s of deterministic compile fuel); a request exceeding one is a
            400 naming it.
        allow_extra_properties: for schemas sent without ``strict: true`` (response formats
            and tool parameters): may an object whose schema has no ``additionalProperties``
            get properties it does not declare?  False (default, as XGrammar's strict mode
            and so vLLM): declared properties only -- a subset of the valid documents, and a
            small model cannot pad arguments with keys copied from the schema.  True: the
            JSON Schema specification's reading (any undeclared property, any value).
            ``strict: true`` schemas are closed either way (docs/server.md, "strict").
    """

    model_name: str = "smollm2"
    max_queue: int = 16
    batching: bool = True
    max_batch: int = 8
    share_prefix: int | None = 16
    prompt_cache: bool = True
    fast_forward: bool = False
    prefill_tokens: int | None = None
    batch_nice: int = 5
    n_threads: int | None = None
    request_timeout_s: float | None = 120.0
    compile_timeout_s: float = 30.0
    compile_workers: int = 0
    default_max_tokens: int = 256
    max_n: int = 8
    retry_after_s: int = 1
    cache_dir: str | None = None
    compile_limits: CompileLimits | None = None
    allow_extra_properties: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ConfigurationError("ServerConfig.model_name must be a non-empty string")
        for name in (
            "max_queue",
            "compile_workers",
            "default_max_tokens",
            "max_n",
            "retry_after_s",
            "max_batch",
            "batch_nice",
        ):
            value = getattr(self, name)
            low = 1 if name in ("default_max_tokens", "max_n", "max_batch") else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(
                    f"ServerConfig.{name} must be an int >= {low}, got {value!r}"
                )
        sp = self.share_prefix
        if sp is not None and (isinstance(sp, bool) or not isinstance(sp, int) or sp < 1):
            raise ConfigurationError(
                f"ServerConfig.share_prefix must be an int >= 1 or None (off), got {sp!r}"
            )
        pt = self.prefill_tokens
        if pt is not None and (isinstance(pt, bool) or not isinstance(pt, int) or pt < 1):
            raise ConfigurationError(
                f"ServerConfig.prefill_tokens must be an int >= 1 or None (no bound), got {pt!r}"
            )
        n = self.n_threads
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigurationError(
                f"ServerConfig.n_threads must be an int >= 1 or None (the machine's cores), "
                f"got {n!r}"
            )
        if not isinstance(self.fast_forward, bool):
            raise ConfigurationError(
                f"ServerConfig.fast_forward must be a bool, got {self.fast_forward!r}"
            )
        if not isinstance(self.prompt_cache, bool):
            raise ConfigurationError(
                f"ServerConfig.prompt_cache must be a bool, got {self.prompt_cache!r}"
            )
        if not isinstance(self.batching, bool):
            raise ConfigurationError(f"ServerConfig.batching must be a bool, got {self.batching!r}")
        if not isinstance(self.allow_extra_properties, bool):
            raise ConfigurationError(
                "ServerConfig.allow_extra_properties must be a bool, got "
                f"{self.allow_extra_properties!r}"
            )
        t = self.request_timeout_s
        if t is not None and not t > 0:
            raise ConfigurationError(
                f"ServerConfig.request_timeout_s must be > 0 or None, got {t!r}"
            )
        if not self.compile_timeout_s > 0:
            raise ConfigurationError(
                f"ServerConfig.compile_timeout_s must be > 0, got {self.compile_timeout_s!r}"
            )
