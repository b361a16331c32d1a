"""formcast.actions.evaluate without a runner: case files and spec files are checked line by
line, scoring is JSON equality projected on the expected fields, the report formats its counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from formcast.actions.evaluate import (
    Case,
    CaseResult,
    EvalReport,
    format_report,
    load_cases,
    load_spec,
    score,
)
from formcast.actions.metrics import Metrics
from formcast.actions.types import Failure, LayerResult, Outcome
from formcast.cli.main import main
from formcast.errors import ConfigurationError


def _write(tmp_path: Path, text: str, name: str = "cases.jsonl") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_cases_are_read_with_their_optional_keys(tmp_path: Path) -> None:
    p = _write(tmp_path, '{"prompt": "a", "expected": {"x": 1}}\n\n'
                         '{"id": "b", "prompt": "b", "principal": null, "status": "rejected"}\n')
    a, b = load_cases(p)
    assert (a.id, a.prompt, a.expected, a.has_principal) == ("line1", "a", {"x": 1}, False)
    assert (b.id, b.principal, b.has_principal, b.status) == ("b", None, True, "rejected")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "cases.jsonl:1: not JSON"),
        ("[1]", "JSON object"),
        ('{"expected": {}}', "prompt"),
        ('{"prompt": "p", "expect": {}}', "unknown key"),
        ('{"prompt": "p", "expected": [1]}', "expected"),
        ('{"prompt": "p", "status": "ok"}', "status"),
        ('{"prompt": "p", "idempotency_key": 3}', "idempotency_key"),
    ],
)
def test_bad_case_lines_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_cases(_write(tmp_path, line + "\n"))


def test_an_empty_or_missing_case_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no cases"):
        load_cases(_write(tmp_path, "\n\n"))
    with pytest.raises(ConfigurationError, match="no such file"):
        load_cases(tmp_path / "nope.jsonl")


def test_a_spec_without_tools_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("formcast.actions.tool")
    with pytest.raises(ConfigurationError, match="TOOLS"):
        load_spec(_write(tmp_path, "X = 1\n", "spec.py"))
    with pytest.raises(ConfigurationError, match=r"TOOLS\[0\]"):
        load_spec(_write(tmp_path, "TOOLS = ['refund']\n", "spec.py"))
    with pytest.raises(ConfigurationError, match="ZeroDivisionError"):
        load_spec(_write(tmp_path, "1 / 0\n", "spec.py"))


def test_cli_reports_a_bad_spec_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("formcast.actions.tool")
    spec = _write(tmp_path, "TOOLS = []\n", "spec.py")
    data = _write(tmp_path, '{"prompt": "p"}\n')
    assert main(["eval", "--tool", str(spec), "--data", str(data)]) == 2
    assert "TOOLS" in capsys.readouterr().err


def test_scoring_is_json_equality_on_the_expected_fields() -> None:
    assert score(None, {"a": 1}) == (None, {})
    assert score({"a": 1, "b": "x"}, {"a": 1.0, "b": "x", "extra": 5}) == (
        True, {"a": True, "b": True})
    assert score({"a": True}, {"a": 1}) == (False, {"a": False})  # true is not 1
    assert score({"a": 1}, None) == (False, {"a": False})
    assert score({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]})[0] is True
    assert score({"a": 1}, {}) == (False, {"a": False})


def test_quality_counts_and_the_formatted_table() -> None:
    m = Metrics()
    ok = tuple(LayerResult(x, True) for x in ("syntax", "schema"))
    refused = (*ok, LayerResult("business", False, (Failure("business", "too_much", "no"),)))
    o1 = Outcome("committed", "completed", ok, 1, "k1", args={"amount": 20, "order": "A"})
    o2 = Outcome("rejected", "completed", refused, 1, "k2", args={"amount": 99, "order": "A"})
    for o in (o1, o2):
        m.record(o)
    c1 = Case("c1", "p", {"amount": 20, "order": "A"}, status="committed")
    c2 = Case("c2", "p", {"amount": 20, "order": "A"}, status="committed")
    c3 = Case("c3", "p")
    results = (
        CaseResult(c1, o1, *score(c1.expected, o1.args)),
        CaseResult(c2, o2, *score(c2.expected, o2.args)),
        CaseResult(c3, None, None, {}, error="RuntimeError: boom"),
    )
    report = EvalReport(results, m)
    q = report.quality()
    assert q["exact_match"] == {"count": 1, "of": 2, "rate": 0.5}
    assert q["fields"]["amount"] == {"count": 1, "of": 2, "rate": 0.5}
    assert q["fields"]["order"] == {"count": 2, "of": 2, "rate": 1.0}
    assert q["status_match"] == {"count": 1, "of": 2, "rate": 0.5}
    assert report.errors == 1
    text = format_report(report)
    assert "syntax             2       2   1.000" in text
    assert "business           1       0   0.000" in text
    assert "facts              0       0       -" in text
    assert "exact match 1/2 = 0.500" in text
    assert "business/too_much 1" in text
    assert "RuntimeError: boom" in text
