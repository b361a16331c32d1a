"""Persistent compiled grammars: the names of :mod:`formcast.index.persist`, kept here for
the code and tests that import them from this module (the format is documented there:
:mod:`~formcast.index.persist.container`, :mod:`~formcast.index.persist.codec`)."""

from __future__ import annotations

from .persist import (
    FORMAT_VERSION,
    PLAIN_CLASSES,
    dump_grammar,
    layout_digest,
    load_grammar,
    materialize,
    read_header,
)
from .persist.registry import instance_attrs as _instance_attrs
from .persist.tuples import sparse_tuple as _sparse_tuple
from .persist.tuples import tuple_depth as _tuple_depth
from .persist.tuples import tuple_sparse as _tuple_sparse

__all__ = [
    "FORMAT_VERSION",
    "PLAIN_CLASSES",
    "_instance_attrs",
    "_sparse_tuple",
    "_tuple_depth",
    "_tuple_sparse",
    "dump_grammar",
    "layout_digest",
    "load_grammar",
    "materialize",
    "read_header",
]
