#!/usr/bin/env python3
"""In-process A/B of the candidate checks and parser steps (#31, verify35): TBM of two trees'
``CfgProgram._compute_mask`` + the module functions below ``class CfgProgram`` + ``pda.py``.

Per variant (``--base`` and ``--new``: repository roots, default the installed package's and
this tree's), the source of ``CfgProgram._compute_mask``, of ``cfg_program``'s module-level
functions from ``_no_memo`` to ``_result`` and of ``automata/pda.py`` is executed in a copy
of the installed modules' namespaces; a variant is switched on by setting the installed
``CfgProgram._compute_mask`` and ``cfg_program.PushdownAutomaton`` to its own.  Everything
else (classification, lexer, trie walks) is the installed package's, shared by both.

The timing and the report are benchmarks/ab_switch.py's ``maskbench`` workload (per schema,
``--reps`` rounds alternating; masks compared).  A compiled ``cfg_program`` (mypyc) cannot
take a method of another tree: run it on a copy where that module is interpreted.
Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/checks_tbm_ab.py --sample 100 --seed 3
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_switch import Switch, maskbench_ab

_HERE = Path(__file__).resolve().parent.parent


def _variant(root: Path, cp: Any, pda_mod: Any) -> tuple[Any, Any, dict[str, Any]]:
    """(``_compute_mask``, ``PushdownAutomaton``) of the tree at ``root``, bound to copies of
    the installed modules' globals."""
    src = (root / "src/formcast/index/cfg_program.py").read_text()
    method = src[src.index("    def _compute_mask(") : src.index("    def _looped_groups(")]
    funcs = src[src.index("def _no_memo(") : src.index("def _result(")]
    ns = dict(cp.__dict__)
    pns: dict[str, Any] = {"__name__": "formcast.automata._pda_" + root.name}
    pns["__package__"] = "formcast.automata"
    exec(compile((root / "src/formcast/automata/pda.py").read_text(), "pda", "exec"), pns)
    # the installed Frame and ParserState (programs above test a state's class: a tree whose
    # pda.py changes those two classes cannot be compared here)
    pns["Frame"], pns["ParserState"] = pda_mod.Frame, pda_mod.ParserState
    # (a slot this tree declares that the installed module lacks: declared once, by name)
    from formcast.index import context as ctx

    saved = dict(ctx._SLOTS)
    for name in list(ctx._SLOTS):
        if f'"{name}"' in funcs:
            del ctx._SLOTS[name]
    exec(compile(funcs + "\n" + textwrap.dedent(method), "cfg_program", "exec"), ns)
    for name, slot in saved.items():
        ctx._SLOTS.setdefault(name, slot)
    return ns["_compute_mask"], pns["PushdownAutomaton"], ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--base", default="")
    ap.add_argument("--new", default=str(_HERE))
    args = ap.parse_args()
    import formcast.automata.pda as pda_mod
    import formcast.index.cfg_program as cp

    base_root = Path(args.base) if args.base else Path(cp.__file__).resolve().parents[3]
    if not (base_root / "src").exists():  # an installed copy (/tmp/fc-X/formcast/...)
        base = (cp.CfgProgram._compute_mask, pda_mod.PushdownAutomaton)
    else:
        base = _variant(base_root, cp, pda_mod)[:2]
    new = _variant(Path(args.new), cp, pda_mod)[:2]
    names = f"{base_root.name} vs {Path(args.new).name}"
    maskbench_ab(
        [
            Switch(cp.CfgProgram, "_compute_mask", base[0], new[0], f"_compute_mask ({names})"),
            Switch(cp, "PushdownAutomaton", base[1], new[1], "PushdownAutomaton"),
        ],
        sample=args.sample, seed=args.seed, reps=args.reps,
    )  # fmt: skip


if __name__ == "__main__":
    main()
