"""OpenAI response bodies and SSE chunks from the engine's events.

``finish_reason`` says what happened to each choice:

=================  ==========================================================================
``stop``           completed: a stop token where the constraint was complete, or a ``stop``
                   string (the text ends before it).  A JSON constraint's content is then a
                   complete document valid for the schema.
``tool_calls``     completed, and the output is tool calls (``message.tool_calls``).
``length``         ``max_tokens`` ran out: ``content`` is the *truncated prefix* (never a
                   complete JSON document, never auto-completed; ``formcast.complete`` is
                   false).
``timeout``        the request's ``request_timeout_s`` ran out: the text so far.
``dead_end``       the constraint allowed no token (the tokenizer cannot spell what the schema
                   needs); ``formcast.diagnostic`` says why.
=================  ==========================================================================

Every choice also carries ``formcast: {"finish": <formcast's reason>, "complete": bool}``
(``complete``: the output is a whole sentence of the constraint).

Lifetime: pure functions over plain values.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..vocab.vocabulary import Vocabulary
from .engine import Finished

__all__ = [
    "chat_logprobs",
    "choice_extension",
    "completion_logprobs",
    "finish_reason",
    "new_id",
    "sse",
    "usage",
]

DONE = "data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def created() -> int:
    return int(time.time())


def finish_reason(finished: Finished, *, tool_calls: bool = False) -> str:
    """OpenAI's ``finish_reason`` for a choice (see the module table)."""
    f = finished.finish
    if f == "completed":
        return "tool_calls" if tool_calls else "stop"
    if f == "stop":
        return "stop"
    if f == "max_tokens":
        return "length"
    return f  # "timeout", "dead_end" ("cancelled" is never answered)


def choice_extension(finished: Finished, warnings: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``formcast`` object of a choice: formcast's finish reason, completeness,
    the dead-end diagnostic, compile warnings."""
    ext: dict[str, Any] = {"finish": finished.finish, "complete": finished.finish == "completed"}
    result = finished.result
    if result is not None and result.diagnostic is not None:
        ext["diagnostic"] = str(result.diagnostic)
    if warnings:
        ext["warnings"] = list(warnings)
    return ext


def usage(finished: list[Finished]) -> dict[str, int]:
    """``usage``: the prompt counted once per distinct prompt (once for ``n`` choices)."""
    prompt = max((f.prompt_tokens for f in finished), default=0)
    completion = sum(f.completion_tokens for f in finished)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _token_text(vocab: Vocabulary, tid: int) -> tuple[str, list[int]]:
    data = vocab.token_bytes(tid)
    return data.decode("utf-8", "replace"), list(data)


def chat_logprobs(finished: Finished, vocab: Vocabulary) -> dict[str, Any] | None:
    """A chat choice's ``logprobs`` (``{"content": [...], "refusal": None}``), ``None`` when
    not asked for.  Each entry is one output token: its text, log-probability, bytes and the
    top alternatives at its step (see ``GenerationResult.logprobs`` for
    which distribution)."""
    if finished.logprobs is None:
        return None
    content = []
    for e in finished.logprobs:
        text, data = _token_text(vocab, e.token_id)
        top = []
        for tid, lp in e.top:
            t, b = _token_text(vocab, tid)
            top.append({"token": t, "logprob": lp, "bytes": b})
        content.append({"token": text, "logprob": e.logprob, "bytes": data, "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(finished: Finished, vocab: Vocabulary) -> dict[str, Any] | None:
    """A text completion choice's legacy ``logprobs`` (``tokens``, ``token_logprobs``,
    ``top_logprobs``, ``text_offset``), ``None`` when not asked for."""
    if finished.logprobs is None:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    offset = 0
    for e in finished.logprobs:
        text, _ = _token_text(vocab, e.token_id)
        tokens.append(text)
        lps.append(e.logprob)
        tops.append({_token_text(vocab, tid)[0]: lp for tid, lp in e.top})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
            "text_offset": offsets}


def sse(obj: dict[str, Any]) -> str:
    """One server-sent event carrying ``obj`` as JSON."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
