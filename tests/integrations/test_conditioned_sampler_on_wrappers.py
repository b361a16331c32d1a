"""``ConditionedSampler`` (exact, aligned, mask) on the transformers wrapper and on the callable
wrapper around the same network: a tiny random-weight GPT-2 built in memory (one thread; skipped
without torch and transformers).

The stateful wrapper (``TransformersModel``: KV cache, ``start`` re-prefills when a walk
leaves the current sequence) and the stateless one (``CallableModel`` re-reading the sequence)
must give the same exact conditioned distribution, the exact sampler must fit it on both
(chi-square), and every method must return complete, valid outputs through either wrapper.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pytest

from formcast.generation.aligned import exact_conditioned_distribution
from formcast.generation.conditioned import ConditionedSampler
from formcast.generation.inputs import compile_constraint
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

EOS = 256
TOKENS = [bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"ba"]
VOCAB = Vocabulary.from_tokens(TOKENS, stop_token_ids=[EOS], name="bytes+")
REGEX = "(ab|ba)x?"
PROMPT = [ord("Q"), ord(":")]


@pytest.fixture(scope="module")
def wrappers() -> tuple[Any, CallableModel]:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from formcast.model.transformers import TransformersModel

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.GPT2Config(
        vocab_size=VOCAB.vocab_size, n_positions=64, n_embd=32, n_layer=1, n_head=2,
        bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS,
    )  # fmt: skip
    net = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # sharper than random init: a distribution worth conditioning
        net.lm_head.weight.mul_(40.0)
    hf = TransformersModel(net, None, vocab=VOCAB, verify_vocab=False, chat_template=None)

    def logits(ids: list[int]) -> np.ndarray:
        with torch.inference_mode():
            out = net(input_ids=torch.tensor([ids], dtype=torch.long))
        return out.logits[0, -1].double().numpy()  # type: ignore[no-any-return]

    return hf, CallableModel(logits, VOCAB, name="gpt2-callable")


def test_both_wrappers_give_the_same_conditioned_distribution(wrappers: Any) -> None:
    hf, fn = wrappers
    compiled, _ = compile_constraint(VOCAB, regex=REGEX)
    assert compiled is not None
    a = exact_conditioned_distribution(hf, PROMPT, compiled, max_tokens=4)
    b = exact_conditioned_distribution(fn, PROMPT, compiled, max_tokens=4)
    assert set(a.probabilities) == set(b.probabilities)
    assert len(a.probabilities) >= 6
    for k, p in a.probabilities.items():
        assert p == pytest.approx(b.probabilities[k], rel=1e-3, abs=1e-6)
    # the model is far from the constraint: masking is visibly biased here
    assert a.valid_mass < 0.05


@pytest.mark.parametrize("which", [0, 1], ids=["transformers", "callable"])
def test_exact_fits_and_every_method_completes(wrappers: Any, which: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    model = wrappers[which]
    compiled, _ = compile_constraint(VOCAB, regex=REGEX)
    assert compiled is not None
    target = exact_conditioned_distribution(model, PROMPT, compiled, max_tokens=4).probabilities
    for method in ("exact", "aligned", "mask"):
        sampler = ConditionedSampler(model, PROMPT, regex=REGEX, method=method, max_tokens=4)
        results = sampler.sample(600 if method != "mask" else 60, seed=0)
        assert all(r.finish_reason == "completed" for r in results), method
        assert all(re.fullmatch(REGEX, r.text) for r in results), method
        if method == "exact":
            counts = Counter(r.token_ids for r in results)
            keys = sorted(target, key=lambda k: -target[k])
            big = [k for k in keys if 600 * target[k] >= 5]
            obs = [counts[k] for k in big] + [600 - sum(counts[k] for k in big)]
            exp = [600 * target[k] for k in big] + [600 * (1 - sum(target[k] for k in big))]
            if exp[-1] < 1e-9:
                obs, exp = obs[:-1], exp[:-1]
            assert scipy_stats.chisquare(obs, exp).pvalue > 1e-3
            assert sampler.stats.model_calls <= 40  # the trie: one call per new prefix
