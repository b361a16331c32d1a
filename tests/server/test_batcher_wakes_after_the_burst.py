"""``ContinuousBatcher.submit(wake=False)`` leaves an idle worker asleep until
:meth:`~formcast.generation.batching.ContinuousBatcher.wake`: the server submits so, and wakes
the worker at the next event-loop turn, after every request read in the same turn (a burst)
has written its first chunks -- the worker's step (Python, GIL held) does not run between
them, and the burst joins its first step together.  The default (``wake=True``) is unchanged.
"""

from __future__ import annotations

import time

from test_continuous_batching import TokenFunction, callable_model

from formcast.generation.batching import ContinuousBatcher
from formcast.model.batched_select import batched_decoder_for


def _batcher(fn: TokenFunction) -> ContinuousBatcher:
    decoder = batched_decoder_for(callable_model(fn), n_slots=4)
    assert decoder is not None
    return ContinuousBatcher(decoder)


def test_an_unwoken_request_waits_for_wake_and_a_woken_one_does_not() -> None:
    fn = TokenFunction()
    batcher = _batcher(fn)
    batcher.start()
    try:
        batcher.submit([1, 2, 3], max_tokens=2).result(timeout=60)  # default: woken
        calls, steps = fn.calls, batcher.steps
        reqs = [batcher.submit([1, 2, 3 + i], max_tokens=2, wake=False) for i in range(3)]
        time.sleep(0.3)
        assert fn.calls == calls  # the idle worker still sleeps: no model call
        assert not any(r.done for r in reqs)
        assert batcher.queued == 3
        batcher.wake()
        results = [r.result(timeout=60) for r in reqs]
        assert all(len(r.token_ids) == 2 for r in results)
        # the three joined one step: as many steps as one request of 2 tokens took
        assert batcher.steps - steps == steps
    finally:
        batcher.close()
