"""Compiled constraints against a brute-force oracle on small vocabularies.

The oracle (:func:`language`) reads the constraint objects' public fields and enumerates their
language up to a length bound, with none of formcast's lowering or automata: a literal is its
text, a regex the strings over a small alphabet that Python's ``re.fullmatch`` accepts,
``select`` a union, ``seq`` a product, ``repeat`` iterated products, ``define``/``rule`` and
``StateMachine`` least fixpoints.  Each case's languages are finite or have short completions
(every valid prefix of length ``m`` completes within ``2m + 3`` characters), so up to the
bound the oracle's prefixes are exact.

For every prefix of the language up to ``DEPTH`` characters (reached one character token at a
time), the compiled mask must be exactly the tokens ``t`` with ``prefix + t`` a prefix of the
language, plus the stop token when the prefix is in the language.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import numpy as np
import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from formcast import constraints as C
from formcast.bitmask import bitmask_to_bool

DEPTH = 6  # prefixes checked: up to this many characters
MAX_TOKEN = 3  # the longest token below
#: every prefix checked completes within this many characters (the recursive cases)
BOUND = 2 * (DEPTH + MAX_TOKEN) + 3
#: the same for cases whose prefixes complete within 3 more characters
SHORT = DEPTH + MAX_TOKEN + 3
REGEX_MAX = 6  # regexes in the cases match strings of at most this many characters


def _cap(strings: set[str], n: int) -> set[str]:
    return {s for s in strings if len(s) <= n}


def _product(a: set[str], b: set[str], n: int) -> set[str]:
    return {x + y for x in a for y in b if len(x) + len(y) <= n}


def language(c: C.Constraint, alphabet: str, n: int = BOUND) -> set[str]:
    """The strings of at most ``n`` characters of ``c`` (independent of formcast's lowering)."""
    rules: dict[str, set[str]] = {}
    bodies: dict[str, C.Constraint] = {}
    regexes: dict[str, set[str]] = {}

    def collect(x: C.Constraint) -> None:  # every define(...) in the tree
        if isinstance(x, C.Define):
            if x.name in bodies:
                return
            bodies[x.name] = x.body
        for child in _children(x):
            collect(child)

    def ev(x: C.Constraint) -> set[str]:
        if isinstance(x, C.Literal):
            return _cap({x.text}, n)
        if isinstance(x, C.Regex):
            if x.pattern in regexes:
                return regexes[x.pattern]
            pat = re.compile(x.pattern)
            out = regexes[x.pattern] = set()
            for k in range(min(n, REGEX_MAX) + 1):
                for chars in itertools.product(alphabet, repeat=k):
                    s = "".join(chars)
                    if pat.fullmatch(s):
                        out.add(s)
            return out
        if isinstance(x, C.Select):
            return set().union(*(ev(o) for o in x.options))
        if isinstance(x, C.Seq):
            acc = {""}
            for item in x.items:
                acc = _product(acc, ev(item), n)
            return acc
        if isinstance(x, C.Optional):
            return {""} | ev(x.item)
        if isinstance(x, C.Repeat):
            item = ev(x.item)
            sep = {""} if x.sep is None else ev(x.sep)
            out, cur, k = set(), {""}, 0
            top = x.max if x.max is not None else n + 1
            while k <= top and cur:
                if k >= x.min:
                    out |= cur
                cur = _product(cur, item if k == 0 else _product(sep, item, n), n)
                k += 1
            return out
        if isinstance(x, C.RuleRef):
            return rules.get(x.name, set())
        if isinstance(x, C.Define):
            return rules.get(x.name, set())
        if isinstance(x, C.StateMachine):
            return machine(x)
        raise AssertionError(f"no oracle for {type(x).__name__}")

    def machine(m: C.StateMachine) -> set[str]:
        from_state: dict[object, set[str]] = {s: set() for s in m.states}
        changed = True
        while changed:
            changed = False
            for s in m.states:
                new = {""} if s in m.accepting else set()
                for src, label, dst in m.transitions:
                    if src == s:
                        new |= _product(ev(label), from_state[dst], n)
                if new != from_state[s]:
                    from_state[s], changed = new, True
        return from_state[m.start]

    collect(c)
    while True:  # least fixpoint of the rules
        new = {name: ev(body) for name, body in bodies.items()}
        if new == rules:
            break
        rules.update(new)
    return ev(c)


def _children(x: C.Constraint) -> list[C.Constraint]:
    if isinstance(x, C.Select):
        return list(x.options)
    if isinstance(x, C.Seq):
        return list(x.items)
    if isinstance(x, C.Optional):
        return [x.item]
    if isinstance(x, C.Repeat):
        return [x.item] + ([x.sep] if x.sep is not None else [])
    if isinstance(x, C.Define):
        return [x.body]
    if isinstance(x, C.StateMachine):
        return [label for _, label, _ in x.transitions]
    return []


def _paren() -> C.Constraint:
    # (few strings per length, so the oracle's fixpoint stays small at BOUND)
    return C.define("p", C.select(["x", C.seq("(", C.rule("p"), C.optional(",x"), ")")]))


# name -> (constraint, alphabet, length bound of the oracle)
CASES: dict[str, tuple[Callable[[], C.Constraint], str, int]] = {
    "literal_select_seq": (
        lambda: C.seq("ab", C.select(["a", "b", "ba", ""]), C.optional("c")),
        "abc",
        SHORT,
    ),
    "repeat_sep_bounds": (lambda: C.repeat(C.select(["a", "bb"]), 1, 3, sep=","), "ab,", SHORT),
    "repeat_unbounded": (lambda: C.seq("(", C.repeat("ab", 0), ")"), "ab()", SHORT),
    "regex_inside_seq": (lambda: C.seq("a", C.regex("[ab]{1,2}c?"), "b"), "abc", SHORT),
    "recursion_balanced": (_paren, "x(),", BOUND),
    "mutual_recursion": (
        lambda: C.define(
            "a",
            C.select(
                ["x", C.seq("[", C.define("b", C.select(["y", C.seq("{", C.rule("a"), "}")])), "]")]
            ),
        ),
        "xy[]{}",
        BOUND,
    ),
    "left_recursion": (
        lambda: C.define("e", C.select(["1", C.seq(C.rule("e"), "+1")])),
        "1+",
        SHORT,
    ),
    "machine_loop": (
        lambda: C.StateMachine(
            "s",
            ["done"],
            [
                ("s", "hi", "q"),
                ("q", C.regex("[ab]{1,2}"), "r"),
                ("r", ",", "q"),
                ("r", ".", "done"),
            ],
        ),
        "hiab,.",
        SHORT,
    ),
    "machine_chains_and_loops": (
        lambda: C.StateMachine(
            0,
            [3, 5],
            [
                (0, "a", 1),
                (1, "b", 2),
                (2, "c", 3),
                (3, "d", 4),
                (4, "e", 5),
                (2, "x", 1),
                (5, "f", 0),
            ],
        ),
        "abcdefx",
        SHORT,
    ),
    "machine_with_constraint_labels": (
        lambda: C.StateMachine(
            0,
            [2, 3],
            [(0, C.select(["a", "b"]), 1), (1, C.repeat("c", 1, 2), 2), (1, "d", 3), (3, "e", 1)],
        ),
        "abcde",
        SHORT,
    ),
}


def _vocab(alphabet: str, lang: set[str]) -> Vocabulary:
    """Every character, plus every substring of 2..MAX_TOKEN characters of the language's
    strings (a bounded sample), plus a few strings it never contains."""
    tokens = set(alphabet)
    for s in sorted(lang)[:400]:
        for i in range(len(s)):
            for k in range(2, MAX_TOKEN + 1):
                if i + k <= len(s):
                    tokens.add(s[i : i + k])
    tokens |= {"zz", alphabet[0] * 3, alphabet[::-1][:3]}
    ordered = sorted(tokens)
    return Vocabulary.from_tokens(
        [t.encode() for t in ordered] + [b"<eos>"], stop_token_ids=[len(ordered)], name="toy"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_masks_equal_the_oracle_on_every_short_prefix(name: str) -> None:
    build, alphabet, bound = CASES[name]
    constraint = build()
    lang = language(constraint, alphabet, bound)
    assert lang, "the oracle found no string: the case is wrong"
    prefixes = {s[:i] for s in lang for i in range(len(s) + 1)}
    vocab = _vocab(alphabet, lang)
    texts = [vocab.token_bytes(i).decode() for i in range(vocab.vocab_size - 1)]
    ids = {t: i for i, t in enumerate(texts)}
    stop = vocab.vocab_size - 1
    compiled = GrammarCompiler(vocab).compile(constraint)
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    checked = 0
    for p in sorted(q for q in prefixes if len(q) <= DEPTH):
        m = GrammarMatcher(compiled)
        assert m.accept_tokens([ids[ch] for ch in p]), f"{name}: valid prefix {p!r} refused"
        m.fill_next_token_bitmask(bitmask)
        got = set(np.nonzero(bitmask_to_bool(bitmask, vocab.vocab_size)[0])[0].tolist())
        want = {i for i, t in enumerate(texts) if p + t in prefixes}
        if p in lang:
            want.add(stop)
        shown = [*texts, "<eos>"]
        assert got == want, (
            f"{name}: after {p!r} the mask allows {sorted(shown[i] for i in got - want)} "
            f"too many and misses {sorted(shown[i] for i in want - got)}"
        )
        checked += 1
    assert checked >= 3
