"""formcast as vLLM's structured-output backend, inside the real engine (``vllm.LLM``).

One engine for the module: the tiny random-weight Llama of ``_tiny_llama`` (real Llama-3
tokenizer, logits padded past the tokenizer), on the CPU, with n-gram speculative decoding
on -- so every request also goes through vLLM's draft-token paths (``validate_tokens``,
multi-token ``accept_tokens``, ``rollback`` while it fills the draft positions' masks).  The
model writes noise; the constraint decides what is possible, so every output must be valid.

Oracles: ``json.loads`` + ``jsonschema``, ``re.fullmatch`` (ASCII), set membership, and a fresh
:class:`formcast.GrammarMatcher` replayed from scratch for the speculative-decoding checks.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _tiny_llama import SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)

from _oracle import expected_allowed, replay
from _tiny_llama import TOKENIZER_LEN

import jsonschema
from formcast import GrammarMatcher
from formcast.bitmask import bitmask_to_ids
from formcast.integrations import vllm as fv
from formcast.integrations.vllm_plugin import register

NUM_SPEC = 3  # n-gram draft tokens per step

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3,
                 "uniqueItems": True},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast",
                                      "parameters": WEATHER}},
]
# prompts that repeat themselves give the n-gram proposer drafts to make
PROMPTS = [
    '{"name":"abc","age":12} {"name":"abc","age":12} {"name":"ab',
    "Ada is 36. Ada is 36. Ada is",
    "<function=get_weather>{\"city\":\"Oslo\",\"days\":2}</function> <function=",
    "yes no yes no yes",
]
CALLS: dict[str, int] = {}


@pytest.fixture(scope="module")
def llm(tiny_llama_dir: Path) -> Iterator[Any]:
    """One vLLM engine with the formcast backend (n-gram speculative decoding on)."""
    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0", (
        "run through scripts/test_engines.sh (VLLM_ENABLE_V1_MULTIPROCESSING=0)"
    )
    register()  # vllm.LLM builds its config before vLLM loads plug-ins
    from vllm import LLM

    # count the speculative-decoding entry points vLLM calls on our grammars
    originals = {n: getattr(fv.FormcastGrammar, n) for n in ("validate_tokens", "rollback")}
    mp = pytest.MonkeyPatch()
    for name, fn in originals.items():
        def counted(self: Any, *args: Any, _fn: Any = fn, _name: str = name) -> Any:
            CALLS[_name] = CALLS.get(_name, 0) + 1
            return _fn(self, *args)
        mp.setattr(fv.FormcastGrammar, name, counted)
    t0 = time.perf_counter()
    engine = LLM(
        str(tiny_llama_dir),
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        max_num_seqs=8,
        seed=0,
        structured_outputs_config={"backend": "formcast"},
        speculative_config={"method": "ngram", "num_speculative_tokens": NUM_SPEC,
                            "prompt_lookup_max": 3, "prompt_lookup_min": 1},
    )
    print(f"vLLM engine started in {time.perf_counter() - t0:.1f} s")
    yield engine
    mp.undo()
    del engine


def _run(llm: Any, n: int = 6, max_tokens: int = 96, **so: Any) -> list[Any]:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    params = [
        SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed,
                       structured_outputs=StructuredOutputsParams(**so))
        for seed in range(n)
    ]
    outs = llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(n)], params, use_tqdm=False)
    completions = [o.outputs[0] for o in outs]
    for c in completions:
        # the padded logits (ids >= the tokenizer's length) are never sampled
        assert all(0 <= t < TOKENIZER_LEN for t in c.token_ids), c.token_ids
    return completions


def _finished(completions: list[Any]) -> list[str]:
    for c in completions:
        assert c.finish_reason == "stop", (c.finish_reason, c.text)
    return [c.text for c in completions]


# -- every request type -------------------------------------------------------------------------
def test_json_schema_outputs_validate(llm: Any) -> None:
    texts = _finished(_run(llm, json=PERSON))
    for text in texts:
        jsonschema.validate(json.loads(text), PERSON)
    assert len(set(texts)) > 1, "different seeds should give different documents"


def test_json_schema_as_text_with_unique_items(llm: Any) -> None:
    """vLLM's xgrammar validator rejects uniqueItems; formcast enforces it."""
    schema = {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 2,
              "maxItems": 3, "uniqueItems": True}
    for text in _finished(_run(llm, json=json.dumps(schema))):
        value = json.loads(text)
        jsonschema.validate(value, schema)
        assert len(set(value)) == len(value)


def test_regex_is_ecma_and_fullmatched(llm: Any) -> None:
    pattern = r"\d{3}-[a-z]{2,5}(\.[A-Z]{1,2})?"
    for text in _finished(_run(llm, regex=pattern)):
        # ECMA \d is [0-9]: an Arabic-Indic digit would fail the ASCII match
        assert re.fullmatch(pattern, text, flags=re.ASCII), text


def test_choice_gives_one_exact_alternative(llm: Any) -> None:
    choices = ["yes", "no", 'say "hi"', "a|b", "naïve\n(x)"]
    texts = _finished(_run(llm, n=8, choice=choices))
    assert set(texts) <= set(choices), texts


def test_gbnf_grammar(llm: Any) -> None:
    gbnf = 'root ::= "(" num ("," num){0,3} ")"\nnum ::= [1-9] [0-9]?\n'
    for text in _finished(_run(llm, grammar=gbnf)):
        assert re.fullmatch(r"\([1-9][0-9]?(,[1-9][0-9]?){0,3}\)", text), text


def test_lark_grammar_is_detected_and_enforced(llm: Any) -> None:
    lark = 'start: "<" WORD ("-" WORD)? ">"\nWORD: /[a-z]{1,6}/\n'
    assert fv.grammar_syntax(lark) == "lark"
    for text in _finished(_run(llm, grammar=lark)):
        assert re.fullmatch(r"<[a-z]{1,6}(-[a-z]{1,6})?>", text), text


def test_json_object_is_an_object_or_a_valid_prefix(llm: Any) -> None:
    """Any JSON object: complete ones parse; a random model may be cut by max_tokens, and
    then the text must still be a prefix of some object (checked by a fresh matcher)."""
    completions = _run(llm, n=6, max_tokens=48, json_object=True)
    compiled = _prefix_oracle({"type": "object"})
    finished = 0
    for c in completions:
        assert c.text.startswith("{"), c.text
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.text), dict)
            finished += 1
        else:
            assert GrammarMatcher(compiled).accept_bytes(c.text.encode()), c.text
    print(f"json_object: {finished}/{len(completions)} finished within 48 tokens")


def _tool_tag(at_least_one: bool) -> dict[str, Any]:
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<function="],
            "tags": [{"type": "tag", "begin": "<function=get_weather>",
                      "content": {"type": "json_schema", "json_schema": WEATHER},
                      "end": "</function>"}],
            "at_least_one": at_least_one,
            "stop_after_first": True,
        },
    }


def test_structural_tag_tool_call(llm: Any) -> None:
    """A forced tool call in the Llama-3.1 ``<function=...>`` style (xgrammar's format JSON)."""
    for text in _finished(_run(llm, structural_tag=json.dumps(_tool_tag(True)))):
        m = re.fullmatch(r"<function=get_weather>(.*)</function>", text, flags=re.DOTALL)
        assert m, text
        jsonschema.validate(json.loads(m.group(1)), WEATHER)


def test_legacy_structural_tag_free_text_then_valid_tags(llm: Any) -> None:
    """The legacy ``structures``/``triggers`` form: free text, and every triggered tag valid."""
    tag = {"type": "structural_tag", "triggers": ["<function="],
           "structures": [{"begin": "<function=get_weather>", "schema": WEATHER,
                           "end": "</function>"}]}
    for c in _run(llm, n=4, max_tokens=64, structural_tag=json.dumps(tag)):
        for part in c.text.split("<function=")[1:]:
            body = part.removeprefix("get_weather>")
            assert body != part, c.text
            if "</function>" in body:
                jsonschema.validate(json.loads(body.split("</function>")[0]), WEATHER)


@functools.cache
def _oracle_compiler() -> Any:
    from formcast import GrammarCompiler
    from formcast.vocab.loaders import load_vocabulary

    return GrammarCompiler(load_vocabulary("llama3"))


def _prefix_oracle(schema: Any) -> Any:
    """An independent compile of ``schema`` (its own vocabulary and compiler)."""
    return _oracle_compiler().compile_json_schema(schema)


def test_tool_calls_through_chat_with_vllms_tool_schemas(llm: Any) -> None:
    """``LLM.chat(tools=...)`` with the JSON schemas vLLM's tool parsers force, built by vLLM's
    own helper: a named tool (its parameters) and ``tool_choice="required"`` (a list of
    ``{"name", "parameters"}``; its objects admit extra members, so a random model may be cut
    by ``max_tokens``: then the text must be a valid prefix)."""
    from vllm import SamplingParams
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionNamedToolChoiceParam,
        ChatCompletionToolsParam,
    )
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    tools = [ChatCompletionToolsParam.model_validate(t) for t in TOOLS]
    named = ChatCompletionNamedToolChoiceParam.model_validate(
        {"type": "function", "function": {"name": "get_weather"}})
    messages = [[{"role": "user", "content": f"Weather in Oslo for {d} days?"}]
                for d in (1, 2, 3, 4)]
    for choice, must_finish in ((named, True), ("required", False)):
        schema = get_json_schema_from_tools(choice, tools, parallel_tool_calls=False)
        assert isinstance(schema, dict)
        params = [
            SamplingParams(max_tokens=96, temperature=1.0, seed=seed,
                           structured_outputs=StructuredOutputsParams(json=schema))
            for seed in range(len(messages))
        ]
        outs = llm.chat(messages, params, tools=TOOLS, use_tqdm=False)
        assert len(outs) == len(messages)
        oracle = _prefix_oracle(schema)
        for o in outs:
            c = o.outputs[0]
            if c.finish_reason != "stop":
                assert not must_finish, c.text
                assert GrammarMatcher(oracle).accept_bytes(c.text.encode()), c.text
                continue
            value = json.loads(c.text)
            jsonschema.validate(value, schema)
            args = value if choice is named else value[0]["parameters"]
            jsonschema.validate(args, WEATHER)


# -- errors -------------------------------------------------------------------------------------
def test_unsupported_schema_is_rejected_at_validation(llm: Any) -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    bad = {"type": "string", "pattern": "(?=a)a+"}  # lookahead: formcast cannot enforce it
    with pytest.raises(VLLMValidationError, match="formcast") as info:
        llm.generate(["x"], SamplingParams(
            max_tokens=8, structured_outputs=StructuredOutputsParams(json=bad)), use_tqdm=False)
    assert "lookahead" in str(info.value).lower() or "(?=" in str(info.value)
    with pytest.raises(VLLMValidationError, match="formcast"):
        llm.generate(["x"], SamplingParams(
            max_tokens=8,
            structured_outputs=StructuredOutputsParams(grammar='root ::= "unterminated')),
            use_tqdm=False)
    # the engine still serves
    assert _finished(_run(llm, n=1, regex="ok|no"))[0] in ("ok", "no")


def test_a_compile_failure_fails_only_that_request(llm: Any) -> None:
    """Passes validation (it parses) but compiles to nothing: vLLM ends just that request with
    ``finish_reason="error"`` (its handling of a failed grammar) and keeps serving."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    empty = r"a[^\s\S]"  # parses; matches no string at all
    outs = llm.generate(["x"], SamplingParams(
        max_tokens=8, structured_outputs=StructuredOutputsParams(regex=empty)), use_tqdm=False)
    assert (outs[0].outputs[0].finish_reason, outs[0].outputs[0].text) == ("error", "")
    assert _finished(_run(llm, n=1, regex="ok|no"))[0] in ("ok", "no")


def test_the_speculative_paths_ran(llm: Any) -> None:
    """The n-gram drafts made vLLM call validate_tokens and rollback on formcast grammars
    (otherwise the speculative checks above would be vacuous)."""
    _run(llm, n=4, json=PERSON)
    assert CALLS.get("validate_tokens", 0) > 0, CALLS
    assert CALLS.get("rollback", 0) > 0, CALLS


# -- vLLM's StructuredOutputManager on formcast grammars ---------------------------------------
def test_the_manager_builds_the_backend_at_engine_start(
    llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine configured with formcast starts building the backend when its manager is
    made; the first structured request takes that backend.  A build that fails is redone at
    the first request, which gets the error (as when nothing was built early)."""
    from concurrent.futures import Future

    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = llm.llm_engine.vllm_config
    tok = llm.get_tokenizer()

    def request(manager: Any) -> Any:
        params = SamplingParams(max_tokens=4,
                                structured_outputs=StructuredOutputsParams(regex="[0-9]+"))
        params._validate_structured_outputs(vllm_config.model_config,
                                            vllm_config.structured_outputs_config, tok)
        req = Request("req-early", prompt_token_ids=[1, 2], sampling_params=params,
                      pooling_params=None)
        manager.grammar_init(req)
        return req

    manager = StructuredOutputManager(vllm_config)
    early = manager._formcast_backend
    assert isinstance(early, Future)
    built = early.result(timeout=120)
    assert isinstance(built, fv.FormcastBackend)
    assert built.vocab._trie is not None, "warm_up builds the token trie"
    request(manager)
    assert manager.backend is built
    assert manager._formcast_backend is None
    manager.clear_backend()

    def fail(self: Any) -> None:
        raise RuntimeError("no trie today")

    monkeypatch.setattr(fv.FormcastBackend, "warm_up", fail)
    manager = StructuredOutputManager(vllm_config)
    with pytest.raises(RuntimeError, match="no trie today"):
        manager._formcast_backend.result(timeout=120)
    monkeypatch.undo()
    request(manager)  # rebuilt at the first request
    assert isinstance(manager.backend, fv.FormcastBackend)
    manager.clear_backend()


def test_a_grammar_in_memory_is_ready_at_grammar_init(llm: Any) -> None:
    """A request whose constraint the compiler holds in memory gets its grammar from
    ``grammar_init`` itself (no Future: the scheduler's first look finds it ready, the request
    is not a step late), with its own matcher; a constraint not seen before still goes to
    vLLM's compile thread (a Future)."""
    from concurrent.futures import Future

    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = llm.llm_engine.vllm_config
    tok = llm.get_tokenizer()
    manager = StructuredOutputManager(vllm_config)

    def request(name: str, regex: str) -> Any:
        params = SamplingParams(max_tokens=4,
                                structured_outputs=StructuredOutputsParams(regex=regex))
        params._validate_structured_outputs(vllm_config.model_config,
                                            vllm_config.structured_outputs_config, tok)
        req = Request(name, prompt_token_ids=[1, 2], sampling_params=params, pooling_params=None)
        manager.grammar_init(req)
        return req.structured_output_request

    first = request("r-first", "[0-7]{3}-x")
    if manager._use_async_grammar_compilation:
        assert isinstance(first._grammar, Future), "a miss goes to the compile thread"
    deadline = time.monotonic() + 60
    while not first.is_grammar_ready:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    again = request("r-again", "[0-7]{3}-x")
    assert isinstance(again._grammar, fv.FormcastGrammar), "a hit is handed over at once"
    assert again._grammar.compiled is first.grammar.compiled
    assert again._grammar.matcher is not first.grammar.matcher
    other = request("r-other", "[0-7]{4}-y")
    if manager._use_async_grammar_compilation:
        assert isinstance(other._grammar, Future)
    manager.clear_backend()


def test_vllms_manager_fills_draft_rows_like_the_oracle(
    llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's own ``StructuredOutputManager.grammar_bitmask`` with scheduled draft tokens: one
    row per draft position plus the bonus row, each the oracle's mask after that prefix (the
    grammar's rows: canonical forcing off), and the grammar rolled back afterwards."""
    monkeypatch.setenv(fv.CANONICAL_FORCED_ENV, "0")  # read when the manager builds its backend
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = llm.llm_engine.vllm_config
    manager = StructuredOutputManager(vllm_config)
    params = SamplingParams(max_tokens=16, structured_outputs=StructuredOutputsParams(json=PERSON))
    params._validate_structured_outputs(vllm_config.model_config,
                                        vllm_config.structured_outputs_config,
                                        llm.get_tokenizer())
    request = Request("req-0", prompt_token_ids=[1, 2, 3], sampling_params=params,
                      pooling_params=None)
    manager.grammar_init(request)
    assert isinstance(manager.backend, fv.FormcastBackend)
    deadline = time.monotonic() + 60
    while not request.structured_output_request.is_grammar_ready:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    grammar = request.structured_output_request.grammar
    assert isinstance(grammar, fv.FormcastGrammar)
    compiled = grammar.compiled
    stops = grammar.stop_token_ids
    tok = llm.get_tokenizer()
    # a valid draft ('{"name"' as tokens), then one the grammar refuses
    draft = tok.encode('{"name', add_special_tokens=False)[:NUM_SPEC]
    rows = manager.grammar_bitmask({"req-0": request}, ["req-0"], {"req-0": draft})
    assert rows is not None
    assert rows.shape[0] == len(draft) + 1
    for i in range(len(draft) + 1):
        m, stopped = replay(compiled, draft[:i], stops)
        got = {int(t) for t in bitmask_to_ids(rows[i])}
        assert got == expected_allowed(compiled, m, stopped, stops), i
    assert grammar.matcher.num_accepted_tokens == 0, "the manager rolls the drafts back"
    assert manager.validate_tokens(request, draft) == draft
    refused = [*draft[:1], tok.encode("}", add_special_tokens=False)[0]]
    assert manager.validate_tokens(request, refused) == draft[:1]
    assert manager.accept_tokens(request, draft)
    assert grammar.matcher.num_accepted_tokens == len(draft)
    manager.clear_backend()
