"""JSON Schema → grammar IR.

Modules: :mod:`.api` (``schema_to_grammar``, the entry point), :mod:`.source` (reading a
schema once: text, dict, boolean or Pydantic class), :mod:`.options` (``JsonSchemaOptions``),
:mod:`.keywords` (the keyword registry), :mod:`.nodes` (normalized schema form), the
normalizer's layers :mod:`.refs` (``$ref``, drafts, definitions), :mod:`.checks` (JSON and
instance checks), :mod:`.algebra` (merging, negation, emptiness) and :mod:`.normalize` (the
keywords), :mod:`.emit` (normalized form → rules; :mod:`.layout` for the punctuation,
:mod:`.keys` for undeclared keys), :mod:`.strings_dfa` (string automata), :mod:`.numbers`,
:mod:`.strings`, :mod:`.regexlang` and :mod:`.formats` (the ``format`` vocabulary).
"""
