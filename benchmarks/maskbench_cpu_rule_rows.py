"""benchmarks/maskbench_cpu.py with the token index's refinement building every rule's rows first.

The A/B of a proposed change to :mod:`formcast.index.cfg_program` (issue #31): the lazy
classifier's ``_refine`` (the bounded refinement of the lexer built so far, on the first wide
start) calls :meth:`formcast.automata.lexer.LazyExpandedLexer.build_rule_rows` before it reads
the lexer, so that the states of rules not met yet are classes like the eager build's rather
than sentinels each a class of its own (walks shared by class and by digest, across grammars
too).  Everything else is maskbench_cpu.py's (the spawned workers import this module as their
main module, so they run the replacement too).  ``FORMCAST_BENCH_LAZY_ROWS_FROM=N`` sets the
lexer's ``_LAZY_ROWS_FROM`` (``10**9``: every rule's rows at construction, the eager side of
the A/B) and ``FORMCAST_BENCH_PLAIN=1`` leaves ``_refine`` as it is::

    PYTHONPATH=DIR python benchmarks/maskbench_cpu_rule_rows.py --sample 100 --seed 3 \\
        --engines formcast
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import maskbench as mb
import maskbench_cpu  # noqa: F401  (its thread-CPU ``_walk``)
from formcast.automata import lexer as _lexer
from formcast.index import cfg_program as _cp

if os.environ.get("FORMCAST_BENCH_LAZY_ROWS_FROM"):
    _lexer._LAZY_ROWS_FROM = int(os.environ["FORMCAST_BENCH_LAZY_ROWS_FROM"])

_orig_refine = _cp._LazyExitSplitClassifier._refine


def _refine(self: Any) -> None:
    if not os.environ.get("FORMCAST_BENCH_PLAIN"):
        self.lexer.build_rule_rows()
    _orig_refine(self)


_cp._LazyExitSplitClassifier._refine = _refine  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(mb.main())
