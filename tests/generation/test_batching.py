"""The continuous batcher (:mod:`formcast.generation.batching`) against ``generate``.

The oracle: every request decoded through the batcher -- whatever joins or leaves around it,
whichever slot it lands in -- gives the same result (text, token ids, finish reason) as the
same arguments given to :func:`formcast.generate` alone.  The model is a logits function of
the whole sequence (a seeded hash: no two sequences share logits), wrapped as a
:class:`CallableModel` for ``generate`` and a :class:`CallableBatchedDecoder` for the batcher,
so a request that read another's tokens, slot or sampler would choose differently.  Also: one
model call per step, the constraint holds for every row, a slot is reused after its request
leaves, queue bound, cancel, the worker thread and ``async for``.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib

import numpy as np
import pytest

from formcast import ConfigurationError, GrammarCompiler, GrammarMatcher
from formcast.generation import GenerationResult, generate
from formcast.generation.batching import (
    BatchedRequest,
    BatcherFullError,
    ContinuousBatcher,
    RequestCancelledError,
)
from formcast.model.batched import BatchedDecoder
from formcast.model.callable import CallableModel
from formcast.model.callable_batched import CallableBatchedDecoder
from formcast.sampling import SamplingParams
from formcast.vocab.vocabulary import Vocabulary

EOS = 256
TOKENS = [bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"10", b'{"', b'":', b"true"]
VOCAB = Vocabulary.from_tokens(TOKENS, stop_token_ids=[EOS], name="bytes+")
COMPILER = GrammarCompiler(VOCAB)


def logits_fn(ids: list[int]) -> np.ndarray:
    """Pseudo-random logits seeded by the whole sequence (stable across processes)."""
    seed = zlib.crc32(np.asarray(ids, dtype=np.int64).tobytes())
    out = np.random.default_rng(seed).standard_normal(VOCAB.vocab_size) * 3.0
    out[EOS] -= 2.0  # let outputs run a while
    return out


MODEL = CallableModel(logits_fn, VOCAB, tokenize=lambda s: list(s.encode()), max_context=4096)

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
REGEXES = [r"[a-c]{2,9}", r"(yes|no)!", r"\d{3}-\d{2}", r"[0-9a-f]+"]


def _requests() -> list[dict]:
    """Twelve requests: regexes, a schema, unconstrained, stop strings, budgets."""
    reqs: list[dict] = []
    for i in range(12):
        ids = [*list(f"prompt {i}: ".encode()), i]
        kind = i % 6
        if kind < 4:
            compiled = COMPILER.compile_regex(REGEXES[kind])
        elif kind == 4:
            compiled = COMPILER.compile_json_schema(SCHEMA)
        else:
            compiled = None
        reqs.append(
            {
                "ids": ids,
                "compiled": compiled,
                "max_tokens": 6 + 3 * (i % 5),
                "stop": ["c"] if i == 7 else None,
            }
        )
    return reqs


def _alone(req: dict, **sampling: object) -> GenerationResult:
    return generate(
        MODEL,
        req["ids"],
        compiled=req["compiled"],
        max_tokens=req["max_tokens"],
        stop=req["stop"],
        **sampling,  # type: ignore[arg-type]
    )


def _same(a: GenerationResult, b: GenerationResult) -> None:
    assert (a.text, a.token_ids, a.finish_reason, a.stop_token_id) == (
        b.text,
        b.token_ids,
        b.finish_reason,
        b.stop_token_id,
    )
    assert a.value == b.value
    assert a.timings.output_tokens == b.timings.output_tokens
    assert a.timings.forced_tokens == b.timings.forced_tokens


def _drain(req: BatchedRequest) -> tuple[str, GenerationResult]:
    pieces: list[str] = []
    result = None
    for item in req:
        if isinstance(item, GenerationResult):
            result = item
        else:
            assert isinstance(item, str)
            assert item
            pieces.append(item)
    assert result is not None
    return "".join(pieces), result


def test_decoder_is_a_batched_decoder() -> None:
    assert isinstance(CallableBatchedDecoder(MODEL), BatchedDecoder)


@pytest.mark.parametrize("n_slots", [1, 3, 8])
def test_greedy_requests_joining_at_different_steps_equal_generate(n_slots: int) -> None:
    reqs = _requests()
    decoder = CallableBatchedDecoder(MODEL, n_slots=n_slots)
    batcher = ContinuousBatcher(decoder, max_queue=None)
    handles: list[BatchedRequest] = []
    for i, req in enumerate(reqs):
        handles.append(
            batcher.submit(
                req["ids"],
                compiled=req["compiled"],
                max_tokens=req["max_tokens"],
                stop=req["stop"],
            )
        )
        for _ in range(i % 3):  # requests join after 0, 1 or 2 more steps
            batcher.step()
    batcher.run_until_idle()
    assert batcher.running == batcher.queued == 0
    for req, handle in zip(reqs, handles):
        assert handle.done
        text, result = _drain(handle)
        assert text == result.text
        _same(result, _alone(req))
    # one model call per step, several rows per call when there are slots for them
    assert decoder.calls == batcher.steps
    assert max(decoder.batch_sizes) >= min(n_slots, 4)
    assert all(decoder.length(s) == 0 for s in range(n_slots))  # every slot released


def test_seeded_sampling_equals_generate_per_request() -> None:
    reqs = _requests()
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=5))
    settings = [
        {
            "temperature": 0.8 + 0.1 * (i % 3),
            "top_k": [0, 5, 40][i % 3],
            "top_p": [1.0, 0.9][i % 2],
            "seed": 100 + i,
        }
        for i in range(len(reqs))
    ]
    handles = [
        batcher.submit(
            r["ids"],
            compiled=r["compiled"],
            max_tokens=r["max_tokens"],
            stop=r["stop"],
            params=SamplingParams(s["temperature"], s["top_k"], s["top_p"]),
            seed=s["seed"],
        )
        for r, s in zip(reqs, settings)
    ]
    batcher.run_until_idle()
    for req, s, handle in zip(reqs, settings, handles):
        _same(handle.result(), _alone(req, **s))


def test_every_row_respects_its_constraint() -> None:
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=8), max_queue=None)
    pats = [REGEXES[i % len(REGEXES)] for i in range(16)]
    handles = [
        batcher.submit(
            [i, 7, i],
            compiled=COMPILER.compile_regex(p),
            max_tokens=40,
            seed=i,
            params=SamplingParams(temperature=1.0),
        )
        for i, p in enumerate(pats)
    ]
    batcher.run_until_idle()
    completed = 0
    for pat, handle in zip(pats, handles):
        res = handle.result()
        matcher = GrammarMatcher(COMPILER.compile_regex(pat))  # every token a legal step
        assert all(matcher.accept_token(t) for t in res.token_ids), (pat, res.text)
        if res.finish_reason == "completed":
            completed += 1
            assert re.fullmatch(pat, res.text), (pat, res.text)
            assert matcher.is_accepting()
        else:
            assert res.finish_reason == "max_tokens"
    assert completed >= 8


def test_cancel_frees_the_slot_and_leaves_others_alone() -> None:
    reqs = _requests()[:4]
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    batcher = ContinuousBatcher(decoder)
    handles = [
        batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"], stop=r["stop"])
        for r in reqs
    ]
    batcher.step()
    handles[0].cancel()  # running
    handles[3].cancel()  # queued
    batcher.run_until_idle()
    for i in (0, 3):
        assert handles[i].cancelled
        assert handles[i].done
        with pytest.raises(RequestCancelledError):
            handles[i].result()
    for i in (1, 2):
        _same(handles[i].result(), _alone(reqs[i]))


def test_queue_bound_and_bad_arguments() -> None:
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=1), max_queue=2)
    batcher.submit([1, 2], max_tokens=2)
    batcher.submit([1, 2], max_tokens=2)
    with pytest.raises(BatcherFullError, match="max_queue=2"):
        batcher.submit([1, 2], max_tokens=2)
    batcher.step()  # one request takes the slot: room in the queue again
    batcher.submit([1, 2], max_tokens=2)
    with pytest.raises(ConfigurationError, match="prompt is empty"):
        batcher.submit([])
    with pytest.raises(ConfigurationError, match="max_tokens"):
        batcher.submit([1], max_tokens=-1)
    with pytest.raises(ConfigurationError, match="exceeds"):
        batcher.submit([1] * 4000, max_tokens=200)
    with pytest.raises(ConfigurationError, match="BatchedDecoder"):
        ContinuousBatcher(MODEL)  # type: ignore[arg-type]
    batcher.run_until_idle()


def test_submit_generate_takes_generates_arguments() -> None:
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=4))
    kwargs = [
        {"regex": r"(yes|no)!", "max_tokens": 10},
        {"schema": SCHEMA, "max_tokens": 30},
        {"max_tokens": 5, "temperature": 0.7, "seed": 3},
    ]
    handles = [batcher.submit_generate("question?", **kw) for kw in kwargs]  # type: ignore[arg-type]
    batcher.run_until_idle()
    for kw, handle in zip(kwargs, handles):
        _same(handle.result(), generate(MODEL, "question?", **kw))  # type: ignore[arg-type]


def test_worker_thread_and_async_iteration() -> None:
    reqs = _requests()
    decoder = CallableBatchedDecoder(MODEL, n_slots=8)
    with ContinuousBatcher(decoder, max_queue=None) as batcher:
        batcher.start()

        async def main() -> list[tuple[str, GenerationResult]]:
            async def one(req: dict) -> tuple[str, GenerationResult]:
                handle = batcher.submit(
                    req["ids"],
                    compiled=req["compiled"],
                    max_tokens=req["max_tokens"],
                    stop=req["stop"],
                )
                pieces: list[str] = []
                async for item in handle:
                    if isinstance(item, GenerationResult):
                        return "".join(pieces), item
                    pieces.append(item)
                raise AssertionError("no result")

            return await asyncio.gather(*(one(r) for r in reqs))

        got = asyncio.run(main())
        for req, (text, result) in zip(reqs, got):
            assert text == result.text
            _same(result, _alone(req))
        # blocking iteration from this thread while the worker runs
        text, result = _drain(
            batcher.submit(
                reqs[4]["ids"], compiled=reqs[4]["compiled"], max_tokens=reqs[4]["max_tokens"]
            )
        )
        _same(result, _alone(reqs[4]))
    assert max(decoder.batch_sizes) > 1


def test_async_iteration_needs_the_worker() -> None:
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=1))
    handle = batcher.submit([1, 2], max_tokens=2)

    async def main() -> None:
        async for _ in handle:
            pass

    with pytest.raises(ConfigurationError, match=r"batcher\.start\(\)"):
        asyncio.run(main())
    batcher.close()
    with pytest.raises(RequestCancelledError):
        handle.result()


def test_decoder_checks_its_feeds() -> None:
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    with pytest.raises(ConfigurationError, match="out of range"):
        decoder.decode([(2, [1])])
    with pytest.raises(ConfigurationError, match="fed twice"):
        decoder.decode([(0, [1]), (0, [2])])
    with pytest.raises(ConfigurationError, match="no tokens"):
        decoder.decode([(0, [])])
    with pytest.raises(ConfigurationError, match="no feeds"):
        decoder.decode([])
    rows = decoder.decode([(1, [5, 6]), (0, [7])])
    assert np.array_equal(rows[0], logits_fn([5, 6]))
    assert np.array_equal(rows[1], logits_fn([7]))
    assert (decoder.length(0), decoder.length(1)) == (1, 2)
    decoder.release(1)
    assert decoder.length(1) == 0
    assert np.array_equal(decoder.decode([(1, [9])])[0], logits_fn([9]))
    small = CallableBatchedDecoder(CallableModel(logits_fn, VOCAB, max_context=3), n_slots=1)
    small.decode([(0, [1, 2])])
    with pytest.raises(ConfigurationError, match="context full in slot 0"):
        small.decode([(0, [3, 4])])


def test_prefill_budget_staggers_joins_and_changes_no_output() -> None:
    reqs = _requests()[:6]
    decoder = CallableBatchedDecoder(MODEL, n_slots=8)
    longest = max(len(r["ids"]) for r in reqs)
    batcher = ContinuousBatcher(decoder, prefill_tokens=longest + 1)  # one prompt per step
    handles = [
        batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"], stop=r["stop"])
        for r in reqs
    ]
    batcher.step()
    assert batcher.running == 1
    assert batcher.queued == 5
    batcher.step()
    assert decoder.batch_sizes[:2] == [1, 2]  # the second joined beside the first
    batcher.run_until_idle()
    for req, handle in zip(reqs, handles):
        _same(handle.result(), _alone(req))
    with pytest.raises(ConfigurationError, match="prefill_tokens"):
        ContinuousBatcher(decoder, prefill_tokens=0)


class _Recorder:
    """Records what a StepObserver sees; as a model proxy, what generate() makes it see."""

    def __init__(self, model: CallableModel | None = None) -> None:
        self.events: list[tuple[str, object]] = []
        self._model = model

    def consume(self, token_ids: list[int]) -> None:
        self.events.append(("consume", list(token_ids)))

    def on_logits(self, logits: np.ndarray) -> None:
        self.events.append(("logits", np.array(logits, dtype=np.float64)))

    # the LanguageModel proxy (the server's _GuardedModel pattern)
    def __getattr__(self, name: str) -> object:
        return getattr(self._model, name)

    def start(self, ids: list[int]) -> np.ndarray:
        out = self._model.start(ids)  # type: ignore[union-attr]
        self.on_logits(out)
        return out

    def step(self, ids: list[int]) -> np.ndarray:
        self.consume(ids)
        out = self._model.step(ids)  # type: ignore[union-attr]
        self.on_logits(out)
        return out


def test_observer_sees_what_a_model_proxy_sees_under_generate() -> None:
    reqs = _requests()[:6]
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=3))
    observers = [_Recorder() for _ in reqs]
    handles = [
        batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"],
                       stop=r["stop"], observer=o)
        for r, o in zip(reqs, observers)
    ]  # fmt: skip
    batcher.run_until_idle()
    for req, handle, obs in zip(reqs, handles, observers):
        proxy = _Recorder(MODEL)
        want = generate(proxy, req["ids"], compiled=req["compiled"],  # type: ignore[arg-type]
                        max_tokens=req["max_tokens"], stop=req["stop"])  # fmt: skip
        _same(handle.result(), want)
        assert [e[0] for e in obs.events] == [e[0] for e in proxy.events]
        for (kind, got), (_, exp) in zip(obs.events, proxy.events):
            if kind == "consume":
                assert got == exp
            else:
                assert np.array_equal(got, exp)  # type: ignore[arg-type]

    class Broken(_Recorder):
        def on_logits(self, logits: np.ndarray) -> None:
            raise RuntimeError("observer failed")

    bad = batcher.submit([1, 2, 3], max_tokens=3, observer=Broken())
    good = batcher.submit([4, 5, 6], max_tokens=3)
    batcher.run_until_idle()
    with pytest.raises(RuntimeError, match="observer failed"):
        bad.result()
    assert good.result().timings.output_tokens == 3
    with pytest.raises(ConfigurationError, match="observer"):
        batcher.submit([1], observer=object())  # type: ignore[arg-type]


def test_threads_submitting_and_reading_at_once_get_their_own_outputs() -> None:
    reqs = _requests() + _requests()[:4]  # 16 requests, 16 threads, 8 slots
    wants = [_alone(r) for r in reqs]
    got: list[GenerationResult | BaseException | None] = [None] * len(reqs)
    with ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=8), max_queue=None) as batcher:
        batcher.start()

        def client(i: int) -> None:
            try:
                r = reqs[i]
                h = batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"],
                                   stop=r["stop"])  # fmt: skip
                text, result = _drain(h)
                assert text == result.text
                got[i] = result
            except BaseException as exc:  # reported below
                got[i] = exc

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    for res, want in zip(got, wants):
        assert isinstance(res, GenerationResult), res
        _same(res, want)


def test_close_with_requests_in_flight_ends_every_request() -> None:
    reqs = _requests()
    decoder = CallableBatchedDecoder(MODEL, n_slots=4)
    batcher = ContinuousBatcher(decoder, max_queue=None)
    batcher.start()
    handles = [batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"])
               for r in reqs]  # fmt: skip
    batcher.close()
    assert not batcher.has_worker
    for req, h in zip(reqs, handles):
        assert h.done
        try:
            res = h.result(timeout=5)
        except RequestCancelledError:
            assert h.cancelled
        else:
            _same(res, _alone({**req, "stop": None}))
    assert all(decoder.length(s) == 0 for s in range(4))
    with pytest.raises(ConfigurationError, match="closed"):
        batcher.submit([1])


def test_shared_prompt_starts_are_evaluated_once() -> None:
    system = list(b"You are a careful assistant. Answer in the format asked. ")
    reqs = [
        {**r, "ids": system + r["ids"]} for r in _requests()[:8]
    ]  # eight prompts, one long common start
    decoder = CallableBatchedDecoder(MODEL, n_slots=8)
    batcher = ContinuousBatcher(decoder, share_prefix=16)
    handles = [
        batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"], stop=r["stop"])
        for r in reqs
    ]
    batcher.step()
    assert batcher.running == 1  # the others wait one step to copy its evaluated start
    batcher.run_until_idle()
    for req, handle in zip(reqs, handles):
        _same(handle.result(), _alone(req))
    assert decoder.copies == 7
    # the same requests without sharing evaluate 7 x the common start more ("...prompt ")
    plain = CallableBatchedDecoder(MODEL, n_slots=8)
    again = ContinuousBatcher(plain)
    for r in reqs:
        again.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"], stop=r["stop"])
    again.run_until_idle()
    assert sum(plain.fed) - sum(decoder.fed) == 7 * (len(system) + len(b"prompt "))
    off = CallableBatchedDecoder(MODEL, n_slots=8)
    ContinuousBatcher(off).submit(reqs[0]["ids"], max_tokens=1).result()
    assert off.copies == 0  # off by default
    with pytest.raises(ConfigurationError, match="share_prefix"):
        ContinuousBatcher(off, share_prefix=0)


def test_copy_prefix_checks() -> None:
    decoder = CallableBatchedDecoder(MODEL, n_slots=3)
    decoder.decode([(0, [1, 2, 3, 4])])
    decoder.copy_prefix(0, 1, 3)
    assert decoder.sequence(1) == [1, 2, 3]
    assert np.array_equal(decoder.decode([(1, [9])])[0], logits_fn([1, 2, 3, 9]))
    with pytest.raises(ConfigurationError, match="release it first"):
        decoder.copy_prefix(0, 1, 2)
    with pytest.raises(ConfigurationError, match="cannot copy"):
        decoder.copy_prefix(0, 2, 5)
    with pytest.raises(ConfigurationError, match="cannot copy"):
        decoder.copy_prefix(2, 2, 1)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_logprobs_equal_generate_per_request(temperature: float) -> None:
    """``logprobs=k`` through the batcher: the entries ``generate(logprobs=k)`` gives, forced
    tokens (logprob 0) and stop tokens (no entry) included."""
    reqs = _requests()
    batcher = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=4))
    handles = [
        batcher.submit(
            req["ids"],
            compiled=req["compiled"],
            max_tokens=req["max_tokens"],
            stop=req["stop"],
            params=SamplingParams(temperature=temperature),
            seed=i,
            logprobs=3,
        )
        for i, req in enumerate(reqs)
    ]
    batcher.run_until_idle()
    for i, (req, handle) in enumerate(zip(reqs, handles)):
        got = handle.result()
        want = _alone(req, temperature=temperature, seed=i, logprobs=3)
        _same(got, want)
        assert got.logprobs is not None
        assert want.logprobs is not None
        assert len(got.logprobs) == len(got.token_ids)
        assert got.logprobs == want.logprobs
    plain = ContinuousBatcher(CallableBatchedDecoder(MODEL, n_slots=2))
    req = plain.submit(reqs[0]["ids"], compiled=reqs[0]["compiled"], max_tokens=5)
    plain.run_until_idle()
    assert req.result().logprobs is None  # off unless asked


def test_control_cancel_and_deadline_end_requests_with_their_text_so_far() -> None:
    """A request's ``StepControl``: a set cancel flag ends it as ``"cancelled"`` and a passed
    deadline as ``"timeout"`` at the next step, with the text so far (a prefix of what it
    would have written), its slot freed; a queued request stopped before it got a slot
    ends with no text; ``on_step`` returning True cancels; the others are untouched."""
    import time

    from formcast.generation.control import StepControl

    ids = list(b"go: ")
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    batcher = ContinuousBatcher(decoder, max_queue=None)
    flag = threading.Event()
    cancelled = batcher.submit(ids, max_tokens=40, control=StepControl(cancel=flag))
    deadline = time.monotonic() + 1.0  # four steps of a logits function take far less
    late = batcher.submit(ids, max_tokens=40, control=StepControl(deadline=deadline))
    queued = batcher.submit(ids, max_tokens=40, control=StepControl(deadline=time.monotonic() - 1))
    seen: list[int] = []
    stepped = batcher.submit(
        list(b"other"),
        max_tokens=40,
        control=StepControl(on_step=lambda s: seen.append(s.token_id) or len(seen) == 3),
    )
    for _ in range(4):
        batcher.step()
    flag.set()
    time.sleep(max(0.0, deadline - time.monotonic()) + 0.01)
    batcher.run_until_idle()
    full = generate(MODEL, ids, max_tokens=40)
    for handle, reason in ((cancelled, "cancelled"), (late, "timeout")):
        result = handle.result()
        assert result.finish_reason == reason
        assert 0 < len(result.token_ids) < 40
        assert full.token_ids[: len(result.token_ids)] == result.token_ids
        assert full.text.startswith(result.text)
        assert result.value is None
    q = queued.result()
    assert (q.finish_reason, q.text, q.token_ids) == ("timeout", "", ())
    s = stepped.result()
    assert s.finish_reason == "cancelled"
    assert list(s.token_ids) == seen
    assert len(seen) == 3
    assert all(decoder.length(slot) == 0 for slot in range(2))


def test_prompt_cache_keeps_finished_prompts_and_changes_no_output() -> None:
    """A finished request's slot keeps its sequence: the same prompt again evaluates one
    token, a prompt sharing a start evaluates the rest, and every output equals generate's."""
    system = list(b"You are a careful assistant. Answer in the format asked. ")
    reqs = [{**r, "ids": system + r["ids"]} for r in _requests()[:6]]
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    batcher = ContinuousBatcher(decoder, prompt_cache=True, share_prefix=16)

    def run(req: dict) -> GenerationResult:
        handle = batcher.submit(
            req["ids"], compiled=req["compiled"], max_tokens=req["max_tokens"], stop=req["stop"]
        )
        return handle.result()

    for req in reqs:  # one at a time: two slots keep the last two sequences
        _same(run(req), _alone(req))
    first = batcher.prompt_tokens_evaluated
    assert first == len(reqs[0]["ids"]) + sum(len(r["ids"]) - len(system) - 7 for r in reqs[1:])
    evaluated = batcher.prompt_tokens_evaluated
    _same(run(reqs[5]), _alone(reqs[5]))  # kept whole: one token evaluated, for the logits
    assert batcher.prompt_tokens_evaluated - evaluated == 1
    evaluated = batcher.prompt_tokens_evaluated
    _same(run(reqs[0]), _alone(reqs[0]))  # evicted: only the shared start is kept
    assert batcher.prompt_tokens_evaluated - evaluated == len(reqs[0]["ids"]) - len(system) - 7
    # several at once, and the slots' sequences are what they hold
    handles = [
        batcher.submit(r["ids"], compiled=r["compiled"], max_tokens=r["max_tokens"], stop=r["stop"])
        for r in reqs
    ]
    batcher.run_until_idle()
    for req, handle in zip(reqs, handles):
        _same(handle.result(), _alone(req))
    for s in range(2):
        seq = decoder.sequence(s)
        assert len(seq) == decoder.length(s) > 0
        assert any(seq[: len(r["ids"])] == r["ids"] for r in reqs)
    # off: every slot released
    plain = CallableBatchedDecoder(MODEL, n_slots=2)
    ContinuousBatcher(plain).submit(reqs[0]["ids"], max_tokens=2).result()
    assert plain.length(0) == plain.length(1) == 0
    with pytest.raises(ConfigurationError, match="prompt_cache"):
        ContinuousBatcher(plain, prompt_cache=1)  # type: ignore[arg-type]


def test_truncate_checks() -> None:
    decoder = CallableBatchedDecoder(MODEL, n_slots=2)
    decoder.decode([(0, [1, 2, 3, 4])])
    decoder.truncate(0, 2)
    assert decoder.sequence(0) == [1, 2]
    assert decoder.length(0) == 2
    assert np.array_equal(decoder.decode([(0, [9])])[0], logits_fn([1, 2, 9]))
    for n in (0, 4, True):
        with pytest.raises(ConfigurationError, match="cannot keep"):
            decoder.truncate(0, n)  # type: ignore[arg-type]
