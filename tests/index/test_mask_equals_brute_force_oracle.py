"""The key property: the token mask equals a brute-force oracle, at every step of random walks.

Random small regexes (over ``a``, ``b``, ``é`` (2 UTF-8 bytes) and ``中`` (3 bytes), with
classes, negated classes, ``.``, alternation, groups and ``* + ? {m} {m,n} {m,} {,n}`` plus lazy
forms) are compiled against random small vocabularies whose tokens are random byte strings over
the UTF-8 bytes of those characters (so tokens split multi-byte characters: partial UTF-8), plus a
stop token and a special token whose text would otherwise match.

The oracle is independent of formcast's automata:

* a tiny Thompson NFA over *characters*, built from the same AST the regex text is rendered from,
  and itself checked against Python's ``re`` on every test case;
* for finite languages additionally the exact language, enumerated from the AST (each member
  checked with ``re.fullmatch``), and its set of byte prefixes.

Token ``t`` must be allowed after the bytes ``P`` iff some string of the language starts with
``P + bytes(t)``; a stop token iff ``P`` itself is in the language; a special token never.

Why a finite character universe is exact here: every byte of every token comes from
``{a, b, C3, A9, E4, B8, AD}``, so every complete character in ``P + bytes(t)`` is one of the 14
characters ``U`` those bytes can form.  Character classes are subsets of the alphabet, their
complements, or ``.``; for any byte prefix of a character that the tokens can produce, ``U`` holds
at least three characters with that prefix and at most one alphabet character among them, so a
class contains a (Unicode) character with that prefix iff it contains one in ``U``; and without
backreferences, any continuation character can be replaced by another one of the same class.
"""

from __future__ import annotations

import codecs
import itertools
import re
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from formcast import (
    GrammarCompiler,
    GrammarMatcher,
    Vocabulary,
    allocate_token_bitmask,
    bitmask_to_bool,
)
from formcast.automata.regular import compile_dfa
from formcast.frontends.regex import parse_regex

ALPHABET = ("a", "b", "é", "中")
TOKEN_BYTES = sorted({b for ch in ALPHABET for b in ch.encode()})  # the 7 bytes tokens use


def _universe() -> tuple[str, ...]:
    """Every character the token bytes can form (the 14-character universe ``U``)."""
    out = []
    for n in (1, 2, 3):
        for combo in itertools.product(TOKEN_BYTES, repeat=n):
            try:
                s = bytes(combo).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(s) == 1:
                out.append(s)
    return tuple(sorted(set(out)))


UNIVERSE = _universe()
assert len(UNIVERSE) == 14, UNIVERSE


# -- the regex AST, its rendering and its semantics --------------------------------------------
@dataclass(frozen=True)
class Lit:
    ch: str


@dataclass(frozen=True)
class Cls:
    chars: frozenset[str]
    negated: bool
    use_range: bool  # render a-b as a range when both are present


@dataclass(frozen=True)
class Dot:
    pass


@dataclass(frozen=True)
class Cat:
    items: tuple[object, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[object, ...]


@dataclass(frozen=True)
class Rep:
    item: object
    lo: int
    hi: int | None
    form: str  # how the quantifier is spelled: "*", "+", "?", "{m}", "{m,n}", "{m,}", "{,n}"
    lazy: bool


@dataclass(frozen=True)
class Group:
    item: object
    capturing: bool


def _quantifier(r: Rep) -> str:
    q = {
        "*": "*",
        "+": "+",
        "?": "?",
        "{m}": f"{{{r.lo}}}",
        "{m,n}": f"{{{r.lo},{r.hi}}}",
        "{m,}": f"{{{r.lo},}}",
        "{,n}": f"{{,{r.hi}}}",
    }[r.form]
    return q + ("?" if r.lazy else "")


def render(node: object, ctx: str = "top") -> str:
    """Regex text of ``node``; ``ctx`` is where it sits: top, alt branch, concat item, repeat."""
    if isinstance(node, Lit):
        return node.ch
    if isinstance(node, Cls):
        chars = set(node.chars)
        body = ""
        if node.use_range and {"a", "b"} <= chars:
            body, chars = "a-b", chars - {"a", "b"}
        body += "".join(sorted(chars))
        return "[" + ("^" if node.negated else "") + body + "]"
    if isinstance(node, Dot):
        return "."
    if isinstance(node, Group):
        return ("(" if node.capturing else "(?:") + render(node.item) + ")"
    if isinstance(node, Cat):
        text = "".join(render(i, "cat") for i in node.items)
        return f"(?:{text})" if ctx == "rep" or (ctx == "cat" and not text) else text
    if isinstance(node, Alt):
        text = "|".join(render(i, "alt") for i in node.items)
        return f"(?:{text})" if ctx in ("cat", "rep") else text
    if isinstance(node, Rep):
        text = render(node.item, "rep") + _quantifier(node)
        return f"(?:{text})" if ctx == "rep" else text
    raise TypeError(node)


def char_set(node: Lit | Cls | Dot) -> frozenset[str]:
    """The characters of ``UNIVERSE`` an atom matches."""
    if isinstance(node, Lit):
        return frozenset({node.ch})
    if isinstance(node, Dot):
        return frozenset(c for c in UNIVERSE if c != "\n")
    return frozenset(c for c in UNIVERSE if (c in node.chars) != node.negated)


class CharNFA:
    """A Thompson NFA over characters of ``UNIVERSE`` (independent of formcast)."""

    def __init__(self, node: object) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[str], int]]] = []
        self.start = self._new()
        self.accept = self._new()
        self._build(node, self.start, self.accept)
        self.live = self._coreachable()

    def _new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def _build(self, node: object, frm: int, to: int) -> None:
        if isinstance(node, (Lit, Cls, Dot)):
            self.edges[frm].append((char_set(node), to))
        elif isinstance(node, Group):
            self._build(node.item, frm, to)
        elif isinstance(node, Cat):
            cur = frm
            for i, item in enumerate(node.items):
                nxt = to if i == len(node.items) - 1 else self._new()
                self._build(item, cur, nxt)
                cur = nxt
            if not node.items:
                self.eps[frm].append(to)
        elif isinstance(node, Alt):
            for item in node.items:
                self._build(item, frm, to)
        elif isinstance(node, Rep):
            cur = frm
            for _ in range(node.lo):
                nxt = self._new()
                self._build(node.item, cur, nxt)
                cur = nxt
            if node.hi is None:
                loop = self._new()
                self.eps[cur].append(loop)
                back = self._new()
                self._build(node.item, loop, back)
                self.eps[back].append(loop)
                self.eps[loop].append(to)
            else:
                self.eps[cur].append(to)
                for _ in range(node.hi - node.lo):
                    nxt = self._new()
                    self._build(node.item, cur, nxt)
                    self.eps[nxt].append(to)
                    cur = nxt
        else:
            raise TypeError(node)

    def _coreachable(self) -> frozenset[int]:
        rev: dict[int, set[int]] = {}
        for s in range(len(self.eps)):
            for t in self.eps[s]:
                rev.setdefault(t, set()).add(s)
            for chars, t in self.edges[s]:
                if chars:
                    rev.setdefault(t, set()).add(s)
        seen = {self.accept}
        stack = [self.accept]
        while stack:
            for p in rev.get(stack.pop(), ()):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return frozenset(seen)

    def closure(self, states: set[int]) -> set[int]:
        out = set(states)
        stack = list(states)
        while stack:
            for t in self.eps[stack.pop()]:
                if t not in out:
                    out.add(t)
                    stack.append(t)
        return out

    def step(self, states: set[int], ch: str) -> set[int]:
        return self.closure({t for s in states for chars, t in self.edges[s] if ch in chars})

    def run(self, text: str) -> set[int]:
        states = self.closure({self.start})
        for ch in text:
            assert ch in UNIVERSE, ch
            states = self.step(states, ch)
            if not states:
                break
        return states

    def fullmatch(self, text: str) -> bool:
        return self.accept in self.run(text)

    def viable(self, data: bytes) -> bool:
        """Some string of the language starts with the bytes ``data``."""
        dec = codecs.getincrementaldecoder("utf-8")()
        try:
            text = dec.decode(data, final=False)
        except UnicodeDecodeError:
            return False
        tail = dec.getstate()[0]
        states = self.run(text)
        if tail:
            states = {
                t for ch in UNIVERSE if ch.encode().startswith(tail) for t in self.step(states, ch)
            }
        return any(s in self.live for s in states)

    def accepts(self, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return self.fullmatch(text)


_LANG_CAP = 3000


def finite_language(node: object) -> frozenset[str] | None:
    """The language over ``UNIVERSE`` when it is finite and small, else ``None``."""

    def lang(n: object) -> frozenset[str] | None:
        if isinstance(n, (Lit, Cls, Dot)):
            return char_set(n)
        if isinstance(n, Group):
            return lang(n.item)
        if isinstance(n, Cat):
            acc: frozenset[str] | None = frozenset({""})
            for item in n.items:
                sub = lang(item)
                if sub is None or acc is None or len(acc) * len(sub) > _LANG_CAP:
                    return None
                acc = frozenset(a + b for a in acc for b in sub)
            return acc
        if isinstance(n, Alt):
            out: set[str] = set()
            for item in n.items:
                sub = lang(item)
                if sub is None:
                    return None
                out |= sub
            return frozenset(out) if len(out) <= _LANG_CAP else None
        if isinstance(n, Rep):
            if n.hi is None:
                return None
            sub = lang(n.item)
            if sub is None:
                return None
            power: frozenset[str] = frozenset({""})
            out = set()
            for k in range(n.hi + 1):
                if k >= n.lo:
                    out |= power
                if len(power) * len(sub) > _LANG_CAP:
                    return None
                power = frozenset(a + b for a in power for b in sub)
            return frozenset(out) if len(out) <= _LANG_CAP else None
        raise TypeError(n)

    return lang(node)


# -- strategies ---------------------------------------------------------------------------------
_leaf = st.one_of(
    st.builds(Lit, st.sampled_from(ALPHABET)),
    st.builds(Lit, st.sampled_from(ALPHABET)),
    st.builds(
        Cls,
        st.frozensets(st.sampled_from(ALPHABET), min_size=1, max_size=3),
        st.booleans(),
        st.booleans(),
    ),
    st.just(Dot()),
)


@st.composite
def _rep(draw: st.DrawFn, child: st.SearchStrategy[object]) -> Rep:
    item = draw(child)
    form = draw(st.sampled_from(["*", "+", "?", "{m}", "{m,n}", "{m,}", "{,n}"]))
    lo = draw(st.integers(0, 2))
    hi = lo + draw(st.integers(0, 2))
    lo, hi = {
        "*": (0, None),
        "+": (1, None),
        "?": (0, 1),
        "{m}": (lo, lo),
        "{m,n}": (lo, hi),
        "{m,}": (lo, None),
        "{,n}": (0, max(hi, 1)),
    }[form]
    return Rep(item, lo, hi, form, draw(st.booleans()))


regex_ast = st.recursive(
    _leaf,
    lambda child: st.one_of(
        st.builds(Cat, st.lists(child, min_size=0, max_size=3).map(tuple)),
        st.builds(Alt, st.lists(child, min_size=2, max_size=3).map(tuple)),
        _rep(child),
        st.builds(Group, child, st.booleans()),
    ),
    max_leaves=6,
)

_piece = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=3).map(str.encode)


@st.composite
def token_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind <= 1:  # whole characters
        return draw(_piece)
    if kind == 2:  # a slice of whole characters: partial UTF-8 at either end
        whole = draw(_piece)
        i = draw(st.integers(0, len(whole) - 1))
        j = draw(st.integers(i + 1, len(whole)))
        return whole[i:j]
    return bytes(draw(st.lists(st.sampled_from(TOKEN_BYTES), min_size=1, max_size=3)))


@dataclass
class VocabCase:
    vocab: Vocabulary
    stop_id: int
    special_id: int


@st.composite
def vocab_cases(draw: st.DrawFn) -> VocabCase:
    text = draw(st.lists(token_bytes(), min_size=1, max_size=20))
    tokens = list(text)
    stop_at = draw(st.integers(0, len(tokens)))
    tokens.insert(stop_at, b"</s>")
    special_at = draw(st.integers(0, len(tokens)))
    # the special token's text is a token that would be allowed somewhere (or plain "a")
    tokens.insert(special_at, draw(st.sampled_from([b"a", *text])))
    stop_id = stop_at if stop_at < special_at else stop_at + 1
    extra = draw(st.sampled_from([0, 0, 3, 40]))
    vocab = Vocabulary.from_tokens(
        tokens,
        stop_token_ids=[stop_id],
        special_token_ids=[special_at],
        vocab_size=len(tokens) + extra,
    )
    return VocabCase(vocab, stop_id, special_at)


# -- helpers ------------------------------------------------------------------------------------
def check_oracle_against_re(nfa: CharNFA, pattern: str, samples: list[str]) -> None:
    compiled = re.compile(pattern)
    for s in samples:
        assert nfa.fullmatch(s) == (compiled.fullmatch(s) is not None), (pattern, s)


def expected_mask(case: VocabCase, prefix: bytes, viable: object, accepts: object) -> np.ndarray:
    vocab = case.vocab
    out = np.zeros(vocab.vocab_size, dtype=bool)
    for tid, tb in enumerate(vocab.tokens):
        if tid in vocab.special_token_ids:
            continue
        out[tid] = viable(prefix + tb)  # type: ignore[operator]
    out[case.stop_id] = accepts(prefix)  # type: ignore[operator]
    return out


def describe_diff(vocab: Vocabulary, got: np.ndarray, want: np.ndarray) -> str:
    diff = np.flatnonzero(got != want)
    return ", ".join(
        f"id {i} {vocab.tokens[i] if i < len(vocab.tokens) else None!r}: "
        f"mask={bool(got[i])} oracle={bool(want[i])}"
        for i in diff[:8]
    )


# -- the property -------------------------------------------------------------------------------
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ast=regex_ast, case=vocab_cases(), rnd=st.randoms(use_true_random=False), data=st.data())
def test_mask_equals_bruteforce_oracle(ast, case, rnd, data):
    pattern = render(ast)
    nfa = CharNFA(ast)
    lang = finite_language(ast)

    # 1. the oracle itself agrees with Python's re (members, random strings)
    samples = ["".join(rnd.choice(UNIVERSE) for _ in range(rnd.randint(0, 5))) for _ in range(25)]
    if lang is not None:
        samples += sorted(lang)[:200]
    check_oracle_against_re(nfa, pattern, samples)
    if lang is not None:
        prefixes = {w.encode()[:k] for w in lang for k in range(len(w.encode()) + 1)}
        members = {w.encode() for w in lang}

        def viable(b: bytes) -> bool:
            return b in prefixes

        def accepts(b: bytes) -> bool:
            return b in members
    else:
        viable, accepts = nfa.viable, nfa.accepts

    # 2. the walk
    vocab = case.vocab
    matcher = GrammarMatcher(GrammarCompiler(vocab).compile_regex(pattern, dialect="python"))
    bm = allocate_token_bitmask(1, vocab.vocab_size)
    prefix = b""
    for _step in range(12):
        any_allowed = matcher.fill_next_token_bitmask(bm, 0)
        got = bitmask_to_bool(bm[0], vocab.vocab_size)
        want = expected_mask(case, prefix, viable, accepts)
        if lang is not None:  # both oracles agree too
            assert np.array_equal(want, expected_mask(case, prefix, nfa.viable, nfa.accepts))
        assert np.array_equal(got, want), (
            f"pattern {pattern!r} prefix {prefix!r}: {describe_diff(vocab, got, want)}"
        )
        assert any_allowed == bool(want.any())
        assert np.array_equal(matcher.allowed_token_ids(), np.flatnonzero(want))
        assert matcher.is_accepting() == accepts(prefix)
        assert not got[case.special_id]
        assert not got[len(vocab.tokens) :].any()

        forced = matcher.find_jump_forward_bytes()
        if forced:
            assert not accepts(prefix), (pattern, prefix, forced)
            assert viable(prefix + forced), (pattern, prefix, forced)
            others = [b for b in TOKEN_BYTES if b != forced[0]]
            assert not any(viable(prefix + bytes([b])) for b in others), (pattern, forced)

        if not any_allowed:
            diag = matcher.diagnose()
            assert diag is not None
            assert diag.prefix == prefix
            assert diag.vocabulary_fingerprint == vocab.fingerprint
            break
        assert matcher.diagnose() is None

        # a disallowed token is rejected and changes nothing
        banned = np.flatnonzero(~want)
        if banned.size:
            t = int(rnd.choice(banned.tolist()))
            before = (matcher.state, matcher.num_accepted_tokens)
            assert not matcher.accept_token(t)
            assert (matcher.state, matcher.num_accepted_tokens) == before

        allowed = np.flatnonzero(want).tolist()
        if want[case.stop_id] and (len(allowed) == 1 or rnd.random() < 0.25):
            assert matcher.accept_token(case.stop_id)
            assert matcher.is_terminated()
            assert re.fullmatch(pattern, prefix.decode("utf-8")), (pattern, prefix)
            assert not matcher.fill_next_token_bitmask(bm, 0)
            break
        choices = [t for t in allowed if t != case.stop_id]
        t = rnd.choice(choices)
        assert matcher.accept_token(t)
        prefix += vocab.tokens[t]
        assert matcher.accepted_bytes() == prefix
    data.draw(st.just(pattern), label="pattern")


# a vocabulary rich enough that most languages can be generated to the end
_RICH_TOKENS = sorted(
    {"".join(p).encode() for n in (1, 2) for p in itertools.product(ALPHABET, repeat=n)}
    | {b"\xc3", b"\xa9", b"\xe4", b"\xb8", b"\xad", b"\xe4\xb8", b"\xb8\xad", b"a\xc3", b"\xadb"}
)
_RICH_VOCAB = Vocabulary.from_tokens([*_RICH_TOKENS, b"<eos>"], stop_token_ids=[len(_RICH_TOKENS)])
_RICH_COMPILER = GrammarCompiler(_RICH_VOCAB)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ast=regex_ast, rnd=st.randoms(use_true_random=False))
def test_masked_generations_always_fullmatch(ast, rnd):
    """Sampling uniformly among allowed tokens: every finished generation fullmatches."""
    pattern = render(ast)
    matcher = GrammarMatcher(_RICH_COMPILER.compile_regex(pattern, dialect="python"))
    stop = len(_RICH_TOKENS)
    finished = 0
    for _ in range(6):
        matcher.reset()
        for _step in range(40):
            allowed = matcher.allowed_token_ids().tolist()
            assert allowed, f"dead end on {pattern!r}: every prefix is completable here"
            if stop in allowed and (len(allowed) == 1 or rnd.random() < 0.3):
                assert matcher.accept_token(stop)
                break
            assert matcher.accept_token(rnd.choice([t for t in allowed if t != stop]))
        text = matcher.accepted_bytes()
        if matcher.is_terminated():
            finished += 1
            assert re.fullmatch(pattern, text.decode("utf-8")), (pattern, text)
            assert compile_dfa(parse_regex(pattern)).matches(text)
    assume(finished > 0)


# -- fixed regressions (readable versions of what the property covers) -------------------------
def _walk_masks(pattern: str, tokens: list[bytes], path: list[int]) -> list[set[bytes]]:
    vocab = Vocabulary.from_tokens([*tokens, b"<eos>"], stop_token_ids=[len(tokens)])
    m = GrammarMatcher(GrammarCompiler(vocab).compile_regex(pattern, dialect="python"))
    out = []
    for t in [*path, None]:
        out.append({vocab.tokens[i] for i in m.allowed_token_ids().tolist()})
        if t is not None:
            assert m.accept_token(t)
    return out


def test_partial_utf8_tokens_split_a_two_byte_character():
    tokens = [b"\xc3", b"\xa9", b"\xa9\xc3", b"\xc3\xa9", b"a", b"\xe4"]
    masks = _walk_masks("é{2}", tokens, [0, 2, 1])
    assert masks[0] == {b"\xc3", b"\xc3\xa9"}  # not a lone continuation, not 中's lead byte
    assert masks[1] == {b"\xa9", b"\xa9\xc3"}
    assert masks[2] == {b"\xa9"}
    assert masks[3] == {b"<eos>"}


def test_partial_utf8_token_for_negated_class_allows_foreign_lead_bytes():
    # [^é] matches U+00E0 etc.: the lone lead byte C3 is a valid start, the exact é is not
    tokens = [b"\xc3", b"\xc3\xa9", b"\xa0", b"\xa9"]
    masks = _walk_masks("[^é]", tokens, [0])
    assert masks[0] == {b"\xc3"}
    assert masks[1] == {b"\xa0"}


@pytest.mark.parametrize(
    ("ast", "pattern"),
    [
        (Rep(Lit("a"), 0, 2, "{,n}", True), "a{,2}?"),
        (Cat((Alt((Lit("a"), Lit("b"))), Rep(Dot(), 1, None, "+", False))), "(?:a|b).+"),
        (Cls(frozenset({"a", "b", "é"}), True, True), "[^a-bé]"),
        (Rep(Cat(()), 0, None, "*", False), "(?:)*"),
    ],
)
def test_renderer(ast, pattern):
    assert render(ast) == pattern
    re.compile(pattern)
