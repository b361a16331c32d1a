"""Random walks of a compiled grammar's mask: the oracle of the run-time check programs' tests
(``oneOf``, ``multipleOf``, ``minProperties`` over distinct keys).

:func:`mask_walk` walks a :class:`GrammarMatcher` token by token and checks on every state that
a token is allowed or the state accepts (no dead end) and that the mask equals what
``accept_token`` accepts, token by token (a fork per token).  Each test file picks its tokens
with its own ``choose`` (closing tokens late, digits, member snippets);
:func:`assert_walks_validate` runs several walks and validates the finished texts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

#: ``choose(matcher, allowed, n, rng)``: a token id of ``allowed`` to take at step ``n``, or
#: bytes to feed instead (a snippet the caller checked on a fork)
Choose = Callable[[GrammarMatcher, list[int], int, random.Random], "int | bytes"]


def byte_vocab(extra: Sequence[bytes] = ()) -> Vocabulary:
    """The 256 single bytes, then ``extra`` (multi-byte tokens), then a stop token."""
    return Vocabulary.from_tokens(
        [bytes([b]) for b in range(256)] + list(extra) + [b"<eos>"],
        stop_token_ids=[256 + len(extra)],
    )


def accepts(compiled: Any, text: str) -> bool:
    """Whether the grammar accepts ``text`` whole."""
    m = GrammarMatcher(compiled)
    return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())


def validator(schema: Any) -> Any:
    """A Draft 2020-12 validator of ``schema`` with its format checker."""
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def allowed_ids(m: GrammarMatcher, vocab: Vocabulary) -> list[int]:
    """The mask's allowed tokens, stop tokens aside."""
    stops = set(vocab.stop_token_ids)
    return [t for t in m.allowed_token_ids().tolist() if t not in stops]


def mask_walk(
    compiled: Any,
    vocab: Vocabulary,
    rng: random.Random,
    *,
    steps: int,
    rounds: int,
    stop_p: float,
    choose: Choose,
    check_mask: bool = True,
) -> str | None:
    """A random walk of the mask, at most ``rounds`` tokens: on every state some token is
    allowed unless the state accepts, and (``check_mask``) the mask equals what
    ``accept_token`` accepts (every non-stop token tried on a fork).  An accepting state ends
    the walk past ``steps`` tokens, when nothing is allowed, or with probability ``stop_p``.
    The text of a finished walk (accepting, the last round's too), else None."""
    m = GrammarMatcher(compiled)
    out = b""
    stops = set(vocab.stop_token_ids)
    for n in range(rounds):
        allowed = allowed_ids(m, vocab)
        for t in range(vocab.vocab_size) if check_mask else ():
            if t in stops:
                continue
            twin = m.fork()
            assert twin.accept_token(t) == (t in allowed), (out, vocab.token_bytes(t))
        if m.is_accepting() and (n > steps or not allowed or rng.random() < stop_p):
            return out.decode("utf-8")
        assert allowed, f"dead end after {out!r}"
        got = choose(m, allowed, n, rng)
        if isinstance(got, bytes):
            assert m.accept_bytes(got)
            out += got
        else:
            assert m.accept_token(got)
            out += vocab.token_bytes(got)
    return out.decode("utf-8") if m.is_accepting() else None


def assert_walks_validate(
    walk: Callable[[], str | None], valid: Callable[[Any], bool], tries: int, at_least: int
) -> None:
    """``tries`` walks; every finished one is valid JSON that ``valid`` accepts, and at least
    ``at_least`` finish."""
    finished = 0
    for _ in range(tries):
        text = walk()
        if text is not None:
            finished += 1
            assert valid(json.loads(text)), text
    assert finished >= at_least
