"""The IR node that stands for a precompiled sub-automaton inside a Thompson construction.

Kept out of :mod:`formcast.automata.nfa` because that module can be compiled with mypyc
(:mod:`formcast._native`): a dataclass subclassing the interpreted :class:`~formcast.ir.nodes.Node`
must stay an ordinary Python class, which this module always is (it is never compiled).

Lifetime: built by :func:`~formcast.automata.nfa.thompson_nfa` during one construction, immutable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir.nodes import Node

__all__ = ["Embedded"]


@dataclass(frozen=True, eq=False)
class Embedded(Node):
    """A precompiled sub-automaton standing in for an IR subtree (internal to the NFA builder)."""

    #: a :class:`formcast.automata.nfa.SubAutomaton` (typed Any: importing nfa would be a cycle)
    sub: Any
