"""benchmarks/maskbench.py with each mask timed in thread CPU time instead of wall time.

On a shared machine (2 cores, several jobs) a wall-clock TBM charges a mask the scheduler
slices of other processes; ``time.thread_time_ns`` does not.  Everything else (schemas,
instances, engines, report) is maskbench.py's: this wrapper only replaces its ``_walk`` (the
spawned workers import this module as their main module, so they run the replacement too).
TTFM stays wall time.

Usage (the same arguments as maskbench.py)::

    PYTHONPATH=DIR python benchmarks/maskbench_cpu.py --sample 60 --seed 1 \\
        --engines formcast,llguidance
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import maskbench as mb


def _walk(ad: Any, compiled: Any, ids: list[int], times: list[float] | None) -> dict[str, Any]:
    """maskbench's ``_walk`` with thread CPU time per mask."""
    m = ad.matcher(compiled)
    mask = ad.alloc()
    view = ad.view(mask)
    clock = time.thread_time_ns
    for step in range(len(ids) + 1):
        t0 = clock()
        ad.fill(m, mask)
        dt = clock() - t0
        if times is not None:
            times.append(dt / 1e3)
        if step == len(ids):
            if mb.allowed(view, mb.EOS_ID):
                return {"ok": True}
            return {"ok": False, "reason": "stop not allowed", "step": step}
        t = ids[step]
        if not mb.allowed(view, t):
            reason = "token not allowed" if view.any() else "dead end (empty mask)"
            return {"ok": False, "reason": reason, "step": step}
        if not ad.accept(m, t):
            return {"ok": False, "reason": "mask/accept mismatch", "step": step}
    raise AssertionError("unreachable")


mb._walk = _walk

if __name__ == "__main__":
    sys.exit(mb.main())
