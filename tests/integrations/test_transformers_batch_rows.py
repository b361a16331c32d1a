"""``FormcastLogitsProcessor`` tracks batch rows by position, not by prompt content.

Two identical prompts with different grammars (``x+`` and ``y+``) used to be matched to the
same parent row by content and failed at step 2.  Rows now extend the row at their own
position, or -- when beam search moved a beam -- a row of the same example (the same grammar);
never a row of another example.  The processor is driven by hand with numpy ids (no torch
needed), and by transformers' own ``generate()`` on a tiny random-weight GPT-2 built in memory
(skipped without torch and transformers).

``finish_reasons(output)`` tells a row that ended with a stop token (``"completed"``) from one
that ``max_new_tokens`` cut (``"max_tokens"``): transformers itself does not say.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from formcast import FormcastError, GrammarCompiler
from formcast.integrations.transformers import FormcastLogitsProcessor
from formcast.vocab.vocabulary import Vocabulary

EOS = 256
X, Y, A, B = ord("x"), ord("y"), ord("a"), ord("b")


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", b"ab", b"10"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


VOCAB = byte_vocab()
COMPILER = GrammarCompiler(VOCAB)


def allowed(scores: np.ndarray) -> list[list[int]]:
    return [np.flatnonzero(row > -np.inf).tolist() for row in scores]


def zeros(rows: int) -> np.ndarray:
    return np.zeros((rows, VOCAB.vocab_size), dtype=np.float32)


# -- driven by hand ------------------------------------------------------------------------------
def test_identical_prompts_with_different_grammars() -> None:
    proc = FormcastLogitsProcessor([COMPILER.compile_regex("x+"), COMPILER.compile_regex("y+")])
    assert allowed(proc(np.array([[65], [65]]), zeros(2))) == [[X], [Y]]
    out = proc(np.array([[65, X], [65, Y]]), zeros(2))  # step 2: failed before
    assert allowed(out) == [[X, EOS], [Y, EOS]]
    out = proc(np.array([[65, X, X], [65, Y, EOS]]), zeros(2))
    assert allowed(out) == [[X, EOS], [EOS]]
    assert proc.matchers[1].is_terminated()
    assert not proc.matchers[0].is_terminated()


def test_identical_prompts_with_beams_reordered_inside_each_example() -> None:
    """2 examples x 2 beams, all four prompts identical; the beams swap inside each example."""
    proc = FormcastLogitsProcessor(
        [COMPILER.compile_regex("(ab|ba)x[0-9]"), COMPILER.compile_regex("(ab|ba)y[0-9]")]
    )
    proc(np.array([[65]] * 4), zeros(4))
    proc(np.array([[65, A], [65, B], [65, A], [65, B]]), zeros(4))
    # beam 0 of each example now continues the old beam 1 and vice versa
    out = proc(np.array([[65, B, A], [65, A, B], [65, A, B], [65, B, A]]), zeros(4))
    assert allowed(out) == [[X], [X], [Y], [Y]]
    out = proc(np.array([[65, A, B, X], [65, B, A, X], [65, B, A, Y], [65, A, B, Y]]), zeros(4))
    digits = list(range(ord("0"), ord("9") + 1))
    assert allowed(out) == [digits] * 4


def test_a_beam_continued_twice_forks_its_matcher() -> None:
    proc = FormcastLogitsProcessor(
        [COMPILER.compile_regex("a[bc]x"), COMPILER.compile_regex("a[bc]y")]
    )
    proc(np.array([[65]] * 4), zeros(4))
    proc(np.array([[65, A]] * 4), zeros(4))
    # example 0: both beams continue beam 0 (one with b, one with c); example 1 likewise
    out = proc(
        np.array([[65, A, B], [65, A, ord("c")], [65, A, ord("c")], [65, A, B]]), zeros(4)
    )
    assert allowed(out) == [[X], [X], [Y], [Y]]
    ms = proc.matchers
    assert len({id(m) for m in ms}) == 4  # independent matchers
    assert [m.accepted_bytes() for m in ms] == [b"ab", b"ac", b"ac", b"ab"]


def test_a_row_extending_another_examples_sequence_is_a_new_sequence() -> None:
    """Content shared with another example's row is no parent: the processor starts over."""
    proc = FormcastLogitsProcessor([COMPILER.compile_regex("x+"), COMPILER.compile_regex("y+")])
    proc(np.array([[65], [66]]), zeros(2))
    # row 1 (grammar y+) extends row 0's sequence [65]: not a continuation -> fresh start
    out = proc(np.array([[65, X], [65, X]]), zeros(2))
    assert proc.prompt_length == 2
    assert allowed(out) == [[X], [Y]]


def test_one_grammar_still_follows_beams_across_the_batch() -> None:
    proc = FormcastLogitsProcessor(COMPILER.compile_regex("(ab|ba)[0-9]"))
    proc(np.array([[65], [65]]), zeros(2))
    proc(np.array([[65, A], [65, B]]), zeros(2))
    out = proc(np.array([[65, B, A], [65, A, B]]), zeros(2))
    digits = list(range(ord("0"), ord("9") + 1))
    assert allowed(out) == [digits, digits]


# -- finish reasons ------------------------------------------------------------------------------
def test_finish_reasons_tell_truncation_from_completion() -> None:
    digits = COMPILER.compile_regex("[0-9]+")
    proc = FormcastLogitsProcessor([digits, digits, COMPILER.compile_regex("abc")])
    one, two, three, pad = ord("1"), ord("2"), ord("3"), 0  # pad: no legal token, ignored
    rows = np.array(
        [
            [65, 66, 67, one, EOS, pad],  # a stop token the grammar accepted: completed
            [65, 66, 67, one, two, three],  # a valid prefix that could go on: max_tokens
            [65, 66, 67, A, B, ord("c")],  # complete, nothing but a stop token left: completed
        ]
    )
    assert proc.finish_reasons(rows, prompt_length=3) == ["completed", "max_tokens", "completed"]
    bad = rows.copy()
    bad[1, 4] = X
    with pytest.raises(FormcastError, match="not allowed"):
        proc.finish_reasons(bad, prompt_length=3)


def test_finish_reasons_need_a_prompt_length_before_the_first_call() -> None:
    proc = FormcastLogitsProcessor(COMPILER.compile_regex("a"))
    with pytest.raises(Exception, match="prompt_length"):
        proc.finish_reasons(np.array([[65, A, EOS]]))
    proc(np.array([[65]]), zeros(1))
    assert proc.finish_reasons(np.array([[65, A, EOS]])) == ["completed"]
    assert proc.finish_reasons(np.array([[65, A]])) == ["completed"]  # nothing but stop left
    proc2 = FormcastLogitsProcessor(COMPILER.compile_regex("a+"))
    proc2(np.array([[65]]), zeros(1))
    assert proc2.finish_reasons(np.array([[65, A]])) == ["max_tokens"]


# -- transformers' own generate() ----------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny() -> Any:
    """A 1-layer GPT-2 with random weights over the byte vocabulary (no files, no hub)."""
    torch = pytest.importorskip(
        "torch", reason="torch is not installed (pip install torch==2.13.0)"
    )
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install transformers)"
    )
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.GPT2Config(
        vocab_size=VOCAB.vocab_size, n_positions=64, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    return torch, transformers, model


def _generate(tiny: Any, proc: FormcastLogitsProcessor, prompts: list[list[int]], **kw: Any) -> Any:
    torch, transformers, model = tiny
    ids = torch.tensor(prompts, dtype=torch.long)
    return model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        logits_processor=transformers.LogitsProcessorList([proc]),
        eos_token_id=sorted(VOCAB.stop_token_ids),
        pad_token_id=EOS,
        **kw,
    )


def _row_texts(out: Any, start: int) -> list[str]:
    texts = []
    for row in out.tolist():
        toks = row[start:]
        cut = toks.index(EOS) if EOS in toks else len(toks)
        texts.append(VOCAB.decode(toks[:cut]).decode())
    return texts


def test_generate_identical_prompts_different_grammars(tiny: Any) -> None:
    patterns = ["x+", "y+", "[0-9]{2,3}"]
    proc = FormcastLogitsProcessor([COMPILER.compile_regex(p) for p in patterns])
    out = _generate(tiny, proc, [[65, 66, 67]] * 3, max_new_tokens=6, do_sample=False)
    texts = _row_texts(out, 3)
    reasons = proc.finish_reasons(out)  # replays every row: each token was legal for its row
    for pattern, text, reason, row in zip(patterns, texts, reasons, out.tolist()):
        assert text, pattern
        if reason == "completed":
            assert re.fullmatch(pattern, text), (pattern, text)
        else:  # cut by max_new_tokens: all six tokens are text, no stop token
            assert len(text) == 6, (pattern, row)
            assert EOS not in row, (pattern, row)
    assert set(texts[0]) == {"x"}
    assert set(texts[1]) == {"y"}
    assert re.fullmatch("[0-9]+", texts[2])


def test_generate_beam_search_identical_prompts(tiny: Any) -> None:
    patterns = ["[a-c]{3,6}", "[x-z]{3,6}"]
    proc = FormcastLogitsProcessor([COMPILER.compile_regex(p) for p in patterns])
    out = _generate(
        tiny, proc, [[65, 66]] * 2, max_new_tokens=10, num_beams=3, num_return_sequences=2,
        do_sample=False, early_stopping=True,
    )  # fmt: skip
    assert out.shape[0] == 4
    texts = _row_texts(out, 2)
    reasons = proc.finish_reasons(out, prompt_length=2)
    for i, (text, reason) in enumerate(zip(texts, reasons)):
        pattern = patterns[i // 2]
        assert reason == "completed", (i, text)
        assert re.fullmatch(pattern, text), (pattern, text)


def test_generate_sampling_and_truncation(tiny: Any) -> None:
    torch = tiny[0]
    torch.manual_seed(1)
    proc = FormcastLogitsProcessor(
        [COMPILER.compile_regex("[a-z]{20,30}"), COMPILER.compile_regex("q")]
    )
    out = _generate(
        tiny, proc, [[70], [70]], max_new_tokens=4, do_sample=True, num_return_sequences=2
    )
    texts = _row_texts(out, 1)
    assert proc.finish_reasons(out) == ["max_tokens", "max_tokens", "completed", "completed"]
    assert all(re.fullmatch("[a-z]{4}", t) for t in texts[:2])  # a prefix, never a document
    assert texts[2:] == ["q", "q"]
