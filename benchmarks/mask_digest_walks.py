#!/usr/bin/env python3
"""sha256 of every formcast mask along every MaskBench instance of the named schemas (issue
#31, memo33): run it on two source trees and compare; masks must be bit-identical.  Walks
each instance's token path as maskbench does (as tops33_maskhash.py), stopping at a token
the mask refuses; prints one digest per schema and the mask count.

Usage::

    PYTHONPATH=DIR python benchmarks/mask_digest_walks.py --walks 20 Github_hard---o82766.json
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collections.abc import Sequence
from typing import Any

import maskbench as mb


def _masks(ad: Any, compiled: Any, ids: list[int], h: Any) -> int:
    """Hash every mask along ``ids`` into ``h``; the number of masks."""
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


def _random_walks(
    ad: Any, compiled: Any, walks: int, steps: int, h: Any, prefix: Sequence[int] = ()
) -> int:
    """Hash the masks along ``walks`` seeded random token paths of up to ``steps`` tokens, each
    token drawn among the ones the mask allows (same masks -> same draws -> same paths, so
    two trees with identical masks hash identically; for schemas without instances), each
    after the forced tokens ``prefix``."""
    import numpy as np

    n = 0
    for w in range(walks):
        rng = random.Random(w)
        m = ad.matcher(compiled)
        mask = ad.alloc()
        for tok in prefix:
            ad.fill(m, mask)
            h.update(bytes(memoryview(mask)))
            if not ad.accept(m, tok):
                raise SystemExit(f"prefix token {tok} refused")
        for _ in range(steps):
            ad.fill(m, mask)
            raw = bytes(memoryview(mask))
            h.update(raw)
            n += 1
            bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
            allowed = np.flatnonzero(bits[: mb.VOCAB_SIZE])
            if len(allowed) == 0 or not ad.accept(m, int(allowed[rng.randrange(len(allowed))])):
                break
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--walks", type=int, default=0, help="also N random walks per schema")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--prefix", action="append", default=[], help="walk after this text too")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    ad = mb.FormcastAdapter()
    ad.setup()
    ad.warmup()
    tok = Tokenizer.from_file(mb.tokenizer_path())
    for name in args.files:
        task = mb.prepare(Path(mb.DATA_DIR) / name, tok)
        h = hashlib.sha256()
        compiled = ad.compile(task["schema"])
        count = sum(_masks(ad, compiled, i["ids"], h) for i in task["instances"])
        count += _random_walks(ad, compiled, args.walks, args.steps, h)
        for text in args.prefix:
            ids = tok.encode(text, add_special_tokens=False).ids
            count += _random_walks(ad, compiled, args.walks, args.steps, h, ids)
        print(f"{name} {len(task['instances'])} instances {count} masks {h.hexdigest()}")


if __name__ == "__main__":
    main()
