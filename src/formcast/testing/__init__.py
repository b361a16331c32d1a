"""Test oracles shipped for users' own differential tests (never imported by the library).

:mod:`.reference` is a brute-force recognizer of the grammar IR, independent of the automata
and the token index: a slow, obviously-correct oracle to compare a compiled grammar against.
"""
