"""The regex front-end, differentially against Python's ``re`` (``dialect="python"``'s reference).

Property: for random regexes and strings, ``re.fullmatch(p, s) is not None`` equals
``compile_dfa(parse_regex(p)).matches(s.encode())``.  Strings are drawn four ways so both
directions are exercised: members generated from the regex's own structure (positives for ``re``),
random walks of the DFA (positives for formcast), mutations of those, and random strings over a
pool of tricky characters (Unicode digits, letters and spaces that separate Python's Unicode
``\\d\\w\\s`` from ASCII/ECMA ones).

Then explicit cases: escapes, classes, anchors, lazy quantifiers, ``{,n}``, literal braces, the
ECMA dialect's differences, error types with positions, limits, and large bounded repeats.
"""

from __future__ import annotations

import random
import re
import warnings
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from formcast import (
    CompileLimits,
    ConfigurationError,
    GrammarCompiler,
    GrammarSyntaxError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
    Vocabulary,
)
from formcast.automata.dfa import DEAD, ByteDFA
from formcast.automata.regular import compile_dfa
from formcast.frontends.regex import parse_regex


def dfa_of(pattern: str, dialect: str = "python", limits: CompileLimits | None = None) -> ByteDFA:
    return compile_dfa(parse_regex(pattern, dialect=dialect, limits=limits), limits)


def fc_match(pattern: str, s: str, dialect: str = "python") -> bool:
    return dfa_of(pattern, dialect).matches(s.encode("utf-8"))


def py_match(pattern: str, s: str, flags: int = 0) -> bool:
    return re.fullmatch(pattern, s, flags) is not None


# characters that tell the dialects and the Unicode classes apart
POOL = (
    "a", "b", "c", "z", "A", "Z", "_", "0", "9", "-", " ", ".", ",", "{", "}", "[", "]", "\\",
    "\t", "\n", "\r", "\x00", "\x7f", "\x1c", "\x85", "\xa0", "\u2028", "\u3000", "\ufeff",
    "é", "ß", "中", "😀", "٠", "²", "Ⅷ", "𝟘", "\u0301", "$", "^",
)  # fmt: skip


# -- a small regex AST with member generation --------------------------------------------------
@dataclass(frozen=True)
class Atom:
    text: str  # one-character atom: literal, escape, class or "."


@dataclass(frozen=True)
class Seq:
    items: tuple[object, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[object, ...]


@dataclass(frozen=True)
class Rep:
    item: object
    q: str  # quantifier text
    lo: int
    hi: int | None


@dataclass(frozen=True)
class Grp:
    item: object
    opener: str


LITERALS = [
    "a", "b", "0", "-", " ", ",", "é", "中", "😀", "]", "}",
    r"\.", r"\*", r"\{", r"\}", r"\\", r"\[", r"\]", r"\(", r"\|", r"\+", r"\?", r"\$", r"\^",
    r"\x41", r"\x7f", r"\u00e9", r"\u4e2d", r"\U0001F600", r"\N{LATIN SMALL LETTER E WITH ACUTE}",
    r"\t", r"\n", r"\0", r"\x00", r"\-",
]  # fmt: skip
SHORTHANDS = [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S"]
CLASS_ITEMS = [
    "a", "b", "0-9", "a-c", "é", "中", "😀", r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", r"\]",
    r"\-", r"\\", ".", r"\x41-\x5a", r"\u00e0-\u00ff", r"\t", "^", "$", "{", r"\n", "ß-ÿ",
]  # fmt: skip
ECMA_LITERALS = [t for t in LITERALS if not t.startswith((r"\U", r"\N", r"\0"))]
ECMA_CLASS_ITEMS = [i for i in CLASS_ITEMS if i not in (r"\s", r"\S")]


@st.composite
def class_atom(draw: st.DrawFn, items: list[str], allow_bracket_first: bool) -> Atom:
    body = draw(st.lists(st.sampled_from(items), min_size=1, max_size=4))
    if body[0] == "^":  # a literal caret must not open the class
        body[0] = r"\^"
    negated = draw(st.booleans())
    first = "]" if allow_bracket_first and draw(st.integers(0, 5)) == 0 else ""
    return Atom("[" + ("^" if negated else "") + first + "".join(body) + "]")


def atoms(ecma: bool) -> st.SearchStrategy[Atom]:
    lits = ECMA_LITERALS if ecma else LITERALS
    shorts = [r"\d", r"\w", r"\D", r"\W"] if ecma else SHORTHANDS
    return st.one_of(
        st.sampled_from(lits).map(Atom),
        st.sampled_from(shorts).map(Atom),
        class_atom(ECMA_CLASS_ITEMS if ecma else CLASS_ITEMS, not ecma),
        *([] if ecma else [st.just(Atom("."))]),
    )


@st.composite
def quantified(draw: st.DrawFn, child: st.SearchStrategy[object], ecma: bool) -> Rep:
    item = draw(child)
    forms = ["*", "+", "?", "{m}", "{m,n}", "{m,}"] + ([] if ecma else ["{,n}"])
    form = draw(st.sampled_from(forms))
    m = draw(st.integers(0, 2))
    n = m + draw(st.integers(0, 2))
    lo, hi, q = {
        "*": (0, None, "*"),
        "+": (1, None, "+"),
        "?": (0, 1, "?"),
        "{m}": (m, m, f"{{{m}}}"),
        "{m,n}": (m, n, f"{{{m},{n}}}"),
        "{m,}": (m, None, f"{{{m},}}"),
        "{,n}": (0, max(n, 1), f"{{,{max(n, 1)}}}"),
    }[form]
    if draw(st.booleans()):
        q += "?"  # lazy: same language
    return Rep(item, q, lo, hi)


def regex_asts(ecma: bool) -> st.SearchStrategy[object]:
    openers = st.sampled_from(["(", "(?:"] + ([] if ecma else ["(?P<g>"]))
    return st.recursive(
        atoms(ecma),
        lambda child: st.one_of(
            st.builds(Seq, st.lists(child, min_size=2, max_size=3).map(tuple)),
            st.builds(Or, st.lists(child, min_size=2, max_size=3).map(tuple)),
            quantified(child, ecma),
            st.builds(Grp, child, openers),
        ),
        max_leaves=5,
    )


def render(node: object, ctx: str = "top") -> str:
    if isinstance(node, Atom):
        return node.text
    if isinstance(node, Grp):
        # named groups must have distinct names: number them by position later
        return node.opener + render(node.item) + ")"
    if isinstance(node, Seq):
        parts = [render(i, "seq") for i in node.items]
        for k in range(len(parts) - 1):
            # "\0" then "0" would read as the octal escape "\00": keep them apart
            if parts[k].endswith("\\0") and parts[k + 1][:1] in "01234567":
                parts[k] = f"(?:{parts[k]})"
        text = "".join(parts)
        return f"(?:{text})" if ctx == "rep" else text
    if isinstance(node, Or):
        text = "|".join(render(i, "or") for i in node.items)
        return f"(?:{text})" if ctx in ("seq", "rep") else text
    if isinstance(node, Rep):
        text = render(node.item, "rep") + node.q
        return f"(?:{text})" if ctx == "rep" else text
    raise TypeError(node)


def number_groups(pattern: str) -> str:
    counter = iter(range(1000))
    return re.sub(r"\(\?P<g>", lambda _: f"(?P<g{next(counter)}>", pattern)


@cache
def atom_members(text: str, flags: int) -> tuple[str, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rx = re.compile(text, flags)
    extra = [chr(c) for c in range(0x20, 0x7F)]
    return tuple(c for c in dict.fromkeys([*POOL, *extra]) if rx.fullmatch(c))


def member(node: object, rnd: random.Random, flags: int) -> str | None:
    """A random string the regex should match (None when the pool has no member)."""
    if isinstance(node, Atom):
        cands = atom_members(node.text, flags)
        return rnd.choice(cands) if cands else None
    if isinstance(node, Grp):
        return member(node.item, rnd, flags)
    if isinstance(node, Seq):
        parts = [member(i, rnd, flags) for i in node.items]
        return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
    if isinstance(node, Or):
        return member(rnd.choice(node.items), rnd, flags)
    if isinstance(node, Rep):
        k = rnd.randint(node.lo, node.hi if node.hi is not None else node.lo + 3)
        parts = [member(node.item, rnd, flags) for _ in range(k)]
        return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
    raise TypeError(node)


def dfa_sample(dfa: ByteDFA, rnd: random.Random, max_len: int = 12) -> bytes | None:
    """A random string of the DFA's language (a walk that heads for acceptance when long)."""
    if dfa.is_empty:
        return None
    dist = _distances(dfa)
    state, out = dfa.start, bytearray()
    target = rnd.randint(0, max_len)
    while True:
        if dfa.accepting[state] and (len(out) >= target or rnd.random() < 0.2):
            return bytes(out)
        nxt = dfa.next_bytes(state)
        if not len(nxt):
            return bytes(out)
        if len(out) >= target:
            nxt = [b for b in nxt if dist[dfa.table[state, b]] < dist[state]]
        b = int(rnd.choice(list(nxt)))
        out.append(b)
        state = int(dfa.table[state, b])


def _distances(dfa: ByteDFA) -> np.ndarray:
    """Bytes to the nearest accepting state, per state (reverse BFS)."""
    n = dfa.table.shape[0]
    dist = np.full(n, 1 << 30, dtype=np.int64)
    dist[dfa.accepting] = 0
    changed = True
    while changed:
        best = dist[dfa.table].min(axis=1) + 1
        best[DEAD] = 1 << 30
        new = np.minimum(dist, best)
        changed = bool((new != dist).any())
        dist = new
    return dist


def mutate(s: str, rnd: random.Random) -> str:
    i = rnd.randint(0, len(s))
    op = rnd.randint(0, 2)
    c = rnd.choice(POOL)
    if op == 0 or not s:
        return s[:i] + c + s[i:]
    i = min(i, len(s) - 1)
    return s[:i] + (c if op == 1 else "") + s[i + 1 :]


def differential(pattern: str, ast: object, rnd: random.Random, dialect: str, flags: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rx = re.compile(pattern, flags)
        except re.error:
            assume(False)
            raise
    dfa = dfa_of(pattern, dialect)
    strings: list[str] = []
    for _ in range(6):
        m = member(ast, rnd, flags)
        if m is not None:
            assert rx.fullmatch(m), (pattern, m)  # the generator itself agrees with re
            strings += [m, mutate(m, rnd)]
    for _ in range(4):
        b = dfa_sample(dfa, rnd)
        if b is not None:
            s = b.decode("utf-8")  # the DFA only produces valid UTF-8
            strings += [s, mutate(s, rnd)]
    strings += ["".join(rnd.choice(POOL) for _ in range(rnd.randint(0, 4))) for _ in range(6)]
    for s in strings:
        want = rx.fullmatch(s) is not None
        got = dfa.matches(s.encode("utf-8"))
        assert got == want, f"{dialect} pattern {pattern!r} string {s!r}: re={want} formcast={got}"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    ast=regex_asts(ecma=False),
    anchors=st.sampled_from(["", "^$", r"\A\Z", "^", "$", "branch"]),
    flags=st.sampled_from(["", "", "", "(?s)", "(?i)", "(?si)"]),
    rnd=st.randoms(use_true_random=False),
)
@example(ast=Seq((Atom(r"\0"), Atom("0"))), anchors="", flags="", rnd=random.Random(0))
def test_python_dialect_matches_re(ast, anchors, flags, rnd):
    body = render(ast)
    if anchors == "branch" and isinstance(ast, Or):
        branches = [render(i, "or") for i in ast.items]
        pattern = "|".join([f"^{branches[0]}", *branches[1:-1], f"{branches[-1]}$"])
    elif anchors in ("^$", r"\A\Z"):
        pattern = anchors[: len(anchors) // 2] + f"(?:{body})" + anchors[len(anchors) // 2 :]
    elif anchors == "^":
        pattern = f"^(?:{body})"
    elif anchors == "$":
        pattern = f"(?:{body})$"
    else:
        pattern = body
    pattern = number_groups(flags + pattern)
    re_flags = (re.DOTALL if "s" in flags else 0) | (re.IGNORECASE if "i" in flags else 0)
    differential(pattern, ast, rnd, "python", re_flags)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(ast=regex_asts(ecma=True), rnd=st.randoms(use_true_random=False))
def test_ecma_dialect_matches_re_ascii(ast, rnd):
    """Without ``\\s``, ``.`` and ``{,n}``, ECMA semantics are Python's with ``re.ASCII``."""
    differential(render(ast), ast, rnd, "ecma", re.ASCII)


# -- Unicode classes ----------------------------------------------------------------------------
def _sample_code_points() -> list[int]:
    rnd = random.Random(7)
    pts = set(range(0, 0x800))  # all of ASCII, Latin, Greek, Cyrillic, Arabic-Indic digits...
    pts |= {0x1680, 0x180E, 0x2000, 0x200A, 0x200B, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
    pts |= {0xFEFF, 0xFF10, 0xFF19, 0x1D7D8, 0x1D7FF, 0x10FFFF, 0xE000, 0xD7FF, 0xFFFD}
    pts |= {rnd.randrange(0x800, 0x110000) for _ in range(4000)}
    return sorted(p for p in pts if not 0xD800 <= p <= 0xDFFF)


CODE_POINTS = _sample_code_points()


@pytest.mark.parametrize("cls", [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", r"[^\W\d_]", "."])
def test_unicode_shorthand_classes_follow_python(cls):
    dfa = dfa_of(cls)
    rx = re.compile(cls)
    bad = [
        hex(cp)
        for cp in CODE_POINTS
        if dfa.matches(chr(cp).encode()) != (rx.fullmatch(chr(cp)) is not None)
    ]
    assert not bad, f"{cls}: {len(bad)} code points differ, e.g. {bad[:10]}"


@pytest.mark.parametrize(
    ("cls", "flags"),
    [(r"\d", re.ASCII), (r"\w", re.ASCII), (r"\D", re.ASCII), (r"\W", re.ASCII)],
)
def test_ecma_shorthand_classes_are_ascii(cls, flags):
    dfa = dfa_of(cls, "ecma")
    rx = re.compile(cls, flags)
    for cp in CODE_POINTS:
        assert dfa.matches(chr(cp).encode()) == (rx.fullmatch(chr(cp)) is not None), hex(cp)


ECMA_SPACE = set(
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def test_ecma_whitespace_and_dot():
    s, not_s, dot = dfa_of(r"\s", "ecma"), dfa_of(r"\S", "ecma"), dfa_of(".", "ecma")
    for cp in CODE_POINTS:
        c = chr(cp)
        assert s.matches(c.encode()) == (c in ECMA_SPACE), hex(cp)
        assert not_s.matches(c.encode()) == (c not in ECMA_SPACE), hex(cp)
        assert dot.matches(c.encode()) == (c not in "\n\r\u2028\u2029"), hex(cp)


CASE_SPECIALS = "sSſkKKåÅÅßẞıIiİσςΣµΜμθϑϴΘǅǄǆﬀﬁ\u1c80вВ\u0345ιΙ\u1fbe"


def _case_candidates() -> list[str]:
    rnd = random.Random(11)
    cased = [chr(c) for c in range(0x20, 0x2000) if chr(c).lower() != chr(c).upper()]
    pts = set(CASE_SPECIALS) | set(rnd.sample(cased, 150)) | set("abcxyzABCXYZ09_")
    pts |= {chr(rnd.randrange(0x2000, 0x20000)) for _ in range(30)}
    variants = {v for c in pts for v in (c.lower(), c.upper(), c.casefold(), c.title())}
    return sorted(c for c in pts | variants if len(c) == 1 and not 0xD800 <= ord(c) <= 0xDFFF)


CASE_CANDIDATES = _case_candidates()


# U+0130 (I with dot above): its *simple* lowercase is "i" (what re uses), its full lowercase
# "i\u0307" has two characters; see test_ignorecase_dotted_capital_i below
KNOWN_CASE_BUG = "\u0130"


@pytest.mark.parametrize("chunk", range(4))
def test_ignorecase_literals_follow_python(chunk):
    """``(?i)c`` matches exactly the characters ``re`` says it matches (simple case folding)."""
    bad = []
    for c in CASE_CANDIDATES[chunk::4]:
        pattern = "(?i)" + re.escape(c)
        dfa, rx = dfa_of(pattern), re.compile(pattern)
        for d in CASE_CANDIDATES:
            if KNOWN_CASE_BUG in (c, d):
                continue
            if dfa.matches(d.encode()) != (rx.fullmatch(d) is not None):
                bad.append((c, d, f"U+{ord(c):04X}", f"U+{ord(d):04X}"))
    assert not bad, bad[:10]


@pytest.mark.parametrize(
    "pattern", [r"(?i)[a-z]+", r"(?i)[^a-z]", r"(?i)[k-s]", r"(?i)[\u00e0-\u00ff]", r"(?i:a)b"]
)
def test_ignorecase_classes_follow_python(pattern):
    dfa, rx = dfa_of(pattern), re.compile(pattern)
    for d in [*CASE_CANDIDATES, "ab", "aB", "Ab", "AB"]:
        if d == KNOWN_CASE_BUG:
            continue
        assert dfa.matches(d.encode()) == (rx.fullmatch(d) is not None), (pattern, d)


@pytest.mark.parametrize(
    ("pattern", "s"),
    [("(?i)i", "\u0130"), ("(?i)[^a-z]", "\u0130"), ("(?i)\u0131", "\u0130"), ("(?i)\u0130", "I")],
)
def test_ignorecase_dotted_capital_i(pattern, s):
    assert fc_match(pattern, s) == py_match(pattern, s)


# -- explicit cases (python dialect, checked against re) --------------------------------------
CASES = {
    # escapes
    r"\x41\x7e": ["A~", "A", "\\x41"],
    r"\u00e9\u4e2d": ["é中", "é", "e中"],
    r"\U0001F600": ["😀", "\U0001f601"],
    r"\N{LATIN SMALL LETTER E WITH ACUTE}+": ["é", "éé", "e"],
    r"\t\n\r\f\v\a\0\07\.\\\*": ["\t\n\r\f\v\a\x00\x07.\\*", "\t\n\r\f\v\a\x00\x07.\\"],
    # classes
    r"[abc]+": ["abcba", "abd", ""],
    r"[^abc]": ["d", "a", "é", "\n", "😀"],
    r"[]a]+": ["]a]", "[", ""],
    r"[^]a]": ["]", "a", "b"],
    r"[\]\\\-]+": ["]\\-", "a"],
    r"[-a]|[a-]": ["-", "a", "b"],
    r"[\d\s]+": ["1 ٠\u3000", "a"],
    r"[^\W\d]+": ["abcé中", "a1", "_"],
    r"[\x00-\x1f]": ["\x00", "\x1f", " "],
    r"[à-ÿ]+": ["àéÿ", "ß", "Ā"],
    r"[\u4e00-\u9fff]{2}": ["中文", "中", "中a"],
    r"[.*+?{}()|$^]+": [".*+?{}()|$^", "a"],
    r"[\b]": ["\b", "b"],
    r"[😀-😂]": ["😁", "😃"],
    # dot
    r".": ["a", "\n", "😀", "\r"],
    r"(?s).": ["\n", "a"],
    r"(?s:.)a.": ["\naX", "\na\n"],
    # anchors
    r"^a$": ["a", "", "a\n"],
    r"a|^b": ["a", "b", ""],
    r"(^a)": ["a", ""],
    r"^(a|b)$": ["a", "b", "ab"],
    r"\Aab\Z": ["ab", "ab\n"],
    r"(^a|b)c": ["ac", "bc", "c"],
    r"(?:^)a": ["a"],
    r"a$|b": ["a", "b", "a\n"],
    r"^^a$$": ["a"],
    # quantifiers
    r"a+?b??c*?": ["a", "ab", "abccc", "b"],
    r"a{2,3}?": ["a", "aa", "aaa", "aaaa"],
    r"a{,2}": ["", "a", "aa", "aaa"],
    r"a{,2}?": ["", "aa", "aaa"],
    r"a{,}": ["", "a", "aaaa", "a{,}"],
    r"a{2,}": ["a", "aa", "aaaaa"],
    r"(ab){0}c": ["c", "abc"],
    r"(a|)+b": ["b", "aab"],
    r"()*": [""],
    # literal braces
    r"a{": ["a{", "a"],
    r"{": ["{"],
    r"a{x}": ["a{x}"],
    r"a{1,x}": ["a{1,x}"],
    r"x{}": ["x{}", "x"],
    r"a{1": ["a{1", "a"],
    r"a{1,2": ["a{1,2"],
    r"}": ["}"],
    r"\{1\}": ["{1}"],
    # groups and comments
    r"(?P<year>\d{4})-(?P<m>\d\d)": ["2024-01", "2024-1"],
    r"(?:a(?#comment)b)": ["ab"],
    r"(a)(?:b)(c)": ["abc"],
    # inline flags
    r"(?a)\d\w": ["1a", "٠a", "1é"],
    r"(?u)\w": ["é"],
}


@pytest.mark.parametrize("pattern", list(CASES))
def test_explicit_python_cases(pattern):
    for s in CASES[pattern]:
        assert fc_match(pattern, s) == py_match(pattern, s), (pattern, s)


def test_explicit_cases_cover_both_outcomes():
    outcomes = {py_match(p, s) for p, ss in CASES.items() for s in ss}
    assert outcomes == {True, False}


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        (r"\d+", ["0123456789"], ["٠", "²", "a"]),
        (r"\w+", ["aZ_09"], ["é", "中", "٠"]),
        (r"\D", ["٠", "a"], ["5"]),
        (r"\W", ["é", " "], ["a", "_"]),
        (r"\s", ["\ufeff", "\u2028", "\xa0", " "], ["\x1c", "\x85", "a"]),
        (r"\S", ["\x1c", "\x85"], ["\ufeff"]),
        (".", ["a", "\x85"], ["\n", "\r", "\u2028", "\u2029"]),
        (r"[]", [], ["", "]", "a"]),
        (r"[^]", ["a", "\n", "😀"], ["", "ab"]),
        (r"[]a]", [], ["]a]", "a]", "]", "a"]),  # ECMA: [] (matches nothing) then "a]"
        (r"a{,2}", ["a{,2}"], ["", "a", "aa"]),  # ECMA: literal
        (r"a{,}", ["a{,}"], ["a"]),
        (r"\u00e9", ["é"], ["e"]),
        (r"\uD83D\uDE00", ["😀"], ["\ufffd"]),  # a surrogate pair is one code point
        (r"\cJ\cj", ["\n\n"], ["cJ"]),
        (r"\/\-", ["/-"], []),
        (r"(?<year>\d{4})", ["2024"], ["24"]),
        (r"[a-\d]", ["a", "-", "5"], ["b"]),  # Annex B: class escape ends a would-be range
        (r"\x41", ["A"], []),
        (r"\0", ["\x00"], ["0"]),
    ],
)
def test_ecma_dialect(pattern, yes, no):
    dfa = dfa_of(pattern, "ecma")
    for s in yes:
        assert dfa.matches(s.encode()), (pattern, s)
    for s in no:
        assert not dfa.matches(s.encode()), (pattern, s)


def test_ecma_braced_unicode_escape():
    assert fc_match(r"\u{1F600}+", "😀😀", "ecma")
    assert not fc_match(r"\u{1F600}", "u{1F600}", "ecma")


def test_empty_language_compiles_to_empty_dfa_and_compile_regex_refuses_it():
    for p in ["a^b", "a$b", r"[^\s\S]", "x^"]:
        assert dfa_of(p).is_empty, p
        assert not py_match(p, "ab")
        assert not py_match(p, "a")
    vocab = Vocabulary.from_tokens([b"a", b"<eos>"], stop_token_ids=[1])
    with pytest.raises(UnsatisfiableGrammarError):
        GrammarCompiler(vocab).compile_regex("a^b")


def test_dotall_scope_is_restored():
    assert fc_match(r"(?s:.)", "\n")
    assert not fc_match(r"(?s:a).", "a\n")
    assert fc_match(r"(?s:a).", "ab")


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "position"),
    [
        ("(", 0),
        ("a)", 1),
        ("[a", 0),
        ("*a", 0),
        ("a|*", 2),
        ("+", 0),
        ("?", 0),
        ("{1}", 0),
        ("\\", 0),
        ("a\\", 1),
        ("(?P<1>a)", 4),
        ("(?P<n>a", 0),
        (r"\x4", 0),
        (r"\u12", 0),
        (r"\N{NO SUCH NAME}", 0),
        (r"\U0011FFFF", 0),
        ("a(?s)b", 1),
        (r"\q", 0),
        (r"[\q]", 1),
        ("(?#abc", 0),
        ("(?:", 0),
        ("((a)", 0),
        ("a{3,2}", None),
        ("[z-a]", None),
        ("[a-\\d]", None),
        ("(?Q)", None),
        (r"\N{DIGIT ONE", None),
    ],
)
def test_syntax_errors_carry_positions(pattern, position):
    with pytest.raises(re.error) as ref:
        re.compile(pattern)
    with pytest.raises(GrammarSyntaxError) as err:
        parse_regex(pattern)
    e = err.value
    assert isinstance(e, ValueError)
    assert 0 <= e.position < len(pattern)
    assert e.line == 1
    assert e.column == e.position + 1
    if position is not None:
        assert e.position == position == ref.value.pos
    assert f"column {e.column}" in str(e)


@pytest.mark.parametrize(
    ("pattern", "line", "column"),
    [("ab\n(c", 2, 1), ("x\ny\n[", 3, 1), ("ab\ncd)", 2, 3)],
)
def test_syntax_error_line_and_column(pattern, line, column):
    with pytest.raises(GrammarSyntaxError) as err:
        parse_regex(pattern)
    assert (err.value.line, err.value.column) == (line, column)
    assert err.value.source == pattern


@pytest.mark.parametrize(
    ("pattern", "feature", "position", "dialect"),
    [
        ("a(?=b)", "lookahead", 1, "python"),
        ("a(?!b)", "lookahead", 1, "python"),
        ("(?<=a)b", "lookbehind", 0, "python"),
        ("(?<!a)b", "lookbehind", 0, "python"),
        (r"(a)\1", "backreference", 3, "python"),
        (r"(?P<n>a)(?P=n)", "backreference", 8, "python"),
        (r"(?<n>a)\k<n>", "backreference", 7, "ecma"),
        (r"\bfoo", "word boundary", 0, "python"),
        (r"foo\B", "word boundary", 3, "python"),
        ("a++", "possessive", 2, "python"),
        ("(?>a)", "atomic group", 0, "python"),
        ("a(?-i:a)", "scoped flags", 1, "python"),
        ("(?m)a", "multiline", 0, "python"),
        ("(?x)a", "verbose", 0, "python"),
        ("(?(1)a|b)", "conditional", 0, "python"),
        ("a(b$)*", "anchor", 3, "python"),
        ("x\\Gy", "\\G", 1, "python"),
    ],
)
def test_unsupported_features_name_feature_and_position(pattern, feature, position, dialect):
    with pytest.raises(UnsupportedFeatureError) as err:
        parse_regex(pattern, dialect=dialect)
    e = err.value
    assert feature in e.feature
    assert f"position {position}" in e.where
    assert feature in str(e)
    assert f"position {position}" in str(e)


def test_limits():
    with pytest.raises(LimitExceededError) as err:
        parse_regex("a{100001}")
    assert err.value.limit == "max_repeat"
    with pytest.raises(LimitExceededError):
        parse_regex("a{2,100001}")
    small = CompileLimits(max_repeat=10, max_pattern_length=40, max_dfa_states=50)
    assert dfa_of("a{10}", limits=small).matches(b"a" * 10)
    with pytest.raises(LimitExceededError) as err:
        parse_regex("a{11}", limits=small)
    assert err.value.limit == "max_repeat"
    assert "max_repeat" in str(err.value)
    with pytest.raises(LimitExceededError) as err:
        parse_regex("a" * 41, limits=small)
    assert err.value.limit == "max_pattern_length"
    with pytest.raises(LimitExceededError) as err:
        dfa_of("(a|b)*a(a|b){8}", limits=small)  # 512 DFA states
    assert err.value.limit in ("max_dfa_states", "max_nfa_states")
    assert fc_match("(" * 150 + "a" + ")" * 150, "a")
    with pytest.raises(ConfigurationError):
        CompileLimits(max_repeat=0)
    with pytest.raises(ConfigurationError):
        parse_regex("a", dialect="pcre")


def test_deep_nesting_raises_limit_exceeded_not_recursion_error():
    with pytest.raises(LimitExceededError):
        parse_regex("(" * 250 + "a" + ")" * 250)


def test_limit_exceeded_through_the_compiler():
    vocab = Vocabulary.from_tokens([b"a", b"<eos>"], stop_token_ids=[1])
    compiler = GrammarCompiler(vocab, limits=CompileLimits(max_dfa_states=100))
    with pytest.raises(LimitExceededError):
        compiler.compile_regex("[a-z]{1,63}x[a-z]{1,63}")  # unrolled (under 64 copies each)


@pytest.mark.parametrize(
    ("pattern", "ok", "too_long", "short"),
    [
        (r"[a-z]{1,1000}", "a" * 1000, "a" * 1001, ""),
        (r"(ab|cd){0,500}", "ab" * 250 + "cd" * 250, "ab" * 501, "abc"),
        (r"\d{3,1000}", "7" * 1000, "7" * 1001, "77"),
    ],
    ids=["az1000", "abcd500", "digits1000"],
)
def test_large_bounded_repeats_compile_fast_and_match_at_the_boundaries(
    pattern, ok, too_long, short
):
    # "fast" in deterministic work, not wall time (a loaded machine must not fail it): the
    # counted repeat compiles within 3,000 fuel units per copy, no deadline
    work = CompileLimits(max_compile_work=3_000_000, max_compile_seconds=None)
    dfa = dfa_of(pattern, limits=work)
    assert dfa.matches(ok.encode())
    assert not dfa.matches(too_long.encode())
    assert dfa.matches(short.encode()) == py_match(pattern, short)
    assert dfa.matches(ok[:-1].encode()) == py_match(pattern, ok[:-1])


# -- known departures from Python's re (bugs) ---------------------------------------------------
def test_ascii_flag_whitespace():
    for c in ["\xa0", "\u3000", "\ufeff", "\u2028"]:
        assert fc_match(r"(?a)\s", c) == py_match(r"(?a)\s", c), repr(c)


@pytest.mark.parametrize("pattern", ["a**", "a{2}{3}", "a+*", "a?{2}"])
def test_multiple_repeat_is_a_syntax_error(pattern):
    with pytest.raises(re.error):
        re.compile(pattern)
    with pytest.raises(GrammarSyntaxError):
        parse_regex(pattern)


def test_class_escape_as_range_start_is_a_syntax_error():
    with pytest.raises(re.error):
        re.compile(r"[\d-z]")
    with pytest.raises(GrammarSyntaxError):
        parse_regex(r"[\d-z]")


def test_documented_departures():
    """Where formcast's python dialect knowingly differs from re (see docs/regex.md)."""
    # $ before a final newline: re lets "a$\n" match "a\n"; formcast treats $ as the end
    assert py_match("a$\n", "a\n")
    assert not fc_match("a$\n", "a\n")
    # octal escapes \NNN are read as backreferences and refused (fail closed)
    with pytest.raises(UnsupportedFeatureError):
        parse_regex(r"\101")
    # lenient extensions Python rejects
    assert fc_match(r"\p{Lu}", "A")
    assert not fc_match(r"\p{Lu}", "a")
    assert fc_match(r"(?<n>a)", "a")
