"""Constraints as Python objects: combinators over the grammar IR, and state machines.

::

    from formcast import constraints as C

    answer = C.seq("Answer: ", C.json(schema), "\\nConfidence: ", C.regex(r"0(\\.[0-9]{1,3})?|1"))
    compiled = GrammarCompiler(vocab).compile(answer)     # or generate(..., constraint=answer)
    print(answer.to_gbnf())                                # the same language as GBNF text

Combinators (each returns an immutable :class:`Constraint`; strings stand for literals, ``+``
is :func:`seq` and ``|`` is :func:`select`): :func:`literal`, :func:`regex`, :func:`json`,
:func:`any_json`, :func:`select`, :func:`seq`, :func:`optional`, :func:`repeat`,
:func:`rule` / :func:`define` (named, possibly recursive sub-constraints), and
:class:`StateMachine` (a transition table).  See docs/constraints.md.

Layer: between the front-ends (which it uses to build IR) and the token index (whose
``GrammarCompiler.compile`` accepts a constraint).  Lifetime: value objects, no state; the
JSON Schema front-end is imported only when a ``json(...)`` is built.
"""

from __future__ import annotations

from .core import (
    AnyJson,
    Constraint,
    Define,
    Json,
    Literal,
    Lowered,
    Optional,
    Regex,
    Repeat,
    RuleRef,
    Select,
    Seq,
    any_json,
    define,
    json,
    literal,
    lower_constraint,
    optional,
    regex,
    repeat,
    rule,
    select,
    seq,
)
from .machine import State, StateMachine

__all__ = [
    "AnyJson",
    "Constraint",
    "Define",
    "Json",
    "Literal",
    "Lowered",
    "Optional",
    "Regex",
    "Repeat",
    "RuleRef",
    "Select",
    "Seq",
    "State",
    "StateMachine",
    "any_json",
    "define",
    "json",
    "literal",
    "lower_constraint",
    "optional",
    "regex",
    "repeat",
    "rule",
    "select",
    "seq",
]
