"""The grammar IR every front-end produces, and the passes that rewrite it.

:mod:`.nodes` holds the immutable node types (``Literal``, ``CharSet``, ``Concat``, ``Alt``,
``Repeat``, ``RuleRef``), ``Rule`` and ``Grammar``, and the smart constructors that keep nodes
canonical; :mod:`.passes` the grammar passes every front-end and the automata share
(productivity, nullability, inlining, reachability, repeat outlining, rule SCCs);
:mod:`.left_recursion` rewrites left-recursive rules; :mod:`.loops` folds ``x (sep x)*``.
Lifetime: per grammar;
nodes are immutable and hash-consed by structure, so grammars can share them freely.
"""

from .nodes import Grammar, Rule

__all__ = ["Grammar", "Rule"]
