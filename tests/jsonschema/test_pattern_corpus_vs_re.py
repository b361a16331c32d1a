"""Differential run over ~12k real JSON Schema ``pattern`` regexes (``patterns_public.jsonl``).

Every distinct pattern is compiled with ``dialect="ecma"`` as-is (fullmatch semantics) under a
per-pattern time budget and counted: compiled / unsupported (by feature) / syntax error / limit
exceeded / over budget.  For compiled patterns, strings are sampled from the DFA (random walks over
the byte table to an accepting state, decoded as UTF-8) and mutated, and Python's ``re`` decides:

* pass A — ``dialect="ecma"`` against ``re.fullmatch(p, s, re.ASCII)``.  With ``re.ASCII`` Python's
  ``\\d``/``\\w`` are ECMA's.  Skipped (counted) where the semantics still differ: patterns using
  ``\\s``/``\\S`` (ECMA's whitespace set is not Python's), ``{,n}`` (a literal in ECMA, a repeat in
  Python) and patterns Python cannot compile (``[^]``, ``\\cX``, ``(?<name>...)``, ``\\u{...}``).
  Mutations never insert ``\\n``, ``\\r``, U+2028 or U+2029 (ECMA's ``.`` excludes all four,
  Python's only ``\\n``).
* pass B — ``dialect="python"`` against ``re.fullmatch(p, s)`` (Unicode semantics) on every
  pattern with ``\\s``/``\\S`` plus a deterministic quarter of the rest (``FORMCAST_CORPUS_FULL=1``
  runs all of them; Unicode ``\\w`` makes some of these compiles take seconds).

Ratchet (``tests/data/patterns_baseline.json``): the ECMA compiled-or-over-budget count may not
drop (at most 3 may be over budget), pass B's compiled-or-over-budget count may not drop, nothing
may raise an exception outside formcast's error hierarchy, and there must be no mismatch.
``FORMCAST_UPDATE_BASELINE=1`` rewrites the baseline.  Run with ``-s`` to see the summary.
"""

from __future__ import annotations

import gc
import json
import os
import random
import re
import signal
import time
import warnings
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from formcast.automata.dfa import DEAD, ByteDFA
from formcast.automata.regular import compile_dfa
from formcast.errors import (
    FormcastError,
    GrammarSyntaxError,
    LimitExceededError,
    UnsupportedFeatureError,
)
from formcast.frontends.regex import parse_regex

pytestmark = pytest.mark.slow

BASELINE = Path(__file__).resolve().parents[1] / "data" / "patterns_baseline.json"
ECMA_BUDGET_S = 10.0
PYTHON_BUDGET_S = 2.0
SAMPLES = 3
# characters mutations insert: no line terminators (ECMA's "." excludes \r, U+2028, U+2029)
MUTATION_POOL = "aZz09-_ .:/@#é中٣{}[]()\\+*?$^|,'\"\t😀"


class _OverBudget(Exception):
    pass


def _alarm(signum, frame):  # pragma: no cover - timing dependent
    raise _OverBudget


def compile_with_budget(pattern: str, dialect: str, budget: float) -> tuple[object, float]:
    """(DFA or the exception raised, seconds); :class:`_OverBudget` past ``budget`` seconds."""
    use_alarm = hasattr(signal, "setitimer")
    # no gc callbacks (hypothesis installs one) may run while the alarm can fire: an exception
    # raised inside a gc callback is swallowed
    gc_was_enabled = gc.isenabled()
    gc.disable()
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, budget)
    t0 = time.perf_counter()
    try:
        result: object = compile_dfa(parse_regex(pattern, dialect=dialect))
    except (Exception, RecursionError) as e:  # classified by the caller
        result = e
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if gc_was_enabled:
            gc.enable()
    return result, time.perf_counter() - t0


def classify(result: object) -> str:
    if isinstance(result, ByteDFA):
        return "compiled"
    if isinstance(result, UnsupportedFeatureError):
        return "unsupported"
    if isinstance(result, GrammarSyntaxError):
        return "syntax_error"
    if isinstance(result, LimitExceededError):
        return "limit_exceeded"
    if isinstance(result, _OverBudget):
        return "over_budget"
    if isinstance(result, FormcastError):
        return "other_formcast_error"
    return "crash"


def _distances(dfa: ByteDFA) -> np.ndarray:
    dist = np.full(dfa.table.shape[0], 1 << 30, dtype=np.int64)
    dist[np.asarray(dfa.accepting)] = 0
    while True:
        best = dist[dfa.table].min(axis=1) + 1
        best[DEAD] = 1 << 30
        new = np.minimum(dist, best)
        if (new == dist).all():
            return dist
        dist = new


def dfa_samples(dfa: ByteDFA, rnd: random.Random, k: int) -> list[bytes]:
    """``k`` random strings of the language (walks that head for acceptance after a while)."""
    dist = _distances(dfa)
    out = []
    for _ in range(k):
        state, buf = dfa.start, bytearray()
        target = rnd.choice([0, 3, 8, 20, 40])
        while True:
            if dfa.accepting[state] and (len(buf) >= target or rnd.random() < 0.1):
                break
            nxt = dfa.next_bytes(state).tolist()
            if not nxt:
                break
            if len(buf) >= target:
                nxt = [b for b in nxt if dist[dfa.table[state, b]] < dist[state]]
            b = rnd.choice(nxt)
            buf.append(b)
            state = int(dfa.table[state, b])
        assert dfa.accepting[state]
        out.append(bytes(buf))
    return out


def mutate(s: str, rnd: random.Random) -> str:
    i = rnd.randint(0, len(s))
    c = rnd.choice(MUTATION_POOL)
    op = rnd.randint(0, 2)
    if op == 0 or not s:
        return s[:i] + c + s[i:]
    i = min(i, len(s) - 1)
    return s[:i] + (c if op == 1 else "") + s[i + 1 :]


def python_compiles(pattern: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError):
            return False
    return True


def differential(
    pattern: str, dfa: ByteDFA, flags: int, rnd: random.Random, mismatches: list[dict[str, str]]
) -> int:
    """Compare ``dfa`` with ``re`` on samples and mutations; returns the strings checked."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rx = re.compile(pattern, flags)
    checked = 0
    for raw in dfa_samples(dfa, rnd, SAMPLES):
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            mismatches.append({"pattern": pattern, "string": repr(raw), "why": "invalid UTF-8"})
            continue
        for t in (s, mutate(s, rnd), mutate(mutate(s, rnd), rnd)):
            want = rx.fullmatch(t) is not None
            got = dfa.matches(t.encode("utf-8"))
            checked += 1
            if got != want:
                mismatches.append(
                    {"pattern": pattern, "string": repr(t), "re": str(want), "formcast": str(got)}
                )
    return checked


def load_patterns(shared_data: Path) -> tuple[int, list[str]]:
    path = shared_data / "derived" / "patterns_public.jsonl"
    if not path.is_file():
        pytest.skip(f"pattern corpus not found at {path}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return len(rows), list(dict.fromkeys(r["regex"] for r in rows))


def test_patterns_corpus(shared_data):
    n_rows, patterns = load_patterns(shared_data)
    full = os.environ.get("FORMCAST_CORPUS_FULL") == "1"
    t_start = time.perf_counter()
    ecma: Counter[str] = Counter()
    python: Counter[str] = Counter()
    features: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    crashes: list[str] = []
    slow: list[tuple[float, str, str]] = []
    mismatches: list[dict[str, str]] = []
    checked = 0

    for i, pattern in enumerate(patterns):
        rnd = random.Random(zlib.crc32(pattern.encode("utf-8", "surrogatepass")))
        result, dt = compile_with_budget(pattern, "ecma", ECMA_BUDGET_S)
        kind = classify(result)
        ecma[kind] += 1
        if dt > 0.5:
            slow.append((round(dt, 2), "ecma", pattern))
        if kind == "unsupported":
            features[result.feature] += 1  # type: ignore[attr-defined]
        elif kind == "limit_exceeded":
            features["limit " + result.limit] += 1  # type: ignore[attr-defined]
        elif kind in ("crash", "other_formcast_error"):
            crashes.append(f"ecma {pattern!r}: {type(result).__name__}: {result}")

        compiles_in_python = python_compiles(pattern)
        has_space = re.search(r"\\[sS]", pattern) is not None
        # pass A: ECMA against re.ASCII
        if kind == "compiled":
            if not compiles_in_python:
                skipped["A: python re cannot compile"] += 1
            elif has_space:
                skipped["A: \\s/\\S (whitespace sets differ)"] += 1
            elif "{," in pattern:
                skipped["A: {,n} (literal in ECMA)"] += 1
            else:
                checked += differential(pattern, result, re.ASCII, rnd, mismatches)  # type: ignore[arg-type]
        # pass B: python dialect against re (Unicode)
        if compiles_in_python and (full or has_space or i % 4 == 0):
            presult, pdt = compile_with_budget(pattern, "python", PYTHON_BUDGET_S)
            pkind = classify(presult)
            python[pkind] += 1
            if pdt > 0.5:
                slow.append((round(pdt, 2), "python", pattern))
            if pkind in ("crash", "other_formcast_error"):
                crashes.append(f"python {pattern!r}: {type(presult).__name__}: {presult}")
            if pkind == "compiled":
                checked += differential(pattern, presult, 0, rnd, mismatches)  # type: ignore[arg-type]

    elapsed = time.perf_counter() - t_start
    summary = {
        "source_rows": n_rows,
        "unique_patterns": len(patterns),
        "ecma": dict(sorted(ecma.items())),
        "ecma_unsupported_or_limit_by_feature": dict(features.most_common()),
        "python_subsample": dict(sorted(python.items())),
        "python_subsample_full": full,
        "strings_checked": checked,
        "differential_skipped": dict(skipped),
        "mismatches": len(mismatches),
        "crashes": len(crashes),
        "seconds": round(elapsed, 1),
    }
    print("\npatterns corpus summary:\n" + json.dumps(summary, indent=2, ensure_ascii=False))
    for dt, dialect, p in sorted(slow, reverse=True)[:15]:
        print(f"  slow compile {dt:6.2f}s [{dialect}] {p[:100]!r}")
    for m in mismatches[:20]:
        print("  MISMATCH", m)
    for c in crashes[:20]:
        print("  CRASH", c)

    baseline_entry = {
        "unique_patterns": len(patterns),
        "ecma_compiled": ecma["compiled"],
        "python_subsample_compiled_or_over_budget": python["compiled"] + python["over_budget"],
    }
    if os.environ.get("FORMCAST_UPDATE_BASELINE") == "1" and not full:
        BASELINE.parent.mkdir(exist_ok=True)
        BASELINE.write_text(json.dumps({**baseline_entry, "summary": summary}, indent=2) + "\n")

    assert not crashes, crashes[:5]
    assert not mismatches, mismatches[:5]
    base = json.loads(BASELINE.read_text())
    if base["unique_patterns"] != len(patterns):
        pytest.skip(f"corpus changed ({len(patterns)} vs {base['unique_patterns']} patterns)")
    # a pattern over the time budget on a busy machine is not counted as a regression, but
    # more than a handful means compiling got slower
    assert ecma["over_budget"] <= 3, "ECMA compiles got slow"
    assert ecma["compiled"] + ecma["over_budget"] >= base["ecma_compiled"], (
        "ECMA compile count regressed"
    )
    if not full:
        assert (
            baseline_entry["python_subsample_compiled_or_over_budget"]
            >= base["python_subsample_compiled_or_over_budget"]
        ), "python-dialect compile count regressed"
