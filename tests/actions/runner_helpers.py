"""Scripted models for the action-runner tests: a byte vocabulary and a model that writes one
given answer per attempt (fast, deterministic, numpy only)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

EOS = 256


def byte_vocab(missing: Sequence[int] = ()) -> Vocabulary:
    """All 256 single bytes (minus ``missing``: empty tokens), EOS = 256."""
    tokens = [b"" if i in missing else bytes([i]) for i in range(256)]
    tokens.append(b"<eos>")
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


class ScriptedModel(CallableModel):
    """Writes ``answers[i]`` on attempt ``i`` (the last one again after that), one byte per
    token, then EOS.  The constraint still masks: a byte the grammar forbids is replaced by the
    best allowed one (the highest logit among the allowed is the next scripted byte only when
    the script is valid).  ``prompts`` records every prompt text; ``delay`` maps an output
    prefix test to seconds slept before the next token (for deadlines)."""

    def __init__(
        self,
        answers: Sequence[str | bytes],
        *,
        delay: Callable[[bytes], float] | None = None,
        chat_template: object = None,
        missing: Sequence[int] = (),
    ) -> None:
        self.vocab_ = byte_vocab(missing)
        self.answers = [a.encode() if isinstance(a, str) else a for a in answers]
        self.prompts: list[str] = []
        self.prompt_len = 0
        self.delay = delay
        super().__init__(self._logits, self.vocab_, tokenize=self._tokenize,
                         chat_template=chat_template, name="scripted")  # type: ignore[arg-type]

    def _tokenize(self, text: str) -> list[int]:
        self.prompts.append(text)
        ids = list(text.encode("utf-8"))
        self.prompt_len = len(ids)
        return ids

    @property
    def attempt(self) -> int:
        return len(self.prompts) - 1

    def _logits(self, seq: list[int]) -> np.ndarray:
        done = bytes(seq[self.prompt_len:])
        if self.delay is not None:
            pause = self.delay(done)
            if pause:
                time.sleep(pause)
        target = self.answers[min(self.attempt, len(self.answers) - 1)]
        logits = np.zeros(self.vocab_.vocab_size)
        # prefer the scripted byte, then EOS, then the rest in a fixed order (deterministic)
        logits[EOS] = 1.0
        if target.startswith(done) and len(done) < len(target):
            logits[target[len(done)]] = 10.0
        elif done == target:
            logits[EOS] = 10.0
        return logits


# -- the refund example ------------------------------------------------------------------------
ORDERS = {"A1": 80, "A2": 250}

REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^A[0-9]{1,4}$"},
        "amount": {"type": "integer", "minimum": 1, "maximum": 1000},
        "reason": {"type": "string", "maxLength": 60},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
    },
    "required": ["order_id", "amount", "reason", "currency"],
    "additionalProperties": False,
}

GOOD = '{"order_id":"A1","amount":80,"reason":"damaged"}'
TOO_MUCH = '{"order_id":"A1","amount":120,"reason":"damaged"}'
UNKNOWN_ORDER = '{"order_id":"A9","amount":5,"reason":"damaged"}'


def amount_within_order(args: dict) -> object:
    from formcast.actions import Failure

    total = ORDERS.get(args["order_id"])
    if total is not None and args["amount"] > total:
        return Failure("business", "amount_exceeds_order",
                       f"the amount {args['amount']} exceeds the order total {total}", "/amount")
    return None


def order_exists(args: dict) -> object:
    from formcast.actions import Failure

    if args["order_id"] not in ORDERS:
        return Failure("facts", "unknown_order", f"no order {args['order_id']!r}", "/order_id")
    return None


class Executions:
    """An ``execute`` that records its calls."""

    def __init__(self, result: object = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[dict, str]] = []
        self.result = result
        self.error = error

    def __call__(self, args: dict, key: str) -> object:
        self.calls.append((args, key))
        if self.error is not None:
            raise self.error
        return self.result if self.result is not None else {"refund_id": f"R{len(self.calls)}"}


def refund_tool(execute: Executions | None = None, **changes: object):  # type: ignore[no-untyped-def]
    from formcast.actions import Tool

    options: dict = {
        "rules": [amount_within_order],
        "facts": [order_exists],
        "defaults": {"currency": "EUR"},
        "execute": execute if execute is not None else Executions(),
    }
    options.update(changes)
    return Tool("refund", REFUND_SCHEMA, **options)
