"""Compile time of constraint objects against the same language written as a regex
(not a test: it measures time).

    python benchmarks/constraints_bench.py            # SmolLM2's vocabulary (49,152 tokens)
    python benchmarks/constraints_bench.py --vocab llama3

Cases (each compiled from scratch in a compiler without a grammar cache, the token index's
first mask included; the median of ``--reps`` runs, after one warm-up run of each):

* ``flow-N``: a finite flow written as a plain transition table (``StateMachine``, ``N``
  steps, three literal words per step, a loop back) against the equivalent regex;
* ``protocol``: a small protocol (greeting, a question with a few forms, an answer, a sign-off)
  as a table against its regex;
* ``template``: ``seq("Answer: ", select([...]), "\\nConfidence: ", regex(...))`` against its
  regex.

The issue's bar is that a transition table compiles as fast as the equivalent regex: the ratio
column is constraint time / regex time, and the fuel ratio the same for the compile's
deterministic work (``CompiledGrammar.compile_work``: independent of the machine's load).
The last two columns isolate the only step that differs: lowering the constraint to IR
(``lower_constraint``) against parsing the regex (``parse_regex``); everything after
(DFA, minimization, token index) is the same code on the same IR.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from formcast import GrammarCompiler, Vocabulary, load_vocabulary
from formcast import constraints as C
from formcast.frontends.regex import parse_regex

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta")


def flow(steps: int) -> tuple[C.Constraint, str]:
    """A chain of ``steps`` states with three words each, and a ``;`` loop back to step 1."""
    transitions: list[tuple[object, object, object]] = []
    parts = []
    for i in range(steps):
        words = [f"{WORDS[(i + k) % len(WORDS)]}{i}" for k in range(3)]
        for w in words:
            transitions.append((i, f"{w} ", i + 1))
        parts.append("(" + "|".join(f"{w} " for w in words) + ")")
    transitions.append((steps, ";", 1))
    regex = parts[0] + "".join(parts[1:]) + "(;" + "".join(parts[1:]) + ")*"
    return C.StateMachine(0, [steps], transitions), regex


def protocol() -> tuple[C.Constraint, str]:
    table = [
        ("start", "HELLO\n", "greeted"),
        ("greeted", "ASK ", "asking"),
        ("asking", C.select(["time", "date", "weather"]), "asked"),
        ("asked", "?\n", "waiting"),
        ("waiting", "ANSWER ", "answering"),
        ("answering", C.regex("[a-z0-9 ]{1,20}"), "answered"),
        ("answered", "\n", "greeted"),
        ("greeted", "BYE\n", "done"),
    ]
    regex = r"HELLO\n(ASK (time|date|weather)\?\nANSWER [a-z0-9 ]{1,20}\n)*BYE\n"
    return C.StateMachine("start", ["done"], table), regex


def template() -> tuple[C.Constraint, str]:
    c = C.seq(
        "Answer: ", C.select(["yes", "no", "unknown"]), "\nConfidence: ",
        C.regex(r"0(\.[0-9]{1,3})?|1(\.0{1,3})?"),
    )  # fmt: skip
    return c, r"Answer: (yes|no|unknown)\nConfidence: (0(\.[0-9]{1,3})?|1(\.0{1,3})?)"


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up (process-wide sub-automaton caches, imports)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="smollm2", help="a load_vocabulary name")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    vocab: Vocabulary = load_vocabulary(args.vocab)
    GrammarCompiler(vocab).compile_regex("warm")  # the token trie, once per vocabulary
    cases = {
        "flow-5": flow(5),
        "flow-20": flow(20),
        "flow-60": flow(60),
        "flow-300": flow(300),
        "protocol": protocol(),
        "template": template(),
    }
    print(f"vocabulary {vocab.name} ({vocab.vocab_size} tokens), median of {args.reps}")
    print(
        f"{'case':10} {'states':>7} {'constraint ms':>14} {'regex ms':>9} {'ratio':>6} "
        f"{'fuel ratio':>10} {'lower ms':>9} {'parse ms':>9}"
    )
    for name, (constraint, pattern) in cases.items():
        comp = GrammarCompiler(vocab, cache_size=0)
        c_s = median_seconds(lambda c=constraint, k=comp: k.compile(c), args.reps)
        r_s = median_seconds(lambda p=pattern, k=comp: k.compile_regex(p), args.reps)
        compiled = comp.compile(constraint)
        fuel = compiled.compile_work / comp.compile_regex(pattern).compile_work
        dfa = getattr(compiled.program, "dfa", None)
        states = dfa.num_states if dfa is not None else "-"
        low_s = median_seconds(lambda c=constraint: C.lower_constraint(c), args.reps)
        parse_s = median_seconds(lambda p=pattern: parse_regex(p), args.reps)
        print(
            f"{name:10} {states!s:>7} {c_s * 1e3:14.2f} {r_s * 1e3:9.2f} {c_s / r_s:6.2f} "
            f"{fuel:10.2f} {low_s * 1e3:9.2f} {parse_s * 1e3:9.2f}"
        )


if __name__ == "__main__":
    main()
