#!/usr/bin/env python3
"""cProfile of a new process's warm starts from the disk cache, summed over a MaskBench sample.

Per schema (the schemas ``maskbench.py --sample N --seed S`` picks), after a ``gc.collect()``
as in ``disk_cache_bench.py``: ``GrammarCompiler(vocab, cache_size=0, cache_dir=D)
.compile_json_schema(schema)`` + matcher + first mask, under one profiler that sums every
schema's calls (the schemas the directory holds: a first pass finds them); prints the
top functions by own time and by cumulative time.  ``--dir``: a cache directory written by
the same code (``disk_cache_bench.py --dir D``)::

    python benchmarks/disk_cache_bench.py --sample 100 --seed 0 --dir /tmp/d
    python benchmarks/disk_load_profile.py --dir /tmp/d --top 40
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # the MaskBench harness: data, tokenizer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    args.files, args.full, args.data = None, False, str(maskbench.DATA_DIR)
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    _ = vocab.trie
    with tempfile.TemporaryDirectory() as d:  # setup, not charged (as disk_cache_bench.py)
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    schemas = [maskbench.prepare(p, tok)["schema"] for p in maskbench.select_files(args)]
    loadable = []  # (a first pass, not profiled: the schemas the directory holds)
    for schema in schemas:
        comp = GrammarCompiler(vocab, cache_size=0, cache_dir=args.dir)
        try:
            comp.compile_json_schema(schema)
        except Exception:  # (schemas the compiler refuses)
            continue
        if comp.disk_hits:
            loadable.append(schema)
    prof = cProfile.Profile()
    hits = 0
    for schema in loadable:
        gc.collect()
        prof.enable()
        comp = GrammarCompiler(vocab, cache_size=0, cache_dir=args.dir)
        compiled = comp.compile_json_schema(schema)
        m = GrammarMatcher(compiled)
        m.fill_next_token_bitmask(allocate_token_bitmask(1, maskbench.VOCAB_SIZE), 0)
        prof.disable()
        hits += comp.disk_hits
    print(f"{len(schemas)} schemas, {len(loadable)} in the directory, {hits} loaded")
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(args.top)
    st.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
