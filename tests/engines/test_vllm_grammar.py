"""formcast's vLLM grammar class against vLLM's base classes, with a fresh-matcher oracle.

The speculative-decoding entry points (``validate_tokens``, multi-token ``accept_tokens``,
``rollback``) and ``fill_bitmask`` of a grammar made by :class:`FormcastBackend` -- a subclass
of vLLM's ``StructuredOutputBackend`` -- on random draft sequences (mostly valid tokens, with
random ids, padding ids past the tokenizer and stop ids mixed in), each step compared with a
fresh :class:`formcast.GrammarMatcher` replayed from scratch.  The request's stop set differs
from the vocabulary's, so the stop-token handling is checked too.  No engine is started: the
backend gets the real Llama-3 tokenizer (transformers) and a config carrying the speculative
token count, which is all it reads.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from _tiny_llama import EOT, SKIP_REASON, TOKENIZER_LEN, VOCAB_SIZE

pytest.importorskip("vllm", reason=SKIP_REASON)

import numpy as np
from _oracle import expected_allowed, random_draft, replay

from formcast import GrammarCompiler, GrammarMatcher
from formcast.bitmask import bitmask_to_ids
from formcast.integrations import vllm as fv

NUM_SPEC = 3
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3,
                 "uniqueItems": True},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def backend(tiny_llama_dir: Path) -> fv.FormcastBackend:
    from transformers import AutoTokenizer
    from vllm.v1.structured_output.backend_types import StructuredOutputBackend

    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=NUM_SPEC))
    # the grammar's own rows (xgrammar's), which the oracle computes: canonical forcing off
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(fv.CANONICAL_FORCED_ENV, "0")
        backend = fv.FormcastBackend(
            config, tokenizer=AutoTokenizer.from_pretrained(tiny_llama_dir), vocab_size=VOCAB_SIZE
        )
    assert not backend.canonical_forced
    assert isinstance(backend, StructuredOutputBackend)
    assert backend.num_speculative_tokens == NUM_SPEC
    return backend


def test_vocabulary_is_the_tokenizers_with_the_logits_width(backend: fv.FormcastBackend) -> None:
    vocab = backend.vocab
    assert vocab.vocab_size == VOCAB_SIZE
    assert len(vocab.tokens) == TOKENIZER_LEN
    assert EOT in vocab.stop_token_ids
    bitmask = backend.allocate_token_bitmask(3)
    assert tuple(bitmask.shape) == (3, (VOCAB_SIZE + 31) // 32)
    assert str(bitmask.dtype) == "torch.int32"
    assert bool((bitmask == -1).all())


def test_a_narrower_logits_width_drops_the_ids_past_it(tiny_llama_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    vocab = fv.vocabulary_from_tokenizer(tok, 128010)
    assert vocab.vocab_size == 128010
    assert len(vocab.tokens) == 128010
    assert all(i < 128010 for i in vocab.stop_token_ids)


@pytest.mark.parametrize("request_stops", [True, False], ids=["request-stops", "vocab-stops"])
@pytest.mark.parametrize("kind", ["JSON", "GRAMMAR", "REGEX"])
def test_validate_accept_rollback_match_a_fresh_matcher(
    backend: fv.FormcastBackend, kind: str, request_stops: bool
) -> None:
    from vllm.v1.structured_output.backend_types import (
        StructuredOutputGrammar,
        StructuredOutputOptions,
    )

    spec = {"JSON": json.dumps(PERSON),
            # unbounded (a recursive CFG; a star regex): the walks never run out of steps
            "GRAMMAR": 'root ::= "[" (val ("," val)*)? "]"\nval ::= [0-9]+ | root\n',
            "REGEX": r"[a-z]+( [0-9]+)*"}[kind]
    # a request stop set unlike the vocabulary's: EOT, a reserved special token and the
    # text token "!" (which then only stops); or none given: the vocabulary's stop ids
    stops = frozenset({EOT, 128002, 0}) if request_stops else backend.vocab.stop_token_ids
    rng = random.Random(f"{kind}-{request_stops}")
    bitmask = backend.allocate_token_bitmask(2)
    steps = 0
    for trial in range(6):
        grammar = backend.compile_grammar(getattr(StructuredOutputOptions, kind), spec,
                                          stop_token_ids=set(stops) if request_stops else None)
        assert isinstance(grammar, StructuredOutputGrammar)
        assert grammar.stop_token_ids == stops
        compiled = grammar.compiled
        committed: list[int] = []
        for _step in range(12):
            m, stopped = replay(compiled, committed, stops)
            assert grammar.is_terminated() == stopped
            # the mask: the oracle's allowed set exactly, never a padding id
            grammar.fill_bitmask(bitmask, 1)
            row = bitmask.numpy()[1]
            got = {int(i) for i in bitmask_to_ids(row)}
            assert got == expected_allowed(compiled, m, stopped, stops), (kind, trial, committed)
            assert max(got, default=0) < TOKENIZER_LEN
            if stopped:
                assert grammar.validate_tokens([1, 2]) == []
                assert grammar.accept_tokens("r", [5])  # ignored after termination
                break
            draft = random_draft(rng, compiled, committed, stops, rng.randint(1, NUM_SPEC + 1))
            # expected: the longest prefix a fresh matcher accepts (a stop ends it)
            want: list[int] = []
            probe, probe_stopped = replay(compiled, committed, stops)
            for t in draft:
                if probe_stopped:
                    break
                if t in stops:
                    if not probe.is_accepting():
                        break
                    probe_stopped = True
                elif t in compiled.vocab.stop_token_ids or not probe.accept_token(t):
                    break
                want.append(t)
            before = bitmask.numpy()[1].copy()
            assert grammar.validate_tokens(draft) == want, (kind, committed, draft)
            grammar.fill_bitmask(bitmask, 1)
            assert np.array_equal(bitmask.numpy()[1], before), "validate_tokens changed state"
            # the scheduler's mask fill for drafts: accept one by one, then roll back
            for t in want:
                assert grammar.accept_tokens("r", [t])
            grammar.rollback(len(want))
            grammar.fill_bitmask(bitmask, 1)
            assert np.array_equal(bitmask.numpy()[1], before), "rollback did not restore"
            # a refused step changes nothing
            if len(want) < len(draft) and not (want and want[-1] in stops):
                assert not grammar.accept_tokens("r", [*want, draft[len(want)]])
                grammar.fill_bitmask(bitmask, 1)
                assert np.array_equal(bitmask.numpy()[1], before)
            # commit the accepted drafts in one call (as after verification), sometimes
            # rolling part of it back
            if want:
                assert grammar.accept_tokens("r", want)
                committed += want
                if rng.random() < 0.3:
                    k = rng.randint(1, len(want))
                    grammar.rollback(k)
                    committed = committed[:-k]
            else:
                m, _ = replay(compiled, committed, stops)
                ok_ids = sorted(expected_allowed(compiled, m, False, stops))
                t = rng.choice(ok_ids)
                assert grammar.accept_tokens("r", [t])
                committed.append(t)
        steps += _step + 1
        grammar.reset()
        assert not grammar.is_terminated()
        grammar.fill_bitmask(bitmask, 0)
        fresh = {int(i) for i in bitmask_to_ids(bitmask.numpy()[0])}
        assert fresh == expected_allowed(compiled, GrammarMatcher(compiled), False, stops)


    assert steps >= 24, f"the random walks were too short ({steps} steps) to test much"


def test_check_request_remembers_a_constraint_that_passed() -> None:
    from formcast.errors import FormcastError

    spec = json.dumps({"type": "object", "properties": {"q": {"type": "string",
                       "maxLength": 97}}, "required": ["q"], "additionalProperties": False})
    before = fv._checked.cache_info()
    fv.check_request("JSON", spec)
    fv.check_request("JSON", spec)
    after = fv._checked.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)
    # a refused constraint is not remembered: it fails every time it comes
    bad = json.dumps({"type": "string", "pattern": "(?<=a)b"})
    for _ in range(2):
        with pytest.raises(FormcastError):
            fv.check_request("JSON", bad)
    assert fv._checked.cache_info().hits == after.hits


def test_fill_bitmask_follows_the_bitmask_it_is_given(backend: fv.FormcastBackend) -> None:
    """The numpy view of vLLM's tensor is kept between steps; another bitmask (a numpy array,
    another tensor) is written, not the kept one."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    grammar = backend.compile_grammar(StructuredOutputOptions.REGEX, "[a-z]+")
    first = backend.allocate_token_bitmask(2)
    second = backend.allocate_token_bitmask(2)
    other = np.full((2, first.shape[1]), -1, dtype=np.int32)
    grammar.fill_bitmask(first, 0)
    want = first.numpy()[0].copy()
    assert not np.array_equal(want, np.full_like(want, -1))
    for target in (other, second, first):
        rows = target.numpy() if hasattr(target, "numpy") else target
        rows[1] = -1
        grammar.fill_bitmask(target, 1)
        assert np.array_equal(rows[1], want)
    assert bool((second[0] == -1).all())
    assert bool((other[0] == -1).all())


def test_compile_workers_come_from_the_environment(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORMCAST_VLLM_COMPILE_WORKERS: a worker process compiles, and its grammar masks like an
    in-process one; a bad value fails naming the variable."""
    from transformers import AutoTokenizer
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from formcast.errors import ConfigurationError

    monkeypatch.delenv(fv.COMPILE_WORKERS_ENV, raising=False)
    assert fv.compile_workers() == 0
    for bad in ("-1", "two"):
        monkeypatch.setenv(fv.COMPILE_WORKERS_ENV, bad)
        with pytest.raises(ConfigurationError, match=fv.COMPILE_WORKERS_ENV):
            fv.compile_workers()
    monkeypatch.setenv(fv.COMPILE_WORKERS_ENV, "1")
    monkeypatch.setenv(fv.CANONICAL_FORCED_ENV, "0")  # compared with the grammar's own row
    config = SimpleNamespace(speculative_config=None)
    backend = fv.FormcastBackend(
        config, tokenizer=AutoTokenizer.from_pretrained(tiny_llama_dir), vocab_size=VOCAB_SIZE
    )
    try:
        assert backend.compiler.workers == 1
        backend.warm_up()
        grammar = backend.compile_grammar(StructuredOutputOptions.JSON, json.dumps(PERSON))
        here = GrammarMatcher(GrammarCompiler(backend.vocab).compile_json_schema(PERSON))
        bitmask = backend.allocate_token_bitmask(1)
        grammar.fill_bitmask(bitmask, 0)
        assert {int(i) for i in bitmask_to_ids(bitmask.numpy()[0])} == {
            int(i) for i in here.allowed_token_ids()
        }
    finally:
        backend.destroy()


@pytest.mark.parametrize(
    "stops",
    [
        frozenset({EOT}),  # fewer than the vocabulary's
        frozenset({EOT, 128001, 128008, 128003}),  # more: the extra ones set where complete
        frozenset({0, 31, 32, 128002}),  # none of them, a text token, word edges
    ],
    ids=["fewer", "more", "others"],
)
def test_fill_bitmask_rows_are_the_fresh_matchers_for_any_stop_set(
    backend: fv.FormcastBackend, stops: frozenset[int]
) -> None:
    """The per-step row (one copy, then the fix-up of the words the stop ids touch) against
    the oracle's allowed set, on a walk through accepting and non-accepting states, in a
    tensor, a numpy array and a numpy array with wider rows (the words past the vocabulary's
    are zeroed)."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    spec = json.dumps({"type": "array", "items": {"type": "integer", "minimum": 0,
                       "maximum": 9}, "maxItems": 3})
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, spec, stop_token_ids=set(stops))
    assert grammar.stop_token_ids == stops
    compiled = grammar.compiled
    words = (VOCAB_SIZE + 31) // 32
    targets = [backend.allocate_token_bitmask(3), np.full((3, words), -1, dtype=np.int32),
               np.full((3, words + 2), -1, dtype=np.int32)]
    ids = {t: i for i, t in enumerate(compiled.vocab.tokens)}
    walk = [ids[t] for t in (b"[", b"1", b",", b"2", b"]")]
    accepting = []
    for n in range(len(walk) + 1):  # every prefix: "[" ... "[1,2]" (complete)
        m, stopped = replay(compiled, walk[:n], stops)
        accepting.append(m.is_accepting())
        want = expected_allowed(compiled, m, stopped, stops)
        for target in targets:
            rows = target.numpy() if hasattr(target, "numpy") else target
            for index in (0, 2):
                rows[index] = -1
                grammar.fill_bitmask(target, index)
                assert {int(i) for i in bitmask_to_ids(rows[index])} == want, (n, index)
                assert not rows[index, words:].any()
        if n < len(walk):
            assert grammar.accept_tokens("r", [walk[n]])
    assert accepting == [False] * 5 + [True]
    assert want == set(stops)  # complete: only the request's stop ids
    assert grammar.accept_tokens("r", [min(stops)])
    assert grammar.is_terminated()
    grammar.fill_bitmask(targets[0], 1)
    assert not targets[0].numpy()[1].any()


def test_fill_bitmask_refuses_a_bad_bitmask_or_row(backend: fv.FormcastBackend) -> None:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from formcast.errors import ConfigurationError

    grammar = backend.compile_grammar(StructuredOutputOptions.REGEX, "[a-z]+")
    bitmask = backend.allocate_token_bitmask(2)
    grammar.fill_bitmask(bitmask, 1)
    for index in (2, -1, 1.0):
        with pytest.raises(ConfigurationError):
            grammar.fill_bitmask(bitmask, index)  # type: ignore[arg-type]
    for bad in (np.zeros((2, 5), dtype=np.int32), np.zeros((2, 4010), dtype=np.int64)):
        with pytest.raises(ConfigurationError):
            grammar.fill_bitmask(bad, 0)


def test_canonical_forced_rows_allow_the_tokenizers_first_token_of_forced_text(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORMCAST_VLLM_CANONICAL_FORCED (on by default): where the grammar forces text that the
    tokenizer writes in 2+ tokens, the row is that first token alone; elsewhere the grammar's
    row (the oracle's).  Random walks through such rows stay valid and reach stop tokens."""
    from transformers import AutoTokenizer
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from formcast.errors import ConfigurationError

    monkeypatch.setenv(fv.CANONICAL_FORCED_ENV, "maybe")
    with pytest.raises(ConfigurationError, match=fv.CANONICAL_FORCED_ENV):
        fv.canonical_forced()
    for text, on in (("0", False), ("off", False), ("", True), ("1", True), ("yes", True)):
        monkeypatch.setenv(fv.CANONICAL_FORCED_ENV, text)
        assert fv.canonical_forced() is on, text
    monkeypatch.delenv(fv.CANONICAL_FORCED_ENV)  # the default: on
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    backend = fv.FormcastBackend(SimpleNamespace(speculative_config=None), tokenizer=tok,
                                 vocab_size=VOCAB_SIZE)
    assert backend.canonical_forced
    spec = json.dumps(PERSON)
    stops = frozenset({EOT})
    bitmask = backend.allocate_token_bitmask(1)
    rng = random.Random(7)
    restricted = finished = 0
    for _trial in range(8):
        grammar = backend.compile_grammar(StructuredOutputOptions.JSON, spec, set(stops))
        compiled = grammar.compiled
        committed: list[int] = []
        for _step in range(60):
            m, stopped = replay(compiled, committed, stops)
            grammar.fill_bitmask(bitmask, 0)
            got = {int(i) for i in bitmask_to_ids(bitmask.numpy()[0])}
            want = expected_allowed(compiled, m, stopped, stops)
            forced = m.find_jump_forward_bytes()
            ids = tok.encode(forced.decode("utf-8", "replace"), add_special_tokens=False)
            if forced and len(ids) >= 2 and ids[0] in want:
                assert got == {ids[0]}, (committed, forced)
                assert forced.startswith(compiled.vocab.token_bytes(ids[0]))
                restricted += 1
            else:
                assert got == want, (committed, forced)
            if stopped:
                break
            t = rng.choice(sorted(got))
            assert grammar.accept_tokens("r", [t])
            committed.append(t)
            finished += grammar.is_terminated()
        if grammar.is_terminated():
            text = b"".join(compiled.vocab.token_bytes(t) for t in committed[:-1])
            assert set(json.loads(text)) >= {"name", "age"}
    assert restricted >= 8, restricted
    assert finished >= 1, finished
    # the first row of a fresh request: '{"' alone (the forced '{"name":"' is 3 tokens)
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, spec, set(stops))
    grammar.fill_bitmask(bitmask, 0)
    assert [tok.decode([int(i)]) for i in bitmask_to_ids(bitmask.numpy()[0])] == ['{"']
    # ... unless the request stops on that token: then the grammar's row (stop ids cleared)
    brace = tok.encode('{"', add_special_tokens=False)
    assert len(brace) == 1
    odd = frozenset({EOT, brace[0]})
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, spec, set(odd))
    grammar.fill_bitmask(bitmask, 0)
    got = {int(i) for i in bitmask_to_ids(bitmask.numpy()[0])}
    assert got == expected_allowed(grammar.compiled, GrammarMatcher(grammar.compiled), False, odd)
    assert [tok.decode([i]) for i in got] == ["{"]
    # another schema forcing the same text: its encoding is remembered (no tokenizer call)
    calls: list[str] = []
    encode = backend.tokenizer.encode
    monkeypatch.setattr(backend.tokenizer, "encode",
                        lambda text, **kw: calls.append(text) or encode(text, **kw))
    other = dict(PERSON, properties={**PERSON["properties"], "name": {"type": "string"}})
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, json.dumps(other), set(stops))
    assert grammar.compiled.program is not compiled.program
    grammar.fill_bitmask(bitmask, 0)
    assert [tok.decode([int(i)]) for i in bitmask_to_ids(bitmask.numpy()[0])] == ['{"']
    assert calls == [], calls
    grammar.accept_tokens("r", tok.encode('{"', add_special_tokens=False))
    grammar.fill_bitmask(bitmask, 0)
    assert [tok.decode([int(i)]) for i in bitmask_to_ids(bitmask.numpy()[0])] == ["name"]


def test_canonical_forced_row_is_the_same_through_the_checked_path(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fill_bitmask's two paths write the same forced row: vLLM's exact-width tensor (the
    per-step path) and a wider numpy array (the checked path): the canonical first token alone,
    every other word of the row zero (the extra words included), the other rows untouched; a
    terminated grammar's row is all zeros on both."""
    from transformers import AutoTokenizer
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from formcast.bitmask import bitmask_words

    monkeypatch.delenv(fv.CANONICAL_FORCED_ENV, raising=False)
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    backend = fv.FormcastBackend(SimpleNamespace(speculative_config=None), tokenizer=tok,
                                 vocab_size=VOCAB_SIZE)
    spec = json.dumps(PERSON)
    words = bitmask_words(VOCAB_SIZE)
    exact = backend.allocate_token_bitmask(2)
    wide = np.full((3, words + 2), -1, dtype=np.int32)
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, spec, {EOT})
    grammar.fill_bitmask(exact, 1)
    grammar.fill_bitmask(wide, 2)
    brace = tok.encode('{"', add_special_tokens=False)
    assert [int(i) for i in bitmask_to_ids(exact.numpy()[1])] == brace
    assert [int(i) for i in bitmask_to_ids(wide[2])] == brace  # extra words zero
    assert (wide[:2] == -1).all()
    for t in [*tok.encode('{"name":"Al","age":3}', add_special_tokens=False), EOT]:
        assert grammar.accept_tokens("r", [t])
    assert grammar.is_terminated()
    grammar.fill_bitmask(exact, 1)
    grammar.fill_bitmask(wide, 2)
    assert not exact.numpy()[1].any()
    assert not wide[2].any()
