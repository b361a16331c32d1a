#!/usr/bin/env python3
"""In-process A/B of the lazy classifier's walk glue (walk39, #31): tbm_parts.py's run with
``--old-methods _walk_resumed --old-file OLD_CFG`` (the two variants alternated schema by
schema, in one process), where the old ``_walk_resumed`` also calls the old
``classify_walk_resume`` and ``_classify_call`` (taken from OLD_TRIE; the other names of
both modules are the current ones).  Prints each variant's TBM mean and p99 (thread CPU);
``--json OUT`` writes ``OUT.old``/``OUT.new`` for ``glue38_permask_min.py``::

    git show main:src/formcast/index/cfg_program.py > /tmp/w39/main_cfg.py
    git show main:src/formcast/vocab/trie.py > /tmp/w39/main_trie.py
    PYTHONPATH=/tmp/fc-walk39 python benchmarks/walk39_walk_ab.py /tmp/w39/main_trie.py \\
        --sample 100 --seed 3 --old-file /tmp/w39/main_cfg.py --json /tmp/w39/ab1
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tbm_parts
from formcast.index import cfg_program as cp
from formcast.vocab import trie as tr


def _old_functions(path: str, names: list[str]) -> dict[str, object]:
    """``names`` (module functions) of the trie module at ``path``, on the current module's
    other names."""
    src = Path(path).read_text(encoding="utf-8")
    ns = dict(vars(tr))
    for name in names:
        start = src.index(f"\ndef {name}(") + 1
        end = src.find("\ndef ", start + 5)
        end2 = src.find("\nclass ", start + 5)
        end = min(e for e in (end, end2, len(src)) if e >= 0)
        exec(textwrap.dedent(src[start:end]), ns)
    return {n: ns[n] for n in names}


def main() -> None:
    old_trie = sys.argv.pop(1)
    old = _old_functions(old_trie, ["_classify_call", "classify_walk_resume"])
    # (the new _walk_resumed calls no classify_walk_resume: only the old one sees this)
    cp.classify_walk_resume = old["classify_walk_resume"]  # type: ignore[assignment]
    sys.argv = ["tbm_parts.py", *sys.argv[1:], "--old-methods", "_walk_resumed"]
    tbm_parts.main()


if __name__ == "__main__":
    main()
