"""Byte-level automata: UTF-8 lowering, Thompson NFA, DFA construction and minimization.

Tables are numpy arrays.  This layer imports only :mod:`formcast.ir.nodes`, errors and config.
"""
