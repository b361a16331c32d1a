"""The bound resumable walks (walk39, #31): ``TokenTrie.classify_walker`` keeps the last
``ClassifyWalker`` it gave (the kernel's handle of the trie and the walk's reach threshold,
so the lazy classifier's walks skip the per-call look-ups) and gives it again only while it
fits: the same vocabulary trie, bitmask width, own strings or not, memo, kernel and reach
thresholds (tests patch ``_NATIVE_WALK_MAX_REACH``, ``_MEMO_WALK_MAX_SHARE`` and ``_KERNEL``:
a walker made before must not keep the old ones).  The walks' results are pinned by
tests/vocab/test_walk_resumes_after_stops.py (``classify_walk_resume`` walks through the
walker) and the lazy == eager tests.  Compiled build only.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import formcast.vocab.trie as trie_module
from _native_kernel import kernel_or_skip
from formcast.bitmask import bitmask_words
from formcast.vocab.trie import TokenTrie

KERNEL = kernel_or_skip(trie_module._KERNEL, "formcast.vocab._trie_walk")

STRINGS = [b"a", b"ab", b"abc", b"b", b"ba", b"c"]


def _trie() -> TokenTrie:
    return TokenTrie(STRINGS, vocab_size=len(STRINGS))


def test_the_walker_is_kept_while_it_fits() -> None:
    trie, other = _trie(), _trie()
    n = bitmask_words(len(STRINGS))
    w = trie.classify_walker(trie, n, True)
    assert w is not None
    assert trie.classify_walker(trie, n, True) is w
    for args in ((trie, n + 1, True), (trie, n, False), (other, n, True)):
        got = trie.classify_walker(*args)
        assert got is not None
        assert got is not w
        assert (got.vocab_trie, got.n_words, got.own_strings) == args
        w = got
        assert trie.classify_walker(*args) is w  # (kept: the last one given)


def test_the_walker_follows_the_thresholds_the_memo_and_the_kernel() -> None:
    trie = _trie()
    n = bitmask_words(len(STRINGS))
    base = trie_module._NATIVE_WALK_MAX_REACH
    w = trie.classify_walker(trie, n, True)
    assert w is not None
    assert w.memo is None
    assert w.max_reach == base
    with mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", 0):
        w0 = trie.classify_walker(trie, n, True)
        assert w0 is not None
        assert w0 is not w
        assert w0.max_reach == 0
    w = trie.classify_walker(trie, n, True)
    assert w is not None
    assert w is not w0
    assert w.max_reach == base
    memo = trie._subtree_memo()  # (built on request: the walks use it from then on)
    assert memo is not None
    wm = trie.classify_walker(trie, n, True)
    assert wm is not None
    assert wm is not w
    assert wm.memo is memo
    with mock.patch.object(trie_module, "_NATIVE_WALK_MAX_REACH", 0):
        ws = trie.classify_walker(trie, n, True)
        assert ws is not None
        assert ws.max_reach == trie.total_nodes // 2
        with mock.patch.object(trie_module, "_MEMO_WALK_MAX_SHARE", 1):
            w1 = trie.classify_walker(trie, n, True)
            assert w1 is not None
            assert w1 is not ws
            assert w1.max_reach == trie.total_nodes

    class Wrapped:
        def __getattr__(self, name: str) -> Any:
            return getattr(KERNEL, name)

    wrapped = Wrapped()
    with mock.patch.object(trie_module, "_KERNEL", wrapped):
        wk = trie.classify_walker(trie, n, True)
        assert wk is not None
        assert wk.kernel is wrapped
    with mock.patch.object(trie_module, "_KERNEL", None):
        assert trie.classify_walker(trie, n, True) is None  # (the pure package)
    back = trie.classify_walker(trie, n, True)
    assert back is not None
    assert back.kernel is KERNEL
