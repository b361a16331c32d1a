"""The continuous batcher's *lead*: the tokens a request's constraint forces before its first
model call (its mask allows exactly one token) are taken at ``submit``, output at once and
evaluated together with the prompt in the request's first model call.

Oracles: ``generate`` alone with the same arguments on the same logits function of the whole
sequence (test_batching's model) -- same text, token ids, finish reason and forced-token count;
the model calls the batcher makes, counted on the decoder, are ``generate``'s minus the one it
spends on the forced start (none at all when the whole output is forced); the forced text is
readable from the request before any model call.
"""

from __future__ import annotations

import threading

import pytest

from formcast.generation import GenerationResult, StepControl, generate
from formcast.generation.batching import BatchedRequest, ContinuousBatcher
from formcast.model.callable_batched import CallableBatchedDecoder
from formcast.sampling import SamplingParams

try:
    from test_batching import COMPILER, MODEL, SCHEMA, _drain, _same
except ImportError:  # tests/ imported as a package
    from tests.generation.test_batching import (  # type: ignore[no-redef]
        COMPILER,
        MODEL,
        SCHEMA,
        _drain,
        _same,
    )

LEAD = r"xyz\d{2,4}"  # "xyz" forced (single-byte tokens only), then digits sampled
ALL_FORCED = r"xyz!"


def calls(result: GenerationResult) -> int:
    """Model calls of a ``generate`` result: the prefill and one per later call."""
    return 1 + len(result.timings.decode_step_s)


def test_forced_start_is_output_before_any_model_call_and_saves_one() -> None:
    compiled = COMPILER.compile_regex(LEAD)
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    batcher = ContinuousBatcher(decoder)
    handle = batcher.submit([1, 2, 3], compiled=compiled, max_tokens=8)
    items = iter(handle)
    assert [next(items) for _ in range(3)] == ["x", "y", "z"]  # one piece per token
    assert (decoder.calls, batcher.steps) == (0, 0)  # ... read before any model call
    rest = list(items)
    result = rest[-1]
    assert isinstance(result, GenerationResult)
    alone = generate(MODEL, [1, 2, 3], compiled=compiled, max_tokens=8)
    _same(result, alone)
    assert "xyz" + "".join(p for p in rest[:-1] if isinstance(p, str)) == alone.text
    assert result.timings.forced_tokens == alone.timings.forced_tokens >= 3
    assert decoder.calls == batcher.rows_stepped == calls(alone) - 1
    assert decoder.fed[0] == 3 + 3  # the prompt and the lead in one call
    assert batcher.prompt_tokens_evaluated == 3  # the lead is output, not prompt


def test_requests_with_and_without_a_lead_equal_generate_with_fewer_calls() -> None:
    patterns = [LEAD, r"(yes|no)!", r"\(\d+\)", r"[a-c]{2,9}", r"--\d-\d", ALL_FORCED]
    decoder = CallableBatchedDecoder(MODEL, n_slots=3)
    batcher = ContinuousBatcher(decoder, max_queue=None)
    reqs = []
    for i in range(18):
        compiled = COMPILER.compile_regex(patterns[i % len(patterns)])
        params = SamplingParams.greedy() if i % 2 == 0 else SamplingParams(temperature=1.0)
        reqs.append((list(f"p{i}".encode()), compiled, params, i))
    handles = []
    for k, (ids, compiled, params, seed) in enumerate(reqs):
        handles.append(
            batcher.submit(ids, compiled=compiled, params=params, seed=seed, max_tokens=9)
        )
        if k % 4 == 1:
            batcher.step()  # requests join at different steps
    batcher.run_until_idle()
    want_calls = 0
    for (ids, compiled, params, seed), handle in zip(reqs, handles):
        alone = generate(
            MODEL,
            ids,
            compiled=compiled,
            temperature=params.temperature,
            seed=seed,
            max_tokens=9,
        )
        _same(handle.result(), alone)
        # the forced start rides in the prompt's call (a wholly forced output: no call)
        want_calls += calls(alone) - (1 if _lead_length(compiled) else 0)
    assert batcher.rows_stepped == sum(decoder.batch_sizes) == want_calls


def _lead_length(compiled: object) -> int:
    """Tokens a fresh matcher of ``compiled`` allows alone from its start."""
    from formcast import GrammarMatcher
    from formcast.bitmask import allocate_token_bitmask, bitmask_to_ids

    m = GrammarMatcher(compiled)  # type: ignore[arg-type]
    bm = allocate_token_bitmask(1, MODEL.vocab.vocab_size)
    n = 0
    while m.fill_next_token_bitmask(bm):
        ids = bitmask_to_ids(bm[0])
        if ids.size != 1 or int(ids[0]) in MODEL.vocab.stop_token_ids:
            break
        m.accept_token(int(ids[0]))
        n += 1
    return n


def test_a_wholly_forced_output_needs_no_model_call() -> None:
    compiled = COMPILER.compile_regex(ALL_FORCED)
    decoder = CallableBatchedDecoder(MODEL, n_slots=1)
    batcher = ContinuousBatcher(decoder)
    handle = batcher.submit([5, 6], compiled=compiled, max_tokens=8)
    assert handle.done  # finished inside submit
    alone = generate(MODEL, [5, 6], compiled=compiled, max_tokens=8)
    _same(handle.result(), alone)
    assert (alone.text, alone.finish_reason) == ("xyz!", "completed")
    assert (decoder.calls, batcher.queued, batcher.running) == (0, 0, 0)


def test_a_lead_cut_by_a_stop_string_or_the_budget_ends_as_generate() -> None:
    compiled = COMPILER.compile_regex(LEAD)
    decoder = CallableBatchedDecoder(MODEL, n_slots=1)
    batcher = ContinuousBatcher(decoder)
    for kwargs in ({"stop": "y", "max_tokens": 8}, {"max_tokens": 2}, {"max_tokens": 0}):
        handle = batcher.submit([7], compiled=compiled, **kwargs)  # type: ignore[arg-type]
        assert handle.done
        alone = generate(MODEL, [7], compiled=compiled, **kwargs)  # type: ignore[arg-type]
        _same(handle.result(), alone)
    assert decoder.calls == 0


def test_a_request_stopped_before_submit_has_no_lead() -> None:
    compiled = COMPILER.compile_regex(LEAD)
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=1))
    cancel = threading.Event()
    cancel.set()
    handle = batcher.submit([7], compiled=compiled, control=StepControl(cancel=cancel))
    assert list(handle)[:-1] == []  # nothing streamed
    alone = generate(MODEL, [7], compiled=compiled, control=StepControl(cancel=cancel))
    _same(handle.result(), alone)
    assert handle.result().text == ""


def test_a_queued_request_stopped_keeps_its_lead_text() -> None:
    """A request that waits for a slot and is cancelled there ends "cancelled" with the text
    it streamed already (its lead), as a running one ends with its text so far."""
    compiled = COMPILER.compile_regex(LEAD)
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=1))
    first = batcher.submit([1], compiled=compiled, max_tokens=6)
    cancel = threading.Event()
    queued = batcher.submit([2], compiled=compiled, control=StepControl(cancel=cancel))
    batcher.step()
    assert batcher.queued == 1
    cancel.set()
    batcher.run_until_idle()
    res = queued.result()
    assert (res.finish_reason, res.text) == ("cancelled", "xyz")
    assert first.result().finish_reason in ("completed", "max_tokens")


def test_prompt_cache_keeps_the_lead_too() -> None:
    """A repeated request finds its prompt AND its forced start in the kept slot: no prompt
    token is evaluated again, and the output equals generate's."""
    compiled = COMPILER.compile_regex(LEAD)
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    batcher = ContinuousBatcher(decoder, prompt_cache=True, share_prefix=4)
    ids = list(b"a prompt of some length")
    alone = generate(MODEL, ids, compiled=compiled, max_tokens=8)
    _same(batcher.submit(ids, compiled=compiled, max_tokens=8).result(), alone)
    assert batcher.prompt_tokens_evaluated == len(ids)
    calls_before = decoder.calls
    _same(batcher.submit(ids, compiled=compiled, max_tokens=8).result(), alone)
    assert batcher.prompt_tokens_evaluated == len(ids)  # nothing more of the prompt
    assert decoder.fed[calls_before] == 1  # the lead's last token, for the logits
    xyz = [ord(c) for c in "xyz"]  # test_batching's vocabulary: ids 0-255 are the bytes
    kept = [decoder.sequence(s) for s in range(2)]
    assert any(seq[: len(ids) + 3] == ids + xyz for seq in kept)


def _pieces_before_any_call(handle: BatchedRequest, decoder: CallableBatchedDecoder) -> str:
    """The text readable from ``handle`` now, checking no model call is made for it."""
    pieces, _ = handle._take()
    assert decoder.calls == 0
    return "".join(pieces)


def test_forced_text_is_streamed_before_the_model_spells_it() -> None:
    """``{"ok":`` is forced text but not a forced token (``{`` or ``{"``; ``"`` or ``":``...):
    the text is pushed at submit, the model still chooses its tokens, and the stream, the
    result and generate's output are the same text."""
    compiled = COMPILER.compile_json_schema(SCHEMA)
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    batcher = ContinuousBatcher(decoder)
    handle = batcher.submit([1, 2], compiled=compiled, max_tokens=20)
    first = _pieces_before_any_call(handle, decoder)
    assert first == '{"ok":'
    text, result = _drain(handle)
    alone = generate(MODEL, [1, 2], compiled=compiled, max_tokens=20)
    _same(result, alone)
    assert first + text == result.text == alone.text
    assert _lead_length(compiled) == 0  # no forced token: the model spells the text
    assert decoder.calls == calls(alone)  # no call saved: the first token is the model's


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5, 8, 30])
def test_streamed_text_is_the_result_text_under_any_budget(max_tokens: int) -> None:
    decoder = CallableBatchedDecoder(MODEL, n_slots=3)
    batcher = ContinuousBatcher(decoder, max_queue=None)
    schema = COMPILER.compile_json_schema(SCHEMA)
    reqs = [(list(f"q{i}".encode()), schema if i % 2 else COMPILER.compile_regex(LEAD))
            for i in range(6)]  # fmt: skip
    handles = [batcher.submit(ids, compiled=c, max_tokens=max_tokens, seed=i,
                              params=SamplingParams(temperature=1.0))
               for i, (ids, c) in enumerate(reqs)]  # fmt: skip
    ahead = [_pieces_before_any_call(h, decoder) for h in handles]
    for (ids, c), h, first, i in zip(reqs, handles, ahead, range(6)):
        text, result = _drain(h)
        alone = generate(MODEL, ids, compiled=c, max_tokens=max_tokens, seed=i, temperature=1.0)
        _same(result, alone)
        assert first + text == alone.text
        assert len(first.encode()) <= max_tokens


def test_no_text_ahead_with_stop_strings() -> None:
    compiled = COMPILER.compile_json_schema(SCHEMA)
    decoder = CallableBatchedDecoder(MODEL, n_slots=1)
    batcher = ContinuousBatcher(decoder)
    handle = batcher.submit([3], compiled=compiled, max_tokens=20, stop="}")
    assert _pieces_before_any_call(handle, decoder) == ""
    text, result = _drain(handle)
    _same(result, generate(MODEL, [3], compiled=compiled, max_tokens=20, stop="}"))
    assert text == result.text
