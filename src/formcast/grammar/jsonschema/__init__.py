"""JSON Schema → grammar IR (implementation package of :mod:`formcast.grammar.json_schema`).

Modules: :mod:`.options` (``JsonSchemaOptions``), :mod:`.keywords` (the keyword registry),
:mod:`.nodes` (normalized schema form), :mod:`.normalize` (keywords, ``$ref``, merging,
negation), :mod:`.emit` (normalized form → rules), :mod:`.numbers`, :mod:`.strings`,
:mod:`.regexlang` and :mod:`.charfa` (the regular-language toolbox).
"""
