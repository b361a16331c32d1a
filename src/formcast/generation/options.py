"""The options of a generation: :class:`GenerationOptions`, validated once.

::

    opts = GenerationOptions(schema=Person, max_tokens=64, temperature=0.7, seed=1)
    generate(model, prompt, options=opts)             # the same as the keyword arguments
    generate(model, prompt, options=opts, seed=2)     # keywords override fields of options
    runner = ActionRunner(model, tool, options=opts)  # (the runner takes the same object)

One typed, frozen value shared by :func:`~formcast.generation.generate`,
:func:`~formcast.generation.stream`, :class:`~formcast.generation.ConditionedSampler`, the
action runner and the command line.  The keyword arguments of ``generate``/``stream`` build
one (they stay the public convenience).  Every check that needs no model runs here, in
``__post_init__``, in a fixed order; a bad value raises
:class:`~formcast.errors.OptionError` (a :class:`~formcast.errors.ConfigurationError`) that
names the option and the value.  What needs the model (the prompt against the context, the
constraint against the vocabulary) is checked when the call starts.

Normalized on construction: ``stop`` becomes a tuple of strings, ``reasoning`` a
:class:`~formcast.generation.ReasoningOptions` or ``None``; :attr:`GenerationOptions.params`
is the :class:`~formcast.sampling.SamplingParams` of ``temperature``/``top_k``/``top_p``.

Lifetime: immutable values (``dataclasses.replace`` gives a changed, re-validated copy); they
hold references to the caller's schema, compiler, compiled grammar and control, never copies.
Cost: O(number of stop strings) to build.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, ContextLengthError, OptionError
from ..index.compiled import CompiledGrammar
from ..index.compiler import GrammarCompiler
from ..model.protocol import LanguageModel
from ..sampling import SamplingParams
from .control import StepControl
from .reasoning import ReasoningOptions, read_reasoning

if TYPE_CHECKING:  # pragma: no cover
    from ..constraints.core import Constraint

__all__ = [
    "DIALECTS",
    "FIELDS",
    "GRAMMAR_SYNTAXES",
    "SAMPLING_METHODS",
    "GenerationOptions",
    "check_context",
]

SAMPLING_METHODS = ("mask", "exact", "aligned")
"""The values of ``sampling=`` (see :mod:`formcast.generation.conditioned`)."""
DIALECTS = ("ecma", "python")
"""The values of ``dialect=`` (the dialect of ``regex=``; see docs/regex.md)."""
GRAMMAR_SYNTAXES = ("gbnf", "lark")
"""The values of ``grammar_syntax=``."""

_CONSTRAINTS = ("schema", "regex", "grammar", "constraint")
_MAX_LOGPROBS = 20


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class GenerationOptions:
    """Everything a generation is asked to do, besides the model and the prompt.

    The fields are the keyword arguments of :func:`~formcast.generation.generate` (documented
    there), with the same defaults; in short:

    Attributes:
        schema, regex, grammar, constraint: at most one constraint (JSON Schema or Pydantic
            class; regular expression; GBNF/Lark text or ``"json"``; a
            :mod:`formcast.constraints` object).
        grammar_syntax: ``"gbnf"`` or ``"lark"`` (for ``grammar``).
        dialect: ``"ecma"`` or ``"python"`` (for ``regex``).
        compiled: a constraint compiled beforehand (instead of the four above).
        compiler: the :class:`GrammarCompiler` to compile with (default: shared per vocabulary).
        max_tokens: the budget of text tokens, ``>= 0``.
        temperature, top_k, top_p: the sampler chain after the mask (``temperature=0``:
            greedy); :attr:`params` is their :class:`~formcast.sampling.SamplingParams`.
        seed: an int, or ``None`` for fresh entropy.
        stop: stop strings, normalized to a tuple (``None``/``()``: none).
        chat, system: the chat template (``None``: when the model has one) and its system
            message.
        sampling: ``"mask"``, ``"exact"`` or ``"aligned"``.
        canonical, token_healing: see ``generate``.
        reasoning: normalized to :class:`ReasoningOptions` or ``None`` (``True``, a mapping of
            its fields, ``False``/``None`` are accepted).
        logprobs: ``None`` (off) or ``k`` in ``0..20``: ``result.logprobs`` holds each output
            token's log-probability and the ``k`` most likely tokens at its step
            (:class:`~formcast.generation.TokenLogprob`).
        timeout_s: seconds from the start of the call after which the generation ends with
            ``finish_reason="timeout"`` (``None``: no limit).
        control: a :class:`~formcast.generation.StepControl` (cancel flag, deadline, on-step
            callback), checked before every model call.
        fast_forward: append the bytes the constraint forces as the tokenizer's tokens
            without sampling them (evaluated in one model call with the next token; see
            :mod:`formcast.generation.fast_forward`).  Off by default: it changes which
            spelling the output uses, and so the distribution.  Needs a constraint and a model
            with ``encode_bytes``; refuses ``logprobs`` and ``sampling`` other than ``"mask"``.

    Raises:
        OptionError: a bad value (the message names the option and the value and says what
            is allowed); also several constraints at once, or a combination ``sampling``
            does not support.
    """

    schema: Any = None
    regex: str | None = None
    grammar: str | None = None
    grammar_syntax: str = "gbnf"
    compiled: CompiledGrammar | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: str | Sequence[str] | None = None
    chat: bool | None = None
    system: str | None = None
    compiler: GrammarCompiler | None = None
    dialect: str = "ecma"
    sampling: str = "mask"
    canonical: bool = False
    token_healing: bool = False
    constraint: Constraint | None = None
    reasoning: bool | ReasoningOptions | Mapping[str, Any] | None = None
    logprobs: int | None = None
    timeout_s: float | None = None
    control: StepControl | None = None
    fast_forward: bool = False

    # -- validation: the one place ---------------------------------------------------------------
    def __post_init__(self) -> None:
        self._check_constraint()
        set_ = self._set
        mt = self.max_tokens
        if not _is_int(mt) or mt < 0:
            raise OptionError("max_tokens", mt, f"max_tokens must be an int >= 0, got {mt!r}")
        try:
            params = SamplingParams(
                temperature=self.temperature, top_k=self.top_k, top_p=self.top_p
            )
        except ConfigurationError as exc:
            name = next(
                (n for n in ("temperature", "top_k", "top_p") if n in str(exc)), "temperature"
            )
            message = str(exc).replace("SamplingParams.", "")
            raise OptionError(name, getattr(self, name), message) from None
        set_("temperature", params.temperature)
        set_("top_k", params.top_k)
        set_("top_p", params.top_p)
        seed = self.seed
        if seed is not None and not _is_int(seed):
            raise OptionError("seed", seed, f"seed must be an int or None, got {seed!r}")
        set_("stop", _stop_strings(self.stop))
        if self.chat not in (None, True, False):
            raise OptionError("chat", self.chat, f"chat must be True, False or None, got "
                              f"{self.chat!r}")
        if self.system is not None and not isinstance(self.system, str):
            raise OptionError("system", self.system, "system must be a string or None, got "
                              f"{type(self.system).__name__}")
        if self.compiler is not None and not isinstance(self.compiler, GrammarCompiler):
            raise OptionError("compiler", self.compiler, "compiler must be a GrammarCompiler, "
                              f"got {type(self.compiler).__name__}")
        if self.sampling not in SAMPLING_METHODS:
            raise OptionError(
                "sampling", self.sampling,
                f"sampling must be one of {', '.join(SAMPLING_METHODS)}, got {self.sampling!r}",
            )
        for name in ("canonical", "token_healing", "fast_forward"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise OptionError(name, v, f"{name} must be a bool, got {v!r}")
        try:
            set_("reasoning", read_reasoning(self.reasoning))
        except ConfigurationError as exc:
            raise OptionError("reasoning", self.reasoning, str(exc)) from None
        lp = self.logprobs
        if lp is not None and (not _is_int(lp) or not 0 <= lp <= _MAX_LOGPROBS):
            raise OptionError(
                "logprobs", lp,
                f"logprobs must be None (off) or an int in 0..{_MAX_LOGPROBS} (the number of "
                f"most likely tokens listed per step), got {lp!r}",
            )
        t = self.timeout_s
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
            or t <= 0
        ):
            raise OptionError(
                "timeout_s", t, f"timeout_s must be a number of seconds > 0 or None, got {t!r}"
            )
        if self.control is not None and not isinstance(self.control, StepControl):
            raise OptionError(
                "control", self.control,
                f"control must be a formcast.generation.StepControl, got "
                f"{type(self.control).__name__}",
            )
        if self.fast_forward and self.logprobs is not None:
            raise OptionError(
                "fast_forward", self.fast_forward,
                f"fast_forward=True cannot be combined with logprobs={self.logprobs!r}: the "
                "model never scores the tokens a fast-forward run appends; use "
                "fast_forward=False to get every token's log-probability",
            )
        self._check_sampling_method()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _check_constraint(self) -> None:
        given = [n for n in _CONSTRAINTS if getattr(self, n) is not None]
        if self.compiled is not None:
            if given:
                raise OptionError(
                    "compiled", self.compiled,
                    "give either compiled= or one of schema/regex/grammar/constraint, got "
                    f"compiled and {', '.join(given)}",
                )
            if not isinstance(self.compiled, CompiledGrammar):
                raise OptionError(
                    "compiled", self.compiled,
                    f"compiled must be a CompiledGrammar, got {type(self.compiled).__name__}",
                )
        if len(given) > 1:
            raise OptionError(
                given[1], getattr(self, given[1]),
                f"give at most one constraint, got {', '.join(given)}",
            )
        for name in ("regex", "grammar"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise OptionError(name, v, f"{name} must be str, got {type(v).__name__}")
        if self.grammar_syntax not in GRAMMAR_SYNTAXES:
            raise OptionError(
                "grammar_syntax", self.grammar_syntax,
                f"grammar_syntax must be 'gbnf' or 'lark', got {self.grammar_syntax!r}",
            )
        if self.dialect not in DIALECTS:
            raise OptionError(
                "dialect", self.dialect,
                f"dialect must be one of {', '.join(DIALECTS)} (the dialect of regex=), got "
                f"{self.dialect!r}",
            )

    def _check_sampling_method(self) -> None:
        """What ``sampling="exact"``/``"aligned"`` (a :class:`ConditionedSampler`) refuses."""
        sampling = self.sampling
        if sampling == "mask":
            return
        refusals: tuple[tuple[str, bool, str], ...] = (
            ("stop", bool(self.stop),
             f"stop strings are not supported with sampling={sampling!r} (they would change "
             "the conditioned distribution): put the stop into the constraint"),
            ("top_k", self.top_k != 0,
             f"top_k is not supported with sampling={sampling!r}: use top_p"),
            ("reasoning", self.reasoning is not None,
             f"reasoning= is supported with sampling='mask' only, got sampling={sampling!r}: "
             "use sampling='mask', or pass compiled=compiler.compile_reasoning(...) and split "
             "the text at the marker yourself"),
            ("token_healing", self.token_healing,
             f"token_healing is supported with sampling='mask' only, got "
             f"sampling={sampling!r}: end the prompt where the constraint starts, or use "
             "sampling='mask'"),
            ("temperature", self.temperature == 0.0,
             f"sampling={sampling!r} samples the model's distribution: give temperature > 0 "
             "(generate's default temperature=0 is greedy decoding)"),
            ("logprobs", self.logprobs is not None,
             f"logprobs is supported with sampling='mask' only, got sampling={sampling!r}"),
            ("control", self.control is not None or self.timeout_s is not None,
             f"control= and timeout_s= are supported with sampling='mask' only, got "
             f"sampling={sampling!r}: bound the work with ConditionedSampler's "
             "max_model_calls"),
            ("fast_forward", self.fast_forward,
             f"fast_forward=True is supported with sampling='mask' only, got "
             f"sampling={sampling!r} (appending tokens unsampled would change the target "
             "distribution)"),
        )
        for name, bad, message in refusals:
            if bad:
                raise OptionError(name, getattr(self, name), message)

    # -- derived values --------------------------------------------------------------------------
    @property
    def params(self) -> SamplingParams:
        """The :class:`~formcast.sampling.SamplingParams` of temperature, top_k and top_p."""
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    @property
    def stops(self) -> tuple[str, ...]:
        """``stop`` as the tuple of non-empty strings it was normalized to."""
        stop = self.stop
        assert isinstance(stop, tuple)
        return stop

    @property
    def reasoning_options(self) -> ReasoningOptions | None:
        """``reasoning`` as the :class:`ReasoningOptions` it was normalized to (``None``: off)."""
        r = self.reasoning
        assert r is None or isinstance(r, ReasoningOptions)
        return r

    @property
    def has_constraint(self) -> bool:
        """A constraint is given (one of schema/regex/grammar/constraint, or compiled)."""
        return self.compiled is not None or any(getattr(self, n) is not None for n in _CONSTRAINTS)

    def replace(self, **changes: Any) -> GenerationOptions:
        """A copy with ``changes`` (re-validated); unknown names raise :class:`OptionError`."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise OptionError(
                unknown[0], changes[unknown[0]],
                f"unknown generation option(s) {', '.join(unknown)}; the options are "
                f"{', '.join(FIELDS)}",
            )
        return dataclasses.replace(self, **changes) if changes else self

    @classmethod
    def build(cls, options: GenerationOptions | None = None, **kwargs: Any) -> GenerationOptions:
        """``options`` (default: all defaults) with the keyword arguments ``kwargs`` applied:
        how ``generate(model, prompt, options=..., **kwargs)`` reads its arguments."""
        if options is None:
            unknown = sorted(set(kwargs) - set(FIELDS))
            if unknown:
                return cls().replace(**kwargs)  # raises, naming them
            return cls(**kwargs)
        if not isinstance(options, GenerationOptions):
            raise OptionError(
                "options", options,
                f"options must be a GenerationOptions, got {type(options).__name__}",
            )
        return options.replace(**kwargs)


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GenerationOptions))
"""The option names, in declaration order."""


def _stop_strings(stop: object) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings."""
    stops: tuple[Any, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, Sequence):
        stops = tuple(stop)
    else:
        raise OptionError(
            "stop", stop, f"stop must be a non-empty string or a list of them, got {stop!r}"
        )
    if any(not isinstance(s, str) or not s for s in stops):
        raise OptionError(
            "stop", stop, f"stop must be a non-empty string or a list of them, got {stop!r}"
        )
    return stops


def check_context(model: LanguageModel, prompt_tokens: int, max_tokens: int) -> None:
    """The prompt plus the budget fit in ``model.max_context`` (no limit: ``None``).

    Raises:
        ContextLengthError: they do not (it carries the three numbers)."""
    limit = model.max_context
    if limit is not None and prompt_tokens + max_tokens > limit:
        raise ContextLengthError(prompt_tokens, max_tokens, limit)
