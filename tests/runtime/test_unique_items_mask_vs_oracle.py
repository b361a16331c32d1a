"""Run-time ``uniqueItems``: every mask equals a brute-force oracle's, on a small vocabulary.

The oracle knows nothing of formcast's check: a token is allowed after a prefix iff some
*document* starts with the prefix and the token, where a document is a text the schema's
grammar *without* ``uniqueItems`` accepts (formcast's plain grammar, tested exact elsewhere)
and whose value ``jsonschema`` validates against the schema *with* it.  Documents are searched
depth first over the bytes that grammar allows (the schemas below have finite languages, so
the search is exhaustive).  Random walks through the matcher compare, at every step, the mask
with the oracle for every token, and ``accept_token`` with the mask; rollback, fork and
``validate_tokens`` are checked against fresh matchers fed the same tokens.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from typing import Any

import pytest

import jsonschema
from formcast.automata.pda import ParserState
from formcast.bitmask import bitmask_to_ids
from formcast.errors import UnsupportedFeatureError
from formcast.frontends.jsonschema.api import schema_to_grammar
from formcast.index.cfg_program import CfgProgram
from formcast.index.compiled import CompiledGrammar
from formcast.index.compiler import GrammarCompiler
from formcast.runtime.matcher import GrammarMatcher
from formcast.vocab.vocabulary import Vocabulary

TOKENS = [
    b"[", b"]", b",", b'"', b"a", b"b", b"c", b'"a', b'a"', b'b"', b'","', b'"]', b'",',
    b'"a"', b'a","', b"\\", b"u", b"00", b"6", b"1", b"2", b"\\u0061", b"ab", b'["',
    b"\xc3\xa9", b"\xc3", b"\xa9", b'\xa9"', b"[]", b'["a"]', b'"],', b" ", b'b","b',
    b"\\u00e9", b'""', b"x", b"{", b"}", b":", b'{"u":', b'"v"', b"]}", b"v", b',"', b',"a', b'"b',
]  # fmt: skip


def _vocab() -> Vocabulary:
    return Vocabulary.from_tokens([*TOKENS, b"<eos>"], stop_token_ids=[len(TOKENS)], name="uq")


VOCAB = _vocab()
COMPILER = GrammarCompiler(VOCAB)

SCHEMAS: list[Any] = [
    # canonical strings (a pattern): a finite domain smaller than maxItems
    {"type": "array", "items": {"type": "string", "pattern": "^[ab]$"}, "uniqueItems": True,
     "maxItems": 3},
    # an enum too large for the compile-time expansion's budget is checked at run time too
    {"type": "array", "items": {"enum": ["a", "b", "c", "ab", "é", "aa", "ba", "bb", "x", "cc"]},
     "uniqueItems": True, "minItems": 1, "maxItems": 4},
    # strings with any escapes, bounded by length: "\\u0061" equals "a"
    {"type": "array", "items": {"type": "string", "maxLength": 1}, "uniqueItems": True,
     "maxItems": 2},
    # minItems: two distinct values must fit
    {"type": "array", "items": {"type": "string", "pattern": "^(a|b|ab)$"},
     "uniqueItems": True, "minItems": 2, "maxItems": 3},
    # unions: a branch without uniqueItems keeps its stacks
    {"anyOf": [
        {"type": "array", "items": {"pattern": "^[ab]$", "type": "string"}, "uniqueItems": True,
         "maxItems": 3},
        {"type": "array", "items": {"const": "a"}, "maxItems": 2},
    ]},
    # free strings (an infinite language: the oracle's search is bounded, see Oracle)
    {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 4},
    # nested in an object, beside a non-unique array
    {"type": "object", "properties": {
        "u": {"type": "array", "items": {"type": "string", "pattern": "^[abc]$"},
              "uniqueItems": True, "maxItems": 2},
        "v": {"type": "array", "items": {"enum": ["a"]}, "maxItems": 2}},
     "required": ["u"], "additionalProperties": False},
]  # fmt: skip


def _plain(schema: Any) -> Any:
    """``schema`` without ``uniqueItems`` (the grammar the oracle searches)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "uniqueItems"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


class Oracle:
    """Whether a byte string starts some document of ``schema`` (see the module docstring)."""

    #: bytes a completion may add past the prefix: more than any document of the finite
    #: schemas needs, and (for free strings) more than the shortest completion of any prefix
    #: (finish an escape, add a new character, close the string and the array: 12 bytes)
    REACH = 16

    def __init__(
        self, schema: Any, tokens: list[bytes] = TOKENS, compiler: GrammarCompiler = COMPILER
    ) -> None:
        self.tokens = tokens
        plain = compiler.compile_json_schema(_plain(schema))
        assert isinstance(plain.program, CfgProgram)
        self.pda = plain.program.pda
        self.validator = jsonschema.Draft202012Validator(schema)
        self._live = lru_cache(maxsize=None)(self._live_uncached)
        # (the pruning is sound only where the top-level array itself must be unique)
        self.prune = isinstance(schema, dict) and schema.get("uniqueItems") is True

    def _valid(self, doc: bytes) -> bool:
        try:
            value = json.loads(doc)
        except ValueError:
            return False
        return bool(self.validator.is_valid(value))

    @staticmethod
    def _repeated(doc: bytes) -> bool:
        """A top-level array whose completed items already repeat a value (no completion
        can undo it: pruned, to keep the search of free strings small)."""
        if not doc.startswith(b"["):
            return False
        head, in_string, escaped, start = doc, False, False, 0
        for i, b in enumerate(doc):  # inside a string at the end: drop it
            if escaped:
                escaped = False
            elif in_string and b == 0x5C:
                escaped = True
            elif b == 0x22:
                in_string, start = not in_string, i
        if in_string:
            head = doc[:start]
        try:
            items = json.loads(head.rstrip(b", ") + b"]")
        except ValueError:
            return False
        keys = [json.dumps(x, sort_keys=True) for x in items]
        return len(keys) != len(set(keys))

    def _live_uncached(self, doc: bytes, state: ParserState, left: int) -> bool:
        if state.accepting and self._valid(doc):
            return True
        if left == 0 or (self.prune and self._repeated(doc)):
            return False
        # closing bytes first: short documents are found first
        order = sorted(self.pda.next_bytes(state).tolist(), key=lambda b: (b not in b'"]}', b))
        for b in order:
            nxt = self.pda.step(state, b)
            if not nxt.is_dead and self._live(doc + bytes((b,)), nxt, left - 1):
                return True
        return False

    def live(self, doc: bytes) -> bool:
        state = self.pda.step_bytes(self.pda.initial, doc)
        return not state.is_dead and self._live(doc, state, self.REACH)

    def plain_allowed(self, prefix: bytes) -> set[int]:
        """What the grammar without ``uniqueItems`` allows (byte liveness only)."""
        out = set()
        for t, tok in enumerate(self.tokens):
            if not self.pda.step_bytes(self.pda.initial, prefix + tok).is_dead:
                out.add(t)
        return out

    def allowed(self, prefix: bytes) -> set[int]:
        out = {t for t, tok in enumerate(self.tokens) if self.live(prefix + tok)}
        state = self.pda.step_bytes(self.pda.initial, prefix)
        if state.accepting and self._valid(prefix):
            out.add(len(self.tokens))
        return out


def _compiled(schema: Any) -> CompiledGrammar:
    compiled = COMPILER.compile_json_schema(schema)
    assert compiled.unique_items, "the run-time check is not in use"
    return compiled


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_masks_equal_the_oracle_on_random_walks(index: int) -> None:
    schema = SCHEMAS[index]
    compiled = _compiled(schema)
    oracle = Oracle(schema)
    rng = random.Random(index)
    mattered = 0  # steps where uniqueness removed a token the plain grammar allows
    for _ in range(30):
        matcher = GrammarMatcher(compiled)
        while not matcher.is_terminated():
            prefix = matcher.accepted_bytes()
            got = set(matcher.allowed_token_ids().tolist())
            want = oracle.allowed(prefix)
            assert got == want, (prefix, sorted(got ^ want))
            mattered += bool(oracle.plain_allowed(prefix) - want - {len(TOKENS)})
            for t in range(len(TOKENS) + 1):
                twin = matcher.fork()
                assert twin.accept_token(t) == (t in want), (prefix, t)
            assert oracle.live(prefix), prefix  # never past where no document exists
            if not got:  # (the vocabulary cannot spell what must follow)
                break
            matcher.accept_token(rng.choice(sorted(got)))
        else:
            value = json.loads(matcher.accepted_bytes())
            assert oracle.validator.is_valid(value)
    assert mattered >= 3  # the walks reached the check


def test_equal_values_are_equal_whatever_their_spelling() -> None:
    compiled = _compiled(SCHEMAS[2])
    m = GrammarMatcher(compiled)
    assert m.accept_bytes('["a",')
    assert not m.fork().accept_bytes('"\\u0061"')  # "a" again, escaped
    assert m.fork().accept_bytes('"\\u0062"')
    m2 = GrammarMatcher(compiled)
    assert m2.accept_bytes('["\\u00e9",')
    assert not m2.fork().accept_bytes('"\xc3\xa9"'.encode("latin-1").decode("utf-8"))


def test_rollback_fork_and_validate_tokens_are_exact() -> None:
    compiled = _compiled(SCHEMAS[0])
    ids = [TOKENS.index(t) for t in (b"[", b'"a', b'"', b",", b'"', b"b", b'"', b"]")]
    m = GrammarMatcher(compiled)
    assert m.validate_tokens(ids) == len(ids)
    assert m.num_accepted_tokens == 0
    dup = [TOKENS.index(t) for t in (b"[", b'"a"', b",", b'"a"')]
    assert m.validate_tokens(dup) == 3  # the second "a" is refused
    assert m.accept_tokens(ids[:6])
    masks = []
    for n in range(6, -1, -1):
        fresh = GrammarMatcher(compiled)
        assert fresh.accept_tokens(ids[:n])
        masks.append((n, fresh.allowed_token_ids().tolist()))
    for n, want in masks:
        m.rollback(m.num_accepted_tokens - n)
        assert m.allowed_token_ids().tolist() == want, n
    twin = m.fork()
    assert twin.accept_tokens(ids)
    assert m.num_accepted_tokens == 0
    assert not twin.fork().accept_token(TOKENS.index(b","))  # nothing follows "]"


def test_the_grammar_alone_fails_closed() -> None:
    with pytest.raises(UnsupportedFeatureError, match="uniqueItems"):
        schema_to_grammar(SCHEMAS[2])


# -- mask == accept_token after escapes (a brute-force differential, no oracle needed) ----------
#: a small alphabet (so items repeat often) plus escape sequences whole and in pieces:
#: ``\\``, ``\"``, ``\n``, ``\u00XX``, and tokens that end on a backslash or close after one
ESCAPE_TOKENS = [
    *(bytes((b,)) for b in b' "\\,[]{}:ab0126un'),
    b"\\\\", b'\\"', b"\\n", b"\\u00", b"\\u0061", b"\\u0022", b"\\u005c", b"\\u00e9", b"\\u",
    b'a\\', b'"\\', b'\\""', b'\\"",', b'\\\\"', b'\\n"', b'","', b'",', b'"]', b'"a"', b'a"',
    b'{"s":', b'"}', b'"},', b'["', b'"],', b"\xc3\xa9", b"\xc3",
]  # fmt: skip
ESCAPE_VOCAB = Vocabulary.from_tokens(
    [*ESCAPE_TOKENS, b"<eos>"], stop_token_ids=[len(ESCAPE_TOKENS)], name="uq-esc"
)
ESCAPE_COMPILER = GrammarCompiler(ESCAPE_VOCAB)
SHORT = {"type": "string", "maxLength": 1}
ESCAPE_SCHEMAS: list[tuple[Any, str]] = [
    ({"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True},
     "UniqueItemsProgram"),
    ({"type": "array", "items": SHORT, "uniqueItems": True, "maxItems": 4}, "UniqueItemsProgram"),
    ({"type": "array", "items": {"type": "string", "pattern": '^[a"\\\\]{1,2}$'},
      "uniqueItems": True}, "UniqueItemsProgram"),
    ({"type": "array", "uniqueItems": True, "items": {
        "type": "object", "properties": {"s": SHORT}, "required": ["s"],
        "additionalProperties": False}}, "ValueUniqueProgram"),
    ({"type": "array", "uniqueItems": True, "maxItems": 4,
      "items": {"type": "array", "items": SHORT, "minItems": 1, "maxItems": 1}},
     "ValueUniqueProgram"),
    ({"type": "array", "uniqueItems": True, "items": {"anyOf": [SHORT, {"enum": [1, 2]}]}},
     "ValueUniqueProgram"),
]  # fmt: skip


def _mask_equals_accept(matcher: GrammarMatcher) -> list[int]:
    """Every token: ``is_token_allowed`` equals what a fork's ``accept_token`` does; the
    allowed ids."""
    allowed = []
    for t in range(len(ESCAPE_TOKENS) + 1):
        got = matcher.is_token_allowed(t)
        where = (matcher.accepted_bytes(), ESCAPE_TOKENS[t : t + 1])
        assert got == matcher.fork().accept_token(t), where
        if got:
            allowed.append(t)
    return allowed


def test_mask_equals_accept_when_an_escape_completes_a_repeated_item() -> None:
    """The reported case: after ``[" \\""," \\`` the quote completes ``\\"``, making the item
    ``' "'`` again, which maxLength then forces closed: both must refuse it."""
    toks = [bytes((i,)) for i in range(32, 127)]
    vocab = Vocabulary.from_tokens([*toks, b"<eos>"], stop_token_ids=[len(toks)], name="uq-ascii")
    schema = {"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True}
    m = GrammarMatcher(GrammarCompiler(vocab).compile_json_schema(schema))
    assert m.accept_bytes(b'[" \\""," \\')
    q = ord('"') - 32
    assert not m.fork().accept_token(q)
    assert not m.is_token_allowed(q)
    assert m.is_token_allowed(ord("n") - 32)  # ' \n' is new
    for t in range(len(toks) + 1):
        assert m.is_token_allowed(t) == m.fork().accept_token(t), toks[t : t + 1]


@pytest.mark.parametrize("index", range(len(ESCAPE_SCHEMAS)))
def test_mask_equals_accept_on_random_walks_with_escapes(index: int) -> None:
    schema, program = ESCAPE_SCHEMAS[index]
    compiled = ESCAPE_COMPILER.compile_json_schema(schema)
    assert compiled.unique_items, "the run-time check is not in use"
    assert type(compiled.program).__name__ == program
    cfg = compiled.program.cfg  # type: ignore[attr-defined]
    assert isinstance(cfg, CfgProgram)
    rng = random.Random(1000 + index)
    escapes = [t for t, b in enumerate(ESCAPE_TOKENS) if b"\\" in b]
    refused_by_check = 0  # steps where uniqueness refused a token the grammar allows
    for _ in range(16):
        matcher = GrammarMatcher(compiled)
        for _ in range(40):
            if matcher.is_terminated():
                break
            allowed = _mask_equals_accept(matcher)
            at = cfg.pda.step_bytes(cfg.pda.initial, matcher.accepted_bytes())
            plain = set(bitmask_to_ids(cfg.token_mask(at)).tolist())
            refused_by_check += bool(plain - set(allowed) - {len(ESCAPE_TOKENS)})
            if not allowed:
                break
            # prefer escapes, to reach the states after a backslash often
            esc = [t for t in allowed if t in escapes]
            pick = rng.choice(esc if esc and rng.random() < 0.5 else allowed)
            assert matcher.accept_token(pick)
    assert refused_by_check >= 3  # the walks reached the check


# -- the trie walk of ValueUniqueProgram._safe, forced on the small vocabulary -----------------
#: object items (value marks), keys and values spelled by TOKENS: two items equal so far reach
#: the check of a free slot after every token (:meth:`ValueUniqueProgram._safe`; ``u`` is free)
OBJECT_SCHEMA: Any = {
    "type": "array", "uniqueItems": True, "maxItems": 3,
    "items": {"type": "object", "properties": {"u": {"type": "string"},
                                               "v": {"type": "string", "maxLength": 1}},
              "required": ["u"], "additionalProperties": False},
}  # fmt: skip
#: a second item equal, token by token, to a long first one
EQUAL_SO_FAR = [
    b"[", b'{"u":', b'"a', b"b", b'"', b',"', b"v", b'"', b":", b'"a"', b"}",
    b",", b'{"u":', b'"a', b"b", b'"', b',"', b"v", b'"', b":", b'"',
]  # fmt: skip


#: string items among others (value marks): the first item ``"\\b"`` (a backspace) is written
#: with its closing quote inside the token after the backslash, and so is the second
MIXED_SCHEMA: Any = {
    "type": "array", "uniqueItems": True, "maxItems": 3,
    "items": {"anyOf": [{"type": "string"}, {"enum": [1]}]},
}  # fmt: skip
ESCAPED_TWICE = [b"[", b'"', b"\\", b'b"', b",", b'"', b"\\"]
#: tokens that, read just after a backslash, close a string and then the object around it
CLOSING_TOKENS = [
    b"[", b"]", b",", b'{"s":', b'"', b"\\", b'\\"}', b'b"}', b'"}', b"a", b"b", b"}",
]  # fmt: skip
CLOSING_VOCAB = Vocabulary.from_tokens(
    [*CLOSING_TOKENS, b"<eos>"], stop_token_ids=[len(CLOSING_TOKENS)], name="uq-close"
)
CLOSING_SCHEMA: Any = {
    "type": "array", "uniqueItems": True, "maxItems": 3,
    "items": {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"],
              "additionalProperties": False},
}  # fmt: skip
#: ``{"s":"\\"}`` twice, the item closed by the token after the backslash
CLOSED_TWICE = [b"[", b'{"s":', b'"', b"\\", b'\\"}', b",", b'{"s":', b'"', b"\\"]
TRIE_CASES: list[tuple[Any, list[bytes], list[bytes], bytes, bytes]] = [
    # only {"u":"ab","v":"a"} again could follow
    (OBJECT_SCHEMA, TOKENS, EQUAL_SO_FAR, b'a"', b"b"),
    (MIXED_SCHEMA, TOKENS, ESCAPED_TWICE, b'b"', b"u"),  # "\b" again
    (CLOSING_SCHEMA, CLOSING_TOKENS, CLOSED_TWICE, b'\\"}', b'b"}'),  # {"s":"\\"} again
]


@pytest.mark.parametrize("case", range(len(TRIE_CASES)))
def test_masks_equal_the_oracle_with_the_trie_walk_forced(
    case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trie walk that decides :meth:`ValueUniqueProgram._safe` for many candidates (a
    128k vocabulary's string body) runs here for every candidate set: masks along a second
    item equal to the first, and on random walks, equal the oracle's."""
    from formcast.index.programs.unique import values as unique_items

    schema, tokens, path, refused, allowed = TRIE_CASES[case]
    compiler = COMPILER if tokens is TOKENS else GrammarCompiler(CLOSING_VOCAB)
    monkeypatch.setattr(unique_items, "_TRIE_WALK_MIN", 0)
    walks = 0
    real = unique_items.ValueUniqueProgram._trie_states

    def counted(self: Any, ps: ParserState) -> Any:
        nonlocal walks
        walks += 1
        return real(self, ps)

    monkeypatch.setattr(unique_items.ValueUniqueProgram, "_trie_states", counted)
    compiled = GrammarCompiler(compiler.vocab).compile_json_schema(schema)  # its own caches
    assert type(compiled.program).__name__ == "ValueUniqueProgram"
    oracle = Oracle(schema, tokens, compiler)
    m = GrammarMatcher(compiled)
    for tok in path:
        prefix = m.accepted_bytes()
        assert set(m.allowed_token_ids().tolist()) == oracle.allowed(prefix), prefix
        assert m.accept_token(tokens.index(tok)), (prefix, tok)
    prefix = m.accepted_bytes()
    got = set(m.allowed_token_ids().tolist())
    assert got == oracle.allowed(prefix), prefix
    assert tokens.index(refused) not in got
    assert tokens.index(refused) in oracle.plain_allowed(prefix)  # (refused by the check)
    assert tokens.index(allowed) in got
    rng = random.Random(7)
    escapes = [t for t, b in enumerate(tokens) if b"\\" in b]
    for _ in range(12):
        m = GrammarMatcher(compiled)
        while not m.is_terminated():
            prefix = m.accepted_bytes()
            allowed_ids = sorted(m.allowed_token_ids().tolist())
            assert set(allowed_ids) == oracle.allowed(prefix), prefix
            if not allowed_ids:
                break
            esc = [t for t in allowed_ids if t in escapes]
            m.accept_token(rng.choice(esc if esc and rng.random() < 0.5 else allowed_ids))
    assert walks >= 5  # the trie walk decided those masks
