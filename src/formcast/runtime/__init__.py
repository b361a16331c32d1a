"""Per-request runtime: the grammar matcher (and, for CFGs, the parser); batch mask fills
(:mod:`formcast.runtime.batch`)."""
