"""``fast_forward=True`` in the continuous batcher: each request decodes exactly as
``generate(fast_forward=True)`` with the same arguments, with fewer model calls than plain
masking.

Oracles: ``generate`` run alone on the same :class:`CallableModel` (logits a seeded function of
the sequence: a batched row sees what a lone call sees) -- same tokens, text, finish reason,
forced-token count, and model calls per request (one fewer: the forced start is evaluated
with the prompt); a fresh matcher accepts every output token
and completed texts fullmatch the pattern; the batcher's decoder is fed fewer calls and fewer
rows than with plain masking.  What fast-forward cannot honour is refused by name.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from formcast import ConfigurationError, GrammarMatcher
from formcast.errors import OptionError
from formcast.generation import GenerationResult, compile_constraint, generate
from formcast.generation.batching import ContinuousBatcher
from formcast.model.callable import CallableModel
from formcast.model.callable_batched import CallableBatchedDecoder
from formcast.sampling import SamplingParams
from formcast.vocab.vocabulary import Vocabulary

try:
    from test_fast_forward import longest_match

    from toy import EOS_ID, TOY_PATTERN, toy_vocabulary
except ImportError:  # tests/ imported as a package
    from tests.generation.test_fast_forward import longest_match  # type: ignore[no-redef]
    from tests.toy import (  # type: ignore[import-not-found,no-redef]
        EOS_ID,
        TOY_PATTERN,
        toy_vocabulary,
    )


def model_of(vocab: Vocabulary) -> CallableModel:
    """Logits a seeded function of the whole sequence, with a tokenizer (greedy longest
    match) for fast-forward's spelling."""

    def fn(seq: list[int]) -> np.ndarray:
        rng = np.random.default_rng([len(seq), *seq[-6:]])
        return rng.normal(0.0, 3.0, vocab.vocab_size)

    return CallableModel(fn, vocab, encode_bytes=longest_match(vocab))


def calls_of(result: GenerationResult) -> int:
    return 1 + len(result.timings.decode_step_s)


def _run(ff: bool, n: int = 24) -> tuple[list[GenerationResult], CallableBatchedDecoder, Any]:
    vocab = toy_vocabulary()
    model = model_of(vocab)
    compiled, _ = compile_constraint(vocab, regex=TOY_PATTERN)
    decoder = CallableBatchedDecoder(model, n_slots=4)
    batcher = ContinuousBatcher(decoder)
    handles = []
    for i in range(n):
        temp = 0.0 if i % 4 == 0 else 1.0
        handles.append(
            batcher.submit(
                [EOS_ID, i % 7],
                compiled=compiled,
                params=SamplingParams(temperature=temp),
                seed=i,
                max_tokens=40,
                fast_forward=ff,
            )
        )
        if i % 3 == 0:
            batcher.step()  # requests join at different steps
    batcher.run_until_idle()
    return [h.result() for h in handles], decoder, (model, compiled)


def test_each_request_decodes_as_generate_with_fewer_model_calls() -> None:
    results, decoder, (model, compiled) = _run(True)
    plain, plain_decoder, _ = _run(False)
    completed = 0
    for i, res in enumerate(results):
        alone = generate(
            model,
            [EOS_ID, i % 7],
            compiled=compiled,
            temperature=0.0 if i % 4 == 0 else 1.0,
            seed=i,
            max_tokens=40,
            fast_forward=True,
        )
        assert (res.token_ids, res.text, res.finish_reason) == (
            alone.token_ids,
            alone.text,
            alone.finish_reason,
        )
        assert res.timings.forced_tokens == alone.timings.forced_tokens
        # the pattern's forced start ``{"name":"`` is the batcher's lead: evaluated with the
        # prompt in the first call, where generate() spends a call of its own on it
        assert calls_of(res) == calls_of(alone) - 1
        m = GrammarMatcher(compiled)
        assert all(m.accept_token(t) for t in res.token_ids)
        if res.finish_reason == "completed":
            completed += 1
            assert re.fullmatch(TOY_PATTERN, res.text)
    assert completed >= 12
    # fewer model calls per request, and fewer rows fed to the decoder over all
    calls, plain_calls = sum(map(calls_of, results)), sum(map(calls_of, plain))
    assert calls < 0.9 * plain_calls, (calls, plain_calls)
    assert sum(decoder.batch_sizes) < sum(plain_decoder.batch_sizes)


def test_fast_forward_is_refused_where_it_cannot_be_honoured() -> None:
    vocab = toy_vocabulary()
    model = model_of(vocab)
    compiled, _ = compile_constraint(vocab, regex=TOY_PATTERN)
    batcher = ContinuousBatcher(CallableBatchedDecoder(model, n_slots=2))
    with pytest.raises(ConfigurationError, match="fast_forward"):
        batcher.submit([EOS_ID], fast_forward=True)  # no constraint
    with pytest.raises(OptionError, match="fast_forward"):
        batcher.submit([EOS_ID], compiled=compiled, logprobs=2, fast_forward=True)
    bare = CallableModel(model._fn, vocab)  # no encode_bytes: no spelling
    with pytest.raises(ConfigurationError, match="encode_bytes"):
        ContinuousBatcher(CallableBatchedDecoder(bare, n_slots=1)).submit(
            [EOS_ID], compiled=compiled, fast_forward=True
        )
