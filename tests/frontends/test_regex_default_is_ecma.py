"""The default regex dialect of every model-facing entry point is ECMA-262 (ASCII ``\\d \\w \\s``,
as JSON Schema ``pattern`` uses); Python ``re`` semantics are there on request
(``dialect="python"``).  With the old ``re`` default ``\\d`` admitted ``٣`` (ARABIC-INDIC DIGIT
THREE) and a model could write ``208٣-02-22`` for a date.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import pytest

from formcast import ConfigurationError, GrammarCompiler, GrammarMatcher, GrammarSyntaxError
from formcast.generation import compile_constraint, generate, stream
from formcast.generation.inputs import DEFAULT_REGEX_DIALECT
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

EOS = 256
ARABIC_THREE = "\u0663"  # ٣, a decimal digit for Python's \d
DATE = r"\d{4}-\d{2}-\d{2}"


def byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", ARABIC_THREE.encode()]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


def wants(vocab: Vocabulary, target: bytes) -> Callable[[list[int]], np.ndarray]:
    """Logits preferring the longest token that continues ``target``, then EOS."""

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[1:])
        logits = np.full(vocab.vocab_size, -5.0)
        rest = target[len(done) :] if target.startswith(done) else b""
        if not rest:
            logits[EOS] = 10.0
            return logits
        best = max(
            (i for i, t in enumerate(vocab.tokens) if t and rest.startswith(t) and i != EOS),
            key=lambda i: len(vocab.tokens[i]),
        )
        logits[best] = 10.0
        return logits

    return fn


def _accepts(compiled: object, text: str) -> bool:
    m = GrammarMatcher(compiled)  # type: ignore[arg-type]
    return m.accept_bytes(text.encode()) and m.is_accepting()


def test_compile_regex_defaults_to_ascii_classes() -> None:
    comp = GrammarCompiler(byte_vocab())
    default = comp.compile_regex(r"\d")
    assert default.options == "dialect=ecma"
    assert _accepts(default, "3")
    assert not _accepts(default, ARABIC_THREE)
    python = comp.compile_regex(r"\d", dialect="python")
    assert _accepts(python, ARABIC_THREE)
    assert not _accepts(comp.compile_regex(r"\w"), "é")
    assert _accepts(comp.compile_regex(r"\w", dialect="python"), "é")
    assert not _accepts(comp.compile_regex(r"\s"), "\x1c")  # not ECMA whitespace
    assert _accepts(comp.compile_regex(r"\s", dialect="python"), "\x1c")


def test_generate_default_rejects_a_non_ascii_digit() -> None:
    vocab = byte_vocab()
    target = f"208{ARABIC_THREE}-02-22".encode()
    result = generate(CallableModel(wants(vocab, target), vocab), [65], regex=DATE)
    assert result.finish_reason == "completed"
    assert ARABIC_THREE not in result.text
    assert result.text.isascii()
    assert result.text[:3] == "208"
    python = generate(
        CallableModel(wants(vocab, target), vocab), [65], regex=DATE, dialect="python"
    )
    assert python.text == f"208{ARABIC_THREE}-02-22"


def test_stream_and_compile_constraint_default_to_ecma() -> None:
    vocab = byte_vocab()
    target = ARABIC_THREE.encode()
    items = list(stream(CallableModel(wants(vocab, target), vocab), [65], regex=r"\d"))
    assert items[-1].text != ARABIC_THREE  # type: ignore[union-attr]
    cg, _ = compile_constraint(vocab, regex=r"\d")
    assert cg is not None
    assert not _accepts(cg, ARABIC_THREE)
    cg_py, _ = compile_constraint(vocab, regex=r"\d", dialect="python")
    assert cg_py is not None
    assert _accepts(cg_py, ARABIC_THREE)


def test_every_entry_point_has_the_same_default() -> None:
    assert DEFAULT_REGEX_DIALECT == "ecma"
    for fn in (generate, stream, compile_constraint, GrammarCompiler.compile_regex):
        assert inspect.signature(fn).parameters["dialect"].default == "ecma", fn


def test_python_only_syntax_needs_the_python_dialect() -> None:
    vocab = byte_vocab()
    with pytest.raises(GrammarSyntaxError, match=r"bad escape \\U"):  # not ECMA-262
        generate(CallableModel(wants(vocab, b"a"), vocab), [65], regex=r"\U00000061")
    assert generate(
        CallableModel(wants(vocab, b"a"), vocab), [65], regex=r"\U00000061", dialect="python"
    ).text == "a"
    with pytest.raises(ConfigurationError, match="dialect"):
        generate(CallableModel(wants(vocab, b"a"), vocab), [65], regex="a", dialect="perl")
