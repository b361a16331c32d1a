"""Per cold step of a grammar_bench workload: thread CPU of the mask, of the C classify walks
inside it (``classify_walk_resume``/``classify_walk_rows``, with their calls and stops), and of
the lexer's ``ensure`` rounds (lexer35, session 21).

    PYTHONPATH=/tmp/fc-main python benchmarks/cold_walk_profile.py json_gbnf [top]
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from tokenizers import Tokenizer

    import formcast.index.cfg_program as cp
    import patch_guard

    patch_guard.require_patchable("cold_walk_profile.py", "timing _ensure")
    import grammar_bench as gb

    wl = gb.make_workloads()[sys.argv[1]]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    tp = gb.tokenizer_path()
    tok = Tokenizer.from_file(tp)
    doc = tok.encode(wl.docs[0], add_special_tokens=False).ids
    ad = gb.FormcastAdapter(tp)
    ad.setup()
    ad.warmup()
    acc: dict[str, list[Any]] = {"walk": [0.0, 0, 0, 0], "ensure": [0.0, 0]}
    real_resume = cp.classify_walk_resume
    real_ensure = cp._LazyExitSplitClassifier._ensure

    def resume(*a: Any, **k: Any) -> Any:
        t0 = time.thread_time_ns()
        got = real_resume(*a, **k)
        w = acc["walk"]
        w[0] += (time.thread_time_ns() - t0) / 1e3
        w[1] += 1
        if got is not None:
            w[2] += got[1].size // 2
            w[3] += int(a[9] is not None)
        return got

    def ensure(self: Any, *a: Any, **k: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return real_ensure(self, *a, **k)
        finally:
            e = acc["ensure"]
            e[0] += (time.thread_time_ns() - t0) / 1e3
            e[1] += 1

    cp.classify_walk_resume = resume
    cp._LazyExitSplitClassifier._ensure = ensure
    gc.collect()
    comp = ad.compile(wl)
    m = ad.matcher(comp)
    mask = ad.alloc()
    rows = []
    gc.disable()
    for step in range(len(doc) + 1):
        acc["walk"] = [0.0, 0, 0, 0]
        acc["ensure"] = [0.0, 0]
        c0 = time.thread_time_ns()
        ad.fill(m, mask)
        t = (time.thread_time_ns() - c0) / 1e3
        rows.append((t, step, list(acc["walk"]), list(acc["ensure"])))
        if step == len(doc):
            break
        ad.accept(m, doc[step])
    gc.enable()
    tot = sum(r[0] for r in rows)
    wt = sum(r[2][0] for r in rows)
    et = sum(r[3][0] for r in rows)
    print(f"{sys.argv[1]}: {len(rows)} masks, sum {tot:.0f} us, walks {wt:.0f}, ensure {et:.0f}")
    for t, step, w, e in sorted(rows, reverse=True)[:top]:
        print(
            f"step {step:3d} {t:7.0f} us  walks {w[0]:6.0f} us ({w[1]} calls, {w[2]} stops, "
            f"{w[3]} resumes)  ensure {e[0]:6.0f} us ({e[1]})"
        )


if __name__ == "__main__":
    main()
