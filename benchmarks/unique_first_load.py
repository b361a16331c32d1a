#!/usr/bin/env python3
"""TTFM (thread CPU) of the first ``uniqueItems`` grammar a fresh process loads from the disk
cache: it pays the vocabulary's lexical tables (:mod:`formcast.index.programs.unique.lexer`)
once.  ``python benchmarks/unique_first_load.py DIR string`` (or ``integer``: the value
program); run it once to write the file, then again to time the load (``disk hit 1``)."""

from __future__ import annotations

import sys
import tempfile
import time

from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
from formcast.vocab.loaders import load_vocabulary


def main() -> int:
    cache_dir, item_type = sys.argv[1], sys.argv[2]
    vocab = load_vocabulary("llama3")
    _ = vocab.trie
    with tempfile.TemporaryDirectory() as d:  # setup, not charged
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
    schema = {"type": "array", "uniqueItems": True, "items": {"type": item_type}}
    t = time.thread_time_ns()
    comp = GrammarCompiler(vocab, cache_size=0, cache_dir=cache_dir)
    g = comp.compile_json_schema(schema)
    m = GrammarMatcher(g)
    m.fill_next_token_bitmask(allocate_token_bitmask(1, vocab.vocab_size), 0)
    ms = (time.thread_time_ns() - t) / 1e6
    print(f"{item_type} {type(g.program).__name__} disk hit {comp.disk_hits} TTFM cpu {ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
