#!/usr/bin/env python3
"""In-process A/B of the candidate checks and parser steps (#31, verify35): TBM of two trees'
``CfgProgram._compute_mask`` + the module functions below ``class CfgProgram`` + ``pda.py``.

Per variant (``--base`` and ``--new``: repository roots, default the installed package's and
this tree's), the source of ``CfgProgram._compute_mask``, of ``cfg_program``'s module-level
functions from ``_no_memo`` to ``_result`` and of ``automata/pda.py`` is executed in a copy
of the installed modules' namespaces; a variant is switched on by setting the installed
``CfgProgram._compute_mask`` and ``cfg_program.PushdownAutomaton`` to its own.  Everything
else (classification, lexer, trie walks) is the installed package's, shared by both.

Per MaskBench schema of the sample, ``--reps`` rounds, the variants alternating (ABBA...): a
fresh compile (untimed) and every instance walked with a fresh matcher, each mask after the
first timed in thread CPU (gc off).  Reported: per variant the TBM mean, p99 and max of the
per-mask minimum over the rounds (the masks are the same sequence in both), the sum, and the
median per-schema ratio new/base.  A mask that differs between the variants is an error.
Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/checks_tbm_ab.py --sample 100 --seed 3
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench

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
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    import formcast.automata.pda as pda_mod
    import formcast.index.cfg_program as cp
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    base_root = Path(args.base) if args.base else Path(cp.__file__).resolve().parents[3]
    if not (base_root / "src").exists():  # an installed copy (/tmp/fc-X/formcast/...)
        base_root = Path(cp.__file__).resolve().parents[2]
        variants: dict[str, tuple[Any, Any, dict[str, Any]]] = {
            "base": (cp.CfgProgram._compute_mask, pda_mod.PushdownAutomaton, cp.__dict__)
        }
    else:
        variants = {"base": _variant(base_root, cp, pda_mod)}
    variants["new"] = _variant(Path(args.new), cp, pda_mod)
    files = maskbench.select_files(
        argparse.Namespace(
            data=str(maskbench.DATA_DIR), files=None, full=False, sample=args.sample,
            seed=args.seed,
        )
    )  # fmt: skip
    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    warm = GrammarCompiler(vocab, cache_size=0).compile_json_schema({"type": "string"})
    GrammarMatcher(warm).fill_next_token_bitmask(mask, 0)
    vocab.trie.strings_end_to_end()  # per-vocabulary tables made before the timing
    clock = time.thread_time_ns
    best: dict[str, list[float]] = {"base": [], "new": []}
    ratios: list[float] = []
    for path in files:
        task = maskbench.prepare(path, tok)
        got: dict[str, list[list[float]]] = {"base": [], "new": []}
        digests: dict[str, str] = {}
        try:
            for rep in range(args.reps):
                for which in ("base", "new") if rep % 2 == 0 else ("new", "base"):
                    compute, pda_cls, _ = variants[which]
                    cp.CfgProgram._compute_mask = compute  # type: ignore[method-assign]
                    cp.PushdownAutomaton = pda_cls  # type: ignore[misc]
                    grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(
                        task["schema"]
                    )
                    times: list[float] = []
                    h = hashlib.sha256()
                    first = True
                    gc.collect()
                    gc.disable()
                    for inst in task["instances"]:
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
                    gc.enable()
                    got[which].append(times)
                    digests.setdefault(which, h.hexdigest())
                    if digests[which] != h.hexdigest():
                        raise SystemExit(f"{path.name}: {which}'s masks differ between rounds")
        except FormcastError:
            continue
        finally:
            cp.CfgProgram._compute_mask = variants["base"][0]  # type: ignore[method-assign]
            cp.PushdownAutomaton = variants["base"][1]  # type: ignore[misc]
        if digests.get("base") != digests.get("new"):
            raise SystemExit(f"{path.name}: masks differ between base and new")
        sums = {}
        for which, runs in got.items():
            mins = np.min(np.asarray(runs), axis=0) if runs and runs[0] else np.zeros(0)
            best[which].extend(mins.tolist())
            sums[which] = float(mins.sum())
        if sums["base"] > 1000:  # (schemas with at least 1 ms of masks)
            ratios.append(sums["new"] / sums["base"])
    for which, ts in best.items():
        a = np.asarray(ts)
        print(
            f"{which:5s} masks {a.size} TBM mean {a.mean():.1f} us p99 {np.percentile(a, 99):.0f}"
            f" max {a.max():.0f} sum {a.sum() / 1e3:.1f} ms"
        )
    print(
        f"new/base: sum {sum(best['new']) / sum(best['base']):.3f}, median per-schema ratio "
        f"{statistics.median(ratios):.3f} ({len(ratios)} schemas); masks identical; "
        f"{os.path.basename(str(base_root))} vs {os.path.basename(args.new)}"
    )


if __name__ == "__main__":
    main()
