"""The programs a matcher runs, by what they check (see :mod:`.dispatch` for which one runs)."""
