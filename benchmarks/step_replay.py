"""In-process A/B of the parser's steps (#31, step34): the installed ``PushdownAutomaton``
against the one in a ``pda.py`` file (``--src``, default: this tree's), on the steps that
MaskBench walks make.

Per schema of ``maskbench.py``'s sample, one compile is walked (every mask, every accepted
token) with ``PushdownAutomaton.step`` / ``step_capped`` / ``step_bytes`` recorded (outermost
calls on states that a recorded step or the initial state made: ``step_bytes`` as one call,
since a compiled ``pda.py``'s own calls of ``step`` bypass the recorder); then each class
replays the calls on a fresh automaton of the same grammar, interleaved, ``--reps`` times;
the per-schema minimum of thread CPU is summed.  The states both replays reach are compared
by value (stacks, accepting, error, far).  Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/step_replay.py --sample 100 --seed 3
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import maskbench

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fp(s: Any) -> tuple[Any, ...]:
    frames = sorted((f.rule, f.state, f.need, f.left, f.depth, f.far) for f in s.frames)
    return (s.accepting, s.dead, s.error, tuple(frames))


def _recorder(
    kind: int,
    orig: Callable[..., Any],
    pda: Any,
    idx: dict[int, int],
    keep: list[Any],
    log: list[tuple[int, int, Any, int]],
    depth: list[int],
) -> Callable[..., Any]:
    """``orig`` (a step method) recording its outermost calls on ``pda``'s known states."""

    def f(self: Any, st: Any, byte: Any) -> Any:
        depth[0] += 1
        try:
            r = orig(self, st, byte)
        finally:
            depth[0] -= 1
        if self is pda and depth[0] == 0:
            i = idx.get(id(st))
            if i is not None:
                j = idx.get(id(r))
                if j is None:
                    j = idx[id(r)] = len(keep)
                    keep.append(r)
                log.append((kind, i, byte, j))
        return r

    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--src", default=os.path.join(_HERE, "src", "formcast", "automata", "pda.py"))
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.automata.pda import PushdownAutomaton
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    spec = importlib.util.spec_from_file_location("formcast.automata.pda_new", args.src)
    assert spec is not None
    assert spec.loader is not None
    pnew = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = pnew
    spec.loader.exec_module(pnew)
    classes = {"base": PushdownAutomaton, "new": pnew.PushdownAutomaton}
    files = maskbench.select_files(
        argparse.Namespace(
            data=str(maskbench.DATA_DIR), files=None, full=False, sample=args.sample,
            seed=args.seed,
        )
    )  # fmt: skip
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    o_step, o_capped = PushdownAutomaton.step, PushdownAutomaton.step_capped
    o_bytes = PushdownAutomaton.step_bytes
    tot = {"base": 0, "new": 0}
    nsteps = mism = 0
    for path in files:
        task = maskbench.prepare(path, tok)
        try:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
        except FormcastError:
            continue
        pda = grammar.program.pda
        log: list[tuple[int, int, Any, int]] = []
        idx = {id(pda.initial): 0}
        keep = [pda.initial]
        depth = [0]

        PushdownAutomaton.step = _recorder(0, o_step, pda, idx, keep, log, depth)  # type: ignore[method-assign]
        PushdownAutomaton.step_capped = _recorder(1, o_capped, pda, idx, keep, log, depth)  # type: ignore[method-assign]
        PushdownAutomaton.step_bytes = _recorder(2, o_bytes, pda, idx, keep, log, depth)  # type: ignore[method-assign]
        try:
            for inst in task["instances"]:
                m = GrammarMatcher(grammar)
                for token in [*inst["ids"], None]:
                    m.fill_next_token_bitmask(mask, 0)
                    if token is None or not m.accept_token(token):
                        break
        finally:
            PushdownAutomaton.step = o_step  # type: ignore[method-assign]
            PushdownAutomaton.step_capped = o_capped  # type: ignore[method-assign]
            PushdownAutomaton.step_bytes = o_bytes  # type: ignore[method-assign]
        nsteps += len(log)
        best: dict[str, int] = {}
        fps: dict[str, list[Any]] = {}
        for rep in range(args.reps):
            for which in ("base", "new") if rep % 2 else ("new", "base"):
                p2 = classes[which](pda.auto, pda.limits, far_count=pda.far_count)
                sts: list[Any] = [p2.initial] + [None] * (len(keep) - 1)
                fns = (p2.step, p2.step_capped, p2.step_bytes)
                gc.collect()
                gc.disable()
                t0 = time.thread_time_ns()
                for k, i, b, j in log:
                    s = sts[i]
                    if s is not None:
                        sts[j] = fns[k](s, b)
                dt = time.thread_time_ns() - t0
                gc.enable()
                best[which] = min(best.get(which, dt), dt)
                if rep == 0:
                    fps[which] = [None if s is None else _fp(s) for s in sts]
        mism += fps["base"] != fps["new"]
        for w, v in best.items():
            tot[w] += v
    print(
        f"{nsteps} recorded steps; sum of per-schema min: base {tot['base'] / 1e6:.2f} ms, "
        f"new {tot['new'] / 1e6:.2f} ms ({tot['new'] / tot['base']:.3f}); "
        f"schemas whose states differ: {mism}"
    )


if __name__ == "__main__":
    main()
