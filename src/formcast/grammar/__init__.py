"""Front-ends that turn constraint sources into the grammar IR (:mod:`formcast.grammar.ir`).

This layer never imports :mod:`formcast.vocab`, :mod:`formcast.index` or anything above them.
"""
