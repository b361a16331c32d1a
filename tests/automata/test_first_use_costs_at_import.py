"""What a process pays once is paid when formcast is imported, not inside its first masks: the
hash weights (drawn when formcast.columns and formcast.automata.equivalence are imported: a
process's first numpy random generator costs up to ~30 ms; growing them on demand keeps the
weights already handed out) and numpy.ma (numpy 2.x's ``np.unique`` imports it on its first
call, ~10 ms: grammar_bench's cold p99 of session 22's merge, before this)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from formcast.automata import equivalence
from formcast.columns import _SEED, hash_weights


def test_weights_and_numpy_ma_exist_after_import_alone() -> None:
    code = (
        "import json, sys, formcast.automata.equivalence as e, formcast.columns as c\n"
        "w = {str(k): int(v.size) for k, v in c._WEIGHTS.items()}\n"
        "print(json.dumps([w, 'numpy.ma' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    weights, ma = json.loads(out)
    assert ma  # (np.unique's first call imports it otherwise)
    sizes = {int(k): v for k, v in weights.items()}
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
