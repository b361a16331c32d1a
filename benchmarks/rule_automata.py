#!/usr/bin/env python3
"""First-compile cost of the rule automata of grammar_bench.py's workloads (thread CPU time).

For each workload the grammar IR that ``GrammarCompiler`` hands to
``compile_grammar_automaton`` is captured once; then that call is timed ``--runs`` times with
the process-wide automaton caches emptied before each (so every rule DFA and sub-automaton is
built, as in a process's first compile): the IR passes, Thompson NFAs, subset construction and
minimization of every rule.  ``--kernel both`` times the compiled build's C subset construction
(``formcast.automata._subset``) and the Python path (the kernel switched off) alternately in one
process; in the pure-Python package only the Python path exists.

Usage::

    python benchmarks/rule_automata.py                       # every workload, 30 runs
    PYTHONPATH=DIR python benchmarks/rule_automata.py --kernel both --runs 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grammar_bench


def _captured_ir(name: str, vocab: Any) -> tuple[Any, dict[str, Any]]:
    """The grammar and keyword arguments of the workload's ``compile_grammar_automaton``."""
    import formcast.index.compiler as compiler_mod
    from formcast import GrammarCompiler

    seen: list[tuple[Any, dict[str, Any]]] = []
    original = getattr(compiler_mod, "compile_grammar_automaton")  # noqa: B009 (not exported)

    def capture(grammar: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((grammar, {k: v for k, v in kwargs.items() if k != "budget"}))
        return original(grammar, *args, **kwargs)

    setattr(compiler_mod, "compile_grammar_automaton", capture)  # noqa: B010
    try:
        wl = grammar_bench.make_workloads()[name]
        compiler = GrammarCompiler(vocab, cache_size=0)
        if wl.kind == "json":
            compiler.compile_builtin_json_grammar()
        else:
            compiler.compile_grammar(wl.gbnf)
    finally:
        setattr(compiler_mod, "compile_grammar_automaton", original)  # noqa: B010
    return seen[0]


def _time(grammar: Any, kwargs: dict[str, Any], kernel: Any) -> float:
    import formcast.automata.dfa as dfa_mod
    import formcast.automata.regular as regular_mod
    import formcast.automata.rules as rules_mod

    saved = getattr(dfa_mod, "_KERNEL", None)  # (absent before session 14)
    if saved is not None or kernel is not None:
        dfa_mod._KERNEL = kernel
    try:
        rules_mod.RULE_DFA_CACHE.clear()
        regular_mod.SUB_DFA_CACHE.clear()
        t = time.thread_time()
        rules_mod.compile_grammar_automaton(grammar, **kwargs)
        return time.thread_time() - t
    finally:
        if saved is not None or kernel is not None:
            dfa_mod._KERNEL = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="json,c1_arith,c2_arith,c_lang,json_gbnf")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--kernel", choices=("auto", "both"), default="auto")
    args = ap.parse_args()

    import formcast.automata.dfa as dfa_mod
    from formcast._native import native_summary
    from formcast.vocab.loaders import load_vocabulary

    print(f"formcast native modules: {native_summary()}")
    kernel = getattr(dfa_mod, "_KERNEL", None)
    paths = [("C kernel" if kernel else "Python", kernel)]
    if args.kernel == "both" and kernel is not None:
        paths.append(("Python", None))
    vocab = load_vocabulary("llama3")
    print("| workload | path | rule automata, cold caches: median / min CPU ms |")
    print("|---|---|---:|")
    for name in args.workloads.split(","):
        grammar, kwargs = _captured_ir(name, vocab)
        times: dict[str, list[float]] = {label: [] for label, _ in paths}
        for _ in range(args.runs):  # the paths alternate, so machine load hits both alike
            for label, k in paths:
                times[label].append(_time(grammar, kwargs, k))
        for label, _ in paths:
            ts = sorted(times[label])
            print(f"| {name} | {label} | {ts[len(ts) // 2] * 1e3:.2f} / {ts[0] * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
