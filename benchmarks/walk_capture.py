"""Capture the widest classify/classify_from kernel calls of a grammar_bench workload's cold
document (walk36, session 22), pickled with copies of every argument taken before the call
(rows are mutated by it), for replays against a locally built kernel.

    PYTHONPATH=/tmp/fc-main python benchmarks/walk_capture.py json /tmp/w36/json.pkl [top]
"""

from __future__ import annotations

import copy
import pickle
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _copy(x: Any) -> Any:
    """A deep copy keeping which arguments share a buffer (the kernel checks that the table
    and pending flags are those of ``rows``)."""
    return copy.deepcopy(x)


def main() -> None:
    from tokenizers import Tokenizer

    import formcast.vocab.trie as tr
    import grammar_bench as gb

    wl = gb.make_workloads()[sys.argv[1]]
    out = sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tp = gb.tokenizer_path()
    tok = Tokenizer.from_file(tp)
    doc = tok.encode(wl.docs[0], add_special_tokens=False).ids
    ad = gb.FormcastAdapter(tp)
    ad.setup()
    ad.warmup()
    kern = tr._KERNEL
    calls: list[tuple[float, str, Any]] = []

    class K:
        def __getattr__(self, name: str) -> Any:
            real = getattr(kern, name)
            if name not in ("classify", "classify_from"):
                return real

            def f(*a: Any) -> Any:
                saved = _copy(a)
                t0 = time.thread_time_ns()
                got = real(*a)
                calls.append(((time.thread_time_ns() - t0) / 1e3, name, saved))
                return got

            return f

    tr._KERNEL = K()
    comp = ad.compile(wl)
    m = ad.matcher(comp)
    mask = ad.alloc()
    for step in range(len(doc) + 1):
        ad.fill(m, mask)
        if step == len(doc):
            break
        ad.accept(m, doc[step])
    calls.sort(key=lambda c: -c[0])
    for us, name, a in calls[:top]:
        resumed = "None" if len(a) < 19 or a[18] is None else len(a[18])
        print(f"{us:8.0f} us {name} start={a[9]} resume={resumed}")
    with open(out, "wb") as fh:
        pickle.dump([(name, a) for _, name, a in calls[:top]], fh)


if __name__ == "__main__":
    main()
