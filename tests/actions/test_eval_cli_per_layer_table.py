"""``formcast eval`` on the example refund dataset with its scripted model: the printed per-layer
table, statuses and task quality equal a hand count of the twelve cases."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from formcast.cli.main import main

pytest.importorskip("formcast.actions.runner")

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "examples" / "actions" / "refund_tool.py"
DATA = REPO / "examples" / "actions" / "refund_cases.jsonl"

# The hand count (examples/actions/refund_tool.py: ANSWERS, ORDERS, RETRY):
#  partial-refund, full-refund, ask-first, wrong-amount, support-agent-refund  committed, 1 attempt
#  retry-fixes-amount     business fails (120 > 80), the retry writes 80: committed, 2 attempts
#  above-order-total      business fails twice (500 > 60): handed_off, 2 attempts
#  unknown-order          facts (no A999), not retried: rejected
#  not-the-owner          permission (cleo, ben's order): handed_off
#  instruction-in-note    inspection, not retried: rejected
#  payment-system-fails   execution raised: rejected
#  replayed-request       ticket-1001 again: duplicate, nothing runs again
# The layers of the runs' last attempts (the duplicate runs none of the validation layers):
LAYERS = {
    #             reached passed
    "syntax":     (11, 11),
    "schema":     (11, 11),
    "business":   (11, 10),
    "facts":      (10, 9),
    "inspection": (9, 8),
    "permission": (8, 7),
    "execution":  (7, 6),
}
STATUSES = {"committed": 6, "rejected": 3, "handed_off": 2, "duplicate": 1, "not_committed": 0}


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["eval", "--tool", str(SPEC), "--data", str(DATA), *extra])
    return code, capsys.readouterr().out


def test_the_printed_table_matches_the_hand_count(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys)
    assert code == 0, out
    for layer, (reached, passed) in LAYERS.items():
        m = re.search(rf"^{layer}\s+(\d+)\s+(\d+)\s+(\S+)$", out, re.MULTILINE)
        assert m is not None, out
        assert (int(m.group(1)), int(m.group(2))) == (reached, passed), (layer, out)
        assert m.group(3) == f"{passed / reached:.3f}"
    assert "statuses:       committed 6, rejected 3, handed_off 2, duplicate 1, " \
           "not_committed 0" in out
    # 11 of 12 exact (wrong-amount wrote 50 for fifteen euros); amount 10 of the 11 cases that
    # expect one (ask-first does not), action and order_id 12/12
    assert "exact match 11/12 = 0.917" in out
    assert re.search(r"^\s+amount\s+10\s+11\s+0\.909$", out, re.MULTILINE), out
    assert re.search(r"^\s+order_id\s+12\s+12\s+1\.000$", out, re.MULTILINE), out
    assert "status as expected: 12/12 = 1.000" in out
    assert "retries 2" in out


def test_json_output_carries_the_same_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "--json")
    assert code == 0
    report = json.loads(out)
    layers = report["metrics"]["layers"]
    assert {k: (v["reached"], v["passed"]) for k, v in layers.items()} == LAYERS
    assert report["metrics"]["statuses"] == STATUSES
    assert report["metrics"]["failures"] == {
        "business": {"amount_exceeds_order": 1},
        "facts": {"no_such_order": 1},
        "inspection": {"instruction_in_text": 1},
        "permission": {"forbidden": 1},
        "execution": {"raised": 1},
    }
    assert report["quality"]["exact_match"] == {"count": 11, "of": 12, "rate": 11 / 12}
    by_id = {r["id"]: r for r in report["results"]}
    assert by_id["retry-fixes-amount"]["attempts"] == 2
    assert by_id["wrong-amount"]["fields"] == {"action": True, "order_id": True, "amount": False}
    assert by_id["partial-refund"]["args"]["currency"] == "EUR"  # the server-side default
    assert report["errors"] == 0


def test_compare_unconstrained_adds_one_latency_pair_per_case(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _run(capsys, "--compare-unconstrained", "--json")
    assert code == 0
    report = json.loads(out)
    lat = report["metrics"]["latency"]
    assert lat["pairs"] == 12
    assert lat["added_ttft_s"]["count"] == 12
    # eleven runs generated (the duplicate did not): their TTFTs were recorded by the runner
    assert lat["ttft_s"]["count"] == 11
    # the comparison generates, it never executes: the statuses are unchanged
    assert report["metrics"]["statuses"] == STATUSES
