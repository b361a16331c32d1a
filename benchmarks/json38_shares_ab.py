#!/usr/bin/env python3
"""A candidate set's share measurement before json38 (#31): ``py_measure_shares`` is the
interpreted loop ``cfg_program._verify_strings`` ran before ``pda.measure_shares`` (compiled
with the parser in the compiled build), kept here as the base of ab_switch.py's A/B::

    PYTHONPATH=/tmp/fc-main python benchmarks/ab_switch.py grammar --rounds 4 \\
        --attr formcast.index.cfg_program.measure_shares \\
        --base-value json38_shares_ab:py_measure_shares json json_gbnf
    PYTHONPATH=/tmp/fc-main python benchmarks/ab_switch.py maskbench --sample 100 --seed 3 \\
        --attr formcast.index.cfg_program.measure_shares \\
        --base-value json38_shares_ab:py_measure_shares
"""

from __future__ import annotations


def py_measure_shares(data_of: list[bytes], shared: list[int]) -> list[bytes]:
    """Each string's share with the one before it where ``shared`` says -1 (filled in place),
    and the strings' suffixes past their shares (the loop of ``_verify_strings`` before json38;
    interpreted: this module is not compiled)."""
    for j in range(1, len(data_of)):
        if shared[j] < 0:
            data, prev = data_of[j], data_of[j - 1]
            limit = min(len(data), len(prev))
            k = 0
            while k < limit and data[k] == prev[k]:
                k += 1
            shared[j] = k
    if data_of:
        shared[0] = 0
    return [d[k:] if k else d for d, k in zip(data_of, shared)]
