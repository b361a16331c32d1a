"""``fast_forward=True``: forced bytes appended in the tokenizer's spelling, without sampling.

Oracles: the output stays in the language (a fresh matcher accepts every token, the text
fullmatches the pattern / validates against the schema) for random logits, random schemas and
random vocabularies; the runs are exactly the reference encoder's spelling of the forced text;
the run's end is held back where a longer token could merge it with what follows; the model is
called less often than with plain masking (counted by :class:`CallableModel`); stop strings,
``on_step``, ``max_tokens`` and ``canonical=True`` behave as without it; what it cannot honour
(``logprobs``, ``sampling="exact"``, no constraint, a model without ``encode_bytes``) is refused
by name.  The reference tokenizer of the toy worlds is greedy longest match over the vocabulary.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jsonschema
from formcast import ConfigurationError, GrammarMatcher
from formcast.errors import OptionError
from formcast.generation import (
    GenerationOptions,
    Step,
    StepControl,
    compile_constraint,
    generate,
    stream,
)
from formcast.generation.fast_forward import FastForward, fast_forward_for
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

try:
    from toy import EOS_ID, TOY_PATTERN, toy_vocabulary
except ImportError:  # tests/ imported as a package
    from tests.toy import (  # type: ignore[import-not-found,no-redef]
        EOS_ID,
        TOY_PATTERN,
        toy_vocabulary,
    )


def longest_match(vocab: Vocabulary) -> Callable[[bytes], list[int] | None]:
    """A deterministic tokenizer: greedy longest match over the text tokens (``None`` when
    some byte has no token)."""
    table = {
        vocab.tokens[i]: i for i in range(len(vocab.tokens)) if vocab.is_text_token(i)
    }
    longest = max(len(t) for t in table)

    def encode(data: bytes) -> list[int] | None:
        out: list[int] = []
        i = 0
        while i < len(data):
            for n in range(min(longest, len(data) - i), 0, -1):
                tok = table.get(data[i : i + n])
                if tok is not None:
                    out.append(tok)
                    i += n
                    break
            else:
                return None
        return out

    return encode


def noise_model(vocab: Vocabulary, seed: int, *, encode: bool = True) -> CallableModel:
    """Logits that are a seeded function of the whole sequence (the same prefix gives the same
    logits, whichever run asks)."""

    def fn(seq: list[int]) -> np.ndarray:
        rng = np.random.default_rng([seed, len(seq), *seq[-6:]])
        return rng.normal(0.0, 3.0, vocab.vocab_size)

    return CallableModel(fn, vocab, encode_bytes=longest_match(vocab) if encode else None)


def calls_of(result: Any) -> int:
    """Model calls of a generation: the prefill plus one per decode step."""
    return 1 + len(result.timings.decode_step_s)


def assert_valid_tokens(model: CallableModel, compiled: Any, result: Any) -> None:
    m = GrammarMatcher(compiled)
    for t in result.token_ids:
        assert m.accept_token(t), (result.token_ids, t)
    if result.finish_reason == "completed":
        assert m.is_accepting()


# -- the toy world of seed 002 -----------------------------------------------------------------
def test_toy_outputs_stay_in_the_language_with_fewer_model_calls() -> None:
    vocab = toy_vocabulary()
    compiled, _ = compile_constraint(vocab, regex=TOY_PATTERN)
    calls = {False: 0, True: 0}
    completed = 0
    for seed in range(40):
        for ff_on in (False, True):
            model = noise_model(vocab, seed)
            result = generate(model, [EOS_ID], compiled=compiled, temperature=1.0, seed=seed,
                              max_tokens=40, fast_forward=ff_on)  # fmt: skip
            assert_valid_tokens(model, compiled, result)
            assert model.calls == calls_of(result)
            if result.finish_reason == "completed":
                assert re.fullmatch(TOY_PATTERN, result.text)
            calls[ff_on] += model.calls
            if not ff_on:
                continue
            # the document starts with {"name":" and has ","age": in the middle: both forced,
            # spelled {" name ":" and ... age ": by the reference tokenizer
            assert [vocab.tokens[t] for t in result.token_ids[:3]] == [b'{"', b"name", b'":"']
            if result.finish_reason == "completed":
                completed += 1
                assert b'","age":' in result.raw
                assert result.timings.forced_tokens >= 5
    assert completed >= 20
    # plain masking asks the model for the spelling of forced text; fast-forward does not
    assert calls[True] < 0.9 * calls[False], calls


def test_toy_greedy_run_is_the_tokenizers_spelling_and_saves_calls() -> None:
    vocab = toy_vocabulary()
    encode = longest_match(vocab)
    text = b'{"name":"a ge","age":36}'  # every byte also a token: any spelling works

    def fn(seq: list[int]) -> np.ndarray:  # prefers the next byte of `text` in any spelling
        done = vocab.decode(seq[1:])
        logits = np.full(vocab.vocab_size, -5.0)
        rest = text[len(done) :]
        if not rest:
            logits[EOS_ID] = 5.0
        for i, tok in enumerate(vocab.tokens):
            if i != EOS_ID and rest.startswith(tok):
                logits[i] = 5.0 - 0.1 * len(tok)  # shortest first: as non-canonical as it gets
        return logits

    plain_model = CallableModel(fn, vocab, encode_bytes=encode)
    ff_model = CallableModel(fn, vocab, encode_bytes=encode)
    plain = generate(plain_model, [EOS_ID], regex=TOY_PATTERN, max_tokens=40)
    ff = generate(ff_model, [EOS_ID], regex=TOY_PATTERN, max_tokens=40, fast_forward=True)
    assert plain.raw == ff.raw == text
    assert plain.finish_reason == ff.finish_reason == "completed"
    spelled = [vocab.tokens[t] for t in ff.token_ids]
    assert spelled[:3] == [b'{"', b"name", b'":"']  # the forced head, as the tokenizer spells it
    assert b"age" in spelled  # the forced key in the middle as one token too
    assert ff_model.calls < plain_model.calls
    assert ff_model.calls == calls_of(ff)


# -- the right boundary: held back where a longer token could merge ---------------------------
def _key_vocab() -> Vocabulary:
    toks = [bytes([c]) for c in b'{}":,abk'] + [b'{"', b'":', b'"a', b'":"', b'k"']
    return Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)])


def test_run_end_that_a_longer_token_extends_is_held_back() -> None:
    vocab = _key_vocab()
    encode = longest_match(vocab)
    ff = FastForward(vocab, encode)
    compiled, _ = compile_constraint(vocab, regex=r'\{"k":"[ab]+"\}')
    m = GrammarMatcher(compiled)
    assert m.find_jump_forward_bytes() == b'{"k":"'
    assert [vocab.tokens[t] for t in ff.spell(b'{"k":"')] == [b'{"', b'k"', b":", b'"']
    # '"a' starts with the last token '"' and 'a' may follow: '"' is left to the model; ':'
    # stays (no token ':x' continues into '"...')
    run = ff.run(m)
    assert [vocab.tokens[t] for t in run] == [b'{"', b'k"', b":"]
    assert ff.held_back == 1
    assert m.num_accepted_tokens == 0  # the matcher is left as it was


def test_nothing_is_held_back_when_no_token_crosses_the_boundary() -> None:
    vocab = _key_vocab()
    ff = FastForward(vocab, longest_match(vocab))
    compiled, _ = compile_constraint(vocab, regex=r'\{"k":[ab]+\}')
    run = ff.run(GrammarMatcher(compiled))
    assert [vocab.tokens[t] for t in run] == [b'{"', b'k"', b":"]
    assert ff.held_back == 0


def test_left_context_that_merges_with_the_forced_text_is_not_reused() -> None:
    vocab = _key_vocab()
    ff = FastForward(vocab, longest_match(vocab))
    # after '{' the forced '"k' is spelled with the context '{': longest match gives '{"' + 'k'
    # (a token straddles the context's end), so the forced text is spelled alone: '"' 'k'...
    brace = vocab.tokens.index(b"{")
    assert [vocab.tokens[t] for t in ff.spell(b'"k":', [brace])] == [b'"', b'k"', b":"]
    # a context that ends on a token boundary is used as it is
    colon = vocab.tokens.index(b":")
    assert [vocab.tokens[t] for t in ff.spell(b'"a', [colon])] == [b'"a']


def test_a_spelling_that_is_not_the_forced_bytes_is_not_used() -> None:
    vocab = _key_vocab()
    space_prefix = longest_match(vocab)

    def encode(data: bytes) -> list[int] | None:  # a SentencePiece-like dummy prefix
        return space_prefix(b"a" + data)

    ff = FastForward(vocab, encode)
    compiled, _ = compile_constraint(vocab, regex=r'\{"k":[ab]+\}')
    assert ff.run(GrammarMatcher(compiled)) == []


# -- random schemas and random vocabularies ----------------------------------------------------
_JSON_PIECES = [
    b'{"', b'":', b'":"', b'","', b'",', b',"', b'"}', b"}", b"true", b"false",
    b"null", b"name", b"age", b"tags", b"id", b"ok", b"ab", b"12", b'["', b'"]',
]  # fmt: skip


@st.composite
def schemas(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    leaves = [
        {"type": "integer", "minimum": 0, "maximum": 99},
        {"type": "boolean"},
        {"enum": ["ab", "b", "12"]},
        {"type": "string", "pattern": "^[ab]{1,3}$"},
        {"const": "ok"},
        {"type": "null"},
    ]
    if depth < 2 and draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(["name", "age", "tags", "id", "ok"]), min_size=1,
                              max_size=3, unique=True))  # fmt: skip
        props = {n: draw(schemas(depth + 1)) for n in names}
        required = draw(st.lists(st.sampled_from(names), unique=True))
        return {"type": "object", "properties": props, "required": required,
                "additionalProperties": False}  # fmt: skip
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        return {"type": "array", "items": draw(schemas(depth + 1)), "maxItems": 2}
    return draw(st.sampled_from(leaves))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schema=schemas(),
    extra=st.lists(st.sampled_from(_JSON_PIECES), min_size=0, max_size=12, unique=True),
    seed=st.integers(0, 2**16),
)
def test_random_schemas_stay_valid_and_never_cost_more_calls(
    schema: dict[str, Any], extra: list[bytes], seed: int
) -> None:
    toks = [bytes([c]) for c in range(32, 127)] + list(extra)
    vocab = Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)])
    compiled, _ = compile_constraint(vocab, schema=schema)
    encode = longest_match(vocab)
    kw: dict[str, Any] = {"compiled": compiled, "temperature": 1.0, "seed": seed,
                          "max_tokens": 60}  # fmt: skip
    ff_model = noise_model(vocab, seed)
    ff = generate(ff_model, [0], fast_forward=True, **kw)
    assert_valid_tokens(ff_model, compiled, ff)
    assert ff_model.calls == calls_of(ff)
    if ff.finish_reason == "completed":
        jsonschema.validate(json.loads(ff.text), schema)
        assert ff.value == json.loads(ff.text)
    # every run is the reference tokenizer's spelling of its text: re-encoding the output
    # never splits a run token (the runs are maximal-munch pieces of forced text)
    assert vocab.decode(ff.token_ids) == ff.raw
    assert encode(ff.raw) is not None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_greedy_run_text_equals_plain_when_the_model_ignores_spelling(seed: int) -> None:
    """A model whose logits depend on the text only (not its spelling) and that prefers the
    longest token reaches the same text with fast-forward, with at most as many calls."""
    vocab = toy_vocabulary()
    compiled, _ = compile_constraint(vocab, regex=TOY_PATTERN)
    rng = np.random.default_rng(seed)
    scores = rng.normal(0.0, 1.0, size=(64, 256))

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[1:])
        row = scores[len(done) % 64]
        logits = np.array(
            [row[t[0]] + 0.01 * len(t) if t and i != EOS_ID else 0.0
             for i, t in enumerate(vocab.tokens)]
        )  # fmt: skip
        logits[EOS_ID] = row[0]
        return logits

    encode = longest_match(vocab)
    plain_model = CallableModel(fn, vocab, encode_bytes=encode)
    ff_model = CallableModel(fn, vocab, encode_bytes=encode)
    plain = generate(plain_model, [EOS_ID], compiled=compiled, max_tokens=30)
    ff = generate(ff_model, [EOS_ID], compiled=compiled, max_tokens=30, fast_forward=True)
    assert_valid_tokens(ff_model, compiled, ff)
    if plain.finish_reason == ff.finish_reason == "completed":
        assert plain.raw == ff.raw
        assert ff_model.calls <= plain_model.calls


# -- the loop's other features ---------------------------------------------------------------
def test_stop_string_inside_a_run_cuts_the_text() -> None:
    vocab = toy_vocabulary()
    model = noise_model(vocab, 3)
    result = generate(model, [EOS_ID], regex=TOY_PATTERN, stop="name", fast_forward=True)
    assert result.finish_reason == "stop"
    assert result.text == '{"'
    assert model.calls == 1  # the prompt only: the run and the stop needed no model call


def test_on_step_sees_each_run_token_as_forced_and_can_cancel_inside_it() -> None:
    vocab = toy_vocabulary()
    seen: list[Step] = []

    def on_step(step: Step) -> bool:
        seen.append(step)
        return step.index == 1

    result = generate(noise_model(vocab, 1), [EOS_ID], regex=TOY_PATTERN, fast_forward=True,
                      control=StepControl(on_step=on_step))  # fmt: skip
    assert result.finish_reason == "cancelled"
    assert [s.index for s in seen] == [0, 1]
    assert all(s.forced and s.logprob is None for s in seen)
    assert [vocab.tokens[s.token_id] for s in seen] == [b'{"', b"name"]
    assert list(result.token_ids) == [s.token_id for s in seen]


@pytest.mark.parametrize("budget", [0, 1, 2, 3, 5])
def test_max_tokens_bounds_a_run(budget: int) -> None:
    vocab = toy_vocabulary()
    result = generate(noise_model(vocab, 0), [EOS_ID], regex=TOY_PATTERN, max_tokens=budget,
                      fast_forward=True)  # fmt: skip
    assert result.finish_reason == "max_tokens"
    assert len(result.token_ids) == budget


def test_stream_yields_the_text_of_generate() -> None:
    vocab = toy_vocabulary()
    kw: dict[str, Any] = {"regex": TOY_PATTERN, "temperature": 1.0, "seed": 5,
                          "fast_forward": True}  # fmt: skip
    result = generate(noise_model(vocab, 5), [EOS_ID], **kw)
    items = list(stream(noise_model(vocab, 5), [EOS_ID], **kw))
    assert "".join(str(i) for i in items[:-1]) == result.text
    assert items[-1].token_ids == result.token_ids  # type: ignore[union-attr]


def test_canonical_pairs_hold_inside_runs() -> None:
    vocab = toy_vocabulary()
    encode = longest_match(vocab)
    for seed in range(6):
        model = noise_model(vocab, seed)
        result = generate(model, [EOS_ID], regex=TOY_PATTERN, temperature=1.0, seed=seed,
                          fast_forward=True, canonical=True, max_tokens=40)  # fmt: skip
        ids = list(result.token_ids)
        for a, b in itertools.pairwise(ids):
            assert encode(vocab.tokens[a] + vocab.tokens[b]) == [a, b]


def test_runs_are_cached_per_grammar_and_model() -> None:
    vocab = toy_vocabulary()
    model = noise_model(vocab, 0)
    compiled, _ = compile_constraint(vocab, regex=TOY_PATTERN)
    generate(model, [EOS_ID], compiled=compiled, fast_forward=True, max_tokens=40)
    ff = fast_forward_for(model)
    calls, runs = ff.encode_calls, ff.runs
    again = generate(model, [EOS_ID], compiled=compiled, fast_forward=True, max_tokens=40)
    assert ff.runs > runs
    assert ff.encode_calls == calls  # every run of the second request came from the cache
    assert again.finish_reason in ("completed", "max_tokens")


# -- refusals -----------------------------------------------------------------------------------
def test_options_refuse_what_fast_forward_cannot_honour() -> None:
    with pytest.raises(OptionError, match="fast_forward must be a bool"):
        GenerationOptions(regex="a", fast_forward=1)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="logprobs") as err:
        GenerationOptions(regex="a", fast_forward=True, logprobs=2)
    assert err.value.option == "fast_forward"
    with pytest.raises(OptionError, match="sampling='mask' only") as err:
        GenerationOptions(regex="a", fast_forward=True, sampling="exact", temperature=1.0)
    assert err.value.option == "fast_forward"
    assert GenerationOptions(regex="a").fast_forward is False


def test_generate_refuses_no_constraint_and_a_model_without_encode_bytes() -> None:
    vocab = toy_vocabulary()
    with pytest.raises(OptionError, match="needs a constraint"):
        generate(noise_model(vocab, 0), [EOS_ID], fast_forward=True)
    with pytest.raises(ConfigurationError, match="fast_forward=True needs the model's raw"):
        generate(noise_model(vocab, 0, encode=False), [EOS_ID], regex="a", fast_forward=True)


def test_fast_forward_arguments_are_checked() -> None:
    vocab = toy_vocabulary()
    for bad in ({"lookback": 0}, {"context_tokens": -1}, {"max_runs": True}):
        with pytest.raises(ConfigurationError):
            FastForward(vocab, longest_match(vocab), **bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="callable"):
        FastForward(vocab, None)  # type: ignore[arg-type]


# -- the fidelity benchmark's variant -------------------------------------------------------
def _fidelity_module() -> Any:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity.py"
    spec = importlib.util.spec_from_file_location("fidelity_bench_ff", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity_bench_ff"] = module
    spec.loader.exec_module(module)
    return module


def test_fidelity_benchmark_runs_fast_forward_through_its_call_counter() -> None:
    fid = _fidelity_module()
    vocab = toy_vocabulary()
    model = noise_model(vocab, 7)
    constraint = {"regex": TOY_PATTERN}
    runs = {
        method: fid.run_method(method, model, [EOS_ID], constraint, 30, seed=0, max_tokens=40)
        for method in ("mask", fid.FAST_FORWARD)
    }
    ff = runs[fid.FAST_FORWARD]
    assert ff.error is None
    assert ff.method == "mask+ff"
    assert len(ff.outcomes) == 30
    assert all(o == fid.UNFINISHED or re.fullmatch(TOY_PATTERN, o) for o in ff.outcomes)
    assert ff.calls < runs["mask"].calls  # counted by the benchmark's own proxy
    assert ff.noncanonical == ff.noncanonical  # a number: the proxy forwards encode_bytes
