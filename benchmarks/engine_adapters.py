"""The engine-adapter pieces that maskbench.py, grammar_bench.py and regex_bench.py share.

Each of those harnesses drives every engine through one small adapter (set up, compile, a
matcher per document, a bitmask, fill, accept) on the Llama-3 vocabulary; how an engine
*compiles* differs per harness (a JSON schema, a grammar, a regex), how its masks are filled
and read does not.  This module holds the latter once:

* :class:`Adapter`: the matcher-side interface (``matcher``, ``alloc``, ``view``, ``fill``,
  ``accept``) with ``notes`` for the report; each harness subclasses it with its own
  ``__init__``/``setup``/``compile``;
* :class:`LLGuidanceMatchers` and :class:`XGrammarMatchers`: those methods for the two peers,
  plus their tokenizer set-up (``llguidance.LLTokenizer`` from ``tokenizer.json``; xgrammar's
  ``TokenizerInfo`` from the exact token bytes, special tokens as ``b""``);
* :func:`allowed` (one bit of an int32 ``[1, W]`` mask view) and :func:`version`.

Lifetime: adapters live for one worker process; nothing here is timed by itself.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

EOS_ID = 128001  # <|end_of_text|>
VOCAB_SIZE = 128256


class Unavailable(Exception):
    """The engine cannot be used here (not installed, API missing)."""


class Adapter:
    """One engine behind a harness: its matchers and bitmasks (``compile`` is the harness's)."""

    name = ""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def setup(self) -> None:
        raise NotImplementedError

    def matcher(self, compiled: Any) -> Any:
        raise NotImplementedError

    def alloc(self) -> Any:
        raise NotImplementedError

    def view(self, mask: Any) -> Any:
        """A numpy int32 ``[1, W]`` view of the mask ``alloc`` made."""
        return mask

    def fill(self, m: Any, mask: Any) -> None:
        raise NotImplementedError

    def accept(self, m: Any, tok: int) -> bool:
        raise NotImplementedError


class LLGuidanceMatchers(Adapter):
    """llguidance: the compile returns an ``LLMatcher``; each document walks a deep copy."""

    ll: Any
    lln: Any
    tok: Any

    def load_llguidance(self, tokenizer_json: str) -> None:
        """Import llguidance (else :class:`Unavailable`) and build its tokenizer."""
        try:
            import llguidance
            import llguidance.numpy as lln
        except ImportError as e:
            raise Unavailable(f"{type(e).__name__}: {e}") from e
        self.ll, self.lln = llguidance, lln
        with open(tokenizer_json, encoding="utf-8") as f:
            self.tok = llguidance.LLTokenizer(f.read(), n_vocab=VOCAB_SIZE, eos_token=EOS_ID)

    def matcher(self, compiled: Any) -> Any:
        # the matcher built at compile time stays pristine; each document gets a copy
        return compiled.deep_copy()

    def alloc(self) -> Any:
        return self.lln.allocate_token_bitmask(1, VOCAB_SIZE)

    def fill(self, m: Any, mask: Any) -> None:
        self.lln.fill_next_token_bitmask(m, mask, 0)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.consume_token(tok))


class XGrammarMatchers(Adapter):
    """xgrammar on one thread: ``GrammarMatcher`` per document, a torch bitmask."""

    xgr: Any
    info: Any

    def load_xgrammar(self, tokens: list[bytes], special: set[int]) -> None:
        """Import xgrammar (else :class:`Unavailable`) and build its ``TokenizerInfo``."""
        try:
            import torch
            import xgrammar as xgr
        except Exception as e:
            raise Unavailable(f"{type(e).__name__}: {e}") from e
        torch.set_num_threads(1)
        self.xgr = xgr
        raw = [b"" if i in special else t for i, t in enumerate(tokens)]
        self.info = xgr.TokenizerInfo(
            raw, xgr.VocabType.RAW, vocab_size=VOCAB_SIZE, stop_token_ids=[EOS_ID]
        )

    def load_xgrammar_llama3(self) -> None:
        """:meth:`load_xgrammar` on formcast's Llama-3 vocabulary (exact bytes per id)."""
        from formcast.vocab.loaders import load_vocabulary

        vocab = load_vocabulary("llama3")
        self.load_xgrammar(list(vocab.tokens), set(vocab.special_token_ids))

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def alloc(self) -> Any:
        return self.xgr.allocate_token_bitmask(1, VOCAB_SIZE)

    def view(self, mask: Any) -> Any:
        return mask.numpy()

    def fill(self, m: Any, mask: Any) -> None:
        m.fill_next_token_bitmask(mask, 0)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


def allowed(view: Any, tok: int) -> bool:
    """Whether token ``tok`` is allowed in an int32 ``[1, W]`` mask view."""
    return bool((int(view[0, tok >> 5]) >> (tok & 31)) & 1)


def version(dist: str, engine: str) -> str:
    """The installed version of ``dist`` (formcast run from a source tree: ``src``)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "src" if engine == "formcast" else "not installed"
