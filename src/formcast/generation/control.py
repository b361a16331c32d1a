"""Step control: how a caller stops a generation from outside the decoding loop.

:class:`StepControl` is checked by the loop (:mod:`formcast.generation.loop`) before the
prompt is evaluated and at the start of every step, i.e. before every model call: a set
``cancel`` event ends the generation with ``finish_reason="cancelled"``, a passed ``deadline``
with ``"timeout"``; ``on_step`` sees every output token once it is chosen and may end the
generation (``"cancelled"``) by returning ``True``.  The result of an interrupted generation
is a normal :class:`~formcast.generation.GenerationResult`: the text and tokens so far, never
parsed (``value`` ``None``).  Nothing raises through the loop, so the caller never has to tell
an interruption from a failure.

Lifetime: a :class:`StepControl` is an immutable value (its ``cancel`` event is the caller's
and may be set from any thread); it may be shared by several generations.  Cost per check:
one ``Event.is_set()``, one :func:`time.monotonic` and the callback.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from ..errors import OptionError

__all__ = ["CancelFlag", "Step", "StepControl", "StopReason"]

StopReason = Literal["cancelled", "timeout"]
"""How a :class:`StepControl` ends a generation."""


@runtime_checkable
class CancelFlag(Protocol):
    """Anything with ``is_set()``: :class:`threading.Event`, :class:`asyncio.Event`..."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Step:
    """One output token, as ``on_step`` sees it.

    Attributes:
        index: 0-based position of the token in the output.
        token_id: the token.
        forced: the constraint allowed only this token (taken without sampling).
        logprob: its log-probability (``logprobs=`` on; see
            :class:`~formcast.generation.TokenLogprob`), else ``None``.
    """

    index: int
    token_id: int
    forced: bool
    logprob: float | None = None


@dataclass(frozen=True)
class StepControl:
    """Stop conditions checked by the decoding loop before every model call.

    Attributes:
        cancel: a flag (``threading.Event``) whose ``is_set()`` ends the generation as
            ``"cancelled"``; may be set from another thread.
        deadline: a :func:`time.monotonic` time after which the generation ends as
            ``"timeout"`` (``None``: none).
        on_step: called with each output :class:`Step` once it is chosen (before the next
            model call); returning ``True`` ends the generation as ``"cancelled"``.  Its
            exceptions propagate out of ``generate``/``stream``.

    Raises:
        OptionError: a ``cancel`` without ``is_set``, a deadline that is not a finite number,
            an ``on_step`` that is not callable.
    """

    cancel: CancelFlag | None = None
    deadline: float | None = None
    on_step: Callable[[Step], bool | None] | None = None

    def __post_init__(self) -> None:
        if self.cancel is not None and not isinstance(self.cancel, CancelFlag):
            raise OptionError(
                "control.cancel", self.cancel,
                "control.cancel must have is_set() (a threading.Event), got "
                f"{type(self.cancel).__name__}",
            )
        d = self.deadline
        if d is not None and (
            isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d)
        ):
            raise OptionError(
                "control.deadline", d,
                f"control.deadline must be a time.monotonic() value or None, got {d!r}",
            )
        if self.on_step is not None and not callable(self.on_step):
            raise OptionError(
                "control.on_step", self.on_step,
                f"control.on_step must be callable(step), got {type(self.on_step).__name__}",
            )

    def check(self) -> StopReason | None:
        """``"cancelled"`` or ``"timeout"`` when the generation must end now, else ``None``."""
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        if self.deadline is not None and time.monotonic() > self.deadline:
            return "timeout"
        return None

    def with_deadline(self, deadline: float | None) -> StepControl:
        """This control with the earlier of its deadline and ``deadline``."""
        if deadline is None:
            return self
        mine = self.deadline
        return StepControl(
            self.cancel, deadline if mine is None else min(mine, deadline), self.on_step
        )
