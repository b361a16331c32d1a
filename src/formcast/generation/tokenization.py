"""Tokenization fidelity in the generation loop: ``canonical=True`` and ``token_healing=True``.

**canonical=True** masks, after each generated text token ``a``, every token ``b`` such that
the tokenizer never produces the pair: ``encode(bytes(a) + bytes(b)) != [a, b]``
(:class:`~formcast.vocab.canonical.CanonicalPairs`; its docstring says what that guarantees
and what not: exact for BPE without pre-tokenization, a strong filter otherwise).  The rows are
ANDed into the grammar's bitmask (:func:`canonical_pairs_for` keeps one
:class:`CanonicalPairs` per model, so rows are shared by every generation on it).  The first
generated token is not tested against the prompt (a canonical output is one the tokenizer would
produce for the output's text alone).  What a dead end means, per method: the grammar may allow
only tokens that the pair test forbids (the text the grammar needs can only be spelled
non-canonically after ``a``); ``sampling="mask"`` then ends with ``finish_reason="dead_end"``
and a diagnostic that names the pair test; ``exact`` and ``aligned`` treat the prefix as dead
mass, so their target becomes p(y | y in L, y canonical).

**token_healing=True** backs off the prompt's last token (when it is a text token and the
prompt has at least two tokens) and makes the output re-spell its bytes: the first generated
tokens must either be a prefix of the removed bytes or start with the rest of them, and the
bytes past the removed text must be accepted by the constraint.  The model can thus choose a
token that merges the prompt's last characters with the output's first (``"http:"`` +
``"//"`` as ``"://"``) instead of being stuck with the prompt's tokenization.  In the result:
``prompt_ids`` is the prompt *after* the back-off, ``token_ids`` every generated token (the
first ones re-spell the removed text), and ``text`` / ``raw`` exclude the removed bytes: the
constraint applies to ``text`` exactly as without healing, and
``vocab.decode(prompt_ids + token_ids) == vocab.decode(original prompt ids) + raw``.

Lifetime and cost: :func:`canonical_pairs_for` caches one object per model (weakly, for the
model's life); :class:`TokenHealing` lives for one generation and scans the vocabulary once
per healing step (O(V) byte comparisons, plus one ``matcher.fork().accept_bytes`` per token
that crosses the removed text; usually one step).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import numpy as np

from ..errors import ConfigurationError, DeadEndDiagnostic, FormcastError
from ..model.protocol import LanguageModel, raw_encoder
from ..runtime.matcher import GrammarMatcher
from ..vocab.canonical import CanonicalPairs
from ..vocab.vocabulary import Vocabulary

__all__ = [
    "TokenHealing",
    "canonical_dead_end",
    "canonical_pairs_for",
    "heal_prompt",
]

_PAIRS: weakref.WeakKeyDictionary[Any, CanonicalPairs] = weakref.WeakKeyDictionary()


def canonical_pairs_for(model: LanguageModel) -> CanonicalPairs:
    """The :class:`CanonicalPairs` of ``model`` (built once per model object, from its
    ``encode_bytes``).

    Raises:
        ConfigurationError: the model has no ``encode_bytes`` (the message names the fix).
    """
    encode = raw_encoder(model, "canonical=True")
    try:
        found = _PAIRS.get(model)
    except TypeError:  # not weakly referenceable: no sharing across calls
        return CanonicalPairs(model.vocab, encode)
    if found is None or found.vocab is not model.vocab:
        found = CanonicalPairs(model.vocab, encode)
        with contextlib.suppress(TypeError):  # weakref-able for get but not set
            _PAIRS[model] = found
    return found


def canonical_dead_end(
    matcher: GrammarMatcher | None, vocab: Vocabulary, prev: int
) -> DeadEndDiagnostic:
    """The diagnostic of a state where the pair test forbids every token the grammar allows."""
    prev_bytes = vocab.token_bytes(prev)
    return DeadEndDiagnostic(
        state=matcher.state if matcher is not None else None,
        prefix=matcher.accepted_bytes() if matcher is not None else b"",
        expected="a token the tokenizer produces after the previous one",
        expected_bytes=(),
        accepting=matcher.is_accepting() if matcher is not None else False,
        vocabulary_fingerprint=vocab.fingerprint,
        reason=(
            f"canonical=True: every token the constraint allows after token {prev} "
            f"({prev_bytes!r}) forms a pair the tokenizer never produces (encode(a + b) != "
            "[a, b]); the constraint can only continue with a non-canonical spelling here: "
            "use canonical=False, or sampling='exact', which removes such prefixes from its "
            "target"
        ),
        extra={"canonical_previous_token": prev},
    )


def heal_prompt(vocab: Vocabulary, prompt_ids: list[int]) -> tuple[list[int], bytes]:
    """``(prompt without its last token, that token's bytes)``; the prompt unchanged and
    ``b""`` when the last token is not a text token or the prompt has fewer than two tokens."""
    if len(prompt_ids) < 2 or not vocab.is_text_token(int(prompt_ids[-1])):
        return list(prompt_ids), b""
    return list(prompt_ids[:-1]), vocab.token_bytes(int(prompt_ids[-1]))


class TokenHealing:
    """The healing phase of one generation: the removed bytes not yet re-spelled.

    ``allowed(matcher)`` gives the text tokens that continue the removed bytes (sorted ids);
    ``accept(tok, matcher)`` consumes them and, for the token that crosses the end of the
    removed text, feeds the bytes past it to the matcher.  Stop tokens are never allowed while
    ``active`` (the output must re-spell the removed text first)."""

    __slots__ = ("healed", "remaining", "vocab")

    def __init__(self, vocab: Vocabulary, healed: bytes) -> None:
        if not isinstance(healed, bytes):
            raise ConfigurationError(f"healed must be bytes, got {type(healed).__name__}")
        self.vocab = vocab
        self.healed = healed
        self.remaining = healed

    @property
    def active(self) -> bool:
        """Whether part of the removed text is still to be generated."""
        return bool(self.remaining)

    def allowed(self, matcher: GrammarMatcher | None) -> np.ndarray:
        """The token ids that may come next (sorted ``int64``); empty when none can."""
        rem = self.remaining
        n = len(rem)
        vocab = self.vocab
        specials = vocab.special_token_ids
        first_ok: set[int] | None = None
        out: list[int] = []
        for i, b in enumerate(vocab.tokens):
            if not b or i in specials:
                continue
            if len(b) <= n:
                if rem.startswith(b):
                    out.append(i)
                continue
            if not b.startswith(rem):
                continue
            if matcher is None:
                out.append(i)
                continue
            if first_ok is None:
                first_ok = {c for c in range(256) if matcher.fork().accept_bytes(bytes([c]))}
            if b[n] in first_ok and matcher.fork().accept_bytes(b[n:]):
                out.append(i)
        return np.asarray(out, dtype=np.int64)

    def accept(self, tok: int, matcher: GrammarMatcher | None) -> None:
        """Consume token ``tok`` (one of :meth:`allowed`)."""
        b = self.vocab.token_bytes(tok)
        n = len(self.remaining)
        if len(b) <= n:
            self.remaining = self.remaining[len(b) :]
            return
        self.remaining = b""
        if matcher is not None and not matcher.accept_bytes(b[n:]):
            raise FormcastError(  # pragma: no cover - allowed() checked it
                f"internal error: token {tok} refused after token healing"
            )
