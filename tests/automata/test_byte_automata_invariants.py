"""The byte automata layer: UTF-8 range lowering, DFA invariants and minimality, the token trie.

* ``utf8_sequences(lo, hi)`` is checked exhaustively: every code point of the range (surrogates
  excluded) is matched by exactly one sequence, and every byte string a sequence matches is the
  encoding of a code point of the range (so no invalid UTF-8, no surrogate, nothing outside).
* DFAs: state 0 dead, every other state reachable and live, and minimal — checked against an
  independent Moore partition refinement, plus known minimal state counts.
* ``TokenTrie.walk`` equals ``dfa.step`` token by token, from every state, on random DFAs and
  vocabularies, in both its dense and sparse modes.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formcast import Vocabulary
from formcast.automata.dfa import DEAD, ByteDFA
from formcast.automata.regular import compile_dfa
from formcast.automata.utf8 import utf8_sequences
from formcast.frontends.regex import parse_regex
from formcast.vocab.trie import TokenTrie

try:
    from automata_helpers import dfa_fingerprint
    from trie_helpers import trie_of, walk_alive
except ImportError:  # pragma: no cover - when tests/ is imported as a package
    from tests.automata_helpers import dfa_fingerprint  # type: ignore[import-not-found,no-redef]
    from tests.trie_helpers import trie_of, walk_alive  # type: ignore[import-not-found,no-redef]

MAX_CP = 0x10FFFF


# -- UTF-8 sequences ----------------------------------------------------------------------------
def encode_all(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 of many code points at once: ``(bytes uint8[N, 4], lengths int[N])``."""
    cps = cps.astype(np.int64)
    n = np.where(cps < 0x80, 1, np.where(cps < 0x800, 2, np.where(cps < 0x10000, 3, 4)))
    out = np.zeros((cps.size, 4), dtype=np.int64)
    lead = np.select(
        [n == 1, n == 2, n == 3, n == 4],
        [cps, 0xC0 | (cps >> 6), 0xE0 | (cps >> 12), 0xF0 | (cps >> 18)],
    )
    out[:, 0] = lead
    for i in range(1, 4):  # continuation byte i of an n-byte sequence carries bits 6*(n-1-i)
        shift = 6 * (n - 1 - i)
        cont = 0x80 | ((cps >> np.maximum(shift, 0)) & 0x3F)
        out[:, i] = np.where(i < n, cont, 0)
    return out, n


def test_vectorized_encoder_matches_python():
    rnd = random.Random(3)
    cps = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, MAX_CP]
    cps += [rnd.randrange(MAX_CP + 1) for _ in range(2000)]
    cps = [c for c in cps if not 0xD800 <= c <= 0xDFFF]
    enc, n = encode_all(np.asarray(cps))
    for row, k, cp in zip(enc, n, cps):
        assert bytes(row[:k].tolist()) == chr(cp).encode(), hex(cp)


def check_sequences(lo: int, hi: int) -> int:
    seqs = list(utf8_sequences(lo, hi))
    cps = np.arange(lo, hi + 1, dtype=np.int64)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    enc, n = encode_all(cps)
    hits = np.zeros(cps.size, dtype=np.int64)
    for seq in seqs:
        assert 1 <= len(seq) <= 4, seq
        assert all(0 <= a <= b <= 0xFF for a, b in seq), seq
        m = n == len(seq)
        for i, (a, b) in enumerate(seq):
            m &= (enc[:, i] >= a) & (enc[:, i] <= b)
        size = int(np.prod([b - a + 1 for a, b in seq]))
        # every byte string of the sequence encodes a code point of the range (and only once)
        assert int(m.sum()) == size, f"{[(hex(a), hex(b)) for a, b in seq]} in {lo:#x}-{hi:#x}"
        hits += m
    assert (hits == 1).all(), [hex(int(c)) for c in cps[hits != 1][:10]]
    return len(seqs)


BOUNDARY_RANGES = [
    (0, MAX_CP),
    (0, 0x7F),
    (0x7F, 0x80),
    (0x80, 0x7FF),
    (0x7FF, 0x800),
    (0x800, 0xFFFF),
    (0xFFFF, 0x10000),
    (0x10000, MAX_CP),
    (MAX_CP, MAX_CP),
    (0, 0),
    (0xD7FF, 0xE000),  # spans the surrogates
    (0xD000, 0xDFFF),
    (0xDFFF, 0xE001),
    (0x61, 0x7A),
    (0xE9, 0x4E2D),
    (0x3FF, 0x401),
    (0xFFF, 0x1001),
    (0x3FFFF, 0x40001),
    (0xFFFFF, 0x100001),
    (0x10FFFE, MAX_CP),
]


@pytest.mark.parametrize(("lo", "hi"), BOUNDARY_RANGES, ids=lambda v: f"{v:#x}")
def test_utf8_sequences_boundaries(lo, hi):
    check_sequences(lo, hi)


def test_utf8_sequences_surrogates_only_is_empty():
    assert list(utf8_sequences(0xD800, 0xDFFF)) == []
    assert list(utf8_sequences(0xDA00, 0xDB00)) == []
    assert list(utf8_sequences(5, 4)) == []


def test_utf8_sequences_full_range_is_the_classic_split():
    seqs = list(utf8_sequences(0, MAX_CP))
    assert [(0x00, 0x7F)] in seqs
    assert [(0xC2, 0xDF), (0x80, 0xBF)] in seqs
    assert [(0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)] in seqs
    assert [(0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)] in seqs  # no surrogates
    assert [(0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)] in seqs
    assert len(seqs) <= 12


_cp = st.one_of(
    st.integers(0, MAX_CP),
    st.sampled_from(
        [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000, MAX_CP]
    ),
    st.integers(0, 0x1000),
)


@settings(max_examples=80, deadline=None)
@given(a=_cp, delta=st.one_of(st.integers(0, 300), st.integers(0, 0x30000)))
def test_utf8_sequences_random_ranges(a, delta):
    lo, hi = a, min(a + delta, MAX_CP)
    check_sequences(lo, hi)


# -- DFA invariants and minimality --------------------------------------------------------------
def moore_classes(dfa: ByteDFA) -> int:
    """Number of Myhill-Nerode classes among all states (dead included), by Moore refinement."""
    table = np.asarray(dfa.table)
    part = np.asarray(dfa.accepting, dtype=np.int64)
    while True:
        sig = np.concatenate([part[:, None], part[table]], axis=1)
        _, new = np.unique(sig, axis=0, return_inverse=True)
        new = new.reshape(-1)
        if len(np.unique(new)) == len(np.unique(part)):
            return len(np.unique(new))
        part = new


def check_invariants(dfa: ByteDFA) -> None:
    table = np.asarray(dfa.table)
    n = table.shape[0]
    assert table.shape == (n, 256)
    assert dfa.accepting.shape == (n,)
    assert (table[DEAD] == DEAD).all()
    assert not dfa.accepting[DEAD]
    if dfa.is_empty:
        assert n == 1
        return
    # reachable from the start
    seen = {dfa.start}
    stack = [dfa.start]
    while stack:
        for t in set(table[stack.pop()].tolist()):
            if t != DEAD and t not in seen:
                seen.add(t)
                stack.append(t)
    assert seen == set(range(1, n)), "unreachable states"
    # live: every non-dead state reaches acceptance
    live = set(np.flatnonzero(dfa.accepting).tolist())
    changed = True
    while changed:
        changed = False
        for s in range(1, n):
            if s not in live and live & set(table[s].tolist()):
                live.add(s)
                changed = True
    assert live == set(range(1, n)), "states that cannot reach acceptance"


@pytest.mark.parametrize(
    ("pattern", "states"),
    [
        ("(a|b)*abb", 4),
        ("a*", 1),
        ("a+", 2),
        ("[a-z]{3}", 4),
        ("(ab|cd){0,2}", 7),
        ("abc|abd", 4),
        ("é", 3),
        ("[é中]", 5),
        (".", 9),  # any UTF-8 character but \n: start, E0, ED, F0, F4, three "need k more", end
        ("(a|b)*a(a|b){3}", 16),
        ("(a*b*)*", 1),
        ("(ab)*|(ab)+", 2),
    ],
)
def test_known_minimal_state_counts(pattern, states):
    dfa = compile_dfa(parse_regex(pattern))
    assert dfa.num_states == states
    check_invariants(dfa)
    assert moore_classes(dfa) == states + 1


_ATOMS = ["a", "b", "0", "é", "中", "[ab]", "[^a]", r"\d", ".", "[a-c0]", "(?:)"]


@st.composite
def small_regex(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_ATOMS))
    kind = draw(st.sampled_from(["cat", "alt", "rep"]))
    if kind == "cat":
        return "".join(draw(st.lists(small_regex(depth - 1), min_size=2, max_size=3)))
    if kind == "alt":
        return (
            "(?:" + "|".join(draw(st.lists(small_regex(depth - 1), min_size=2, max_size=3))) + ")"
        )
    q = draw(st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,}"]))
    return "(?:" + draw(small_regex(depth - 1)) + ")" + q


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=small_regex(), rnd=st.randoms(use_true_random=False))
def test_random_dfas_are_minimal_and_correct(pattern, rnd):
    dfa = compile_dfa(parse_regex(pattern))
    check_invariants(dfa)
    if not dfa.is_empty:
        assert moore_classes(dfa) == dfa.num_states + 1, pattern
    pool = ["a", "b", "c", "0", "5", "é", "中", "\n", "٣"]
    for _ in range(20):
        s = "".join(rnd.choice(pool) for _ in range(rnd.randint(0, 5)))
        assert dfa.matches(s.encode()) == (re.fullmatch(pattern, s) is not None), (pattern, s)


def test_step_and_next_bytes():
    dfa = compile_dfa(parse_regex("ab|ac"))
    s = dfa.step(dfa.start, b"a")
    assert dfa.next_bytes(s).tolist() == [ord("b"), ord("c")]
    assert dfa.step(dfa.start, b"x") == DEAD
    assert dfa.step(DEAD, b"") == DEAD
    assert dfa.step(dfa.start, b"") == dfa.start
    assert dfa_fingerprint(dfa) == dfa_fingerprint(compile_dfa(parse_regex("a(b|c)")))
    assert dfa_fingerprint(dfa) != dfa_fingerprint(compile_dfa(parse_regex("a(b|d)")))
    assert not dfa.table.flags.writeable


# -- the token trie ------------------------------------------------------------------------------
def check_walk(dfa: ByteDFA, vocab: Vocabulary) -> TokenTrie:
    trie = trie_of(vocab)
    strings = trie.strings
    assert strings == sorted(set(strings))
    # token -> distinct string mapping
    for tid in range(vocab.vocab_size):
        u = int(trie.token_to_unique[tid])
        if vocab.is_text_token(tid):
            assert strings[u] == vocab.tokens[tid]
        else:
            assert u == len(strings)
    assert set(strings) == {vocab.tokens[t] for t in range(len(vocab)) if vocab.is_text_token(t)}
    for state in range(dfa.table.shape[0]):
        got = trie.walk(dfa.table, state)
        want = [dfa.step(state, s) for s in strings]
        assert got.tolist() == want, f"state {state}"
        assert np.array_equal(walk_alive(trie, dfa.table, state), np.asarray(want) != DEAD)
    return trie


def level1_live_fraction(trie: TokenTrie, dfa: ByteDFA, state: int) -> float:
    states = np.asarray(dfa.table)[state, trie.level_bytes[1]]
    return float(np.count_nonzero(states)) / max(states.size, 1)


_BYTE_POOL = sorted({*b'abc0159{}" ', *"é中".encode()})


@st.composite
def vocabularies(draw: st.DrawFn) -> Vocabulary:
    toks = draw(
        st.lists(
            st.one_of(
                st.binary(min_size=0, max_size=6),
                st.lists(st.sampled_from(_BYTE_POOL), min_size=1, max_size=7).map(bytes),
                st.text(alphabet="ab0é中", min_size=1, max_size=4).map(str.encode),
            ),
            min_size=1,
            max_size=60,
        )
    )
    toks = [*toks, toks[0], b"<eos>"]  # a duplicate and the stop token
    special = draw(st.lists(st.integers(0, len(toks) - 1), max_size=3))
    return Vocabulary.from_tokens(
        toks,
        stop_token_ids=[len(toks) - 1],
        special_token_ids=special,
        vocab_size=len(toks) + draw(st.integers(0, 5)),
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=small_regex(), vocab=vocabularies())
def test_trie_walk_equals_per_token_steps(pattern, vocab):
    check_walk(compile_dfa(parse_regex(pattern)), vocab)


def _many_tokens(seed: int, n: int) -> list[bytes]:
    rnd = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 _-{}"
    return [bytes(rnd.choice(alphabet) for _ in range(rnd.randint(1, 8))) for _ in range(n)]


def test_trie_walk_dense_mode():
    """A permissive automaton keeps most of every level alive: the dense gathers."""
    toks = _many_tokens(1, 400)
    vocab = Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)])
    dfa = compile_dfa(parse_regex(r"[^\n]*"))
    trie = check_walk(dfa, vocab)
    assert level1_live_fraction(trie, dfa, dfa.start) == 1.0
    assert (trie.walk(dfa.table, dfa.start) != DEAD).all()


def test_trie_walk_sparse_mode():
    """A restrictive automaton kills most of level 1 (< 1/8 alive): the sparse walk."""
    toks = [*_many_tokens(2, 600), b"a1", b"a12", b"a123x", b"a1234", b"a", b"1"]
    vocab = Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)])
    dfa = compile_dfa(parse_regex(r"a[0-9]*x?"))
    trie = check_walk(dfa, vocab)
    assert level1_live_fraction(trie, dfa, dfa.start) * 8 < 1  # the switch happens at level 1
    alive = {trie.strings[i] for i in np.flatnonzero(trie.walk(dfa.table, dfa.start))}
    assert {b"a1", b"a12", b"a123x", b"a1234", b"a"} <= alive
    assert all(re.fullmatch(rb"a[0-9]*x?", s) for s in alive)


def test_trie_walk_mixed_modes_deep_tokens():
    """Dense at first, then sparse deeper down (long tokens sharing prefixes)."""
    toks = [b"ab" * k for k in range(1, 12)] + [b"ab" * k + b"c" for k in range(1, 12)]
    toks += [b"a" + bytes([c]) for c in range(0x20, 0x7F)]
    vocab = Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)])
    for pattern in ["(ab)*", "(ab){0,5}c?", "a.*", "[ab]*c"]:
        check_walk(compile_dfa(parse_regex(pattern)), vocab)


def test_trie_of_only_special_or_empty_tokens():
    vocab = Vocabulary.from_tokens([b"", b"x", b"<eos>"], stop_token_ids=[2], special_token_ids=[1])
    trie = trie_of(vocab)
    assert trie.num_strings == 0
    assert trie.strings == []
    dfa = compile_dfa(parse_regex("x*"))
    assert trie.walk(dfa.table, dfa.start).size == 0


# -- compile-time sharing, fuel and deadline ----------------------------------------------------
def _dfa_matches(dfa: ByteDFA, data: bytes) -> bool:
    s = dfa.start
    for b in data:
        s = int(dfa.table[s, b])
        if s == DEAD:
            return False
    return bool(dfa.accepting[s])


def test_shared_subtrees_are_built_once_per_exit() -> None:
    """Optional members sharing their suffix (the shape JSON objects take): the NFA is linear in
    the IR's DAG, not in its tree unfolding, and the language is unchanged."""
    from formcast.automata.dfa import nfa_to_dfa
    from formcast.automata.regular import build_nfa
    from formcast.ir.nodes import alt, concat, literal, node_size, repeat

    n = 12
    suffix = literal("}")
    for i in reversed(range(n)):
        member = concat([literal(f',"k{i}":'), repeat(parse_regex("[0-9]+"), 1, 1)])
        suffix = alt([suffix, concat([member, suffix])])
    node = concat([literal("{"), suffix])
    assert node_size(node) > 2**n  # the tree unfolding is exponential...
    nfa = build_nfa(node)
    assert len(nfa.eps) < 40 * n  # ...the NFA is not
    dfa = nfa_to_dfa(nfa)
    pattern = re.compile("{" + "".join(f'(,"k{i}":[0-9]+)?' for i in range(n)) + "}")
    rnd = random.Random(7)
    for _ in range(300):
        keys = sorted(rnd.sample(range(n), rnd.randint(0, 4)))
        if rnd.random() < 0.3:
            rnd.shuffle(keys)
        text = "{" + "".join(f',"k{i}":{rnd.randint(0, 99)}' for i in keys) + "}"
        assert _dfa_matches(dfa, text.encode()) == bool(pattern.fullmatch(text)), text


def test_compile_deadline_and_fuel_name_their_limit() -> None:
    from formcast.errors import ConfigurationError, LimitExceededError
    from formcast.limits import CompileLimits

    with pytest.raises(LimitExceededError) as e:
        compile_dfa(parse_regex("[a-z]{1,40}@[a-z]{1,40}"), CompileLimits(max_compile_seconds=1e-9))
    assert e.value.limit == "max_compile_seconds"
    with pytest.raises(LimitExceededError) as e:
        compile_dfa(parse_regex("[a-z]{1,400}"), CompileLimits(max_compile_work=10_000))
    assert e.value.limit == "max_compile_work"
    assert compile_dfa(parse_regex("[a-z]{1,4}"), CompileLimits(max_compile_seconds=60)).num_states
    for bad in (0, -1.0, True, "2"):
        with pytest.raises(ConfigurationError):
            CompileLimits(max_compile_seconds=bad)  # type: ignore[arg-type]


@given(st.integers(1, 40), st.integers(1, 30), st.integers(1, 4), st.integers(0, 2**31))
@settings(max_examples=60, deadline=None)
def test_column_classes_group_equal_columns(rows: int, cols: int, values: int, seed: int) -> None:
    from formcast.columns import column_classes

    table = np.random.default_rng(seed).integers(0, values, size=(rows, cols), dtype=np.int32)
    cls, first = column_classes(table)
    for a in range(cols):
        assert np.array_equal(table[:, a], table[:, first[cls[a]]])
        for b in range(cols):
            assert (cls[a] == cls[b]) == np.array_equal(table[:, a], table[:, b])


@given(st.integers(1, 300), st.integers(1, 256), st.integers(1, 40), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_column_classes_numbering_is_the_integer_hash_order(
    rows: int, cols: int, values: int, seed: int
) -> None:
    """The floating-point fast path numbers the classes exactly as the integer hash does
    (ascending hash, each with its first column), so tables built on it do not change."""
    from formcast.columns import column_classes, hash_weights

    rng = np.random.default_rng(seed)
    base = rng.integers(0, values, size=(rows, max(1, cols // 3)), dtype=np.int32)
    table = np.ascontiguousarray(base[:, rng.integers(0, base.shape[1], size=cols)])
    cls, first = column_classes(table)
    with np.errstate(over="ignore"):
        h = hash_weights(rows, 0x5EED) @ table.astype(np.int64)
    _, want_first, want_cls = np.unique(h, return_index=True, return_inverse=True)
    assert cls.tolist() == want_cls.reshape(-1).tolist()
    assert first.tolist() == want_first.tolist()


@given(st.integers(1, 1200), st.integers(1, 256), st.integers(1, 6), st.integers(0, 2**31))
@settings(max_examples=150, deadline=None)
def test_column_classes_with_a_cap_give_none_only_past_it(
    rows: int, cols: int, most: int, seed: int
) -> None:
    """``most`` (the vocabulary trie's class-trie cap): None exactly where the table has more
    classes than that, else the uncapped result."""
    from formcast.columns import column_classes

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 5, size=(rows, rng.integers(1, 10)), dtype=np.int32)
    table = np.ascontiguousarray(base[:, rng.integers(0, base.shape[1], size=cols)])
    full = column_classes(table)
    capped = column_classes(table, most)
    n_classes = len({table[:, c].tobytes() for c in range(cols)})
    assert full[1].size == n_classes
    if n_classes > most:
        assert capped is None
    else:
        assert capped is not None
        assert capped[0].tolist() == full[0].tolist()
        assert capped[1].tolist() == full[1].tolist()


def _ir_cases() -> list[tuple[str, object]]:
    """IR built with concat()/alt() (which merge adjacent literals) whose loops Thompson
    construction folds (``x (sep x)*``, ``x x*``), with the regex each one means."""
    from formcast.ir.nodes import CharSet, alt, concat, literal, repeat

    digits = repeat(CharSet.chars("01"), 1, 2)
    x = concat([literal("{"), digits, literal("}")])
    x_re = r"\{[01]{1,2}\}"
    return [
        # "[" then an alternative: the first element's "{" stays apart, the loop's "," + "{"
        # is merged into ",{" (the loop body's first literal is longer)
        (
            rf"\[(\]|{x_re}(,{x_re})*\])",
            concat(
                [
                    literal("["),
                    alt(
                        [
                            literal("]"),
                            concat([x, repeat(concat([literal(","), x]), 0, None), literal("]")]),
                        ]
                    ),
                ]
            ),
        ),
        # "[" merged with the first element's "{" (the element's first literal is longer)
        (rf"\[{x_re}({x_re})*", concat([literal("["), x, repeat(x, 0, None)])),
        (
            rf"\[{x_re}(;{x_re})*\]",
            concat([literal("["), x, repeat(concat([literal(";"), x]), 0, None), literal("]")]),
        ),
        # enum values that share their closing bytes, concatenations that end alike
        (
            r"(ab|cb|b)x?(ab|cb)",
            concat(
                [
                    alt([literal("ab"), literal("cb"), literal("b")]),
                    repeat(literal("x"), 0, 1),
                    alt([literal("ab"), literal("cb")]),
                ]
            ),
        ),
    ]


@pytest.mark.parametrize("case", range(4))
def test_folded_loops_and_shared_tails_keep_the_language(case: int) -> None:
    pattern, node = _ir_cases()[case]
    dfa = compile_dfa(node)  # type: ignore[arg-type]
    rng = random.Random(case)
    alphabet = "[]{},;01abcx"
    samples = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(4000)
    ]
    # and strings of the language itself, which random ones rarely hit
    samples += ["[{0}]", "[{01},{1}]", "[{0},{1},{10}]", "[]", "[{0}{1}{11}", "[{0}", "[{0};{1}]"]
    samples += ["abab", "cbxab", "bcb", "bxcb", "abxcb"]
    for text in samples:
        assert dfa.matches(text.encode()) == (re.fullmatch(pattern, text) is not None), text


def _brute_equivalent(table: np.ndarray, labels: np.ndarray, depth: int, a: int, b: int) -> bool:
    """States ``a`` and ``b`` reach equal labels on every string of at most ``depth`` symbols."""
    frontier = [(a, b)]
    for _ in range(depth + 1):
        if any(labels[x] != labels[y] for x, y in frontier):
            return False
        frontier = list(
            {
                (int(table[x, c]), int(table[y, c]))
                for x, y in frontier
                for c in range(table.shape[1])
            }
        )
    return True


@pytest.mark.parametrize("seed", range(40))
def test_equivalence_classes_match_brute_force(seed: int) -> None:
    from formcast.automata.equivalence import equivalence_classes

    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 12)), int(rng.integers(1, 4))
    table = rng.integers(0, n, size=(n, k)).astype(np.int32)
    table[0] = 0
    labels = rng.integers(0, 2, size=n)
    labels[0] = 5
    depth = int(rng.integers(1, 6))
    part, stable = equivalence_classes(table, labels, depth)
    for a in range(n):
        for b in range(n):
            assert (part[a] == part[b]) == _brute_equivalent(table, labels, depth, a, b), (a, b)
    if stable:  # a congruence: one label per class, successors of a class in one class
        for a in range(n):
            for b in range(n):
                if part[a] == part[b]:
                    assert labels[a] == labels[b]
                    assert all(part[table[a, c]] == part[table[b, c]] for c in range(k))


def test_equivalence_gives_up_with_the_identity_never_failing_the_compile() -> None:
    from formcast.automata.equivalence import equivalence_classes
    from formcast.limits import WorkBudget

    # a chain of equal bytes needs one round per state to converge
    n = 60
    table = np.zeros((n, 1), dtype=np.int32)
    table[1:-1, 0] = np.arange(2, n)
    labels = np.ones(n, dtype=np.int64)
    labels[0] = 0
    labels[-1] = 2
    part, stable = equivalence_classes(table, labels, 100, budget=10 * n)
    assert stable
    assert list(part) == list(range(n))
    nearly_spent = WorkBudget(limit=5)
    part, stable = equivalence_classes(table, labels, 100, work=nearly_spent)
    assert stable
    assert list(part) == list(range(n))
    assert nearly_spent.used <= 5
    part, stable = equivalence_classes(table, labels, 100)
    assert stable
    assert len(set(part.tolist())) == n
    part, stable = equivalence_classes(table, labels, 3)
    assert not stable
    assert len(set(part.tolist())) < n


def _moore_reference(table: np.ndarray, labels: np.ndarray, depth: int) -> tuple[list[int], bool]:
    """Textbook Moore refinement, every state every round (the incremental pass's oracle)."""
    block = {s: int(labels[s]) for s in range(table.shape[0])}
    for _ in range(depth):
        sigs: dict[tuple[int, ...], int] = {}
        new = {
            s: sigs.setdefault(
                (block[s], *(block[int(t)] for t in table[s])), len(sigs)
            )
            for s in range(table.shape[0])
        }
        if len(set(new.values())) == len(set(block.values())):
            return [block[s] for s in range(table.shape[0])], True
        block = new
    return [block[s] for s in range(table.shape[0])], False


def _same_partition(a: list[int], b: list[int]) -> bool:
    return len({(x, y) for x, y in zip(a, b)}) == len(set(a)) == len(set(b))


@pytest.mark.parametrize("seed", range(30))
def test_incremental_refinement_equals_full_moore_rounds(seed: int) -> None:
    """Only blocks with a successor that changed block are refined each round (counters such
    as a number's bounded digits converge in one cheap round per count): the partition after
    every number of rounds is the textbook one's."""
    from formcast.automata.equivalence import equivalence_classes

    rng = np.random.default_rng(1000 + seed)
    n, k = int(rng.integers(20, 300)), int(rng.integers(1, 5))
    table = rng.integers(0, n, size=(n, k)).astype(np.int32)
    chain = int(rng.integers(0, n // 2))  # a counter: state i moves to i + 1 on column 0
    table[1 : chain + 1, 0] = np.arange(2, chain + 2)
    table[0] = 0
    labels = rng.integers(0, 3, size=n)
    labels[0] = 7
    for depth in (1, 2, 5, chain + 3, 400):
        part, stable = equivalence_classes(table, labels, depth)
        ref, ref_stable = _moore_reference(table, labels, depth)
        assert _same_partition(part.tolist(), ref), depth
        assert stable == (ref_stable or len(set(ref)) == n), depth
