"""The commit boundary: :class:`ActionRunner` turns constrained generation into actions that
run at most once, and only after every check passes.

One run (``runner.run(prompt, principal=..., idempotency_key=None)``)::

    key = idempotency_key or uuid4()             made once, reused by every retry
    ledger.get(key) exists?                      executed/failed -> "duplicate" (recorded result),
                                                 pending -> "handed_off", in_doubt; no generation
    attempt (up to retry.max_attempts):
        generate under the tools' generation schema (text pieces streamed as they come;
        a closed stream -> "cancelled", the deadline -> "timeout": not_committed, never retried)
        syntax      finish_reason "completed" (else max_tokens / dead_end / stop: a failure)
        schema      which tool (several tools: {"tool": name, "arguments": {...}}), server
                    fields filled (defaults, then derive), jsonschema on the FULL schema
        business    the tool's rules
        facts       the tool's fact checks
        inspection  inspect(text, pointer) on every string the model wrote
        permission  permission(principal, args)
        a failed layer stops the attempt: retried (with feedback) if in retry.retry_on and
        attempts remain; else handed_off (permission, exhausted retries) or rejected
    commit:
        ledger.claim(key, tool, args)            existing entry -> duplicate / in doubt
        permission(principal, args) again        right before execution (a failure is recorded
                                                 as the key's failed entry: never executed)
        result = execute(args, key)              an exception -> execution failure, "failed"
        ledger.record_executed(key, result)      a ledger error after execute -> handed_off,
                                                 in_doubt (the side effect ran; nothing hidden)

Nothing is executed before generation completed in an accepting state *and* every layer
passed; a truncated output is never completed, repaired or executed.  ``runner.stream(...)``
yields the text pieces of every attempt as they are generated and ends with the
:class:`~formcast.actions.types.Outcome`; closing it early ends the run ``not_committed`` /
``cancelled`` (counted in ``metrics``, nothing executed).

Deadlines.  ``timeout_s`` is a deadline over one attempt's generation, checked whenever a text
piece arrives and when the generation ends (not inside the prompt's prefill or a single model
call): an attempt still generating when it passes ends ``timeout``.  A deadline is the one place
where the outcome depends on the machine's speed -- by the caller's request; without one, the
outcome of a seeded or greedy run depends only on the model and the inputs.

Interruptions have no layer results (``layers == ()``): no layer judged the output;
``finish_reason`` says why.  Every other outcome's ``layers`` are the last attempt's, in
:data:`~formcast.actions.types.LAYERS` order, up to the first failure (the commit adds
``execution``; a permission re-check that fails replaces the earlier ``permission`` result).

Lifetime: one runner per (model, tools) pair, built once: it checks the tools and compiles the
generation constraint at construction (the compile is cached per vocabulary); each run costs one
generation per attempt plus the user's checks and one ledger round trip.  A runner drives one
model, which holds one sequence at a time: do not run it from several threads at once.
"""

from __future__ import annotations

import copy
import json
import math
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, GrammarError
from ..generation import GenerationOptions, GenerationResult, compile_constraint
from ..generation import stream as generation_stream
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..model.protocol import LanguageModel
from .retry import RetryPolicy, default_feedback
from .tool import Tool
from .types import Failure, LayerResult, Ledger, LedgerEntry, Outcome, OutcomeFinishReason, Status

__all__ = ["GENERATION_OPTIONS", "ActionRunner", "tools_generation_schema"]

GENERATION_OPTIONS = (
    "max_tokens", "temperature", "top_k", "top_p", "seed", "timeout_s", "chat", "system", "stop",
)
"""The options of the constructor that one ``run``/``stream`` call may override (fields of
:class:`~formcast.generation.GenerationOptions`; ``timeout_s`` is per attempt)."""

ENVELOPE_DEFS = "formcast_tools"
"""Where several tools' schemas go in the envelope's ``$defs`` (``#/$defs/formcast_tools/<i>``
is tool ``i``'s generation schema; its own local ``$ref`` s are re-rooted there)."""

_SKIP_WALK = frozenset({"const", "enum", "default", "examples"})  # values, not schemas


# -- the generation constraint -----------------------------------------------------------------
def _rerooted(schema: Any, base: str) -> Any:
    """``schema`` with every local ``$ref`` (``#...``) re-rooted under the pointer ``base``."""
    if isinstance(schema, list):
        return [_rerooted(s, base) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "$ref" and isinstance(v, str) and v.startswith("#"):
            out[k] = "#" + base + v[1:]
        elif k in _SKIP_WALK:
            out[k] = v
        elif k == "properties" and isinstance(v, Mapping):  # keys are names, values schemas
            out[k] = {name: _rerooted(sub, base) for name, sub in v.items()}
        else:
            out[k] = _rerooted(v, base)
    return out


def tools_generation_schema(tools: Sequence[Tool]) -> dict[str, Any]:
    """The schema the model generates under for ``tools``.

    One tool: its generation schema (the arguments object itself).  Several: ``{"tool": name,
    "arguments": {...}}`` as an ``anyOf`` of one closed object per tool, discriminated by a
    ``const`` name (exact in formcast's front-end; the names are distinct, so ``anyOf`` and
    ``oneOf`` have the same language); each tool's generation schema sits in
    ``$defs/formcast_tools/<i>`` with its local references re-rooted.
    """
    if len(tools) == 1:
        return copy.deepcopy(tools[0].generation_schema)
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    dialects = {t.generation_schema.get("$schema") for t in tools} - {None}
    for i, tool in enumerate(tools):
        gen = dict(tool.generation_schema)
        gen.pop("$schema", None)
        gen.pop("$id", None)
        base = f"/$defs/{ENVELOPE_DEFS}/$defs/t{i}"
        defs[f"t{i}"] = _rerooted(gen, base)
        branches.append({
            "type": "object",
            "properties": {"tool": {"const": tool.name}, "arguments": {"$ref": "#" + base}},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        })
    out: dict[str, Any] = {
        "$defs": {ENVELOPE_DEFS: {"$defs": defs}},
        "anyOf": branches,
    }
    if len(dialects) == 1:
        out["$schema"] = dialects.pop()
    return out


# -- per-run state ------------------------------------------------------------------------------
@dataclass
class _Run:
    """What one run has gathered so far (mutable, private to the run)."""

    key: str
    attempts: int = 0
    history: list[tuple[LayerResult, ...]] = field(default_factory=list)
    result: GenerationResult | None = None
    tool: Tool | None = None
    args: dict[str, Any] | None = None
    text: str = ""

    def outcome(
        self,
        status: Status,
        finish: OutcomeFinishReason,
        layers: tuple[LayerResult, ...],
        *,
        result: Any = None,
        in_doubt: bool = False,
        tool: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> Outcome:
        history = (*self.history[:-1], layers) if self.history else ()
        return Outcome(
            status=status,
            finish_reason=finish,
            layers=layers,
            attempts=self.attempts,
            idempotency_key=self.key,
            tool=tool if tool is not None else (self.tool.name if self.tool else None),
            args=args if args is not None else self.args,
            result=result,
            in_doubt=in_doubt,
            history=history,
            text=self.text,
        )


def _fail(layer: Any, code: str, message: str, pointer: str = "") -> LayerResult:
    return LayerResult(layer, False, (Failure(layer, code, message, pointer),))


def _describe_exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- the runner ---------------------------------------------------------------------------------
class ActionRunner:
    """Runs the model under the tools' schema and commits a valid call exactly once.

    Args:
        model: a formcast model wrapper, or a name / GGUF path for
            :func:`~formcast.model.loading.load_model` (``"smollm2"``).
        tools: one :class:`~formcast.actions.tool.Tool` or several (distinct names).
        ledger: where executions are recorded (default: a new ``MemoryLedger``).
        retry: the :class:`~formcast.actions.retry.RetryPolicy` (default: one attempt).
        metrics: an ``actions.Metrics`` (anything with ``record(outcome, *, ttft_s, tpot_s)``):
            called once per finished run, cancelled ones included.
        on_hand_off: ``hook(outcome)``, called for every ``handed_off`` outcome (after
            metrics); its exception propagates (a hand-off must not be lost silently).
        system: the chat template's system message (default: the template's own).
        max_tokens, temperature, top_k, top_p, seed, stop, chat: the generation options of
            :func:`formcast.generation.generate` (defaults: 256 tokens, greedy).
        timeout_s: a deadline per attempt's generation, in seconds (``None``: none); the
            decoding loop checks it before every model call.

    The options are kept as one :class:`~formcast.generation.GenerationOptions`
    (``runner.options``), validated here, before anything compiles.
        compiler: the :class:`~formcast.index.compiler.GrammarCompiler` (default: the shared
            one of the model's vocabulary).

    Raises:
        ConfigurationError: bad tools, options, ledger, metrics or hook.
        GrammarError: a tool's generation schema does not compile (e.g.
            ``UnsupportedFeatureError`` for a keyword formcast cannot enforce); the error
            carries a note naming the tool.
    """

    def __init__(
        self,
        model: LanguageModel | str,
        tools: Tool | Iterable[Tool],
        ledger: Ledger | None = None,
        retry: RetryPolicy | None = None,
        metrics: Any = None,
        on_hand_off: Callable[[Outcome], Any] | None = None,
        system: str | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        timeout_s: float | None = None,
        chat: bool | None = None,
        stop: str | Sequence[str] | None = None,
        compiler: GrammarCompiler | None = None,
    ) -> None:
        self.model = _resolve_model(model)
        self.tools: tuple[Tool, ...] = _check_tools(tools)
        self._by_name = {t.name: t for t in self.tools}
        if ledger is None:
            from .ledger import MemoryLedger

            ledger = MemoryLedger()
        if not isinstance(ledger, Ledger):
            raise ConfigurationError(
                f"ActionRunner: ledger must implement claim/record_executed/record_failed/get "
                f"(MemoryLedger, SqliteLedger, PostgresLedger), got {type(ledger).__name__}"
            )
        self.ledger: Ledger = ledger
        if retry is None:
            retry = RetryPolicy()
        if not isinstance(retry, RetryPolicy):
            raise ConfigurationError(
                f"ActionRunner: retry must be a RetryPolicy, got {type(retry).__name__}"
            )
        self.retry = retry
        if metrics is not None and not callable(getattr(metrics, "record", None)):
            raise ConfigurationError(
                "ActionRunner: metrics must have record(outcome, *, ttft_s, tpot_s) "
                f"(actions.Metrics), got {type(metrics).__name__}"
            )
        self.metrics = metrics
        if on_hand_off is not None and not callable(on_hand_off):
            raise ConfigurationError("ActionRunner: on_hand_off must be callable(outcome)")
        self.on_hand_off = on_hand_off
        options = GenerationOptions(  # checked before anything compiles
            max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, timeout_s=timeout_s, chat=chat, system=system, stop=stop,
        )
        self.generation_schema = tools_generation_schema(self.tools)
        self.compiled: CompiledGrammar = self._compile(compiler)
        self.options: GenerationOptions = options.replace(compiled=self.compiled)
        """The generation options of every attempt (one ``run`` may override the fields in
        :data:`GENERATION_OPTIONS`)."""

    # -- construction helpers --------------------------------------------------------------------
    def _compile(self, compiler: GrammarCompiler | None) -> CompiledGrammar:
        vocab = self.model.vocab
        try:
            compiled, _ = compile_constraint(
                vocab, schema=self.generation_schema, compiler=compiler
            )
        except GrammarError as exc:
            culprit = [t.name for t in self.tools]
            if len(self.tools) > 1:  # which tool? compile each alone
                culprit = []
                for tool in self.tools:
                    try:
                        compile_constraint(vocab, schema=tool.generation_schema, compiler=compiler)
                    except GrammarError:
                        culprit.append(tool.name)
            exc.add_note(
                f"ActionRunner: the generation schema of tool(s) {culprit or 'the envelope'} "
                "does not compile; change the tool's schema (or move the keyword to a rule: "
                "the full schema is still validated with jsonschema)"
            )
            raise
        assert compiled is not None
        return compiled

    # -- public API ------------------------------------------------------------------------------
    def run(
        self,
        prompt: Any,
        principal: Any = None,
        idempotency_key: str | None = None,
        **overrides: Any,
    ) -> Outcome:
        """One logical action: generate, validate, retry, commit at most once.

        Args:
            prompt: text, chat messages or token ids (as for ``generate``).
            principal: who asks (given to ``permission``).
            idempotency_key: the action's key (default: a new uuid4, made once for this run).
            overrides: generation options for this call (see :data:`GENERATION_OPTIONS`).

        Returns:
            The :class:`~formcast.actions.types.Outcome`.

        Raises:
            ConfigurationError: unknown or bad options, a bad key or prompt (before anything
                runs).  Exceptions of the model itself propagate (nothing was executed).
        """
        for item in self.stream(prompt, principal, idempotency_key, **overrides):
            if isinstance(item, Outcome):
                return item
        raise AssertionError("unreachable: stream() always ends with the Outcome")

    def stream(
        self,
        prompt: Any,
        principal: Any = None,
        idempotency_key: str | None = None,
        **overrides: Any,
    ) -> Generator[str | Outcome, None, Outcome]:
        """Like :meth:`run`, yielding the text pieces of every attempt as they are generated,
        then the :class:`~formcast.actions.types.Outcome` (also the generator's return value).

        Arguments are checked when this is called.  Nothing is executed before the last item.
        Closing the generator early ends the run ``not_committed`` / ``cancelled``: counted in
        ``metrics``, nothing executed, the ledger untouched (a generator closed before its
        first item never started: nothing ran, nothing is counted).
        """
        unknown = sorted(set(overrides) - set(GENERATION_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"ActionRunner.run: unknown options {unknown}; the options are "
                f"{list(GENERATION_OPTIONS)}"
            )
        options = self.options.replace(**overrides)
        if idempotency_key is None:
            key = uuid.uuid4().hex
        elif isinstance(idempotency_key, str) and idempotency_key:
            key = idempotency_key
        else:
            raise ConfigurationError(
                f"idempotency_key must be a non-empty str or None, got {idempotency_key!r}"
            )
        _check_prompt(prompt)
        if (
            self.retry.max_attempts > 1 and self.retry.feedback is default_feedback
            and not isinstance(prompt, str) and not isinstance(prompt[0], Mapping)
        ):
            raise ConfigurationError(
                "a token-id prompt cannot take the default retry feedback (there is no text to "
                "append to): give the prompt as text or chat messages, or give RetryPolicy a "
                "feedback callable (prompt, outcome_so_far) -> prompt"
            )
        return self._drive(prompt, principal, _Run(key), options)

    def commit_arguments(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        principal: Any = None,
        idempotency_key: str | None = None,
        *,
        text: str = "",
    ) -> Outcome:
        """Commit a call whose arguments were generated elsewhere (a tool call parsed from a
        chat completion, :func:`formcast.tools.execute_tool_calls`): the same layers as
        :meth:`run` from ``schema`` on (server fields filled, jsonschema on the full schema,
        rules, facts, inspection of ``text``'s strings, permission), then the same commit
        through the ledger (claim, permission re-check, execute, record).  No generation and
        no retry: a failed layer gives ``rejected`` (``handed_off`` for permission).  Metrics
        record the outcome (no timings).

        Raises:
            ConfigurationError: an unknown tool name or a bad key.
        """
        chosen = self._by_name.get(tool)
        if chosen is None:
            raise ConfigurationError(
                f"ActionRunner.commit_arguments: unknown tool {tool!r}; the tools are "
                f"{sorted(self._by_name)}"
            )
        if idempotency_key is None:
            idempotency_key = uuid.uuid4().hex
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise ConfigurationError(
                f"idempotency_key must be a non-empty str or None, got {idempotency_key!r}"
            )
        run = _Run(idempotency_key, attempts=1, text=text)
        run.tool = chosen
        outcome = self._recorded(run)
        if outcome is None:
            layers: list[LayerResult] = [LayerResult("syntax", True)]
            args, derive_failure = chosen.fill(dict(arguments))
            run.args = args
            failed = derive_failure
            if failed is None:
                for check in (
                    chosen.validate_schema, chosen.check_rules, chosen.check_facts,
                    chosen.check_inspection,
                ):
                    lr = check(args)
                    if not lr.ok:
                        failed = lr
                        break
                    layers.append(lr)
            if failed is None:
                perm = chosen.check_permission(principal, args)
                layers.append(perm)
                run.history.append(tuple(layers))
                if perm.ok:
                    outcome = self._commit(principal, run, tuple(layers), "completed")
                else:
                    outcome = run.outcome("handed_off", "completed", tuple(layers))
            else:
                layers.append(failed)
                run.history.append(tuple(layers))
                outcome = run.outcome("rejected", "completed", tuple(layers))
        self._finish(outcome, run)
        return outcome

    # -- the run ---------------------------------------------------------------------------------
    def _drive(
        self, prompt: Any, principal: Any, run: _Run, options: GenerationOptions
    ) -> Generator[str | Outcome, None, Outcome]:
        try:
            outcome = yield from self._attempts(prompt, principal, run, options)
        except GeneratorExit:
            if len(run.history) < run.attempts:
                run.history.append(())
            self._finish(run.outcome("not_committed", "cancelled", ()), run)
            raise
        self._finish(outcome, run)
        yield outcome
        return outcome

    def _finish(self, outcome: Outcome, run: _Run) -> None:
        if self.metrics is not None:
            ttft = tpot = None
            if run.result is not None:
                t = run.result.timings
                ttft = t.time_to_first_token_s
                tpot = None if math.isnan(t.per_token_s) else t.per_token_s
            self.metrics.record(outcome, ttft_s=ttft, tpot_s=tpot)
        if outcome.status == "handed_off" and self.on_hand_off is not None:
            self.on_hand_off(outcome)

    def _recorded(self, run: _Run) -> Outcome | None:
        """The outcome when the key is already in the ledger (no generation)."""
        try:
            entry = self.ledger.get(run.key)
        except Exception:  # the claim at commit time reports a failing ledger, with the layers
            return None
        if entry is None:
            return None
        return self._existing(run, entry, ())

    def _existing(
        self, run: _Run, entry: LedgerEntry, layers: tuple[LayerResult, ...]
    ) -> Outcome:
        """A key that the ledger already holds: duplicate (executed/failed) or in doubt."""
        args = dict(entry.args)
        if entry.state == "pending":
            lr = _fail(
                "execution", "in_doubt",
                f"idempotency key {run.key!r} is pending in the ledger: an execution was "
                "claimed and never recorded (a crash between execute and the ledger write?); "
                "it is not re-executed: check the side effect, then resolve the entry",
            )
            return run.outcome("handed_off", _finish_of(run), (*layers, lr), in_doubt=True,
                               tool=entry.tool, args=args)
        if entry.state == "failed":
            lr = _fail("execution", "recorded_failure",
                       f"key {run.key!r} was already tried and failed: {entry.error}")
            return run.outcome("duplicate", _finish_of(run), (*layers, lr), tool=entry.tool,
                               args=args)
        return run.outcome("duplicate", _finish_of(run), layers, result=entry.result,
                           tool=entry.tool, args=args)

    def _attempts(
        self, prompt: Any, principal: Any, run: _Run, options: GenerationOptions
    ) -> Generator[str, None, Outcome]:
        recorded = self._recorded(run)
        if recorded is not None:
            return recorded
        policy = self.retry
        while True:
            run.attempts += 1
            run.tool, run.args = None, None
            result = yield from self._generate(prompt, options, run)
            if isinstance(result, str):  # "cancelled" never returns here; "timeout" does
                run.history.append(())
                return run.outcome("not_committed", "timeout", ())
            layers = self._validate(result, principal, run)
            run.history.append(layers)
            failed = layers[-1] if not layers[-1].ok else None
            finish = result.finish_reason
            if failed is None:
                return self._commit(principal, run, layers, finish)
            if failed.layer == "permission":
                return run.outcome("handed_off", finish, layers)
            if not policy.retries(failed.layer):
                return run.outcome("rejected", finish, layers)
            if run.attempts >= policy.max_attempts:
                return run.outcome("handed_off", finish, layers)
            so_far = run.outcome("rejected", finish, layers)
            if (
                policy.feedback is default_feedback and isinstance(prompt, str)
                and _chat_on(self.model, options)
            ):
                prompt = [{"role": "user", "content": prompt}]  # the feedback: an extra turn
            prompt = policy.feedback(prompt, so_far)
            _check_prompt(prompt)

    def _generate(
        self, prompt: Any, options: GenerationOptions, run: _Run
    ) -> Generator[str, None, GenerationResult | str]:
        """One attempt's generation: yields its pieces; returns the result, or ``"timeout"``
        (the decoding loop stops at ``timeout_s`` before its next model call; a generation
        that finished past the deadline is a timeout too)."""
        timeout = options.timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        gen = generation_stream(self.model, prompt, options=options)
        pieces: list[str] = []
        try:
            for item in gen:
                if isinstance(item, str):
                    pieces.append(item)
                    run.text = "".join(pieces)
                    yield item
                    if deadline is not None and time.monotonic() > deadline:
                        return "timeout"
                    continue
                run.result = item
                run.text = item.text
                if item.finish_reason == "timeout" or (
                    deadline is not None and time.monotonic() > deadline
                ):
                    return "timeout"
                return item
        finally:
            gen.close()
        raise AssertionError("unreachable: a generation stream ends with its result")

    def _validate(
        self, result: GenerationResult, principal: Any, run: _Run
    ) -> tuple[LayerResult, ...]:
        """The layers syntax .. permission on one completed-or-not generation."""
        layers: list[LayerResult] = []
        syntax = _syntax(result)
        layers.append(syntax)
        if not syntax.ok:
            return tuple(layers)
        tool, generated, envelope = self._tool_call(result.value)
        if envelope is not None:
            layers.append(envelope)
            run.args = generated
            return tuple(layers)
        assert tool is not None
        assert generated is not None
        run.tool = tool
        args, derive_failure = tool.fill(generated)
        run.args = args
        if derive_failure is not None:
            layers.append(derive_failure)
            return tuple(layers)
        for check in (
            tool.validate_schema, tool.check_rules, tool.check_facts, tool.check_inspection,
        ):
            lr = check(args)
            layers.append(lr)
            if not lr.ok:
                return tuple(layers)
        layers.append(tool.check_permission(principal, args))
        return tuple(layers)

    def _tool_call(
        self, value: Any
    ) -> tuple[Tool | None, dict[str, Any] | None, LayerResult | None]:
        """``(tool, generated arguments, None)`` or ``(None, value, schema failure)``."""
        if len(self.tools) == 1:
            if not isinstance(value, dict):
                return None, None, _fail("schema", "type", f"{value!r} is not an object")
            return self.tools[0], value, None
        if not isinstance(value, dict) or not isinstance(value.get("arguments"), dict):
            return None, None, _fail(
                "schema", "envelope", "the value is not {\"tool\": name, \"arguments\": {...}}"
            )
        tool = self._by_name.get(value.get("tool"))  # type: ignore[arg-type]
        if tool is None:
            return None, value, _fail(
                "schema", "unknown_tool", f"unknown tool {value.get('tool')!r}", "/tool"
            )
        return tool, value["arguments"], None

    def _commit(
        self, principal: Any, run: _Run, layers: tuple[LayerResult, ...],
        finish: OutcomeFinishReason,
    ) -> Outcome:
        """Claim the key, re-check the permission, execute, record."""
        tool, args, key = run.tool, run.args, run.key
        assert tool is not None
        assert args is not None
        try:
            entry = self.ledger.claim(key, tool.name, args)
        except Exception as exc:
            lr = _fail("execution", "ledger_error",
                       f"the ledger failed to claim key {key!r} ({_describe_exc(exc)}); "
                       "nothing was executed")
            return run.outcome("rejected", finish, (*layers, lr))
        if entry is not None:
            return self._existing(run, entry, layers)
        recheck = tool.check_permission(principal, args)
        if not recheck.ok:
            kept = tuple(lr for lr in layers if lr.layer != "permission")
            reason = "; ".join(f"{f.code}: {f.message}" for f in recheck.failures)
            note = self._record_failed(key, f"not executed: permission re-check failed: {reason}")
            if note is not None:
                return run.outcome("handed_off", finish, (*kept, recheck, note), in_doubt=True)
            return run.outcome("handed_off", finish, (*kept, recheck))
        try:
            result = tool.execute(copy.deepcopy(args), key)  # type: ignore[misc]
        except Exception as exc:  # the tool's failure: recorded, never retried
            message = f"tool {tool.name!r} raised {_describe_exc(exc)}"
            lr = _fail("execution", "raised", message)
            note = self._record_failed(key, message)
            if note is not None:
                both = LayerResult("execution", False, lr.failures + note.failures)
                return run.outcome("handed_off", finish, (*layers, both), in_doubt=True)
            return run.outcome("rejected", finish, (*layers, lr))
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            message = (f"tool {tool.name!r} executed but returned a result that is not "
                       f"JSON-serializable ({_describe_exc(exc)}): recorded as failed, it "
                       "will not run again for this key")
            lr = _fail("execution", "unserializable_result", message)
            note = self._record_failed(key, message)
            return run.outcome("handed_off", finish, (*layers, lr), result=result,
                               in_doubt=note is not None)
        try:
            self.ledger.record_executed(key, result)
        except Exception as exc:
            lr = _fail("execution", "ledger_write_failed",
                       f"tool {tool.name!r} executed (the result is in outcome.result) but the "
                       f"ledger could not record it ({_describe_exc(exc)}): key {key!r} is in "
                       "doubt and will not be re-executed")
            return run.outcome("handed_off", finish, (*layers, lr), result=result, in_doubt=True)
        return run.outcome("committed", finish, (*layers, LayerResult("execution", True)),
                           result=result)

    def _record_failed(self, key: str, error: str) -> LayerResult | None:
        """``ledger.record_failed``; a failure of the ledger itself as an execution result."""
        try:
            self.ledger.record_failed(key, error)
        except Exception as exc:
            return _fail("execution", "ledger_write_failed",
                         f"the ledger could not record key {key!r} as failed "
                         f"({_describe_exc(exc)}): it stays pending, in doubt")
        return None


# -- helpers ------------------------------------------------------------------------------------
def _finish_of(run: _Run) -> OutcomeFinishReason:
    """The finish reason of the run so far: the last generation's, or ``"completed"`` when the
    ledger answered before any generation (the recorded action)."""
    return run.result.finish_reason if run.result is not None else "completed"


def _syntax(result: GenerationResult) -> LayerResult:
    reason = result.finish_reason
    if reason == "completed" and result.parse_error is None:
        return LayerResult("syntax", True)
    if reason == "completed":
        return _fail("syntax", "unparseable", str(result.parse_error))
    if reason == "max_tokens":
        return _fail("syntax", "max_tokens",
                     f"the token budget ran out after {len(result.token_ids)} tokens: the output "
                     "is an unfinished prefix (never completed or executed)")
    if reason == "dead_end":
        return _fail("syntax", "dead_end", f"no token was allowed: {result.diagnostic}")
    return _fail("syntax", "stop", "a stop string ended the output before it was complete")


def _resolve_model(model: Any) -> LanguageModel:
    if isinstance(model, str):
        from ..model.loading import load_model

        return load_model(model)
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(
            "ActionRunner: model must be a formcast model wrapper (CallableModel, "
            f"LlamaCppModel, TransformersModel) or a model name, got {type(model).__name__}"
        )
    return model


def _check_tools(tools: Any) -> tuple[Tool, ...]:
    items = (tools,) if isinstance(tools, Tool) else tuple(tools) if isinstance(
        tools, Iterable) else None
    if not items or any(not isinstance(t, Tool) for t in items):
        raise ConfigurationError(
            "ActionRunner: tools must be one actions.Tool or a non-empty list of them, "
            f"got {tools!r}"
        )
    names = [t.name for t in items]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(f"ActionRunner: tool names must be distinct, repeated: {dupes}")
    return items


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, (str, Sequence)) and len(prompt) > 0:
        return
    raise ConfigurationError(
        "prompt must be non-empty text, chat messages or token ids, got "
        f"{type(prompt).__name__} {prompt!r:.40}"
    )


def _chat_on(model: LanguageModel, options: GenerationOptions) -> bool:
    chat = options.chat
    return bool(model.chat_template is not None) if chat is None else bool(chat)

