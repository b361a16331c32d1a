"""Front-ends: constraint sources → the grammar IR (:class:`formcast.ir.Grammar`).

========================  ================================================================
:mod:`.regex`             regular expressions (ECMA-262 by default, Python's ``re``)
:mod:`.gbnf`              llama.cpp's GBNF
:mod:`.lark`              Lark / EBNF grammars
:mod:`.builtin_json`      any JSON value (the ``json`` built-in)
:mod:`.jsonschema`        JSON Schema, drafts 4 to 2020-12
========================  ================================================================

Lifetime: stateless functions; each returns a fresh, immutable IR.  A front-end imports only
:mod:`formcast.ir`, :mod:`formcast.automata` (the JSON Schema path's regular-language
algebra) and the shared modules; never the vocabulary, the index or anything above them.
"""
