"""The toy world of seed 002 ("Constrained decoding: making the model return valid JSON").

Seed 002 is a walkthrough backed by a script (``structured_output_from_scratch.py``) with a
45-token vocabulary and a hand-built 20-state character DFA for the fixed schema
``{"name":"<letters>","age":<digits>}`` (no whitespace).  This module rebuilds both:

* :data:`ARTICLE_TOKENS` - the article's 45 tokens, in the article's order (the ids matter: the
  article's random logits are indexed by them).
* :func:`toy_vocabulary` - a formcast :class:`Vocabulary` of those 45 tokens plus one stop token
  (id 45).  formcast requires a stop token; the article has none and simply stops when its DFA
  reaches the accepting state, so the EOS id is appended *after* the article's ids and the
  article's ids stay unchanged.
* :data:`TOY_PATTERN` - the article's language as a regex.  Its name string is the
  article's ``LETTERS`` (``a``-``z`` and space, possibly empty: ``{"name":"","age":30}`` is one of
  its outputs) and its age is ``[1-9][0-9]*`` (the article forbids a leading zero).
* :class:`ArticleDFA` - an independent re-implementation of the article's DFA (one state per
  character of each literal), used as the reference the compiled formcast automaton is checked
  against.  Its states are numbered as in the article: 0 start, 1 in name string, 2 need a
  digit, 3 in age, 4 done, 5.. the literal steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from formcast.vocab.vocabulary import Vocabulary

__all__ = [
    "ARTICLE_TOKENS",
    "EOS_ID",
    "EOS_TOKEN",
    "NAMED_STATES",
    "TOY_PATTERN",
    "V_ARTICLE",
    "ArticleDFA",
    "allowed_ids",
    "bitmask_from_ids",
    "tid",
    "toy_vocabulary",
]

# The article's VOCAB, verbatim and in order.
ARTICLE_TOKENS: tuple[str, ...] = (
    "{", "}", '"', ":", ",", '{"', '":"', '","', '":', '"}',
    "name", "age", "nam", "e", "a", "g",
    "ada", "lovelace", " ", "ace", "lo", "ve",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "36", "180", "0}", "9}", "36}",
    "null", "true", "```", "json", "Sure", "here", "!", "\n",
)  # fmt: skip
V_ARTICLE = len(ARTICLE_TOKENS)  # 45
EOS_TOKEN = b"<|eos|>"
EOS_ID = V_ARTICLE  # 45: appended after the article's ids

TOY_PATTERN = r'\{"name":"[a-z ]*","age":[1-9][0-9]*\}'

LETTERS = "abcdefghijklmnopqrstuvwxyz "
DIGITS = "0123456789"
START, NAME, DIGIT1, DIGITS_N, END = 0, 1, 2, 3, 4
NAMED_STATES = {START: "start", NAME: "in name string", DIGIT1: "need a digit",
                DIGITS_N: "in age", END: "done"}  # fmt: skip


def tid(token: str) -> int:
    """The article's id of ``token``."""
    return ARTICLE_TOKENS.index(token)


def toy_vocabulary() -> Vocabulary:
    """The 45 article tokens (ids 0..44) plus the stop token ``EOS_ID`` = 45."""
    tokens = [t.encode("utf-8") for t in ARTICLE_TOKENS] + [EOS_TOKEN]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS_ID], name="seed002-toy")


class ArticleDFA:
    """The seed-002 character DFA, rebuilt state by state as the article describes it."""

    def __init__(self) -> None:
        self.delta: dict[int, dict[str, int]] = {s: {} for s in range(5)}
        self._literal(START, '{"name":"', NAME)
        for ch in LETTERS:
            self.delta[NAME][ch] = NAME
        self._literal(NAME, '","age":', DIGIT1)
        for ch in DIGITS:
            if ch != "0":
                self.delta[DIGIT1][ch] = DIGITS_N
            self.delta[DIGITS_N][ch] = DIGITS_N
        self.delta[DIGITS_N]["}"] = END
        self.accepting = frozenset({END})

    def _literal(self, src: int, text: str, dst: int) -> None:
        state = src
        for ch in text[:-1]:
            new = max(self.delta) + 1
            self.delta[state][ch] = new
            self.delta[new] = {}
            state = new
        self.delta[state][text[-1]] = dst

    @property
    def num_states(self) -> int:
        return len(self.delta)

    def step_char(self, state: int, ch: str) -> int | None:
        return self.delta.get(state, {}).get(ch)

    def step_token(self, state: int | None, token: str) -> int | None:
        """Run the whole token; ``None`` if any character falls off the DFA."""
        for ch in token:
            if state is None:
                return None
            state = self.step_char(state, ch)
        return state

    def allowed(self, state: int) -> dict[int, int]:
        """Whole-token check: article id -> state after the token."""
        out = {}
        for i, tok in enumerate(ARTICLE_TOKENS):
            nxt = self.step_token(state, tok)
            if nxt is not None:
                out[i] = nxt
        return out

    def first_char_allowed(self, state: int) -> set[int]:
        """The classic bug: a token passes if only its *first character* can step."""
        return {i for i, tok in enumerate(ARTICLE_TOKENS) if self.step_char(state, tok[0])}

    def token_paths(self) -> dict[int, list[int]]:
        """For every state reachable through whole tokens, a shortest token-id path to it."""
        paths: dict[int, list[int]] = {START: []}
        queue = deque([START])
        while queue:
            s = queue.popleft()
            for i, nxt in sorted(self.allowed(s).items()):
                if nxt not in paths:
                    paths[nxt] = [*paths[s], i]
                    queue.append(nxt)
        return paths


def bitmask_from_ids(ids: Iterable[int], vocab_size: int) -> npt.NDArray[np.int32]:
    """An int32 bitmask row (bit j%32 of word j//32) with exactly ``ids`` set."""
    words = np.zeros((vocab_size + 31) // 32, dtype=np.uint32)
    for i in ids:
        words[i // 32] |= np.uint32(1 << (i % 32))
    return words.view(np.int32)


def allowed_ids(bitmask_row: npt.ArrayLike, vocab_size: int) -> set[int]:
    """The token ids whose bit is set (an independent decoder of the bitmask layout)."""
    words = np.asarray(bitmask_row).astype(np.int64) & 0xFFFFFFFF
    return {j for j in range(vocab_size) if (int(words[j // 32]) >> (j % 32)) & 1}
