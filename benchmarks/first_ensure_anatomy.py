"""What the first mask's ``LazyExpandedLexer.ensure`` builds, per MaskBench schema (issue #31).

Pure tree only (wraps the lexer's Python methods; the compiled lexer cannot be wrapped)::

    PYTHONPATH=src python benchmarks/first_ensure_anatomy.py --sample 150 --seed 5

Per first mask of a fresh compile: ``rows`` built (``_build``), ``members`` unioned
(``_union_rows``), new ``unions`` (``_state_of``), rule states written by ``_plain_rows``
(``plainrules``), each with its inclusive thread CPU (``*_us``, wrapper overhead included).
Prints ~15 schemas spread over the ensure-time order plus the 3 slowest.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent.parent / "shared/data/JSONSchemaBench/maskbench/data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    import formcast
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.automata import lexer as lexmod
    from formcast.vocab.loaders import load_vocabulary

    vocab = load_vocabulary("llama3")
    files = sorted(DATA.glob("*.json"))
    files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    schemas = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    st: dict[str, float] = {}

    def wrap(name: str, real: Any, key: Callable[..., int]) -> Any:
        def spy(self: Any, *a: Any) -> Any:
            st[name] = st.get(name, 0) + key(self, *a)
            t0 = time.thread_time_ns()
            out = real(self, *a)
            st[name + "_us"] = st.get(name + "_us", 0) + (time.thread_time_ns() - t0) / 1e3
            return out

        return spy

    lz: Any = lexmod.LazyExpandedLexer

    def plain_key(s: Any, h: Any, r: int) -> int:
        return 0 if h.plain_done[r] else int(s.auto.dfas[r].table.shape[0])

    lz._build = wrap("rows", lz._build, lambda s, todo: len(todo))
    lz._union_rows = wrap("members", lz._union_rows, lambda s, h, b: sum(map(len, b)))
    lz._plain_rows = wrap("plainrules", lz._plain_rows, plain_key)
    lz._state_of = wrap("unions", lz._state_of, lambda s, h, m, live: int(m not in s.ids))
    lz.ensure = wrap("ensure", lz.ensure, lambda s, x: 0)
    rows = []
    for doc in schemas:
        try:
            c = GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile_json_schema(
                doc.get("schema", doc)
            )
        except formcast.errors.FormcastError:
            continue
        st.clear()
        GrammarMatcher(c).fill_next_token_bitmask(mask, 0)
        rows.append(dict(st))
    rows.sort(key=lambda d: d.get("ensure_us", 0))
    for d in rows[:: max(1, len(rows) // 15)] + rows[-3:]:
        print({k: round(v) for k, v in d.items() if k != "ensure"})
    print(f"n={len(rows)}")


if __name__ == "__main__":
    main()
