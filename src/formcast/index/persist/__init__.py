"""Persistent compiled grammars: the binary format behind ``CompiledGrammar.serialize``.

* :mod:`.container` — the file: header (magic, :data:`FORMAT_VERSION`, lengths, CRC), the
  JSON metadata, the blob of aligned numpy arrays in checked regions;
* :mod:`.codec` — the object graph as a tagged JSON tree: :func:`dump_grammar`,
  :func:`load_grammar` (lazy sections decoded on first use), :func:`materialize`;
* :mod:`.registry` — what may be written: :data:`PLAIN_CLASSES`, each class's serialized
  fields as it declares them beside itself (``_persist_fields``, else its dataclass fields /
  ``__slots__``), the :func:`layout_digest` of the code;
* :mod:`.tuples` — nested tuples as compact JSON.

Compatibility: a file of another :data:`FORMAT_VERSION`, another code layout (the declared
fields of every class, the formcast version) or another vocabulary, truncated or corrupt,
raises :class:`~formcast.errors.SerializationError` (the disk cache treats it as a miss and
rebuilds): never misread.
"""

from __future__ import annotations

from .codec import dump_grammar, load_grammar, materialize
from .container import FORMAT_VERSION, read_header
from .registry import PLAIN_CLASSES, declared_fields, instance_attrs, layout_digest

__all__ = [
    "FORMAT_VERSION",
    "PLAIN_CLASSES",
    "declared_fields",
    "dump_grammar",
    "instance_attrs",
    "layout_digest",
    "load_grammar",
    "materialize",
    "read_header",
]
