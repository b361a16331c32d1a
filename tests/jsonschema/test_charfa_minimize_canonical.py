"""``charfa.minimize`` (block-splitter Hopcroft) against a brute-force Moore refinement on
random code-point DFAs: the same number of states, the same language (every word up to length
4 over the edges' boundary code points), and a result that is its own fixed point."""

from __future__ import annotations

import itertools
import random

from formcast.automata import charfa
from formcast.automata.charfa import CharDFA


def _random_dfa(rng: random.Random, n: int) -> CharDFA:
    trans = []
    for _ in range(n):
        cuts = sorted(rng.sample(range(40, 60), rng.randint(0, 6)))
        row = []
        lo = 40
        for c in [*cuts, 60]:
            if c > lo and rng.random() < 0.8:
                row.append((lo, c - 1, rng.randrange(n)))
            lo = c
        trans.append(row)
    return CharDFA(trans, [rng.random() < 0.4 for _ in range(n)])


def _moore_classes(d: CharDFA) -> int:
    """The number of Myhill-Nerode classes of the live states of a trimmed ``d``."""
    points = sorted({p for row in d.trans for lo, hi, _ in row for p in (lo, hi + 1)})

    def target(s: int, c: int) -> int:
        for lo, hi, t in d.trans[s]:
            if lo <= c <= hi:
                return t
        return -1

    cls = [int(a) for a in d.accept]
    while True:
        sig = [
            (cls[s], tuple(-1 if (t := target(s, c)) < 0 else cls[t] for c in points))
            for s in range(d.num_states)
        ]
        ids = {v: i for i, v in enumerate(dict.fromkeys(sig))}
        new = [ids[v] for v in sig]
        if len(ids) == len(set(cls)):
            return len(ids)
        cls = new


def test_minimize_matches_moore_on_random_dfas() -> None:
    rng = random.Random(7)
    for _ in range(300):
        d = _random_dfa(rng, rng.randint(1, 9))
        m = charfa.minimize(CharDFA([list(r) for r in d.trans], list(d.accept)))
        trimmed = charfa.trim(d)
        expected = _moore_classes(trimmed) if trimmed.num_states else 0
        assert m.num_states == expected
        alphabet = sorted({c for row in d.trans for lo, hi, _ in row for c in (lo, hi, hi + 1)})
        for k in range(5):
            for word in itertools.product(alphabet[:6], repeat=k):
                text = "".join(map(chr, word))
                assert m.matches(text) == d.matches(text)
        again = charfa.minimize(CharDFA([list(r) for r in m.trans], list(m.accept)))
        assert (again.trans, again.accept) == (m.trans, m.accept)


def test_complement_of_a_minimal_dfa_is_what_minimize_returns() -> None:
    rng = random.Random(11)
    for _ in range(300):
        m = charfa.minimize(_random_dfa(rng, rng.randint(1, 9)))
        fast = charfa.complement(m)
        slow = charfa.complement(CharDFA([list(r) for r in m.trans], list(m.accept)))
        assert (fast.trans, fast.accept) == (slow.trans, slow.accept)
        assert fast.minimal or not m.num_states
