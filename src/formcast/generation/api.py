"""Model-in-the-loop constrained decoding: :func:`generate` and :func:`stream`.

One decoding step (the order is fixed)::

    matcher.fill_next_token_bitmask  ->  [only stop tokens allowed?  finish "completed"]
      -> [exactly one token allowed?  take it without sampling (forced token)]
      -> model.step(pending tokens) -> logits
      -> mask (-inf) -> temperature -> top-k -> top-p -> sample     (formcast.sampling)
      -> matcher.accept_token

Sampling runs :func:`~formcast.sampling.sample_token` on the allowed ids only (cached per
mask): the same distribution, and for a seeded generator the same token, as the full-vocabulary
chain (masked tokens have probability 0; ids stay in increasing order), at O(allowed) cost.

Jump-forward, and why it is done this way.  When the grammar forces the next bytes
(``find_jump_forward_bytes()`` is non-empty) there are usually several token spellings of
them (``"name"`` can be ``"``+``name``+``"`` or ``"name`` + ``"``); inserting one spelling
without asking the model would produce token sequences the tokenizer would never produce
(non-canonical tokenization, mission item 14).  formcast therefore keeps sampling normally
through forced bytes: the model picks the spelling, under the mask.  The only shortcut is
exact: when the mask allows **exactly one** token, that token is taken without sampling (any
sampler would pick it), and its evaluation is deferred and batched with the next model call;
when only stop tokens are allowed the output is complete and generation ends without a model
call.  Greedy output is therefore identical to plain step-by-step masked decoding.

Token budget.  ``max_tokens`` counts text tokens.  A stop token that the grammar forces (the
output is complete and nothing else is allowed) is accepted without a model call and without
counting.  When the budget runs out the result is ``"max_tokens"`` with the truncated text:
never ``"completed"``, never auto-completed, never parsed (``value``/``parsed`` ``None``,
``parse_error`` says why).  The output is thus bounded by the constraint *and* the budget: a
schema without ``maxItems``/``maxLength`` (or with ``10**12``) is bounded by ``max_tokens``.

Regex dialect.  ``regex=`` is ECMA-262 by default (ASCII ``\\d \\w \\s``, as JSON Schema
``pattern``); ``dialect="python"`` gives Python ``re``'s Unicode classes.

Threads.  Masks are precomputed on a background thread while the model reads the prompt; the
thread is stopped and joined before anything is yielded or returned (also when the prefill
raises), so no thread outlives the call.

Streaming.  Text pieces are decoded incrementally from the token bytes: a multi-byte UTF-8
character split across tokens is held back until it is complete, and text that could be the
start of a caller's stop string is held back until it is known not to be one.

Lifetime: stateless functions; a compiled constraint is cached per vocabulary by the module's
:class:`~formcast.index.compiler.GrammarCompiler` (bounded LRU), so repeated calls with the same
schema or regex compile once.
"""

from __future__ import annotations

import codecs
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from ..bitmask import allocate_token_bitmask
from ..errors import (
    ConfigurationError,
    DeadEndDiagnostic,
    FormcastError,
    UnsupportedFeatureError,
    VocabularyError,
)
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..model.chat import Message
from ..model.protocol import LanguageModel
from ..runtime.matcher import GrammarMatcher
from ..sampling import SamplingParams, sample_token
from ..vocab.vocabulary import Vocabulary
from .results import FinishReason, GenerationResult, GenerationTimings

__all__ = [
    "FrontEndUnavailableError",
    "Prompt",
    "allowed_token_ids",
    "compile_constraint",
    "generate",
    "get_compiler",
    "stream",
]

Prompt: TypeAlias = "str | Sequence[int] | Sequence[Message]"
"""A prompt: text (the chat template is applied for instruct models), chat messages, or token
ids (used as they are)."""

JSON_KINDS = frozenset({"json_schema", "builtin_json"})
DEFAULT_REGEX_DIALECT = "ecma"
"""The regex dialect of ``regex=``: ECMA-262 (``u`` flag), ASCII ``\\d \\w \\s`` -- the
semantics of JSON Schema ``pattern``.  ``dialect="python"`` gives Python ``re``'s."""
_perf = time.perf_counter

# -- compilers, one per vocabulary ---------------------------------------------------------------
_COMPILERS: OrderedDict[str, GrammarCompiler] = OrderedDict()
_COMPILERS_LOCK = threading.Lock()
_MAX_COMPILERS = 4


def get_compiler(vocab: Vocabulary) -> GrammarCompiler:
    """The shared :class:`GrammarCompiler` of ``vocab`` (kept for the 4 most recent vocabularies;
    keyed by the vocabulary fingerprint, so an equal vocabulary reuses the cache)."""
    key = vocab.fingerprint
    with _COMPILERS_LOCK:
        comp = _COMPILERS.get(key)
        if comp is None:
            comp = GrammarCompiler(vocab)
            _COMPILERS[key] = comp
            while len(_COMPILERS) > _MAX_COMPILERS:
                _COMPILERS.popitem(last=False)
        _COMPILERS.move_to_end(key)
        return comp


class FrontEndUnavailableError(UnsupportedFeatureError):
    """This formcast build lacks the compiler front-end a constraint needs (e.g. JSON Schema)."""


def _call_front_end(compiler: GrammarCompiler, name: str, what: str, *args: Any, **kw: Any) -> Any:
    """``compiler.<name>(*args, **kw)``; a missing method or front-end module is reported as
    :class:`FrontEndUnavailableError` (never as an AttributeError/ImportError)."""
    hint = f"this formcast build has no working GrammarCompiler.{name} yet; use regex= meanwhile"
    fn = getattr(compiler, name, None)
    if fn is None:
        raise FrontEndUnavailableError(what, hint=hint)
    try:
        return fn(*args, **kw)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("formcast"):
            raise FrontEndUnavailableError(what, hint=f"{hint} ({exc})") from exc
        raise


def compile_constraint(
    vocab: Vocabulary,
    *,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiler: GrammarCompiler | None = None,
    dialect: str = DEFAULT_REGEX_DIALECT,
) -> tuple[CompiledGrammar | None, str | None]:
    """Compile at most one constraint for ``vocab``; returns ``(compiled, kind)``.

    Args:
        schema: a JSON Schema (``dict``, ``bool`` or JSON text; ``True`` is "any JSON value"),
            or a Pydantic model class (its ``model_json_schema()``).
        regex: a regular expression (fullmatch semantics).
        grammar: grammar text in ``grammar_syntax`` (``"gbnf"`` or ``"lark"``), or ``"json"``
            for the built-in JSON grammar.
        compiler: the compiler to use (default: the shared one of ``vocab``).
        dialect: the dialect of ``regex``: ``"ecma"`` (default: ECMA-262 with the ``u`` flag,
            ASCII ``\\d \\w \\s``, as JSON Schema ``pattern``) or ``"python"`` (``re``: Unicode
            ``\\d`` admits ``٣``); see docs/regex.md.

    Returns:
        ``(None, None)`` when no constraint is given; ``kind`` is the compiled grammar's kind
        (``"regex"``, ``"json_schema"``, ``"builtin_json"``, ``"gbnf"``, ``"lark"``).

    Raises:
        ConfigurationError: more than one constraint, or a schema that is not JSON.
        FrontEndUnavailableError: this build lacks the needed front-end (an
            :class:`~formcast.errors.UnsupportedFeatureError`).
        GrammarError: the constraint does not compile (syntax, unsupported feature, limits).
    """
    named = (("schema", schema), ("regex", regex), ("grammar", grammar))
    given = [n for n, v in named if v is not None]
    if len(given) > 1:
        raise ConfigurationError(f"give at most one constraint, got {', '.join(given)}")
    if not given:
        return None, None
    comp = compiler if compiler is not None else get_compiler(vocab)
    if regex is not None:
        if not isinstance(regex, str):
            raise ConfigurationError(f"regex must be str, got {type(regex).__name__}")
        cg = comp.compile_regex(regex, dialect=dialect)
        return cg, cg.kind
    if grammar is not None:
        if not isinstance(grammar, str):
            raise ConfigurationError(f"grammar must be str, got {type(grammar).__name__}")
        if grammar.strip() == "json":
            cg = _call_front_end(comp, "compile_builtin_json_grammar", "json grammar")
        else:
            cg = _call_front_end(
                comp, "compile_grammar", f"{grammar_syntax} grammar", grammar, syntax=grammar_syntax
            )
        return cg, cg.kind
    if pydantic_model_class(schema) is not None:
        schema = schema.model_json_schema()
    elif isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"schema is not valid JSON text: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise ConfigurationError(
            "schema must be a JSON Schema object or boolean, JSON text or a Pydantic model "
            f"class, got {type(schema).__name__}"
        )
    cg = _call_front_end(comp, "compile_json_schema", "JSON Schema", schema)
    return cg, cg.kind


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


# -- prompts -------------------------------------------------------------------------------------
def _prompt_ids(
    model: LanguageModel, prompt: Prompt, *, chat: bool | None, system: str | None
) -> list[int]:
    template = model.chat_template
    if isinstance(prompt, str):
        if chat is None:
            chat = template is not None
        if chat:
            if template is None:
                raise ConfigurationError(
                    f"chat=True but model {model.name!r} has no chat template; pass chat=False "
                    "or give the model a template (chat_template=...)"
                )
            prompt = template.render_user(prompt, system=system)
        ids = model.tokenize(prompt)
    elif isinstance(prompt, Sequence) and prompt and isinstance(prompt[0], Mapping):
        if chat is False or template is None:
            raise ConfigurationError(
                "chat messages need a chat template: the model has none (or chat=False); "
                "pass the prompt as text or token ids"
            )
        messages: list[Message] = list(prompt)  # type: ignore[arg-type]  # render() checks
        ids = model.tokenize(template.render(messages, system=system))
    elif isinstance(prompt, Sequence) and all(
        isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in prompt
    ):
        ids = [int(t) for t in prompt if isinstance(t, (int, np.integer))]
        bad = [t for t in ids if not 0 <= t < model.vocab.vocab_size]
        if bad:
            raise ConfigurationError(
                f"prompt token ids {bad[:5]} are out of range for vocab_size "
                f"{model.vocab.vocab_size}"
            )
    else:
        raise ConfigurationError(
            "prompt must be text, a list of chat messages or a list of token ids, "
            f"got {type(prompt).__name__}"
        )
    if not ids:
        raise ConfigurationError("the prompt is empty: give at least one token of context")
    return ids


def _resolve_model(model: Any) -> LanguageModel:
    if isinstance(model, str):
        from ..model.loading import load_model

        return load_model(model)
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(
            f"model must be a formcast model wrapper (LlamaCppModel, TransformersModel, "
            f"CallableModel) or a model name such as 'smollm2', got {type(model).__name__}"
        )
    return model


# -- the decoding loop ---------------------------------------------------------------------------
class _StopScanner:
    """Cuts the text at the first caller stop string; holds back possible stop-string starts."""

    __slots__ = ("held", "stops")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.held = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """``(text safe to emit, stop string found)``."""
        if not self.stops:
            return piece, False
        buf = self.held + piece
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buf[: min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if s.startswith(buf[len(buf) - k :]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


_BIT_OFFSETS = np.arange(32, dtype=np.int32)


def allowed_token_ids(row: np.ndarray) -> np.ndarray:
    """Sorted ids (``int32``) of the tokens allowed by one int32 bitmask row.

    One pass over the ``ceil(V/32)`` words; a narrow allowed set (a digit, a key, a literal)
    only unpacks its non-zero words.
    """
    nz = np.flatnonzero(row)
    if nz.size * 8 >= row.size:  # dense: unpack everything
        octets = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
        dense: np.ndarray = np.flatnonzero(np.unpackbits(octets, bitorder="little"))
        return dense.astype(np.int32)
    octets = np.ascontiguousarray(row[nz], dtype="<i4").view(np.uint8)
    bits = np.unpackbits(octets, bitorder="little").reshape(nz.size, 32).astype(bool)
    ids: np.ndarray = (nz[:, None].astype(np.int32) * 32 + _BIT_OFFSETS)[bits]
    return ids


class _AllowedIdsCache:
    """Bitmask row bytes -> allowed ids, LRU bounded by memory.  Shared by all generations:
    a state seen before (by any request) costs one hash of the row instead of an unpack."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self._data: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._max = max_bytes
        self._lock = threading.Lock()

    def get(self, row: np.ndarray) -> np.ndarray:
        key = row.tobytes()
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
                return hit
        ids = allowed_token_ids(row)
        ids.setflags(write=False)
        size = len(key) + ids.nbytes
        with self._lock:
            if key not in self._data and size <= self._max:
                self._data[key] = ids
                self._bytes += size
                while self._bytes > self._max:
                    old_key, old = self._data.popitem(last=False)
                    self._bytes -= len(old_key) + old.nbytes
        return ids


_ALLOWED_IDS = _AllowedIdsCache()


def _sample_allowed(
    logits: Any, ids: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> int:
    """:func:`~formcast.sampling.sample_token` restricted to the allowed ``ids``.

    Exactly the distribution (and, for a seeded ``rng``, exactly the token) of
    ``sample_token(logits, bitmask_row, params, rng)``: masked tokens have probability 0, the
    chain (temperature, top-k, top-p, softmax) only ever sees the allowed tokens, the allowed
    ids are in increasing order (same greedy tie-break, same inverted CDF, one ``rng.random()``
    draw) -- but the work is O(allowed) instead of O(vocabulary) after the gather.
    """
    sub = np.take(np.asarray(logits), ids)
    return int(ids[sample_token(sub, None, params, rng)])


# upper bound on background mask precomputation during the prompt's prefill
_WARM_UP_SECONDS = 2.0
WARM_UP_THREAD_NAME = "formcast-warm-up"
"""The name of the background thread that precomputes masks during the prefill (joined before
the call yields or returns anything)."""


def _parse_output(
    text: str, reason: FinishReason, kind: str | None, schema_class: Any
) -> tuple[Any, Any, str | None]:
    """``(value, parsed, parse_error)`` of a generation's text.

    Only a ``"completed"`` JSON output is parsed: anything else (a ``max_tokens`` prefix even
    if it happens to parse, a dead end, a stop string) has ``value``/``parsed`` ``None`` and a
    ``parse_error`` saying why, so a truncated output can never pass for a document (and a
    completed JSON ``null`` is told apart by ``parse_error is None``).  With a Pydantic class,
    ``parsed`` is ``schema_class.model_validate_json(text)`` (``None`` and the validation
    error in ``parse_error`` if the class's own validators reject the document).
    """
    if kind not in JSON_KINDS:
        return None, None, None
    if reason != "completed":
        return None, None, (
            f"no JSON value: finish_reason is {reason!r}, the text is an unfinished prefix "
            "of a document"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:  # pragma: no cover - the grammar guarantees JSON
        return None, None, f"internal error: the completed output is not JSON ({exc})"
    if schema_class is None:
        return value, value, None
    try:
        return value, schema_class.model_validate_json(text), None
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return value, None, f"{schema_class.__name__} rejects the document: {exc}"


def _run(
    model: LanguageModel,
    prompt_ids: list[int],
    compiled: CompiledGrammar | None,
    kind: str | None,
    params: SamplingParams,
    rng: np.random.Generator,
    max_tokens: int,
    stops: tuple[str, ...],
    compile_s: float,
    t_call: float,
    schema_class: Any = None,
) -> Generator[str, None, GenerationResult]:
    vocab = model.vocab
    stop_ids = vocab.stop_token_ids
    matcher = GrammarMatcher(compiled) if compiled is not None else None
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    row = bitmask[0]
    stop_flags = np.zeros(vocab.vocab_size, dtype=bool)
    stop_flags[list(stop_ids)] = True
    n_stops = len(stop_ids)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    scanner = _StopScanner(stops)

    mask_times: list[float] = []
    sample_times: list[float] = []
    decode_times: list[float] = []
    out_ids: list[int] = []
    pending: list[int] = []
    emitted: list[str] = []
    raw = bytearray()
    n_forced = 0
    ttft = 0.0
    reason: FinishReason = "max_tokens"
    diagnostic: DeadEndDiagnostic | None = None
    stop_token: int | None = None

    # precompute token classifications on the other core while the model reads the prompt;
    # the thread never outlives the prefill: it is stopped and joined before the first token
    # (a daemon thread still running at interpreter exit is stopped wherever it is, possibly
    # inside native code, which can abort the process: "terminate called without an active
    # exception"); the join costs at most the one mask computation in progress
    warm_stop = threading.Event()
    warmer: threading.Thread | None = None
    if compiled is not None:
        warmer = threading.Thread(
            target=compiled.warm_up,
            args=(_WARM_UP_SECONDS, warm_stop),
            name=WARM_UP_THREAD_NAME,
            daemon=True,
        )
        warmer.start()
    t0 = _perf()
    try:
        logits = model.start(prompt_ids)
        prefill = _perf() - t0
    finally:
        warm_stop.set()
        if warmer is not None:
            warmer.join()

    while True:
        allowed: np.ndarray | None = None
        if matcher is not None:
            tm = _perf()
            ok = matcher.fill_next_token_bitmask(bitmask)
            allowed = _ALLOWED_IDS.get(row)
            if ok and allowed.size <= n_stops and stop_flags[allowed].all():  # only stops: done
                stop_token = int(allowed[0])
                matcher.accept_token(stop_token)
                mask_times.append(_perf() - tm)
                reason = "completed"
                break
            mask_times.append(_perf() - tm)
            if not ok:
                diagnostic = matcher.diagnose()
                reason = "dead_end"
                break
        if len(out_ids) >= max_tokens:
            reason = "max_tokens"
            break
        if allowed is not None and allowed.size == 1:  # forced: any sampler would pick it
            tok = int(allowed[0])
            n_forced += 1
        else:
            if pending:
                td = _perf()
                logits = model.step(pending)
                decode_times.append(_perf() - td)
                pending = []
            ts = _perf()
            if allowed is None:
                tok = sample_token(logits, None, params, rng)
            else:
                tok = _sample_allowed(logits, allowed, params, rng)
            sample_times.append(_perf() - ts)
        if not out_ids:
            ttft = _perf() - t_call
        if matcher is not None:
            ta = _perf()
            accepted = matcher.accept_token(tok)
            mask_times[-1] += _perf() - ta
            if not accepted:  # pragma: no cover - the sampler only returns allowed tokens
                raise FormcastError(f"internal error: sampled token {tok} rejected by the matcher")
        if tok in stop_ids:
            stop_token = tok
            reason = "completed"
            break
        out_ids.append(tok)
        pending.append(tok)
        data = vocab.token_bytes(tok)
        raw += data
        piece = decoder.decode(data)
        if piece:
            safe, hit = scanner.feed(piece)
            if safe:
                emitted.append(safe)
                yield safe
            if hit:
                reason = "stop"
                break

    if reason != "stop":
        tail, hit = scanner.feed(decoder.decode(b"", final=True))
        if hit:
            reason = "stop"
        else:
            tail += scanner.flush()
        if tail:
            emitted.append(tail)
            yield tail
    text = "".join(emitted)
    value, parsed, parse_error = _parse_output(text, reason, kind, schema_class)
    total = _perf() - t_call
    timings = GenerationTimings(
        compile_s=compile_s,
        prefill_s=prefill,
        time_to_first_token_s=ttft if out_ids else total,
        total_s=total,
        prompt_tokens=len(prompt_ids),
        output_tokens=len(out_ids),
        forced_tokens=n_forced,
        decode_step_s=tuple(decode_times),
        mask_step_s=tuple(mask_times),
        sample_step_s=tuple(sample_times),
    )
    return GenerationResult(
        text=text,
        finish_reason=reason,
        token_ids=tuple(out_ids),
        raw=bytes(raw),
        value=value,
        parsed=parsed,
        parse_error=parse_error,
        diagnostic=diagnostic,
        stop_token_id=stop_token,
        constraint=kind,
        prompt_ids=tuple(prompt_ids),
        timings=timings,
    )


def _prepare(
    model: Any,
    prompt: Prompt,
    *,
    schema: Any,
    regex: str | None,
    grammar: str | None,
    grammar_syntax: str,
    compiled: CompiledGrammar | None,
    max_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int | None,
    stop: str | Sequence[str] | None,
    chat: bool | None,
    system: str | None,
    compiler: GrammarCompiler | None,
    dialect: str,
) -> Generator[str, None, GenerationResult]:
    """Validate everything and compile, then return the (not yet started) decoding loop."""
    t_call = _perf()
    lm = _resolve_model(model)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ConfigurationError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigurationError(f"seed must be an int or None, got {seed!r}")
    rng = np.random.default_rng(seed)
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,)
    else:
        stops = tuple(stop)
    if any(not isinstance(s, str) or not s for s in stops):
        raise ConfigurationError(f"stop must be a non-empty string or a list of them, got {stop!r}")

    t_compile = _perf()
    if compiled is not None:
        if any(v is not None for v in (schema, regex, grammar)):
            raise ConfigurationError("give either compiled= or one of schema/regex/grammar")
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError(
                f"compiled must be a CompiledGrammar, got {type(compiled).__name__}"
            )
        if compiled.vocab.fingerprint != lm.vocab.fingerprint:
            raise VocabularyError(
                f"the constraint was compiled for vocabulary {compiled.vocab.name!r}, not for "
                f"the model's {lm.vocab.name!r}: compile it with GrammarCompiler(model.vocab)"
            )
        cg: CompiledGrammar | None = compiled
        kind: str | None = compiled.kind
    else:
        cg, kind = compile_constraint(
            lm.vocab,
            schema=schema,
            regex=regex,
            grammar=grammar,
            grammar_syntax=grammar_syntax,
            compiler=compiler,
            dialect=dialect,
        )
    compile_s = _perf() - t_compile if compiled is None and cg is not None else 0.0

    ids = _prompt_ids(lm, prompt, chat=chat, system=system)
    limit = lm.max_context
    if limit is not None and len(ids) + max_tokens > limit:
        raise ConfigurationError(
            f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
            f"context of {limit} tokens: lower max_tokens or load the model with a larger n_ctx"
        )
    schema_class = pydantic_model_class(schema) if cg is not None else None
    return _run(
        lm, ids, cg, kind, params, rng, max_tokens, stops, compile_s, t_call, schema_class
    )


def generate(
    model: LanguageModel | str,
    prompt: Prompt,
    *,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiled: CompiledGrammar | None = None,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop: str | Sequence[str] | None = None,
    chat: bool | None = None,
    system: str | None = None,
    compiler: GrammarCompiler | None = None,
    dialect: str = DEFAULT_REGEX_DIALECT,
) -> GenerationResult:
    """Generate text from ``model`` under at most one constraint.

    Args:
        model: a model wrapper (:class:`~formcast.model.llama_cpp.LlamaCppModel`,
            :class:`~formcast.model.transformers.TransformersModel`,
            :class:`~formcast.model.callable.CallableModel`) or a model name /
            GGUF path for :func:`formcast.model.loading.load_model` (``"smollm2"``: the bundled
            default model on llama.cpp, loaded once and cached).
        prompt: text (the model's chat template is applied when it has one, see ``chat``),
            chat messages ``[{"role": ..., "content": ...}]``, or token ids (used as given).
        schema: a JSON Schema (dict, bool or JSON text) or a Pydantic model class: output is
            a JSON document valid for it; ``result.value`` is the parsed document and
            ``result.parsed`` the class's instance (``Model.model_validate_json``), both only
            when ``finish_reason == "completed"``.
        regex: a regular expression the whole output must match, in ``dialect``.
        grammar: a GBNF (or ``grammar_syntax="lark"``) grammar, or ``"json"`` for any JSON.
        compiled: a constraint compiled beforehand with ``GrammarCompiler(model.vocab)``.
        max_tokens: the budget of text tokens (``>= 0``).
        temperature, top_k, top_p: the sampler chain, applied after the mask
            (``temperature=0`` is greedy).
        seed: seeds the sampler (``None``: fresh entropy).  Greedy decoding draws nothing.
        stop: stop string(s): generation ends when one appears; it is not part of the text.
        chat: apply the model's chat template to a text prompt (default: when it has one).
        system: the system message for the chat template (default: the template's own).
        compiler: the :class:`GrammarCompiler` to use (default: one shared per vocabulary).
        dialect: the dialect of ``regex``: ``"ecma"`` (default; ECMA-262 ``u`` mode, ASCII
            ``\\d \\w \\s`` as in JSON Schema ``pattern``) or ``"python"`` (``re``'s
            Unicode classes).

    Returns:
        A :class:`GenerationResult` (``finish_reason`` says how it ended).  The output is
        bounded by the constraint *and* ``max_tokens``: a schema without ``maxItems`` /
        ``maxLength`` (or with a huge one) is bounded by the budget alone, and running out
        of it is ``"max_tokens"`` with ``value``/``parsed`` ``None`` -- never a completion.

    Raises:
        ConfigurationError: bad arguments (several constraints, bad sampling values, prompt
            longer than the context...), before anything runs.
        GrammarError: the constraint does not compile (before the model runs).
        VocabularyError: a constraint compiled for another vocabulary.
    """
    loop = _prepare(
        model,
        prompt,
        schema=schema,
        regex=regex,
        grammar=grammar,
        grammar_syntax=grammar_syntax,
        compiled=compiled,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stop=stop,
        chat=chat,
        system=system,
        compiler=compiler,
        dialect=dialect,
    )
    while True:
        try:
            next(loop)
        except StopIteration as done:
            result: GenerationResult = done.value
            return result


def stream(
    model: LanguageModel | str,
    prompt: Prompt,
    *,
    schema: Any = None,
    regex: str | None = None,
    grammar: str | None = None,
    grammar_syntax: str = "gbnf",
    compiled: CompiledGrammar | None = None,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop: str | Sequence[str] | None = None,
    chat: bool | None = None,
    system: str | None = None,
    compiler: GrammarCompiler | None = None,
    dialect: str = DEFAULT_REGEX_DIALECT,
) -> Generator[str | GenerationResult, None, GenerationResult]:
    """Like :func:`generate`, but yields the text as it is produced.

    Yields non-empty ``str`` pieces, each made of whole characters (a multi-byte UTF-8
    character is never split across pieces), whose concatenation is ``result.text``; the last
    item is the :class:`GenerationResult`.  Arguments are validated and the constraint is
    compiled when this function is called, before the first item is requested: bad input
    raises here, not in the loop.

    A stream shows progress, not a commitment: act on the output (execute a tool call, store a
    record) only after the final result says ``"completed"`` and it passes your validation.
    Closing the generator early (``.close()``, or leaving a ``for`` loop and dropping it) stops
    generation; the model is left mid-sequence and the next call starts over.  The generator's
    return value (``StopIteration.value``) is the result as well.
    """
    loop = _prepare(
        model,
        prompt,
        schema=schema,
        regex=regex,
        grammar=grammar,
        grammar_syntax=grammar_syntax,
        compiled=compiled,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stop=stop,
        chat=chat,
        system=system,
        compiler=compiler,
        dialect=dialect,
    )
    return _stream_items(loop)


def _stream_items(
    loop: Generator[str, None, GenerationResult],
) -> Generator[str | GenerationResult, None, GenerationResult]:
    result: GenerationResult = yield from loop
    yield result
    return result
