"""Integrations without a real model: the transformers logits processor driven by hand with torch
tensors (skipped without torch), the lazy package, and missing-dependency errors."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from formcast import (
    ConfigurationError,
    DeadEndError,
    FormcastError,
    GrammarCompiler,
    GrammarMatcher,
)
from formcast._optional import require
from formcast.errors import MissingDependencyError
from formcast.vocab.vocabulary import Vocabulary

EOS = 256


def byte_vocab(missing: tuple[int, ...] = ()) -> Vocabulary:
    tokens = [b"" if i in missing else bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"10"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


def test_lazy_exports() -> None:
    import formcast
    import formcast.model as fm

    assert fm.CallableModel.__name__ == "CallableModel"
    assert formcast.CallableModel is fm.CallableModel
    assert formcast.LlamaCppModel.__module__ == "formcast.model.llama_cpp"
    with pytest.raises(AttributeError):
        _ = fm.NoSuchThing


def test_require_names_the_install() -> None:
    with pytest.raises(MissingDependencyError, match="pip install"):
        require("formcast_no_such_module_xyz")
    with pytest.raises(ImportError):  # also an ImportError for generic handlers
        require("formcast_no_such_module_xyz")


def test_llama_model_missing_file_fails_first() -> None:
    from formcast.errors import ModelFileError
    from formcast.model.llama_cpp import LlamaCppModel

    with pytest.raises(ModelFileError, match="does not exist"):
        LlamaCppModel("/nonexistent/x.gguf")


@pytest.fixture
def torch() -> Any:
    """torch, or skip: the processor tests need tensors (the transformers extra)."""
    return pytest.importorskip("torch", reason="torch is not installed (the transformers extra)")


def _greedy(
    torch: Any, proc: object, prompt: np.ndarray, steps: int, vocab: Vocabulary, seed: int = 0
) -> np.ndarray:
    """A tiny stand-in for transformers' greedy loop: scores -> processor -> argmax -> append."""
    rng = np.random.default_rng(seed)
    ids = torch.tensor(prompt, dtype=torch.long)
    for _ in range(steps):
        scores = torch.tensor(
            rng.normal(size=(ids.shape[0], vocab.vocab_size)), dtype=torch.float32
        )
        scores = proc(ids, scores)  # type: ignore[operator]
        nxt = scores.argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids.numpy()


def _texts(vocab: Vocabulary, rows: np.ndarray, start: int) -> list[str]:
    out = []
    for row in rows:
        toks = [int(t) for t in row[start:]]
        if EOS in toks:
            toks = toks[: toks.index(EOS)]
        out.append(vocab.decode(toks).decode())
    return out


def test_processor_batch_outputs_match(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab()
    pattern = r"[a-c]{2,4}-[0-9]{1,2}"
    proc = FormcastLogitsProcessor(GrammarCompiler(vocab).compile_regex(pattern))
    prompt = np.array([[65, 66], [67, 68], [69, 70]])
    rows = _greedy(torch, proc, prompt, 12, vocab)
    assert proc.prompt_length == 2
    for text in _texts(vocab, rows, 2):
        assert re.fullmatch(pattern, text), text
    assert all(m.is_terminated() for m in proc.matchers)
    # terminated rows only allow stop tokens afterwards: every token after EOS is EOS
    for row in rows:
        tail = [int(t) for t in row[2:]]
        assert set(tail[tail.index(EOS) :]) == {EOS}
    assert len(proc.mask_seconds) == 12


def test_processor_resets_on_a_new_sequence(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab()
    proc = FormcastLogitsProcessor(GrammarCompiler(vocab).compile_regex(r"[0-9]{3}"))
    _greedy(torch, proc, np.array([[65, 66, 67]]), 3, vocab)
    assert proc.matchers[0].num_accepted_tokens > 0
    # a shorter input: new generate() call
    rows = _greedy(torch, proc, np.array([[65]]), 4, vocab, seed=1)
    assert proc.prompt_length == 1
    assert re.fullmatch(r"[0-9]{3}", _texts(vocab, rows, 1)[0])
    # same length but another prefix: new sequence as well
    rows = _greedy(torch, proc, np.array([[70, 71, 72, 73, 74]]), 4, vocab, seed=2)
    assert proc.prompt_length == 5
    assert re.fullmatch(r"[0-9]{3}", _texts(vocab, rows, 5)[0])


def test_processor_follows_beam_reordering(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab()
    cg = GrammarCompiler(vocab).compile_regex(r"(ab|ba)[0-9]")
    proc = FormcastLogitsProcessor(cg)
    zeros = torch.zeros((2, vocab.vocab_size))
    proc(torch.tensor([[65], [65]]), zeros.clone())
    proc(torch.tensor([[65, ord("a")], [65, ord("b")]]), zeros.clone())
    # the beams swap places: each row is matched to the parent sequence it extends
    out = proc(torch.tensor([[65, ord("b"), ord("a")], [65, ord("a"), ord("b")]]), zeros.clone())
    assert proc.prompt_length == 1
    allowed = (out > -np.inf).numpy()
    digits = [ord(c) for c in "0123456789"]
    assert allowed[0, digits].all()
    assert allowed[1, digits].all()
    assert allowed.sum() == 20


def test_processor_per_example_grammars(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab()
    comp = GrammarCompiler(vocab)
    proc = FormcastLogitsProcessor([comp.compile_regex("x+"), comp.compile_regex("y+")])
    out = proc(torch.tensor([[65], [65], [66], [66]]), torch.zeros((4, vocab.vocab_size)))
    allowed = (out > -np.inf).numpy()
    assert [list(np.flatnonzero(r)) for r in allowed] == [[120], [120], [121], [121]]
    with pytest.raises(ConfigurationError, match="2 grammars for a batch of 3"):
        proc(torch.tensor([[1], [2], [3]]), torch.zeros((3, vocab.vocab_size)))


def test_processor_refuses_a_disallowed_token(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab()
    proc = FormcastLogitsProcessor(GrammarCompiler(vocab).compile_regex("[0-9]+"))
    proc(torch.tensor([[65]]), torch.zeros((1, vocab.vocab_size)))
    with pytest.raises(FormcastError, match="not allowed by the grammar"):
        proc(torch.tensor([[65, ord("z")]]), torch.zeros((1, vocab.vocab_size)))


def test_processor_dead_end_raises_with_diagnostic(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab(missing=(ord("c"),))
    proc = FormcastLogitsProcessor(GrammarCompiler(vocab).compile_regex("abc"))
    proc(torch.tensor([[65]]), torch.zeros((1, vocab.vocab_size)))
    with pytest.raises(DeadEndError) as info:
        proc(torch.tensor([[65, 257]]), torch.zeros((1, vocab.vocab_size)))  # token "ab"
    assert info.value.diagnostic.prefix == b"ab"


def test_processor_rejects_bad_construction(torch: Any) -> None:
    from formcast.integrations.transformers import FormcastLogitsProcessor

    with pytest.raises(ConfigurationError):
        FormcastLogitsProcessor([])
    a = GrammarCompiler(byte_vocab()).compile_regex("a")
    other = Vocabulary.from_tokens([b"a", b"<e>"], stop_token_ids=[1])
    with pytest.raises(ConfigurationError, match="different vocabularies"):
        FormcastLogitsProcessor([a, GrammarCompiler(other).compile_regex("a")])


def test_processor_matches_a_plain_matcher(torch: Any) -> None:
    """The processor's mask is exactly the matcher's allowed set."""
    from formcast.integrations.transformers import FormcastLogitsProcessor

    vocab = byte_vocab()
    cg = GrammarCompiler(vocab).compile_regex(r"ab[0-9]{2}")
    proc = FormcastLogitsProcessor(cg)
    ref = GrammarMatcher(cg)
    seq = [65]
    for tok in [257, ord("1"), ord("0")]:
        out = proc(torch.tensor([seq]), torch.zeros((1, vocab.vocab_size)))
        got = np.flatnonzero((out > -np.inf).numpy()[0])
        assert got.tolist() == ref.allowed_token_ids().tolist()
        ref.accept_token(tok)
        seq.append(tok)
