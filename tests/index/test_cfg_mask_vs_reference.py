"""The CFG runtime against a brute-force oracle (``ReferenceRecognizer``, Earley over characters).

Random small grammars (GBNF text generated from a random AST over ``a b ( ) ,`` plus the
multi-byte ``é`` (2 bytes) and ``€`` (3 bytes), with recursion, nullable rules and ambiguous
alternatives) and random small vocabularies (random byte strings over those characters' UTF-8
bytes, so partial and invalid UTF-8 included, plus a stop token and a special token whose text
is a valid sentence prefix):

* **masks**: on random walks, at every step token ``t`` is allowed iff the bytes so far plus
  ``t`` are a viable prefix of the language, and the stop token iff the bytes so far are a
  sentence; the special token never.
* **whole strings**: ``accept_bytes(s)`` then ``is_accepting()`` equals ``matches(s)``.
* **byte by byte**: feeding one byte at a time, each byte is accepted iff the byte prefix is
  viable.

The oracle is character-level, the runtime byte-level.  A byte string ``B`` is decoded
incrementally into complete characters ``s`` and a pending incomplete tail ``P``: ``B`` is
viable iff it decodes without error and either ``P`` is empty and ``is_prefix(s)``, or some
character ``c`` of the grammar's alphabet (grammars here have no ``.`` or negated classes, so no
other character can occur) has a UTF-8 form starting with ``P`` and ``is_prefix(s + c)``.
"""

from __future__ import annotations

import codecs
import os
import random
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.errors import LimitExceededError
from formcast.frontends.gbnf import parse_gbnf
from formcast.testing.reference import ReferenceRecognizer

ALPHABET = ("a", "b", "(", ")", ",", "é", "€")
BYTE_POOL = sorted({b for c in ALPHABET for b in c.encode("utf-8")})
RULES = ("root", "r1", "r2", "r3")

# FORMCAST_ORACLE_EXAMPLES=2000 for a longer bug hunt (the default keeps the file ~15 s)
SETTINGS = settings(
    max_examples=int(os.environ.get("FORMCAST_ORACLE_EXAMPLES", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- a tiny grammar AST, rendered to GBNF and sampled ----------------------------------------------
# nodes: ("lit", str) | ("cls", str) | ("ref", int) | ("eps",) | ("seq", list) | ("alt", list)
#        | ("rep", node, lo, hi)   (hi None = unbounded)


def render(node: tuple) -> str:
    kind = node[0]
    if kind == "lit":
        return '"' + node[1] + '"'
    if kind == "cls":
        return "[" + node[1] + "]"
    if kind == "ref":
        return RULES[node[1]]
    if kind == "eps":
        return '""'
    if kind == "seq":
        return " ".join(_atom(x) if x[0] == "alt" else render(x) for x in node[1])
    if kind == "alt":
        return " | ".join(render(x) for x in node[1])
    if kind == "rep":
        _, item, lo, hi = node
        inner = _atom(item)
        if (lo, hi) == (0, None):
            return inner + "*"
        if (lo, hi) == (1, None):
            return inner + "+"
        if (lo, hi) == (0, 1):
            return inner + "?"
        return inner + (f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}")
    raise AssertionError(node)


def _atom(node: tuple) -> str:
    return render(node) if node[0] in ("lit", "cls", "ref", "eps") else "(" + render(node) + ")"


@dataclass
class RandomGrammar:
    bodies: list[tuple]
    text: str = field(init=False)

    def __post_init__(self) -> None:
        self.text = "\n".join(f"{RULES[i]} ::= {render(b)}" for i, b in enumerate(self.bodies))

    def sample(self, rng: random.Random, budget: int = 8, max_len: int = 24) -> str:
        """A random sentence of at most about ``max_len`` characters (the Earley oracle is
        cubic); derivations past ``budget`` take the non-recursive first branch."""
        while True:
            text = self._sample(rng, budget)
            if len(text) <= max_len or budget <= 0:
                return text
            budget //= 2

    def _sample(self, rng: random.Random, budget: int) -> str:
        out: list[str] = []
        todo: list[tuple[tuple, int]] = [(("ref", 0), budget)]
        while todo:
            node, b = todo.pop()
            kind = node[0]
            if kind == "lit":
                out.append(node[1])
            elif kind == "cls":
                out.append(rng.choice(node[1]))
            elif kind == "ref":
                body = self.bodies[node[1]]
                if b <= 0 and body[0] == "alt":
                    body = body[1][0]
                todo.append((body, b - 1))
            elif kind == "seq":
                todo.extend((x, b) for x in reversed(node[1]))
            elif kind == "alt":
                todo.append((node[1][0] if b <= 0 else rng.choice(node[1]), b))
            elif kind == "rep":
                _, item, lo, hi = node
                top = lo if b <= 0 else min(lo + 3, lo + 3 if hi is None else hi)
                todo.extend((item, b - 1) for _ in range(rng.randint(lo, top)))
        return "".join(out)


def _expr(
    draw, rule: int, n_rules: int, depth: int, back_ok: bool, recursive: bool = True
) -> tuple:
    """A random expression of ``rule``.  References to rules ``<= rule`` (possible cycles) only
    appear after a literal in the same sequence, so no rule can reach itself without consuming
    a byte (no left recursion); references to later rules may appear anywhere.  With
    ``recursive=False`` no reference to a rule ``<= rule`` appears at all."""
    leaves = ["lit", "lit", "cls", "eps"]
    if rule + 1 < n_rules:
        leaves += ["fwd", "fwd"]
    if back_ok:
        leaves += ["back", "back"]
    kinds = leaves + (["seq", "seq", "alt", "rep", "rep"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "lit":
        return ("lit", "".join(draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3))))
    if kind == "cls":
        chars = draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3, unique=True))
        return ("cls", "".join(sorted(chars)))
    if kind == "eps":
        return ("eps",)
    if kind == "fwd":
        return ("ref", draw(st.integers(rule + 1, n_rules - 1)))
    if kind == "back":
        return ("ref", draw(st.integers(0, rule)))
    if kind == "seq":
        items: list[tuple] = []
        guarded = back_ok
        for _ in range(draw(st.integers(2, 3))):
            if recursive and not guarded and draw(st.booleans()):
                lit = ("lit", draw(st.sampled_from(ALPHABET)))
                items.append(lit)
                guarded = True  # a consumed byte: later items may recurse
            items.append(_expr(draw, rule, n_rules, depth - 1, guarded, recursive))
        return ("seq", items)
    if kind == "alt":
        return (
            "alt",
            [_expr(draw, rule, n_rules, depth - 1, back_ok, recursive) for _ in range(2)],
        )
    lo, hi = draw(st.sampled_from([(0, None), (1, None), (0, 1), (1, 2), (0, 2), (2, None)]))
    return ("rep", _expr(draw, rule, n_rules, depth - 1, back_ok, recursive), lo, hi)


@st.composite
def random_grammars(draw) -> RandomGrammar:
    n_rules = draw(st.integers(1, 4))
    bodies = []
    for r in range(n_rules):
        # the first branch never recurses, so every rule can finish (productive)
        branches = [_expr(draw, r, n_rules, 2, False, recursive=False)]
        for _ in range(draw(st.integers(0 if r else 1, 2))):
            guard = ("lit", draw(st.sampled_from(ALPHABET)))
            branches.append(("seq", [guard, _expr(draw, r, n_rules, 2, True)]))
        bodies.append(branches[0] if len(branches) == 1 else ("alt", branches))
    return RandomGrammar(bodies)


class FixedGrammar(RandomGrammar):
    """A hand-written grammar (``sample`` falls back to random strings over its alphabet)."""

    def __init__(self, text: str) -> None:
        self.bodies = []
        self.text = text

    def sample(self, rng: random.Random, budget: int = 8, max_len: int = 24) -> str:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))


FIXED = [
    # balanced parentheses (recursion in the middle)
    'root ::= ( "(" root ")" )*',
    # nested lists with separators
    'root ::= "(" ( item ( "," item )* )? ")"\nitem ::= "a" | "é" | root',
    # right recursion (tail calls) and a terminator
    'root ::= "a" root | "b" rest\nrest ::= "€" rest | ""',
    # nullable rules in a row, nullable start
    'root ::= x x y x\nx ::= "a"?\ny ::= "b"* | "é"',
    # ambiguous alternatives (two parses of "aa" ...)
    'root ::= ( "a" | "a" "a" | x )* "b"\nx ::= "a" x | "a"',
    # multi-byte characters nested around a recursion
    'root ::= "é" root "€" | "é€" | ","',
    # a^n b^n, and an ambiguous concatenation of nullable recursive rules
    'root ::= "a" root "b" | ""',
    'root ::= p p\np ::= "(" p ")" p | ""',
]


@st.composite
def grammars(draw) -> RandomGrammar:
    if draw(st.integers(0, 2)) == 0:
        return FixedGrammar(draw(st.sampled_from(FIXED)))
    return draw(random_grammars())


# -- vocabularies ---------------------------------------------------------------------------------
SPECIAL_TEXT = b"a"  # a special token's text is never matched, even where "a" is allowed


@st.composite
def vocabularies(draw) -> Vocabulary:
    # every full character (so walks can always move) plus random byte strings over the pool
    toks = [c.encode() for c in ALPHABET]
    extra = draw(
        st.lists(
            st.lists(st.sampled_from(BYTE_POOL), min_size=1, max_size=4).map(bytes),
            min_size=3,
            max_size=20,
        )
    )
    toks += extra  # duplicates are fine: two ids with the same bytes
    toks = draw(st.permutations(toks))
    n = len(toks)
    return Vocabulary.from_tokens(
        [*toks, b"<eos>", SPECIAL_TEXT], stop_token_ids=[n], special_token_ids=[n + 1]
    )


# -- the oracle -----------------------------------------------------------------------------------
class Oracle:
    """Byte-level viable-prefix and membership questions answered by the Earley recognizer."""

    def __init__(self, text: str) -> None:
        self.rec = ReferenceRecognizer(parse_gbnf(text))
        self._viable: dict[bytes, bool] = {}

    @staticmethod
    def split(data: bytes) -> tuple[str, bytes] | None:
        """(complete characters, pending bytes of an incomplete last character) or None."""
        dec = codecs.getincrementaldecoder("utf-8")()
        try:
            text = dec.decode(data, final=False)
        except UnicodeDecodeError:
            return None
        return text, dec.getstate()[0]

    def viable(self, data: bytes) -> bool:
        hit = self._viable.get(data)
        if hit is None:
            parts = self.split(data)
            if parts is None:
                hit = False
            else:
                text, pending = parts
                if not pending:
                    hit = self.rec.is_prefix(text)
                else:
                    hit = any(
                        self.rec.is_prefix(text + c)
                        for c in ALPHABET
                        if c.encode().startswith(pending)
                    )
            self._viable[data] = hit
        return hit

    def complete(self, data: bytes) -> bool:
        parts = self.split(data)
        return parts is not None and not parts[1] and self.rec.matches(parts[0])

    def allowed(self, vocab: Vocabulary, prefix: bytes) -> set[int]:
        out = set()
        for i, tok in enumerate(vocab.tokens):
            if i in vocab.special_token_ids:
                continue
            if self.viable(prefix + tok):
                out.add(i)
        if self.complete(prefix):
            out |= set(vocab.stop_token_ids)
        return out


def compile_gbnf(vocab: Vocabulary, text: str):
    try:
        return GrammarCompiler(vocab, cache_size=0).compile_grammar(text)
    except LimitExceededError as e:
        # a documented compile limit (e.g. doubly recursive rules expanded at their call
        # sites), not a wrong answer: nothing to compare
        event(f"compile limit {e.limit}")
        reject()


def _partial_utf8(tok: bytes) -> bool:
    try:
        tok.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _describe(vocab: Vocabulary, ids: set[int]) -> list[bytes]:
    return sorted(vocab.tokens[i] for i in ids)


# -- properties -----------------------------------------------------------------------------------
@SETTINGS
@given(g=grammars(), vocab=vocabularies(), data=st.data())
def test_masks_match_the_oracle_on_random_walks(g: RandomGrammar, vocab: Vocabulary, data) -> None:
    oracle = Oracle(g.text)
    compiled = compile_gbnf(vocab, g.text)
    event(f"program: {type(compiled.program).__name__}")
    m = GrammarMatcher(compiled)
    prefix = b""
    for step in range(10):
        got = set(m.allowed_token_ids().tolist())
        want = oracle.allowed(vocab, prefix)
        assert got == want, (
            f"grammar:\n{g.text}\nprefix {prefix!r} step {step}: "
            f"extra {_describe(vocab, got - want)} missing {_describe(vocab, want - got)}"
        )
        special = next(iter(vocab.special_token_ids - vocab.stop_token_ids))
        assert not m.accept_token(special)
        for t in data.draw(st.permutations(sorted(set(range(len(vocab.tokens))) - got)))[:3]:
            assert not m.accept_token(t), f"rejected-by-mask token {vocab.tokens[t]!r} accepted"
        event(f"walk reached step {step}")
        text_ids = sorted(got - vocab.stop_token_ids)
        if any(_partial_utf8(vocab.tokens[i]) for i in text_ids):
            event("a partial-UTF-8 token was allowed")
        if not got:
            break
        if text_ids and data.draw(st.integers(0, 7)):  # mostly keep going
            t = data.draw(st.sampled_from(text_ids))
        else:
            t = data.draw(st.sampled_from(sorted(got)))
        if not m.accept_token(t):
            # only a run-time limit (ParserLimits) may refuse a token the mask allowed
            assert m.stop_reason is not None, f"{vocab.tokens[t]!r} allowed but refused"
            break
        if t in vocab.stop_token_ids:
            assert m.is_terminated()
            assert not m.allowed_token_ids().size
            break
        prefix += vocab.tokens[t]
        assert m.accepted_bytes() == prefix
        assert m.is_accepting() == oracle.complete(prefix)


@SETTINGS
@given(g=grammars(), seed=st.integers(0, 2**32 - 1))
def test_accept_bytes_then_is_accepting_equals_matches(g: RandomGrammar, seed: int) -> None:
    rng = random.Random(seed)
    oracle = Oracle(g.text)
    compiled = compile_gbnf(BYTE_VOCAB, g.text)
    texts = [g.sample(rng) for _ in range(6)]
    texts += [_mutate(rng, t) for t in texts]
    texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(6)]
    texts.append("")
    for text in texts:
        m = GrammarMatcher(compiled)
        ok = m.accept_bytes(text.encode())
        if not ok and stopped_by_limit(compiled, text.encode()):
            continue  # a documented run-time limit (ParserLimits), not a wrong answer
        assert ok == oracle.rec.is_prefix(text), f"{g.text}\n{text!r}"
        assert (ok and m.is_accepting()) == oracle.rec.matches(text), f"{g.text}\n{text!r}"


@SETTINGS
@given(g=grammars(), seed=st.integers(0, 2**32 - 1))
def test_byte_by_byte_matches_the_oracle(g: RandomGrammar, seed: int) -> None:
    """Multi-byte characters split at every byte: each byte is accepted iff the byte prefix is
    viable; a rejected byte leaves the state unchanged, so the walk goes on with the next one."""
    rng = random.Random(seed)
    oracle = Oracle(g.text)
    compiled = compile_gbnf(BYTE_VOCAB, g.text)
    for _ in range(4):
        data = _mutate(rng, g.sample(rng)).encode()
        if rng.random() < 0.3:  # a stray continuation byte / truncated character
            pos = rng.randint(0, len(data))
            data = data[:pos] + bytes([rng.choice(BYTE_POOL)]) + data[pos:]
        m = GrammarMatcher(compiled)
        prefix = b""
        for b in data:
            mask_says = m.is_token_allowed(b)
            ok = m.accept_bytes(bytes([b]))
            if not ok and stopped_by_limit(compiled, prefix + bytes([b])):
                break
            assert ok == mask_says == oracle.viable(prefix + bytes([b])), (
                f"{g.text}\nprefix {prefix!r} byte {bytes([b])!r}"
            )
            if ok:
                prefix += bytes([b])
                assert m.is_accepting() == oracle.complete(prefix)
        assert m.is_token_allowed(256) == oracle.complete(prefix)


BYTE_VOCAB = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256], name="bytes"
)


def stopped_by_limit(compiled, data: bytes) -> str | None:
    """The ParserLimits message if running ``data`` stops the parser on a limit.

    Highly ambiguous grammars (``r ::= "" | "a" root root``) keep one stack per parse, and their
    number grows exponentially with the input; ``max_stacks`` (4,096) then stops the parser.
    """
    pda = getattr(compiled.program, "pda", None)
    if pda is None:
        return None  # a regular grammar: the DFA program has no run-time limits
    return pda.step_bytes(pda.initial, data).error


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(0, 2)):
        op = rng.randrange(3)
        pos = rng.randint(0, len(chars))
        if op == 0:
            chars.insert(pos, rng.choice(ALPHABET))
        elif chars and op == 1:
            del chars[min(pos, len(chars) - 1)]
        elif chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(ALPHABET)
    return "".join(chars)


# -- deterministic spot checks (the oracle's own sanity) ------------------------------------------
def test_oracle_sanity_on_partial_utf8() -> None:
    o = Oracle('root ::= "é" root "€" | ","')
    assert o.viable(b"\xc3")
    assert o.viable(b"\xc3\xa9\xc3")
    assert not o.viable(b"\xa9")  # a lone continuation byte
    assert not o.viable(b"\xe2")  # "€" cannot come first
    assert o.viable(b"\xc3\xa9,\xe2\x82")
    assert o.complete(b"\xc3\xa9,\xe2\x82\xac")
    assert not o.complete(b"\xc3\xa9,\xe2\x82")


def test_partial_utf8_tokens_on_a_fixed_walk() -> None:
    """A hand-checked walk: "é" split over two tokens, "€" over two."""
    toks = [b"\xc3", b"\xa9", b"\xe2\x82", b"\xac", b",", b"\xc3\xa9,", b"<eos>"]
    vocab = Vocabulary.from_tokens(toks, stop_token_ids=[6])
    m = GrammarMatcher(compile_gbnf(vocab, 'root ::= "é" root "€" | ","'))
    assert set(m.allowed_token_ids().tolist()) == {0, 4, 5}
    for t, want in [
        (0, {1}),
        (1, {0, 4, 5}),
        (5, {2}),
        (2, {3}),
        (3, {2}),
        (2, {3}),
        (3, {6}),
    ]:
        assert m.accept_token(t)
        assert set(m.allowed_token_ids().tolist()) == want, (t, m.accepted_bytes())
    assert m.accept_token(6)
    assert m.accepted_bytes() == "éé,€€".encode()


@pytest.mark.parametrize("text", FIXED)
def test_fixed_grammars_compile_to_a_pushdown_program(text: str) -> None:
    """The hand-written grammars are really context-free (the CFG runtime is what is tested)."""
    from formcast.index.cfg_program import CfgProgram

    compiled = compile_gbnf(BYTE_VOCAB, text)
    if text.startswith("root ::= x x y x") or text.startswith('root ::= "a" root | "b"'):
        return  # regular languages: the DFA program is allowed
    assert isinstance(compiled.program, CfgProgram), text
    assert np.asarray(GrammarMatcher(compiled).allowed_token_ids()).size > 0
