"""``generate(token_healing=True)``: the prompt's last token is backed off and re-spelled.

A scripted model that, like a real one, prefers the merged token ``://`` after ``http`` and
has seen ``//`` after a lone ``:`` only rarely.  Without healing the prompt ``http`` + ``:``
forces the spelling ``//``; with healing the model may write ``://``, and the result's text
still starts after the prompt (the removed ``:`` is not part of it).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from formcast.errors import ConfigurationError
from formcast.generation import generate, stream
from formcast.model.callable import CallableModel
from formcast.vocab.vocabulary import Vocabulary

TOKENS = [b"<eos>", b"http", b":", b"//", b"://", b"ex", b".com", b"x"]
EOS, HTTP, COLON, SLASHES, COLON_SLASHES, EX, DOTCOM, X = range(8)
VOCAB = Vocabulary.from_tokens(TOKENS, stop_token_ids=[EOS], name="url")
REGEX = r"//[a-z]+\.com"
PROMPT = [HTTP, COLON]  # "http:"


def url_model() -> CallableModel:
    def fn(ids: list[int]) -> np.ndarray:
        p = np.full(len(TOKENS), 1e-6)
        last = ids[-1]
        if last == HTTP:
            p[[COLON_SLASHES, COLON]] = [0.9, 0.1]
        elif last == COLON:
            p[[SLASHES, X]] = [0.05, 0.95]
        elif last in (SLASHES, COLON_SLASHES):
            p[EX] = 1.0
        elif last in (EX, X):
            p[[DOTCOM, X]] = [0.8, 0.2]
        else:
            p[EOS] = 1.0
        return np.log(p)

    return CallableModel(fn, VOCAB)


def test_healing_lets_the_model_merge_across_the_prompt_boundary() -> None:
    healed = generate(url_model(), PROMPT, regex=REGEX, token_healing=True)  # greedy
    assert healed.finish_reason == "completed"
    assert healed.prompt_ids == (HTTP,)  # the prompt after the back-off
    assert healed.token_ids == (COLON_SLASHES, EX, DOTCOM)
    assert healed.text == "//ex.com"
    assert healed.raw == b"//ex.com"
    assert VOCAB.decode([*healed.prompt_ids, *healed.token_ids]) == b"http:" + healed.raw

    plain = generate(url_model(), PROMPT, regex=REGEX)
    assert plain.prompt_ids == tuple(PROMPT)
    assert plain.token_ids[0] == SLASHES
    assert plain.text == "//ex.com"


def test_healing_samples_follow_the_model_at_the_boundary() -> None:
    first = Counter(
        generate(
            url_model(), PROMPT, regex=REGEX, token_healing=True, temperature=1.0, seed=s
        ).token_ids[:2]
        for s in range(200)
    )
    # "://" with probability 0.9; else ":" re-spelled, then "//" (the only token the
    # constraint allows after it)
    assert set(first) == {(COLON_SLASHES, EX), (COLON, SLASHES)}
    assert 150 <= first[(COLON_SLASHES, EX)] <= 195


def test_stream_pieces_exclude_the_healed_text() -> None:
    items = list(stream(url_model(), PROMPT, regex=REGEX, token_healing=True))
    result = items[-1]
    pieces = items[:-1]
    assert "".join(str(p) for p in pieces) == result.text == "//ex.com"  # type: ignore[union-attr]


def test_healing_is_a_no_op_when_the_last_token_is_not_text() -> None:
    r = generate(url_model(), [HTTP, EOS], regex=REGEX, token_healing=True)
    assert r.prompt_ids == (HTTP, EOS)
    assert r.text == "//ex.com"


def test_healing_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="mask"):
        generate(
            url_model(), PROMPT, regex=REGEX, token_healing=True, sampling="exact", temperature=1.0
        )
    with pytest.raises(ConfigurationError, match="bool"):
        generate(url_model(), PROMPT, regex=REGEX, token_healing=1)
