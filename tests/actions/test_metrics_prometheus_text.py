"""Metrics.prometheus_text: parses with prometheus_client's own parser and carries the counts;
a missing prometheus_client names the pip command."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from formcast.actions.metrics import Metrics
from formcast.actions.types import LAYERS, Failure, LayerResult, Outcome
from formcast.errors import MissingDependencyError

parser = pytest.importorskip("prometheus_client.parser")


def _metrics() -> Metrics:
    m = Metrics()
    all_ok = tuple(LayerResult(layer, True) for layer in LAYERS)
    refused = (
        LayerResult("syntax", True), LayerResult("schema", True),
        LayerResult("business", False, (Failure("business", "amount_exceeds_order", "too much",
                                                "/amount"),)),
    )
    m.record(Outcome("committed", "completed", all_ok, 1, "a"), ttft_s=0.25, tpot_s=0.02)
    m.record(Outcome("rejected", "completed", refused, 2, "b", history=(refused, refused)),
             ttft_s=0.5)
    m.record(Outcome("not_committed", "timeout", (), 1, "c"))
    m.record_pair(ttft_s=0.4, tpot_s=0.03, unconstrained_ttft_s=0.1, unconstrained_tpot_s=0.02)
    return m


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_text_parses_and_carries_the_counts() -> None:
    text = _metrics().prometheus_text()
    s = _samples(text)
    assert s[("formcast_action_runs_total", (("status", "committed"),))] == 1
    assert s[("formcast_action_runs_total", (("status", "rejected"),))] == 1
    assert s[("formcast_action_runs_total", (("status", "duplicate"),))] == 0
    assert s[("formcast_action_finish_reasons_total", (("reason", "timeout"),))] == 1
    assert s[("formcast_action_layer_reached_total", (("layer", "business"),))] == 2
    assert s[("formcast_action_layer_passed_total", (("layer", "business"),))] == 1
    assert s[("formcast_action_attempt_layer_reached_total", (("layer", "business"),))] == 3
    assert s[("formcast_action_failures_total",
              (("code", "amount_exceeds_order"), ("layer", "business")))] == 1
    assert s[("formcast_action_attempts_total", ())] == 4
    assert s[("formcast_action_retries_total", ())] == 1
    assert s[("formcast_action_ttft_seconds_count", ())] == 2
    assert s[("formcast_action_ttft_seconds_sum", ())] == pytest.approx(0.75)
    assert s[("formcast_action_added_ttft_seconds_sum", ())] == pytest.approx(0.3)
    assert "success" not in text


def test_a_prefix_renames_and_a_bad_prefix_is_refused() -> None:
    m = _metrics()
    assert "refunds_runs_total" in m.prometheus_text(prefix="refunds")
    with pytest.raises(Exception, match="prefix"):
        m.prometheus_text(prefix="9 bad-name")


def test_without_prometheus_client_the_error_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    real_import = builtins.__import__

    def no_prometheus(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("prometheus_client"):
            raise ImportError("No module named 'prometheus_client'")
        return real_import(name, *args, **kwargs)

    for mod in [m for m in sys.modules if m.startswith("prometheus_client")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_prometheus)
    monkeypatch.setattr("importlib.import_module", lambda name: no_prometheus(name))
    with pytest.raises(MissingDependencyError, match="pip install"):
        _metrics().prometheus_text()
