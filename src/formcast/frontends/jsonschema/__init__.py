"""JSON Schema → grammar IR.

Modules: :mod:`.api` (``schema_to_grammar``, the entry point), :mod:`.options`
(``JsonSchemaOptions``), :mod:`.keywords` (the keyword registry), :mod:`.nodes` (normalized
schema form), :mod:`.normalize` (keywords, ``$ref``, merging, negation), :mod:`.emit`
(normalized form → rules), :mod:`.numbers`, :mod:`.strings`, :mod:`.regexlang` and
:mod:`.formats` (the ``format`` vocabulary).
"""
