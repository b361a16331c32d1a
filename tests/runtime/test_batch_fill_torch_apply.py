"""Torch bitmasks and the one-operation apply.

``apply_token_bitmask_inplace`` masks the whole batch with one vectorized unpack and one masked
write (numpy, torch CPU through numpy, and the torch-op path that CUDA and bfloat16 take); the
oracle is a plain per-token loop over the bits.  ``allocate_token_bitmask(...,
framework="torch")`` gives the ecosystem's CPU ``torch.int32`` tensor, and a matcher fills it in
place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from formcast import (
    ConfigurationError,
    GrammarCompiler,
    GrammarMatcher,
    Vocabulary,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    reset_token_bitmask,
)

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0")


def _oracle(logits: np.ndarray, bitmask: np.ndarray, rows: list[int], width: int) -> np.ndarray:
    """Per token: -inf unless bit ``j % 32`` of word ``j // 32`` of its row is set."""
    out = logits.copy()
    words = bitmask.shape[1]
    for r in rows:
        for j in range(width):
            word = j // 32
            if word >= words or not (int(bitmask[r, word]) >> (j % 32)) & 1:
                out[r, j] = -np.inf
    return out


def _case(seed: int) -> tuple[np.ndarray, np.ndarray, Any, int | None]:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 6))
    vocab = int(rng.integers(1, 150))
    words = (vocab + 31) // 32 - int(rng.integers(0, 2))  # sometimes narrower than the logits
    words = max(words, 1)
    bm = rng.integers(-(2**31), 2**31, size=(rows + int(rng.integers(0, 2)), words))
    bm = bm.astype(np.int32)
    bm[0] = 0 if rng.random() < 0.3 else bm[0]  # an all-refusing row
    logits = rng.standard_normal((rows, vocab)).astype(np.float32)
    indices = None
    if rng.random() < 0.5:
        indices = [int(i) for i in rng.choice(rows, size=int(rng.integers(0, rows + 1)))]
    vocab_size = int(rng.integers(1, vocab + 1)) if rng.random() < 0.3 else None
    return logits, bm, indices, vocab_size


@pytest.mark.parametrize("seed", range(40))
def test_apply_matches_the_per_token_oracle(seed: int) -> None:
    logits, bm, indices, vocab_size = _case(seed)
    rows = list(range(logits.shape[0])) if indices is None else sorted(set(indices))
    width = logits.shape[1] if vocab_size is None else vocab_size
    want = _oracle(logits, bm, rows, width)
    got = logits.copy()
    apply_token_bitmask_inplace(got, bm, vocab_size=vocab_size, indices=indices)
    np.testing.assert_array_equal(got, want)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        # float32/64 go through numpy on the tensor's memory; bfloat16 takes the torch-op path
        # (the one CUDA logits take)
        t = torch.from_numpy(logits.copy()).to(dtype)
        reference = _oracle(t.float().numpy(), bm, rows, width)
        for mask in (bm, torch.from_numpy(bm.copy())):
            t2 = t.clone()
            apply_token_bitmask_inplace(t2, mask, vocab_size=vocab_size, indices=indices)
            np.testing.assert_array_equal(t2.float().numpy(), reference, err_msg=str(dtype))


def test_apply_one_row_and_a_numpy_view_of_a_torch_bitmask() -> None:
    rng = np.random.default_rng(5)
    bm = rng.integers(-(2**31), 2**31, size=(3,)).astype(np.int32)
    logits = rng.standard_normal(90).astype(np.float32)
    want = _oracle(logits[None], bm[None], [0], 90)[0]
    got = logits.copy()
    apply_token_bitmask_inplace(got, torch.from_numpy(bm))  # a torch bitmask for numpy logits
    np.testing.assert_array_equal(got, want)
    t = torch.from_numpy(logits.copy()).to(torch.bfloat16)
    apply_token_bitmask_inplace(t, bm)
    assert torch.isneginf(t).numpy().tolist() == np.isneginf(want).tolist()


def test_apply_checks_before_writing() -> None:
    logits = torch.zeros((2, 64))
    with pytest.raises(ConfigurationError, match="no bitmask row"):
        apply_token_bitmask_inplace(logits, np.full((1, 2), 0, dtype=np.int32))
    with pytest.raises(ConfigurationError, match="out of range"):
        apply_token_bitmask_inplace(logits, np.zeros((2, 2), np.int32), indices=[0, 2])
    with pytest.raises(ConfigurationError, match="int32"):
        apply_token_bitmask_inplace(logits, torch.zeros((2, 2), dtype=torch.int64))
    assert not torch.isneginf(logits).any()


def test_allocate_a_torch_bitmask() -> None:
    bm = allocate_token_bitmask(3, 70, framework="torch")
    assert isinstance(bm, torch.Tensor)
    assert bm.dtype == torch.int32
    assert tuple(bm.shape) == (3, 3)
    assert bm.device.type == "cpu"
    assert (bm == -1).all()
    assert bm.is_pinned() == torch.cuda.is_available()
    assert not allocate_token_bitmask(1, 70, framework="torch", pin_memory=False).is_pinned()
    bm.zero_()
    reset_token_bitmask(bm)
    assert (bm == -1).all()
    if not torch.cuda.is_available():
        with pytest.raises(ConfigurationError, match="needs CUDA"):
            allocate_token_bitmask(1, 70, framework="torch", pin_memory=True)
    with pytest.raises(ConfigurationError, match="framework='torch' only"):
        allocate_token_bitmask(1, 70, pin_memory=True)
    with pytest.raises(ConfigurationError, match="framework must be"):
        allocate_token_bitmask(1, 70, framework="jax")  # type: ignore[call-overload]


def test_a_matcher_fills_a_torch_tensor_in_place() -> None:
    tokens = [b"a", b"b", b"ab", b"c"]
    vocab = Vocabulary.from_tokens([*tokens, b"<eos>"], stop_token_ids=[4])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex("ab?c"))
    bm = allocate_token_bitmask(2, vocab.vocab_size, framework="torch")
    before = bm.data_ptr()
    assert m.fill_next_token_bitmask(bm, 1)
    assert bm.data_ptr() == before
    assert bm[0].tolist() == [-1]
    assert bm[1].tolist() == [0b00101]  # "a" and "ab"
    logits = torch.zeros((2, vocab.vocab_size))
    apply_token_bitmask_inplace(logits, bm, indices=[1])
    assert torch.isneginf(logits[1]).tolist() == [False, True, False, True, True]
    assert not torch.isneginf(logits[0]).any()
