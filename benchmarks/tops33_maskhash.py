#!/usr/bin/env python3
"""sha256 of every formcast mask over MaskBench instances and grammar_bench documents (issue
#31, tops33): run it on two builds (or two settings of a switch) and compare the digests;
masks must be bit-identical.

For each sampled MaskBench schema (``--sample N --seed S``, as maskbench.py picks them): one
compile, every instance's token path (valid or not) walked as maskbench does, each mask
hashed, stopping at a token the mask refuses.  Then every grammar_bench workload's two
documents on one compile.  Prints one digest per part, the mask count and a digest of all.

Usage::

    PYTHONPATH=DIR python benchmarks/tops33_maskhash.py --sample 40 --seed 11
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_bench as gb
import maskbench as mb


def _masks(ad: Any, compiled: Any, ids: list[int], h: Any) -> int:
    m = ad.matcher(compiled)
    mask = ad.alloc()
    view = ad.view(mask) if hasattr(ad, "view") else None
    n = 0
    for step in range(len(ids) + 1):
        ad.fill(m, mask)
        h.update(bytes(memoryview(mask)))
        n += 1
        if step == len(ids):
            break
        t = ids[step]
        if view is not None and not mb._allowed(view, t):
            break
        if not ad.accept(m, t):
            break
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--grammars", default="json,c1_arith,c2_arith,c_lang,json_gbnf")
    args = ap.parse_args()
    total = hashlib.sha256()
    count = 0
    from tokenizers import Tokenizer

    ad = mb.FormcastAdapter()
    ad.setup()
    ad.warmup()
    tok = Tokenizer.from_file(mb.tokenizer_path())
    data = Path(mb.DATA_DIR)
    files = sorted(data.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    h = hashlib.sha256()
    for f in files:
        task = mb.prepare(f, tok)
        try:
            compiled = ad.compile(task["schema"])
        except Exception as e:  # a schema formcast refuses: its message is hashed
            h.update(f"{f.name}: {type(e).__name__}".encode())
            continue
        for inst in task["instances"]:
            count += _masks(ad, compiled, inst["ids"], h)
    print(f"maskbench {len(files)} schemas: {h.hexdigest()}")
    total.update(h.digest())
    gad = gb.FormcastAdapter(gb.tokenizer_path())
    gad.setup()
    gad.warmup()
    gtok = Tokenizer.from_file(gb.tokenizer_path())
    workloads = gb.make_workloads()
    for name in args.grammars.split(","):
        wl = workloads[name]
        compiled = gad.compile(wl)
        g = hashlib.sha256()
        for d in wl.docs:
            count += _masks(gad, compiled, gtok.encode(d, add_special_tokens=False).ids, g)
        print(f"{name}: {g.hexdigest()}")
        total.update(g.digest())
    print(f"{count} masks, all: {total.hexdigest()}")


if __name__ == "__main__":
    main()
