"""maskbench_cpu.py with `_LazyExitSplitClassifier._ensure` instrumented (issue #31).

Per call of ``_ensure`` (thread CPU time), its parts (the lexer's ``ensure``, the ahead
states, the table writes) and the rows it wrote are appended to
``$ENSURE_PROFILE_DIR/<pid>.tsv`` (one line per call: total_us, lexer_us, ahead_us,
write_us, input states, rows written).  Summarize with ``--summary DIR``.

    PYTHONPATH=DIR ENSURE_PROFILE_DIR=/tmp/p python benchmarks/ensure_profile.py \\
        --sample 60 --seed 3 --engines formcast
    python benchmarks/ensure_profile.py --summary /tmp/p
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _summary(path: str) -> None:
    import numpy as np

    rows = []
    for name in os.listdir(path):
        with open(os.path.join(path, name)) as f:
            rows += [[float(x) for x in line.split()] for line in f if line.strip()]
    a = np.asarray(rows)
    if not a.size:
        print("no calls")
        return
    n = a.shape[0]
    print(f"calls {n}")
    for i, name in enumerate(("total", "lexer", "ahead", "write", "other")):
        col = a[:, 0] - a[:, 1:4].sum(axis=1) if name == "other" else a[:, i]
        print(
            f"{name:6s} mean {col.mean():8.1f} us  p50 {np.percentile(col, 50):7.1f}"
            f"  p99 {np.percentile(col, 99):8.1f}  sum {col.sum() / 1e3:8.1f} ms"
        )
    print(
        f"states in: mean {a[:, 4].mean():.1f}; rows written: mean {a[:, 5].mean():.1f}"
        f" sum {a[:, 5].sum():.0f}"
    )


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--summary":
    _summary(sys.argv[2])
    sys.exit(0)

import maskbench as mb  # noqa: E402
import maskbench_cpu  # noqa: E402,F401  (installs the thread-CPU _walk)
import patch_guard  # noqa: E402

patch_guard.require_patchable("ensure_profile.py", "timing _ensure/_LazyWalkTables.write")
from formcast.index import cfg_program as cp  # noqa: E402

_OUT = os.environ.get("ENSURE_PROFILE_DIR")
_acc = [0.0, 0.0, 0.0]
_clock = time.thread_time_ns
_orig_ensure = cp._LazyExitSplitClassifier._ensure
_orig_ahead = cp.ahead_states
_orig_write = cp._LazyWalkTables.write


def _timed(i: int, fn: Any) -> Any:
    def wrap(*a: Any, **k: Any) -> Any:
        t0 = _clock()
        try:
            return fn(*a, **k)
        finally:
            _acc[i] += _clock() - t0

    return wrap


cp.ahead_states = _timed(1, _orig_ahead)
cp.LazyExpandedLexer.ensure = _timed(0, cp.LazyExpandedLexer.ensure)  # type: ignore[method-assign]
cp._LazyWalkTables.write = _timed(2, _orig_write)  # type: ignore[method-assign]


def _ensure(self: Any, states: Any, ahead: int = 0) -> None:
    _acc[:] = [0.0, 0.0, 0.0]
    before = len(self._ready_list)
    t0 = _clock()
    try:
        _orig_ensure(self, states, ahead)
    finally:
        dt = _clock() - t0
        if _OUT:
            with open(os.path.join(_OUT, f"{os.getpid()}.tsv"), "a") as f:
                f.write(
                    f"{dt / 1e3:.1f} {_acc[0] / 1e3:.1f} {_acc[1] / 1e3:.1f} {_acc[2] / 1e3:.1f}"
                    f" {len(states)} {len(self._ready_list) - before}\n"
                )


cp._LazyExitSplitClassifier._ensure = _ensure  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(mb.main())
