"""How many MaskBench (JSONSchemaBench) schemas compile to a grammar, and why the others fail.

Usage::

    python scripts/maskbench_compile_stats.py [DATA_DIR] [--limit N] [--timeout S] [--lenient]
        [--check-instances]

For every ``*.json`` in DATA_DIR (default: the shared JSONSchemaBench ``maskbench/data``) it
runs :func:`formcast.frontends.jsonschema.api.schema_to_grammar` on the ``schema`` field and counts
successes, unsatisfiable schemas, and failures by exception type and keyword/limit.  With
``--check-instances`` it also runs the slow reference recognizer on the file's test instances
(compact serialization) and counts valid-rejected / invalid-accepted.  No masks are computed.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

from formcast.errors import (
    FormcastError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
)
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/JSONSchemaBench/maskbench/data"


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", default=str(DEFAULT))
    ap.add_argument("--limit", type=int, default=0, help="only the first N files")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per schema")
    ap.add_argument("--lenient", action="store_true")
    ap.add_argument("--check-instances", action="store_true")
    ap.add_argument("--show", type=int, default=0, help="print N examples per failure reason")
    args = ap.parse_args(argv)
    files = sorted(Path(args.data).glob("*.json"))
    if args.limit:
        files = files[: args.limit]
    options = JsonSchemaOptions(lenient=args.lenient)
    outcome: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    inst: Counter[str] = Counter()
    times: list[float] = []
    signal.signal(signal.SIGALRM, _alarm)
    for path in files:
        doc = json.loads(path.read_text())
        schema = doc.get("schema", doc)
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        grammar = None
        try:
            grammar, _ = schema_to_grammar(schema, options)
            outcome["compiled"] += 1
        except UnsatisfiableGrammarError:
            outcome["unsatisfiable"] += 1
        except UnsupportedFeatureError as e:
            outcome["unsupported"] += 1
            reason = f"unsupported {e.feature}"
            reasons[reason] += 1
            examples.setdefault(reason, []).append(f"{path.name}: {e}")
        except LimitExceededError as e:
            outcome["limit"] += 1
            reason = f"limit {e.limit}"
            reasons[reason] += 1
            examples.setdefault(reason, []).append(f"{path.name}: {e}")
        except _Timeout:
            outcome["timeout"] += 1
            examples.setdefault("timeout", []).append(path.name)
        except FormcastError as e:
            outcome["error"] += 1
            reason = f"{type(e).__name__}"
            reasons[reason] += 1
            examples.setdefault(reason, []).append(f"{path.name}: {e}")
        except RecursionError:
            outcome["crash"] += 1
            examples.setdefault("crash", []).append(f"{path.name}: RecursionError")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        times.append(time.perf_counter() - t0)
        if args.check_instances and grammar is not None:
            from formcast.testing.reference import ReferenceRecognizer

            rr = ReferenceRecognizer(grammar)
            for t in doc.get("tests", []):
                text = json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False)
                if len(text) > 2000:
                    inst["skipped (long)"] += 1
                    continue
                ok = rr.matches(text)
                if ok == t["valid"]:
                    inst["agree"] += 1
                elif ok:
                    inst["INVALID ACCEPTED"] += 1
                    print("invalid accepted:", path.name, text[:200])
                else:
                    inst["valid rejected"] += 1
    n = len(files)
    print(f"{n} schemas from {args.data}")
    for k, v in outcome.most_common():
        print(f"  {k:14s} {v:6d}  {100 * v / max(n, 1):5.1f}%")
    print("failure reasons:")
    for k, v in reasons.most_common():
        print(f"  {v:6d}  {k}")
        for ex in examples.get(k, [])[: args.show]:
            print(f"          {ex[:300]}")
    if times:
        qs = statistics.quantiles(times, n=100) if len(times) > 1 else times * 99
        print(
            f"compile time: median {1000 * statistics.median(times):.1f} ms, "
            f"p99 {1000 * qs[98]:.1f} ms, max {1000 * max(times):.1f} ms"
        )
    if inst:
        print("instances:", dict(inst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
