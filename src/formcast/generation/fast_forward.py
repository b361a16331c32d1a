"""Fast-forward (``fast_forward=True``): the bytes a grammar forces, appended as tokens in the
tokenizer's own spelling, without asking the model for each of them.

When the constraint forces the next bytes (``{"name":"`` at the start of a schema's object,
``","age":`` after a value), per-step masking still asks the model for every token of them,
because usually more than one token is allowed (``{`` or ``{"``; ``"`` or ``"name``...): one
model call per forced token.  Fast-forward (the "coalescence" of the Outlines authors,
llguidance's fast-forward tokens, xgrammar's jump-forward) spells the forced bytes with the
model's tokenizer and appends those tokens at once; they are evaluated together with the
next sampled token, in **one** model call (:meth:`~formcast.model.protocol.LanguageModel.step`
takes several tokens).

The spelling, and its two boundaries:

* **Left.** The forced bytes ``F`` are encoded after the text of the last output token(s)
  (``context_tokens``, default 1), ``encode(context + F)``, and the tokens after ``context``
  are kept when the encoding has a token boundary exactly where ``context`` ends (the
  pre-tokenizer sees the bytes in context).  Otherwise the previous token merges with ``F`` in
  the tokenizer's spelling (the model chose ``,`` where the tokenizer writes ``,"``; no
  continuation can make that prefix canonical): ``F`` is spelled alone.  A spelling whose
  bytes are not exactly ``F`` (a SentencePiece encoder that adds a dummy space, bytes that are
  not UTF-8) is not used: nothing is fast-forwarded then.
* **Right.** The last tokens of the run are held back when a longer token could continue them
  into what follows (llguidance's rule): for each suffix ``s`` of the run's last ``lookback``
  tokens' text, longest first, if some text token of the vocabulary starts with ``s``, is
  longer, and the grammar accepts its extra bytes after ``F``, then every token overlapping
  ``s`` is removed from the run.  ``{"name":"`` is thus appended as ``{"`` + ``name`` and the
  model chooses between ``":"``, ``":"B``... itself: a forced run never cuts off the spelling
  the tokenizer would choose for the text that follows.

What it guarantees: every appended token is accepted by the matcher (the output stays in the
language, exactly as with plain masking), the run's text is exactly the forced bytes' prefix,
and inside the run the tokens are the tokenizer's spelling of that text in its left context.
What it changes: the distribution over outputs.  Plain masking samples the spelling of forced
text from the model, whose next choices then depend on that spelling; fast-forward writes the
canonical spelling.  For a model trained on canonical text the change is small and towards
the model's own spelling (measured in docs/benchmarks_decode.md with the fidelity benchmark).
Greedy output can differ from plain masked greedy output.

Lifetime and cost: :func:`fast_forward_for` keeps one :class:`FastForward` per model object
(weakly); it holds a sorted copy of the vocabulary's text tokens (built once, O(V log V)) and a
cache of runs per compiled grammar (weakly keyed by the grammar; at most ``max_runs`` entries
each, keyed by the grammar state and the left context's token ids), so a schema's forced runs are
spelled once per model: a cached run costs one dictionary lookup plus the matcher's accepts.
A new run costs one to three ``encode`` calls (SmolLM2 on llama.cpp: ~50-100 us each) and the
extension test (a bisection of the sorted tokens and ``matcher.accept_bytes`` on the
candidates' extra bytes).  Thread-safety: the per-model and per-grammar tables are created under
a lock; a run may be computed twice by two threads (harmless); the matcher passed in is used by
one thread.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..cache import LruCache
from ..errors import ConfigurationError
from ..index.compiled import CompiledGrammar
from ..model.protocol import LanguageModel, raw_encoder
from ..runtime.matcher import GrammarMatcher
from ..vocab.canonical import CanonicalPairs, EncodeBytes
from ..vocab.vocabulary import Vocabulary

__all__ = ["FastForward", "fast_forward_for"]

_DEFAULT_LOOKBACK = 4
_DEFAULT_MAX_RUNS = 4096

_FF: weakref.WeakKeyDictionary[Any, FastForward] = weakref.WeakKeyDictionary()
_FF_LOCK = threading.Lock()


def fast_forward_for(model: LanguageModel) -> FastForward:
    """The :class:`FastForward` of ``model`` (built once per model object, from its
    ``encode_bytes``; a model that cannot be weakly referenced gets a new one per call).

    Raises:
        ConfigurationError: the model has no ``encode_bytes`` (the message names the fix).
    """
    encode = raw_encoder(model, "fast_forward=True")
    with _FF_LOCK:
        try:
            found = _FF.get(model)
        except TypeError:  # not weakly referenceable: no sharing across calls
            return FastForward(model.vocab, encode)
        if found is None or found.vocab is not model.vocab:
            found = FastForward(model.vocab, encode)
            with contextlib.suppress(TypeError):
                _FF[model] = found
        return found


class FastForward:
    """Spells forced bytes as tokens for one tokenizer (see the module docstring).

    Args:
        vocab: the model's vocabulary.
        encode: the raw encoder (:data:`~formcast.vocab.canonical.EncodeBytes`, e.g.
            ``model.encode_bytes``): bytes to ids, no BOS or special tokens.
        lookback: tokens at the run's end examined for the right boundary (``>= 1``).
        context_tokens: output tokens of left context for the spelling (``>= 0``).
        max_runs: runs cached per compiled grammar (``>= 0``; 0 disables the cache).

    Counters (for measurements): ``runs`` (non-empty runs returned), ``tokens`` (tokens in
    them), ``held_back`` (tokens removed at right boundaries), ``encode_calls``.

    Raises:
        ConfigurationError: ``encode`` not callable, a bad ``lookback``, ``context_tokens`` or
            ``max_runs``.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        encode: EncodeBytes,
        *,
        lookback: int = _DEFAULT_LOOKBACK,
        context_tokens: int = 1,
        max_runs: int = _DEFAULT_MAX_RUNS,
    ) -> None:
        if not callable(encode):
            raise ConfigurationError("encode must be callable: bytes -> token ids (or None)")
        for name, value, low in (
            ("lookback", lookback, 1),
            ("context_tokens", context_tokens, 0),
            ("max_runs", max_runs, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
        self.vocab = vocab
        self.encode: Callable[[bytes], Sequence[int] | None] = encode
        self.lookback = lookback
        self.context_tokens = context_tokens
        self.max_runs = max_runs
        text = [(tok, i) for i, tok in enumerate(vocab.tokens) if vocab.is_text_token(i)]
        text.sort()
        self._keys: list[bytes] = [t for t, _ in text]
        self._max_len = max((len(t) for t in self._keys), default=0)
        self._lock = threading.Lock()
        self._runs: weakref.WeakKeyDictionary[
            CompiledGrammar, LruCache[tuple[Any, tuple[int, ...]], tuple[int, ...]]
        ] = weakref.WeakKeyDictionary()
        self.runs = 0
        self.tokens = 0
        self.held_back = 0
        self.encode_calls = 0

    # -- the run ---------------------------------------------------------------------------------
    def run(
        self,
        matcher: GrammarMatcher,
        context: Sequence[int] = (),
        *,
        budget: int | None = None,
        canonical: CanonicalPairs | None = None,
    ) -> list[int]:
        """The tokens to append now (empty: nothing forced, or all held back).

        ``context``: the output tokens so far (only the last ``context_tokens`` are read).
        ``budget``: at most this many tokens.  ``canonical``: the run also stops before the
        first pair that :class:`~formcast.vocab.canonical.CanonicalPairs` forbids (the first
        pair being ``(context[-1], run[0])``), as ``canonical=True`` requires.  The matcher is
        left as it was (its state, history and stop flags): the caller accepts the tokens.
        """
        if budget is not None and budget <= 0:
            return []
        if matcher.is_terminated() or matcher.stop_reason is not None:
            return []
        vocab = self.vocab
        ctx_ids = [int(t) for t in context[-self.context_tokens :] if vocab.is_text_token(int(t))]
        key = (matcher.state, tuple(ctx_ids))
        cache = self._cache(matcher.compiled)
        found, cached = cache.get(key) if cache is not None else (False, None)
        if found and cached is not None:
            ids = list(cached)
        else:
            ids = self._compute(matcher, ctx_ids)
            if cache is not None:
                cache.put(key, tuple(ids))
        if canonical is not None and ids:
            prev = int(context[-1]) if len(context) else -1
            keep = 0
            for tok in ids:
                if not canonical.allowed_after(prev, np.asarray([tok]))[0]:
                    break
                keep += 1
                prev = tok
            ids = ids[:keep]
        if budget is not None:
            ids = ids[:budget]
        if ids:
            self.runs += 1
            self.tokens += len(ids)
        return ids

    def _cache(
        self, compiled: CompiledGrammar
    ) -> LruCache[tuple[Any, tuple[int, ...]], tuple[int, ...]] | None:
        if self.max_runs == 0:
            return None
        with self._lock:
            cache = self._runs.get(compiled)
            if cache is None:
                cache = LruCache(self.max_runs)
                self._runs[compiled] = cache
            return cache

    def _compute(self, matcher: GrammarMatcher, ctx_ids: list[int]) -> list[int]:
        forced = matcher.find_jump_forward_bytes()
        if not forced:
            return []
        ids = self.spell(forced, ctx_ids)
        if not ids:
            return []
        ids = ids[: matcher.validate_tokens(ids)]
        if not ids or not matcher.accept_tokens(ids):
            return []
        try:
            chop = self._held_back(matcher, ids)
        finally:
            matcher.rollback(len(ids))
        self.held_back += chop
        return ids[: len(ids) - chop]

    # -- the left boundary -----------------------------------------------------------------------
    def spell(self, forced: bytes, context: Sequence[int] = ()) -> list[int]:
        """The tokenizer's spelling of ``forced`` after the text of ``context`` (token ids),
        or ``[]`` when no context gives a token boundary where ``forced`` starts and a
        spelling of exactly ``forced`` (see the module docstring).  One ``encode`` call per
        context tried (the last ``context_tokens`` tokens, then none)."""
        vocab = self.vocab
        ctx_ids = [int(t) for t in context[-self.context_tokens :]] if self.context_tokens else []
        for k in sorted({len(ctx_ids), 0}, reverse=True):
            prefix = vocab.decode(ctx_ids[len(ctx_ids) - k :])
            self.encode_calls += 1
            got = self.encode(prefix + forced)
            if got is None:
                continue
            enc = [int(t) for t in got]
            pos = 0
            cut = 0
            while cut < len(enc) and pos < len(prefix):
                pos += len(vocab.token_bytes(enc[cut]))
                cut += 1
            if pos != len(prefix):
                continue  # a token straddles the context's end: the context merges with F
            rest = enc[cut:]
            if rest and all(vocab.is_text_token(t) for t in rest) and vocab.decode(rest) == forced:
                return rest
        return []

    # -- the right boundary ----------------------------------------------------------------------
    def _held_back(self, matcher: GrammarMatcher, ids: list[int]) -> int:
        """How many tokens at the end of ``ids`` (already accepted by ``matcher``) a longer
        token could extend into what the grammar allows next."""
        vocab = self.vocab
        tail = ids[-self.lookback :]
        lengths = [len(vocab.token_bytes(t)) for t in tail]
        text = vocab.decode(tail)
        start = max(0, len(text) - self._max_len)
        first_ok: dict[int, bool] = {}
        for i in range(start, len(text)):
            suffix = text[i:]
            if self._extends(matcher, suffix, first_ok):
                covered = 0
                n = 0
                for size in reversed(lengths):
                    covered += size
                    n += 1
                    if covered >= len(suffix):
                        break
                return n
        return 0

    def _extends(self, matcher: GrammarMatcher, suffix: bytes, first_ok: dict[int, bool]) -> bool:
        """Whether some text token starts with ``suffix``, is longer, and its extra bytes are
        accepted by ``matcher`` (which is left unchanged)."""
        keys = self._keys
        i = bisect.bisect_right(keys, suffix)  # tokens equal to the suffix are not longer
        n = len(suffix)
        while i < len(keys) and keys[i].startswith(suffix):
            extra = keys[i][n:]
            i += 1
            head = extra[0]
            ok = first_ok.get(head)
            if ok is None:
                ok = first_ok[head] = _accepts(matcher, extra[:1])
            if ok and (len(extra) == 1 or _accepts(matcher, extra)):
                return True
        return False


def _accepts(matcher: GrammarMatcher, data: bytes) -> bool:
    """Whether ``matcher`` accepts ``data`` now; the matcher is left unchanged (a run-time
    limit hit on the way is cleared again)."""
    if matcher.accept_bytes(data):
        matcher.rollback(1)
        return True
    if matcher.stop_reason is not None:
        matcher.rollback(0)  # clears the limit stop: the state itself did not move
    return False
