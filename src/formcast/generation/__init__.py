"""Model-in-the-loop constrained decoding: generate, stream, results, timings, chat templates.

::

    import formcast.generation as fg
    from formcast.model.loading import load_model

    model = load_model("smollm2")                       # bundled SmolLM2-135M-Instruct, llama.cpp
    result = fg.generate(model, "Extract: Ada, 36", schema={"type": "object", ...})
    result.finish_reason, result.value, result.timings.mask_overhead

    for item in fg.stream(model, "Today's date?", regex=r"\\d{4}-\\d{2}-\\d{2}"):
        ...                                             # str pieces, then the GenerationResult

Nothing here imports a model library: the wrappers in :mod:`formcast.model` do, lazily; the
decoding loop itself is :mod:`formcast.generation.loop`.
"""

from __future__ import annotations

from ..model.chat import CHATML, SMOLLM2_CHAT, ChatTemplate, Message
from ..model.protocol import LanguageModel, Logits
from .api import generate, stream
from .conditioned import ConditionedSampler
from .control import Step, StepControl
from .inputs import Prompt, compile_constraint, get_compiler
from .options import GenerationOptions
from .reasoning import ReasoningOptions, ReasoningText
from .results import (
    FINISH_REASONS,
    FinishReason,
    GenerationResult,
    GenerationTimings,
    StepTimes,
    TokenLogprob,
)
from .sampler_context import SamplerStats

__all__ = [
    "CHATML",
    "FINISH_REASONS",
    "SMOLLM2_CHAT",
    "ChatTemplate",
    "ConditionedSampler",
    "FinishReason",
    "GenerationOptions",
    "GenerationResult",
    "GenerationTimings",
    "LanguageModel",
    "Logits",
    "Message",
    "Prompt",
    "ReasoningOptions",
    "ReasoningText",
    "SamplerStats",
    "Step",
    "StepControl",
    "StepTimes",
    "TokenLogprob",
    "compile_constraint",
    "generate",
    "get_compiler",
    "stream",
]
