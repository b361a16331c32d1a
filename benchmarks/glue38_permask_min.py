#!/usr/bin/env python3
"""Per-mask minimum over runs of two variants (glue38, #31): ``tbm_parts.py --json`` files
(``{schema: [mask us]}``; with ``--old-methods`` the ``.old``/``.new`` files), same schemas and
instances, comparable mask by mask.  Prints the TBM mean and p99 of each variant's per-mask
minimum, and the sum over the masks above 100 us in the base (the cold ones)::

    python benchmarks/glue38_permask_min.py b1.json,b2.json m1.json,m2.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def _load(files: list[str]) -> list[dict[str, list[float]]]:
    return [json.loads(Path(f).read_text(encoding="utf-8")) for f in files]


def main() -> None:
    rb, rm = _load(sys.argv[1].split(",")), _load(sys.argv[2].split(","))
    names = sorted(set.intersection(*[set(r) for r in rb + rm]))
    names = [n for n in names if len({len(r[n]) for r in rb + rm}) == 1]
    b = np.concatenate([np.min([r[n] for r in rb], axis=0) for n in names])
    m = np.concatenate([np.min([r[n] for r in rm], axis=0) for n in names])
    cold = b > 100
    print(
        f"masks {b.size} per-mask min: mean {b.mean():.2f} -> {m.mean():.2f} "
        f"({m.mean() / b.mean():.3f}); p99 {np.percentile(b, 99):.0f} -> "
        f"{np.percentile(m, 99):.0f}; masks > 100 us {b[cold].sum() / 1e3:.1f} -> "
        f"{m[cold].sum() / 1e3:.1f} ms ({m[cold].sum() / b[cold].sum():.3f})"
    )


if __name__ == "__main__":
    main()
