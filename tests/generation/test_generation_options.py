"""``GenerationOptions`` (one validated options object), ``StepControl`` (cancel / deadline /
on-step in the decoding loop), ``logprobs`` from the loop's own distribution, and the readable
``result.timings``.

Oracles: the logprobs are checked against an independent replay (a second matcher driven
through a model proxy, as the server once did, and a brute-force log-softmax over the
allowed set of a fresh matcher); cancellation and deadlines are checked by counting model calls.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import pickle
import threading
import time
from typing import Any

import numpy as np
import pytest

import formcast
from formcast import ConfigurationError, GrammarMatcher, OptionError
from formcast.generation import (
    ConditionedSampler,
    GenerationOptions,
    GenerationResult,
    GenerationTimings,
    Step,
    StepControl,
    TokenLogprob,
    api,
    generate,
    stream,
)
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

EOS = 256


def byte_vocab(extra: tuple[bytes, ...] = ()) -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", *extra]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes-opts")


def noise_model(vocab: Vocabulary, calls: list[list[int]] | None = None, seed: int = 0) -> Any:
    """Logits that depend on the whole sequence (a hash of it seeds them): deterministic."""

    def fn(seq: list[int]) -> np.ndarray:
        if calls is not None:
            calls.append(list(seq))
        rng = np.random.default_rng([seed, *seq])
        return rng.normal(0.0, 2.0, vocab.vocab_size)

    return CallableModel(fn, vocab)


# -- the options object ---------------------------------------------------------------------------
def test_the_public_signature_is_the_options_fields_with_their_defaults() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(GenerationOptions)}
    for fn in (generate, stream):
        params = inspect.signature(fn).parameters
        keywords = {
            n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        assert keywords.pop("options") is None
        assert keywords == fields, fn.__name__
    assert formcast.GenerationOptions is GenerationOptions
    assert formcast.StepControl is StepControl


BAD = [
    ("max_tokens", -1),
    ("max_tokens", 2.5),
    ("max_tokens", True),
    ("temperature", -0.5),
    ("temperature", math.nan),
    ("top_k", -3),
    ("top_p", 0.0),
    ("top_p", 1.5),
    ("seed", "7"),
    ("seed", 1.0),
    ("stop", ""),
    ("stop", ["ok", 3]),
    ("chat", "yes"),
    ("system", 3),
    ("dialect", "pcre"),
    ("grammar_syntax", "ebnf"),
    ("sampling", "beam"),
    ("canonical", 1),
    ("token_healing", "no"),
    ("reasoning", "think"),
    ("reasoning", {"end": "x"}),
    ("logprobs", 21),
    ("logprobs", -1),
    ("timeout_s", 0),
    ("timeout_s", math.inf),
    ("control", object()),
    ("compiled", "not compiled"),
    ("compiler", "not a compiler"),
    ("regex", 5),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=lambda x: repr(x))
def test_a_bad_option_names_itself_and_its_value(name: str, value: Any) -> None:
    with pytest.raises(OptionError) as info:
        GenerationOptions(**{name: value})
    assert info.value.option == name
    assert info.value.value is value
    assert name in str(info.value)
    assert isinstance(info.value, ConfigurationError)  # existing except clauses still catch it
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.option, str(again)) == (name, str(info.value))


def test_a_bad_option_fails_before_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import formcast.model.loading

    loads: list[Any] = []
    monkeypatch.setattr(formcast.model.loading, "load_model", lambda *a, **k: loads.append(a))
    for bad in ({"max_tokens": -1}, {"seed": "x"}, {"top_p": 2.0}, {"sampling": "exact"}):
        with pytest.raises(OptionError):
            generate("smollm2", "hi", **bad)  # exact: temperature 0 is refused
    with pytest.raises(OptionError, match="stream"):
        stream("smollm2", "hi", sampling="exact", temperature=1.0)
    assert loads == []


def test_several_constraints_are_refused_naming_them() -> None:
    with pytest.raises(OptionError, match="schema, regex") as info:
        GenerationOptions(schema={"type": "integer"}, regex="[0-9]+")
    assert info.value.option == "regex"
    cg = formcast.GrammarCompiler(byte_vocab()).compile_regex("a")
    with pytest.raises(OptionError, match="compiled"):
        GenerationOptions(compiled=cg, regex="a")


def test_options_are_normalized_frozen_and_replaceable() -> None:
    o = GenerationOptions(stop="END", reasoning=True, temperature=np.float32(0.5))
    assert o.stop == ("END",)
    assert o.stops == ("END",)
    assert isinstance(o.reasoning, formcast.ReasoningOptions)
    assert type(o.temperature) is float
    assert o.params.temperature == 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.max_tokens = 3  # type: ignore[misc]
    p = o.replace(max_tokens=3)
    assert (p.max_tokens, o.max_tokens) == (3, 256)
    with pytest.raises(OptionError, match="unknown generation option"):
        o.replace(max_token=3)
    with pytest.raises(OptionError, match="max_tokens"):
        o.replace(max_tokens=-2)


def test_options_and_keywords_give_the_same_generation() -> None:
    vocab = byte_vocab()
    model = noise_model(vocab)
    opts = GenerationOptions(regex="[a-z]{3,8}", temperature=1.0, seed=3, max_tokens=12)
    a = generate(model, [65], options=opts)
    b = generate(model, [65], regex="[a-z]{3,8}", temperature=1.0, seed=3, max_tokens=12)
    assert a.token_ids == b.token_ids
    assert a.finish_reason == b.finish_reason
    c = generate(model, [65], options=opts, seed=4)  # keywords override the object's fields
    d = generate(model, [65], options=opts.replace(seed=4))
    assert c.token_ids == d.token_ids
    with pytest.raises(OptionError, match="GenerationOptions"):
        generate(model, [65], options={"seed": 1})  # type: ignore[arg-type]


def test_options_are_validated_once_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = byte_vocab()
    model = noise_model(vocab)
    checks: list[int] = []
    original = GenerationOptions.__post_init__

    def counting(self: GenerationOptions) -> None:
        checks.append(1)
        original(self)

    monkeypatch.setattr(GenerationOptions, "__post_init__", counting)
    generate(model, [65], regex="ab|cd", max_tokens=4)
    assert len(checks) == 1
    checks.clear()
    list(stream(model, [65], regex="ab|cd", max_tokens=4))
    assert len(checks) == 1
    checks.clear()
    generate(model, [65], regex="ab|cd", max_tokens=4, sampling="exact", temperature=1.0)
    assert len(checks) == 1
    resolved: list[Any] = []  # the model is resolved once as well

    orig_resolve = api._resolve_model

    def count_resolve(m: Any) -> Any:
        resolved.append(m)
        return orig_resolve(m)

    monkeypatch.setattr(api, "_resolve_model", count_resolve)
    generate(model, [65], regex="ab|cd", max_tokens=4, sampling="exact", temperature=1.0)
    assert len(resolved) == 1


def test_conditioned_sampler_takes_the_same_options() -> None:
    vocab = byte_vocab()
    model = noise_model(vocab)
    opts = GenerationOptions(regex="yes|no", sampling="exact", temperature=1.0, max_tokens=4)
    sampler = ConditionedSampler.from_options(model, [65], opts)
    assert sampler.method == "exact"
    assert sampler.options is opts
    assert {r.text for r in sampler.sample(20, seed=0)} <= {"yes", "no"}
    with pytest.raises(OptionError, match="stop") as info:
        ConditionedSampler.from_options(model, [65], GenerationOptions(regex="a", stop="x"))
    assert info.value.option == "stop"
    with pytest.raises(OptionError, match="top_k"):
        GenerationOptions(regex="a", sampling="aligned", temperature=1.0, top_k=3)


def test_the_context_error_is_typed() -> None:
    vocab = byte_vocab()
    model = CallableModel(lambda s: np.zeros(vocab.vocab_size), vocab, max_context=8)
    with pytest.raises(formcast.ContextLengthError) as info:
        generate(model, [65, 66, 67], max_tokens=6)
    assert (info.value.prompt_tokens, info.value.max_tokens, info.value.context) == (3, 6, 8)


# -- step control ---------------------------------------------------------------------------------
def test_a_cancel_flag_stops_the_loop_before_the_next_model_call() -> None:
    vocab = byte_vocab()
    calls: list[list[int]] = []
    model = noise_model(vocab, calls)
    cancel = threading.Event()
    seen: list[Step] = []

    def on_step(step: Step) -> None:
        seen.append(step)
        if step.index == 2:
            cancel.set()  # another thread would do the same

    control = StepControl(cancel=cancel, on_step=on_step)
    result = generate(model, [65], regex="[a-z]{20}", max_tokens=30, control=control)
    assert result.finish_reason == "cancelled"
    assert len(result.token_ids) == 3
    assert [s.index for s in seen] == [0, 1, 2]
    assert [s.token_id for s in seen] == list(result.token_ids)
    assert len(calls) == 3  # the prefill and two steps: none after the flag was set
    assert result.value is None
    assert result.text == vocab.decode(result.token_ids).decode()


def test_a_cancel_flag_set_from_another_thread_stops_the_loop() -> None:
    vocab = byte_vocab()
    calls: list[int] = []
    cancel = threading.Event()

    def slow(seq: list[int]) -> np.ndarray:
        calls.append(len(seq))
        time.sleep(0.01)
        return np.zeros(vocab.vocab_size)

    timer = threading.Timer(0.1, cancel.set)
    timer.start()
    try:
        result = generate(CallableModel(slow, vocab), [65], regex="[a-z]{500}", max_tokens=600,
                          control=StepControl(cancel=cancel))
    finally:
        timer.cancel()
    assert result.finish_reason == "cancelled"
    n = len(calls)
    assert 1 <= n < 100
    assert len(result.token_ids) in (n - 1, n)  # at most the token chosen before the check
    time.sleep(0.05)
    assert len(calls) == n  # nothing runs after the call returned


def test_on_step_returning_true_cancels_and_sees_forced_tokens() -> None:
    vocab = byte_vocab()
    model = noise_model(vocab)
    seen: list[Step] = []
    result = generate(
        model, [65], regex="abc[a-z]+", max_tokens=30,
        control=StepControl(on_step=lambda s: seen.append(s) or s.index == 4),
    )
    assert result.finish_reason == "cancelled"
    assert len(result.token_ids) == 5
    assert [s.forced for s in seen[:3]] == [True, True, True]  # "abc" is forced
    assert not any(s.forced for s in seen[3:])


def test_a_past_deadline_ends_before_the_prompt_is_read() -> None:
    vocab = byte_vocab()
    calls: list[list[int]] = []
    model = noise_model(vocab, calls)
    control = StepControl(deadline=time.monotonic() - 1.0)
    items = list(stream(model, [65], regex="[a-z]+", control=control, logprobs=2))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    assert items[:-1] == []
    assert (result.finish_reason, result.token_ids, result.logprobs) == ("timeout", (), ())
    assert calls == []


def test_timeout_s_stops_a_slow_model() -> None:
    vocab = byte_vocab()
    calls: list[int] = []

    def slow(seq: list[int]) -> np.ndarray:
        calls.append(len(seq))
        time.sleep(0.02)
        return np.zeros(vocab.vocab_size)

    model = CallableModel(slow, vocab)
    t0 = time.monotonic()
    result = generate(model, [65], regex="[a-z]{200}", max_tokens=300, timeout_s=0.15)
    assert result.finish_reason == "timeout"
    assert time.monotonic() - t0 < 1.0
    assert 1 <= len(calls) < 20
    assert 0 < len(result.token_ids) < 20


def test_step_control_checks_its_fields() -> None:
    with pytest.raises(OptionError, match="is_set"):
        StepControl(cancel=object())  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="deadline"):
        StepControl(deadline=math.nan)
    with pytest.raises(OptionError, match="callable"):
        StepControl(on_step=3)  # type: ignore[arg-type]
    c = StepControl(deadline=10.0).with_deadline(5.0)
    assert c.deadline == 5.0


# -- logprobs -------------------------------------------------------------------------------------
def brute_logprobs(model_fn: Any, cg: Any, prompt: list[int], tokens: tuple[int, ...], k: int
                   ) -> list[TokenLogprob]:
    """Replay with a fresh matcher: at each step, the allowed set, the logits of the whole
    sequence, a log-softmax over the allowed ids (forced: 0)."""
    matcher = GrammarMatcher(cg) if cg is not None else None
    out = []
    for i, tok in enumerate(tokens):
        logits = np.asarray(model_fn(prompt + list(tokens[:i])), dtype=np.float64)
        allowed = (
            np.arange(logits.size) if matcher is None else matcher.allowed_token_ids()
        )
        if matcher is not None and allowed.size == 1:
            out.append(TokenLogprob(tok, 0.0, ((tok, 0.0),)[:k]))
        else:
            sub = logits[allowed]
            z = sub.max() + np.log(np.exp(sub - sub.max()).sum())
            order = np.argsort(-(sub - z), kind="stable")[:k]
            top = tuple((int(allowed[j]), float(sub[j] - z)) for j in order)
            out.append(TokenLogprob(tok, float(logits[tok] - z), top))
        if matcher is not None:
            assert matcher.accept_token(tok)
    return out


def close(a: list[TokenLogprob], b: list[TokenLogprob]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.token_id != y.token_id or not math.isclose(x.logprob, y.logprob, abs_tol=1e-9):
            return False
        if [t for t, _ in x.top] != [t for t, _ in y.top]:
            return False
        if not all(math.isclose(p, q, abs_tol=1e-9) for (_, p), (_, q) in zip(x.top, y.top,
                                                                                 strict=True)):
            return False
    return True


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize(
    "constraint",
    [None, "abc[a-z]{2,6}(x|yz)", '\\{"k": (true|false|[0-9]{1,4})\\}'],
    ids=["free", "forced-then-free", "json-ish"],
)
def test_logprobs_match_a_replay_with_a_fresh_matcher(
    constraint: str | None, temperature: float
) -> None:
    vocab = byte_vocab((b"ab", b"abc", b'{"', b'": ', b"true"))
    fn = noise_model(vocab, seed=11)._fn
    model = CallableModel(fn, vocab)
    result = generate(model, [65], regex=constraint, max_tokens=12, temperature=temperature,
                      seed=5, logprobs=3)
    assert result.logprobs is not None
    assert len(result.logprobs) == len(result.token_ids)  # no entry for the stop token
    cg = None if constraint is None else formcast.GrammarCompiler(vocab).compile_regex(constraint)
    assert close(list(result.logprobs), brute_logprobs(fn, cg, [65], result.token_ids, 3))
    assert all(e.logprob <= 0.0 for e in result.logprobs)
    without = generate(model, [65], regex=constraint, max_tokens=12, temperature=temperature,
                       seed=5)
    assert without.logprobs is None
    assert without.token_ids == result.token_ids


class _ReplayRecorder:
    """The independent oracle (what the server did before the loop reported logprobs): a
    model proxy's view of each step's logits, replaying the constraint on a second matcher to
    know what was allowed, and a log-softmax over the allowed tokens (0 for a forced one)."""

    def __init__(self, compiled: formcast.CompiledGrammar, vocab: Vocabulary, top: int) -> None:
        self.matcher = formcast.GrammarMatcher(compiled)
        self.bitmask = formcast.allocate_token_bitmask(1, vocab.vocab_size)
        self.vocab_size = vocab.vocab_size
        self.top = top
        self.logits: np.ndarray | None = None
        self.entries: list[tuple[int, float, tuple[tuple[int, float], ...]]] = []

    def on_logits(self, logits: np.ndarray) -> None:
        self.logits = np.array(logits, dtype=np.float64, copy=True)

    def consume(self, tokens: list[int]) -> None:
        for k, tok in enumerate(tokens):
            self.matcher.fill_next_token_bitmask(self.bitmask)
            bits = np.unpackbits(self.bitmask[0].view(np.uint8), bitorder="little")
            allowed = np.flatnonzero(bits[: self.vocab_size])
            logits = self.logits
            if k == 0 and logits is not None and allowed.size > 1:
                sub = logits[allowed]
                finite = np.isfinite(sub)
                peak = sub[finite].max()
                logz = peak + np.log(np.exp(sub[finite] - peak).sum())
                lp = sub - logz
                order = np.argsort(-lp, kind="stable")[: self.top]
                top = tuple((int(allowed[j]), float(lp[j])) for j in order)
                self.entries.append((int(tok), float(logits[tok] - logz), top))
            else:  # forced: the only token allowed
                self.entries.append((int(tok), 0.0, ((int(tok), 0.0),)[: self.top]))
            self.matcher.accept_token(int(tok))
            if k == 0:
                self.logits = None


def test_logprobs_agree_with_a_replay_behind_a_model_proxy() -> None:
    """A second matcher behind a model proxy replays the constraint; the loop's own entries
    must be the same numbers."""
    vocab = byte_vocab((b"ab", b"abc", b'{"', b'": ', b"true"))
    model = noise_model(vocab, seed=2)
    cg = formcast.GrammarCompiler(vocab).compile_json_schema(
        {"type": "object", "properties": {"k": {"enum": ["red", "green", "blue"]},
                                          "n": {"type": "integer"}},
         "required": ["k", "n"], "additionalProperties": False}
    )
    recorder = _ReplayRecorder(cg, vocab, 4)

    class Proxy:
        vocab = model.vocab
        name = model.name
        chat_template = None
        max_context = model.max_context

        def tokenize(self, text: str) -> list[int]:
            return model.tokenize(text)

        def start(self, prompt_ids: list[int]) -> np.ndarray:
            logits = model.start(prompt_ids)
            recorder.on_logits(logits)
            return logits

        def step(self, token_ids: list[int]) -> np.ndarray:
            recorder.consume(list(token_ids))
            logits = model.step(token_ids)
            recorder.on_logits(logits)
            return logits

    mine = generate(model, [65], compiled=cg, max_tokens=40, temperature=0.9, seed=7,
                    logprobs=4)
    theirs = generate(Proxy(), [65], compiled=cg, max_tokens=40, temperature=0.9, seed=7)
    assert mine.token_ids == theirs.token_ids
    assert mine.finish_reason == "completed"
    recorder.consume(theirs.token_ids[len(recorder.entries):])
    assert mine.logprobs is not None
    assert [(e.token_id, e.logprob, e.top) for e in mine.logprobs] == recorder.entries


def test_logprobs_zero_lists_no_alternatives() -> None:
    vocab = byte_vocab()
    result = generate(noise_model(vocab), [65], regex="[a-c]{4}", logprobs=0)
    assert result.logprobs is not None
    assert len(result.logprobs) == 4
    assert all(e.top == () for e in result.logprobs)


# -- timings --------------------------------------------------------------------------------------
def test_timings_print_a_short_summary_and_keep_the_data() -> None:
    vocab = byte_vocab()
    result = generate(noise_model(vocab), [65], regex="[a-z]{120}", max_tokens=200)
    t = result.timings
    # 121 masks (the last one allows only the stop token), 119 model calls after the prefill
    assert len(t.mask_step_s) == 121
    assert len(t.decode_step_s) == 119
    text, line = str(t), repr(t)
    assert len(line) < 400, line
    assert "\n" not in line
    assert line.startswith("GenerationTimings(")
    for word in ("mask", "decode", "sample", "p50", "p99", "max", "120 output tokens",
                 "120 model calls"):
        assert word in text, word
    assert repr(result).count("GenerationTimings(") == 1
    assert len(repr(result)) < 2000  # was ~6 KB of per-step tuples
    steps = t.mask_steps
    assert steps.count == 121
    assert steps.max_s == max(t.mask_step_s)
    assert math.isclose(steps.total_s, t.mask_s)
    assert str(GenerationTimings()).count("none") == 3
