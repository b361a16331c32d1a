#!/usr/bin/env python3
"""Where a new process's warm start from the disk cache goes, over a MaskBench sample.

Per schema (the schemas ``maskbench.py --sample N --seed S`` picks), after a ``gc.collect()``
as in ``disk_cache_bench.py``: ``GrammarCompiler(vocab, cache_size=0, cache_dir=D)
.compile_json_schema(schema)`` + matcher + first mask.  ``--dir``: a cache directory written by
the same code (the file keys depend on it), e.g. by ``disk_cache_bench.py --dir D``.  Two views:

* default: one cProfile over every schema the directory holds (a first pass finds them); the
  top functions by own time and by cumulative time;
* ``--phases``: the thread CPU of each phase -- the compiler made, the schema read
  (``JsonSchemaSpec.of``), the grammar key, the file key, the file read, the container checked
  (header, CRC, metadata JSON), the decode, the matcher and the first mask (min of ``--repeat``
  per schema; p50 / p90 / mean over the schemas).

::

    python benchmarks/disk_cache_bench.py --sample 100 --seed 0 --dir /tmp/d
    python benchmarks/disk_load_profile.py --dir /tmp/d --top 40
    python benchmarks/disk_load_profile.py --dir /tmp/d --phases --repeat 1
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import itertools
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # the MaskBench harness: data, tokenizer

NAMES = ("compiler", "spec", "gkey", "dkey", "read", "container", "decode", "matcher", "mask")


def _one(vocab: object, schema: object, cache_dir: str) -> list[float] | None:
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.index.compiled import CompiledGrammar, grammar_key, serialization_layout
    from formcast.index.persist import codec, container
    from formcast.index.spec import JsonSchemaSpec

    clock = time.thread_time_ns
    gc.collect()
    t = [clock()]
    comp = GrammarCompiler(vocab, cache_size=0, cache_dir=cache_dir)  # type: ignore[arg-type]
    t.append(clock())
    spec = JsonSchemaSpec.of(schema, None)
    t.append(clock())
    key = grammar_key(*spec.key_parts(), vocab)  # type: ignore[arg-type]
    t.append(clock())
    disk_key = comp._cache.disk_key(key)
    t.append(clock())
    assert comp._cache.disk is not None
    assert disk_key is not None
    try:  # as CompileCache.load reads it (memory-mapped where this tree can)
        data = comp._cache.disk.get(disk_key, mapped=True)
    except TypeError:  # a tree before DiskCache.get(mapped=)
        data = comp._cache.disk.get(disk_key)
    t.append(clock())
    if data is None:
        return None
    container.open_container(data)
    t.append(clock())
    codec.load_grammar(data, vocab, serialization_layout())  # type: ignore[arg-type]
    t.append(clock())
    grammar = CompiledGrammar.deserialize(data, vocab)  # type: ignore[arg-type]
    t0 = clock()
    m = GrammarMatcher(grammar)
    t.append(clock() - t0 + t[-1])
    m.fill_next_token_bitmask(allocate_token_bitmask(1, maskbench.VOCAB_SIZE), 0)
    t.append(clock() - t0 + t[-2])
    d = [(b - a) / 1e3 for a, b in itertools.pairwise(t)]
    d[6] -= d[5]  # (load_grammar checks the container again)
    return d


def _profile(vocab: Any, schemas: list[Any], cache_dir: str, top: int) -> None:
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask

    loadable = []  # (a first pass, not profiled: the schemas the directory holds)
    for schema in schemas:
        comp = GrammarCompiler(vocab, cache_size=0, cache_dir=cache_dir)
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
        comp = GrammarCompiler(vocab, cache_size=0, cache_dir=cache_dir)
        compiled = comp.compile_json_schema(schema)
        m = GrammarMatcher(compiled)
        m.fill_next_token_bitmask(allocate_token_bitmask(1, maskbench.VOCAB_SIZE), 0)
        prof.disable()
        hits += comp.disk_hits
    print(f"{len(schemas)} schemas, {len(loadable)} in the directory, {hits} loaded")
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)


def _phases(vocab: Any, schemas: list[Any], cache_dir: str, repeat: int) -> None:
    rows = []
    for schema in schemas:
        runs = [r for r in (_one(vocab, schema, cache_dir) for _ in range(repeat)) if r]
        if runs:
            rows.append([*min(runs, key=sum), sum(min(runs, key=sum))])
    a = np.array(rows)
    print(f"{len(rows)} schemas loaded; thread CPU µs, min of {repeat} per schema")
    for i, name in enumerate((*NAMES, "total")):
        col = a[:, i]
        p50, p90 = np.percentile(col, 50), np.percentile(col, 90)
        print(f"{name:10s} p50 {p50:7.0f} p90 {p90:7.0f} mean {col.mean():7.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=40, help="cProfile rows per table")
    ap.add_argument("--phases", action="store_true", help="per-phase thread CPU, no profiler")
    ap.add_argument("--repeat", type=int, default=1, help="--phases: runs per schema (min)")
    args = ap.parse_args()
    args.files, args.full, args.data = None, False, str(maskbench.DATA_DIR)
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    _ = vocab.trie
    with tempfile.TemporaryDirectory() as d:  # setup, not charged (as disk_cache_bench.py)
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
        GrammarCompiler(vocab, cache_dir=d).compile_json_schema({"type": "object"})
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    schemas = [maskbench.prepare(p, tok)["schema"] for p in maskbench.select_files(args)]
    if args.phases:
        _phases(vocab, schemas, args.dir, args.repeat)
    else:
        _profile(vocab, schemas, args.dir, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
