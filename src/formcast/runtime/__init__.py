"""Per-request runtime: the grammar matcher (and, for CFGs, the parser)."""
