#!/usr/bin/env python3
"""In-process A/B of a switch (#31): base and new alternate in one process, so the machine's
drift hits both alike -- the one harness behind every "setting off vs on" comparison.

A *switch* is an attribute (of a module or a class) set to one value for ``base`` and to
another for ``new`` before each round, and restored at the end: a module flag
(``cfg_program._KEEP_ORDERS``), a function (``cfg_program.measure_shares``), a method or a
class.  Two workloads:

* ``maskbench``: per MaskBench schema (``--sample N --seed S`` or ``--files``), ``--reps``
  rounds with the settings alternating (base, new, new, base, ...), each a fresh compile
  (untimed) and every instance walked with a fresh matcher, each mask after the first timed
  in thread CPU (gc off); ``--ttfm``: the compile and first mask instead (one number per
  schema).  Reported: per setting the TBM mean, p99, max and sum of the per-mask minimum
  over its rounds, and the median per-schema ratio new/base.
* ``grammar``: per grammar_bench workload, ``--rounds`` rounds alternating: a fresh compile
  (``GrammarCompiler(cache_size=0)``, untimed), the first document walked with a fresh
  matcher (cold), then the second (warm), each mask timed in thread CPU (gc off).
  Reported per setting and document (``--docs``): p99, max and sum of the per-mask minimum
  over the rounds, the rounds' own p99s and the five slowest steps.

The masks are the same sequence under both settings, or the run stops with an error.  On the
command line a value is an int literal or ``module:name`` (an object: a function of a
benchmark module, say); ``--new-value`` defaults to the attribute's current value.  Scripts
with a switch that is not one attribute (two trees' sources: checks_tbm_ab.py) call
:func:`maskbench_ab` / :func:`grammar_ab` with their own :class:`Switch` objects.  Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/ab_switch.py maskbench \\
        --attr formcast.index.cfg_program._KEEP_ORDERS --base-value 0 --new-value 1
    PYTHONPATH=/tmp/fc-main python benchmarks/ab_switch.py grammar --rounds 4 \\
        --attr formcast.index.cfg_program.measure_shares \\
        --base-value json38_shares_ab:py_measure_shares json json_gbnf
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench

_SETTINGS = ("base", "new")


@dataclass
class Switch:
    """One attribute of ``owner`` (a module or a class) set to ``base`` or ``new``.

    Lifetime: one A/B run; :meth:`restore` puts back the value it found."""

    owner: Any
    attr: str
    base: Any
    new: Any
    label: str = ""
    _kept: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._kept = getattr(self.owner, self.attr)
        if not self.label:
            self.label = f"{getattr(self.owner, '__name__', self.owner)}.{self.attr}"

    def set(self, which: str) -> None:
        setattr(self.owner, self.attr, self.base if which == "base" else self.new)

    def restore(self) -> None:
        setattr(self.owner, self.attr, self._kept)


def _order(rep: int) -> tuple[str, str]:
    return _SETTINGS if rep % 2 == 0 else _SETTINGS[::-1]


def _set_all(switches: Sequence[Switch], which: str) -> None:
    for s in switches:
        s.set(which)


def _restore_all(switches: Sequence[Switch]) -> None:
    for s in switches:
        s.restore()


def maskbench_ab(
    switches: Sequence[Switch],
    *,
    sample: int = 100,
    seed: int = 3,
    reps: int = 4,
    files: str | None = None,
    ttfm: bool = False,
) -> dict[str, float]:
    """Run the ``maskbench`` workload (module docstring) and print its report.

    Returns the new/base ratio of the sums and the median per-schema ratio (keys ``sum``,
    ``median``).  Cost: ``2 * reps`` compiles and walks of every schema of the sample."""
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    chosen = maskbench.select_files(
        argparse.Namespace(
            data=str(maskbench.DATA_DIR), files=files, full=False, sample=sample, seed=seed
        )
    )
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema({"type": "string"})
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    vocab.trie.strings_end_to_end()  # per-vocabulary tables made before the timing
    clock = time.thread_time_ns
    best: dict[str, list[float]] = {w: [] for w in _SETTINGS}
    ratios: list[float] = []
    for path in chosen:
        task = maskbench.prepare(path, tok)
        got: dict[str, list[list[float]]] = {w: [] for w in _SETTINGS}
        digests: dict[str, str] = {}
        try:
            for rep in range(reps):
                for which in _order(rep):
                    _set_all(switches, which)
                    times: list[float] = []
                    h = hashlib.sha256()
                    t0 = clock()
                    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
                        task["schema"]
                    )
                    if ttfm:  # (gc on, as a compile runs in a server)
                        GrammarMatcher(grammar).fill_next_token_bitmask(mask, 0)
                        times.append((clock() - t0) / 1e3)
                        h.update(mask.tobytes())
                    else:
                        gc.collect()
                        gc.disable()
                        try:
                            _walk_instances(grammar, task["instances"], mask, times, h)
                        finally:
                            gc.enable()
                    got[which].append(times)
                    if digests.setdefault(which, h.hexdigest()) != h.hexdigest():
                        raise SystemExit(f"{path.name}: {which}'s masks differ between rounds")
        except FormcastError:
            continue
        finally:
            _restore_all(switches)
        if digests.get("base") != digests.get("new"):
            raise SystemExit(f"{path.name}: masks differ between base and new")
        sums = {}
        for which, runs in got.items():
            mins = np.min(np.asarray(runs), axis=0) if runs and runs[0] else np.zeros(0)
            best[which].extend(mins.tolist())
            sums[which] = float(mins.sum())
        if sums["base"] > (0 if ttfm else 1000):  # (TBM: schemas with >= 1 ms of masks)
            ratios.append(sums["new"] / sums["base"])
    what = "TTFM" if ttfm else "TBM"
    for which, ts in best.items():
        a = np.asarray(ts)
        print(
            f"{which:5s} {'schemas' if ttfm else 'masks'} {a.size} {what} mean {a.mean():.1f} us"
            f" p99 {np.percentile(a, 99):.0f} max {a.max():.0f} sum {a.sum() / 1e3:.1f} ms"
        )
    out = {
        "sum": sum(best["new"]) / sum(best["base"]),
        "median": statistics.median(ratios) if ratios else float("nan"),
    }
    labels = ", ".join(s.label for s in switches)
    print(
        f"new/base: sum {out['sum']:.3f}, median per-schema ratio {out['median']:.3f} "
        f"({len(ratios)} schemas); masks identical; switch {labels}"
    )
    return out


def _walk_instances(
    grammar: Any, instances: list[dict[str, Any]], mask: Any, times: list[float], h: Any
) -> None:
    """Every instance through a fresh matcher; each mask's thread CPU after the very first."""
    from formcast import GrammarMatcher

    clock = time.thread_time_ns
    first = True
    for inst in instances:
        m = GrammarMatcher(grammar)
        for token in [*inst["ids"], None]:
            t = clock()
            m.fill_next_token_bitmask(mask, 0)
            dt = (clock() - t) / 1e3
            if not first:
                times.append(dt)
            first = False
            h.update(mask.tobytes())
            if token is None or not m.accept_token(token):
                break


def grammar_ab(
    switches: Sequence[Switch],
    workloads: Sequence[str] = ("json", "json_gbnf"),
    *,
    rounds: int = 4,
    docs: Sequence[str] = ("cold", "warm"),
) -> None:
    """Run the ``grammar`` workload (module docstring) and print its report.

    Cost: ``2 * rounds`` compiles and walks of each workload's two documents."""
    from tokenizers import Tokenizer

    import grammar_bench as gb

    tok = Tokenizer.from_file(gb.tokenizer_path())
    ad = gb.FormcastAdapter(gb.tokenizer_path())
    ad.setup()
    ad.warmup()
    for name in workloads:
        wl = gb.make_workloads()[name]
        texts = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs[:2]]
        runs: dict[str, list[list[list[float]]]] = {w: [] for w in _SETTINGS}
        digests: set[str] = set()
        try:
            for r in range(rounds):
                for which in _order(r):
                    _set_all(switches, which)
                    times, digest = _walk_documents(ad, wl, texts)
                    runs[which].append(times)
                    digests.add(digest)
        finally:
            _restore_all(switches)
        if len(digests) != 1:
            raise SystemExit(f"{name}: masks differ between base and new")
        for d, label in enumerate(("cold", "warm")):
            if label not in docs:
                continue
            for which in _SETTINGS:
                per_round = [t[d] for t in runs[which]]
                best = np.min(np.asarray(per_round), axis=0)
                top = np.argsort(-best)[:5]
                each = " ".join(f"{np.percentile(t, 99):.0f}" for t in per_round)
                print(
                    f"{name} {label} {which:4s}: per-mask min p99 {np.percentile(best, 99):.1f}"
                    f" us, max {best.max():.1f}, sum {best.sum():.0f}; rounds' p99 {each}; "
                    f"top {[(int(k), round(float(best[k]))) for k in top]}"
                )
    print(f"masks identical; switch {', '.join(s.label for s in switches)}")


def _walk_documents(ad: Any, wl: Any, texts: list[list[int]]) -> tuple[list[list[float]], str]:
    """A fresh compile, then each document through a fresh matcher, every mask timed."""
    compiled = ad.compile(wl)
    h = hashlib.sha256()
    out: list[list[float]] = []
    for ids in texts:
        m = ad.matcher(compiled)
        mask = ad.alloc()
        times: list[float] = []
        gc.collect()
        gc.disable()
        try:
            for step in range(len(ids) + 1):
                c0 = time.thread_time_ns()
                ad.fill(m, mask)
                times.append((time.thread_time_ns() - c0) / 1e3)
                h.update(mask.tobytes())
                if step == len(ids):
                    break
                ad.accept(m, ids[step])
        finally:
            gc.enable()
        out.append(times)
    return out, h.hexdigest()


def _value(text: str) -> Any:
    """An int literal, or ``module:name`` (imported; benchmarks/ is on the path)."""
    if ":" in text:
        mod, name = text.split(":", 1)
        return getattr(importlib.import_module(mod), name)
    return int(text)


def _switch(attr: str, base: str, new: str | None) -> Switch:
    mod_name, name = attr.rsplit(".", 1)
    try:
        owner: Any = importlib.import_module(mod_name)
    except ModuleNotFoundError:  # a class attribute: module.Class.NAME
        mod_name, cls = mod_name.rsplit(".", 1)
        owner = getattr(importlib.import_module(mod_name), cls)
    current = getattr(owner, name)
    return Switch(owner, name, _value(base), current if new is None else _value(new), attr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", choices=("maskbench", "grammar"))
    ap.add_argument("--attr", required=True, help="module.NAME or module.Class.NAME")
    ap.add_argument("--base-value", required=True, help="int literal or module:name")
    ap.add_argument("--new-value", default=None, help="(default: the attribute's value now)")
    ap.add_argument("--sample", type=int, default=100, help="maskbench: schemas")
    ap.add_argument("--seed", type=int, default=3, help="maskbench: the sample's seed")
    ap.add_argument("--reps", type=int, default=4, help="maskbench: rounds per schema")
    ap.add_argument("--files", default=None, help="maskbench: comma-separated file names")
    ap.add_argument("--ttfm", action="store_true", help="maskbench: compile + first mask")
    ap.add_argument("--rounds", type=int, default=4, help="grammar: rounds per workload")
    ap.add_argument("--docs", default="cold,warm", help="grammar: documents reported")
    ap.add_argument("workloads", nargs="*", default=["json", "json_gbnf"], help="grammar")
    args = ap.parse_intermixed_args()
    switch = _switch(args.attr, args.base_value, args.new_value)
    if args.workload == "maskbench":
        maskbench_ab(
            [switch], sample=args.sample, seed=args.seed, reps=args.reps, files=args.files,
            ttfm=args.ttfm,
        )  # fmt: skip
    else:
        grammar_ab([switch], args.workloads, rounds=args.rounds, docs=args.docs.split(","))


if __name__ == "__main__":
    main()
