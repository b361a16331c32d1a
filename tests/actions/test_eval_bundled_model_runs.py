"""``formcast eval --model smollm2`` on three of the example's cases: the bundled model runs
through the whole runner and the report is consistent (whatever the model answers, the layer
counts nest, the statuses add up, nothing raised).  Slow: a real model on one thread."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from formcast.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "actions" / "refund_tool.py"
DATA = REPO / "examples" / "actions" / "refund_cases.jsonl"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="needs llama-cpp-python (bash scripts/install_model_extras.sh)"),
]


def test_the_bundled_model_goes_through_every_layer_it_reaches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = DATA.read_text(encoding="utf-8").splitlines()
    subset = tmp_path / "three.jsonl"
    subset.write_text("\n".join([lines[0], lines[5], lines[-1]]) + "\n", encoding="utf-8")
    code = main(["eval", "--tool", str(SPEC), "--data", str(subset), "--model", "smollm2",
                 "--max-tokens", "64", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["errors"] == 0
    m = report["metrics"]
    assert m["runs"] == 3
    assert sum(m["statuses"].values()) == 3
    reached = [m["layers"][name]["reached"] for name in
               ("syntax", "schema", "business", "facts", "inspection", "permission")]
    passed = [m["layers"][name]["passed"] for name in
              ("syntax", "schema", "business", "facts", "inspection", "permission")]
    # a layer is reached only by the runs that passed the one before it
    for i in range(1, len(reached)):
        assert reached[i] <= passed[i - 1]
    # the third case replays the first one's key: a duplicate only if the first one executed
    first, _, third = report["results"]
    assert (third["status"] == "duplicate") == (first["status"] in ("committed", "rejected")
                                               and m["layers"]["execution"]["reached"] > 0)
    assert m["latency"]["ttft_s"]["count"] >= 1
