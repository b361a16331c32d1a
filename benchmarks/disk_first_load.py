#!/usr/bin/env python3
"""The *first* warm start of a genuinely new process: ``import formcast``, the vocabulary
loaded (not charged), then one schema's ``GrammarCompiler(vocab, cache_dir=D)
.compile_json_schema`` + matcher + first mask, timed (wall and thread CPU) with every lazy
import it triggers -- what a server restarted on a filled cache pays for its first request
(``disk_cache_bench.py`` charges no import: its setup compiles first).

One process per schema of a MaskBench sample (``--sample N --seed S``, the schemas
``maskbench.py`` picks; ``--limit`` of them), the directory filled first by
``disk_cache_bench.py --dir D``::

    python benchmarks/disk_cache_bench.py --sample 100 --seed 0 --dir /tmp/d
    python benchmarks/disk_first_load.py --dir /tmp/d --limit 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # the MaskBench harness: data, tokenizer

_CHILD = """
import json, sys, time
schema = json.load(open(sys.argv[1]))
from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
from formcast.vocab.loaders import load_vocabulary
vocab = load_vocabulary("llama3")
_ = vocab.trie
t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
comp = GrammarCompiler(vocab, cache_size=0, cache_dir=sys.argv[2])
m = GrammarMatcher(comp.compile_json_schema(schema))
m.fill_next_token_bitmask(allocate_token_bitmask(1, int(sys.argv[3])), 0)
t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
print(json.dumps([(t1 - t0) / 1e3, (c1 - c0) / 1e3, comp.disk_hits]))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=10)
    args = ap.parse_args()
    args.files, args.full, args.data = None, False, str(maskbench.DATA_DIR)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    rows = []
    for path in maskbench.select_files(args)[: args.limit]:
        schema = maskbench.prepare(path, tok)["schema"]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(schema, f)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, f.name, args.dir, str(maskbench.VOCAB_SIZE)],
            capture_output=True,
            text=True,
            check=False,
        )
        Path(f.name).unlink()
        if out.returncode == 0:
            wall, cpu, hits = json.loads(out.stdout.strip().splitlines()[-1])
            if hits:
                rows.append((wall, cpu))
    a = np.array(rows)
    print(f"{len(rows)} first warm starts (one new process each) at {time.strftime('%H:%M:%S')}")
    for i, name in enumerate(("wall", "thread CPU")):
        print(f"{name:10s} µs p50 {np.median(a[:, i]):9.0f} mean {a[:, i].mean():9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
