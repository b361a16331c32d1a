"""``formcast eval``: run a dataset through the action runner and print the per-layer table.

::

    formcast eval --tool examples/actions/refund_tool.py --data examples/actions/refund_cases.jsonl
    formcast eval --tool spec.py --data cases.jsonl --model smollm2 --max-tokens 96 --json
    formcast eval --tool spec.py --data cases.jsonl --compare-unconstrained

``--tool`` is a Python spec file defining ``TOOLS`` (and optionally ``PRINCIPAL``, ``LEDGER``,
``MODEL``, ``RETRY``, ``OPTIONS``); ``--data`` is a JSON Lines file of cases (see
:mod:`formcast.actions.evaluate`).  The model is ``--model`` when given, else the spec's
``MODEL``, else the bundled ``smollm2``.

stdout carries the report: the per-layer table (layer, reached, passed, rate), statuses,
finish reasons, the named rates, task quality (exact match and per-field accuracy) and one
line per case -- or, with ``--json``, one JSON object.  Exit status: 0 when every case ran
(whatever its status: a rejected or handed-off action is a measurement, not an error), 1 when
some case's run raised, 2 for a usage or configuration error (bad spec, bad case file).

Lifetime: one process per command.  Costs: loading the model, then one ``runner.run`` per case.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..actions.evaluate import format_report, load_cases, load_spec, run_eval
from .common import add_json_argument, positive_int, progress

__all__ = ["add_eval_arguments", "run_eval_command"]


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``formcast eval``."""
    p.add_argument("--tool", required=True, metavar="SPEC.py",
                   help="Python file defining TOOLS (and PRINCIPAL, LEDGER, MODEL, ...)")
    p.add_argument("--data", required=True, metavar="CASES.jsonl",
                   help="JSON Lines: {\"prompt\": ..., \"expected\": {...}, \"principal\": ...}")
    p.add_argument("--model", default=None,
                   help="smollm2 or a .gguf path (default: the spec's MODEL, else smollm2)")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="token budget per generation (default: the spec's or the runner's)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="CPU threads for a loaded model (default: %(default)s)")
    p.add_argument("--compare-unconstrained", action="store_true",
                   help="also generate each prompt without the constraint: the added TTFT/TPOT "
                   "(two more generations a case)")
    p.add_argument("--no-cases", action="store_true", help="omit the per-case lines")
    add_json_argument(p, help="one JSON object on stdout")


def _model(args: argparse.Namespace, spec_model: Any) -> Any:
    from ..model.loading import load_model

    name = args.model if args.model is not None else spec_model
    if name is None:
        name = "smollm2"
    if isinstance(name, str):
        progress(f"loading model {name}")
        return load_model(name, n_threads=args.threads)
    return name


def run_eval_command(args: argparse.Namespace) -> int:
    """Run ``formcast eval``; returns the exit status."""
    spec = load_spec(args.tool)
    cases = load_cases(args.data)
    model = _model(args, spec.model)
    options = {} if args.max_tokens is None else {"max_tokens": args.max_tokens}
    progress(f"running {len(cases)} cases from {args.data}")
    report = run_eval(spec, cases, model, options=options,
                      compare_unconstrained=args.compare_unconstrained)
    if args.json:
        print(json.dumps(report.as_dict(), default=str))
    else:
        print(format_report(report, cases=not args.no_cases))
    return 1 if report.errors else 0
