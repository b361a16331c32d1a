"""The builders' interning of composite IR nodes (formcast.ir.nodes._INTERNED): equal nodes
built while one is alive are the same object; the table holds no node alive and forgets an
entry when its node goes, but never a newer node interned under the same key."""

from __future__ import annotations

import gc

from formcast.ir import nodes
from formcast.ir.nodes import CharSet, Literal, RuleRef, alt, concat, repeat
from formcast.limits import HashedKey


def _fresh_items() -> tuple[object, ...]:
    # children unlikely to be interned by anything else in the process
    return (Literal("interning-test-a"), RuleRef("interning_test_rule"))


def test_equal_builds_are_one_object_while_alive() -> None:
    a = concat(_fresh_items())
    b = concat(_fresh_items())
    assert a is b
    r1 = repeat(a, 2, 7)
    r2 = repeat(concat(_fresh_items()), 2, 7)
    assert r1 is r2
    x = alt([CharSet.chars("q"), RuleRef("interning_test_rule")])
    assert x is alt([CharSet.chars("q"), RuleRef("interning_test_rule")])


def test_the_table_holds_nothing_alive_and_forgets_dead_nodes() -> None:
    gc.collect()
    before = len(nodes._INTERNED)
    a = concat(_fresh_items())
    key = (type(a), a.items)  # type: ignore[attr-defined]
    assert nodes._interned(key) is a
    assert len(nodes._INTERNED) == before + 1
    del a
    gc.collect()
    assert nodes._interned(key) is None
    assert HashedKey(key) not in nodes._INTERNED
    assert len(nodes._INTERNED) == before


def test_a_dead_reference_does_not_remove_a_newer_entry() -> None:
    a = concat(_fresh_items())
    key = (type(a), a.items)  # type: ignore[attr-defined]
    old_ref = nodes._INTERNED[HashedKey(key)]
    # a newer node under the same key (a lost race between threads does this)
    newer = type(a)(a.items)  # type: ignore[call-arg,attr-defined]
    nodes._intern(key, newer)
    nodes._forget(old_ref)  # the old node's callback, run late
    assert nodes._interned(key) is newer
    del a
    gc.collect()
    assert nodes._interned(key) is newer
    assert concat(_fresh_items()) is newer


def test_keys_are_hashed_once_and_equal_to_the_fields_tuple_keys() -> None:
    """The table's keys are the :class:`HashedKey` of the fields tuple, hashing as it does;
    the node's own hash is that hash (as the dataclass ``__post_init__`` computes it)."""
    a = concat(_fresh_items())
    r = repeat(a, 3, 9)
    for node, fields in ((a, (type(a), a.items)), (r, (type(r), a, 3, 9))):  # type: ignore[attr-defined]
        ref = nodes._INTERNED[HashedKey(fields)]
        assert ref() is node
        assert type(ref.key) is HashedKey
        assert ref.key.parts == fields
        assert hash(ref.key) == hash(fields) == hash(node)
        assert node == type(node)(*fields[1:])  # (the dataclass's own constructor)
        assert hash(node) == hash(type(node)(*fields[1:]))
