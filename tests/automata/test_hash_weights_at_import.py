"""The hash weights are drawn when formcast.columns and formcast.automata.equivalence are
imported, not inside the first mask (a process's first numpy random generator costs up to
~30 ms), and growing them on demand keeps the weights already handed out."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from formcast.automata import equivalence
from formcast.columns import _SEED, hash_weights


def test_weights_of_both_seeds_exist_after_import_alone() -> None:
    code = (
        "import json, formcast.automata.equivalence as e, formcast.columns as c\n"
        "print(json.dumps({str(k): int(v.size) for k, v in c._WEIGHTS.items()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    sizes = {int(k): v for k, v in json.loads(out).items()}
    assert sizes.get(_SEED, 0) >= 1024
    assert sizes.get(equivalence._ROW_SEED, 0) >= 1024


def test_growing_keeps_the_weights_handed_out() -> None:
    for seed in (_SEED, equivalence._ROW_SEED):
        first = hash_weights(1024, seed).copy()
        grown = hash_weights(5000, seed)
        assert grown.size == 5000
        np.testing.assert_array_equal(grown[:1024], first)
        fresh = np.random.default_rng(seed).integers(1, 1 << 62, size=1024, dtype=np.int64) | 1
        np.testing.assert_array_equal(first, fresh)
