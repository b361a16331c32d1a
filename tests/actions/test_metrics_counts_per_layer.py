"""actions.Metrics on hand-built Outcomes: every layer counted apart, rates over the runs that
reached the layer, statuses and finish reasons, latency pairs, Prometheus text that parses."""

from __future__ import annotations

import math
import threading

import pytest

from formcast.actions.metrics import Metrics
from formcast.actions.types import LAYERS, Failure, Layer, LayerResult, Outcome
from formcast.errors import ConfigurationError


def ok(*layers: Layer) -> tuple[LayerResult, ...]:
    return tuple(LayerResult(layer, True) for layer in layers)


def bad(layer: Layer, code: str) -> LayerResult:
    return LayerResult(layer, False, (Failure(layer, code, f"{layer} said no", "/amount"),))


ALL_OK = ok(*LAYERS)


def outcome(status: str, finish: str, layers: tuple[LayerResult, ...], attempts: int = 1,
            history: tuple[tuple[LayerResult, ...], ...] = (), in_doubt: bool = False) -> Outcome:
    return Outcome(status=status, finish_reason=finish, layers=layers,  # type: ignore[arg-type]
                   attempts=attempts, idempotency_key="k", history=history, in_doubt=in_doubt)


def hand_built() -> list[Outcome]:
    """Eight runs whose counts are worked out by hand in the tests below."""
    business_fail = (*ok("syntax", "schema"), bad("business", "amount_exceeds_order"))
    return [
        outcome("committed", "completed", ALL_OK),                                  # 1
        outcome("committed", "completed", ALL_OK, attempts=2,                       # 2
                history=(business_fail, ALL_OK)),
        outcome("rejected", "completed", business_fail),                            # 3
        outcome("handed_off", "completed",                                          # 4
                (*ok("syntax", "schema", "business", "facts", "inspection"),
                 bad("permission", "forbidden"))),
        outcome("rejected", "completed", (*ok("syntax", "schema"),                  # 5
                                          *ok("business"), bad("facts", "no_such_order"))),
        outcome("handed_off", "dead_end", (bad("syntax", "dead_end"),), attempts=3,  # 6
                history=((bad("syntax", "dead_end"),),) * 3),
        outcome("not_committed", "cancelled", ()),                                  # 7
        outcome("duplicate", "completed", (), attempts=0, in_doubt=False),          # 8
        outcome("rejected", "completed",                                            # 9
                (*ok("syntax", "schema", "business", "facts", "inspection", "permission"),
                 bad("execution", "raised"))),
    ]


def filled() -> Metrics:
    m = Metrics()
    for o in hand_built():
        m.record(o)
    return m


def test_layers_are_counted_over_the_runs_that_reached_them() -> None:
    d = filled().as_dict()
    layers = d["layers"]
    # syntax: runs 1 2 3 4 5 6 9 reached it; 6 failed
    assert layers["syntax"] == {"reached": 7, "passed": 6, "failed": 1, "rate": 6 / 7}
    assert layers["schema"] == {"reached": 6, "passed": 6, "failed": 0, "rate": 1.0}
    # business: 1 2 3 4 5 9 reached it; 3 failed (run 2's first attempt is not its last)
    assert layers["business"]["reached"] == 6
    assert layers["business"]["passed"] == 5
    assert layers["facts"] == {"reached": 5, "passed": 4, "failed": 1, "rate": 0.8}
    assert layers["inspection"] == {"reached": 4, "passed": 4, "failed": 0, "rate": 1.0}
    assert layers["permission"] == {"reached": 4, "passed": 3, "failed": 1, "rate": 0.75}
    assert layers["execution"] == {"reached": 3, "passed": 2, "failed": 1, "rate": 2 / 3}


def test_every_attempt_is_counted_separately() -> None:
    att = filled().as_dict()["attempt_layers"]
    # run 2 adds a failing business attempt; run 6 has three dead-end attempts
    assert att["syntax"]["reached"] == 7 + 1 + 2
    assert att["syntax"]["passed"] == 6 + 1
    assert att["business"] == {"reached": 7, "passed": 5, "failed": 2, "rate": 5 / 7}


def test_statuses_finish_reasons_and_named_rates() -> None:
    d = filled().as_dict()
    assert d["runs"] == 9
    assert d["statuses"] == {"committed": 2, "rejected": 3, "handed_off": 2, "duplicate": 1,
                             "not_committed": 1}
    assert d["finish_reasons"]["completed"] == 7
    assert d["finish_reasons"]["dead_end"] == 1
    assert d["finish_reasons"]["cancelled"] == 1
    assert d["finish_reasons"]["timeout"] == 0
    assert d["attempts"] == 1 + 2 + 1 + 1 + 1 + 3 + 1 + 0 + 1
    assert d["retries"] == 1 + 2
    r = d["rates"]
    assert r["dead_end"] == {"count": 1, "of": 9, "rate": 1 / 9}
    assert r["permission_interceptions"] == {"count": 1, "of": 4, "rate": 0.25}
    assert r["tool_success"] == {"count": 2, "of": 3, "rate": 2 / 3}
    assert r["duplicates_prevented"] == {"count": 1, "of": 9, "rate": 1 / 9}
    assert r["not_committed"]["count"] == 1
    assert r["handed_off"]["count"] == 2
    assert r["rejected"]["count"] == 3
    assert r["fact_pass"] == {"count": 4, "of": 5, "rate": 0.8}
    assert "success_rate" not in r  # never one folded number


def test_failures_are_kept_by_layer_and_code() -> None:
    f = filled().as_dict()["failures"]
    assert f == {
        "syntax": {"dead_end": 1},
        "business": {"amount_exceeds_order": 1},
        "facts": {"no_such_order": 1},
        "permission": {"forbidden": 1},
        "execution": {"raised": 1},
    }


def test_an_unreached_layer_has_no_rate() -> None:
    m = Metrics()
    m.record(outcome("not_committed", "timeout", ()))
    d = m.as_dict()
    assert d["layers"]["schema"]["rate"] is None
    assert d["rates"]["tool_success"] == {"count": 0, "of": 0, "rate": None}
    assert m.layer("schema").rate is None


def test_timings_and_unconstrained_pairs() -> None:
    m = Metrics()
    m.record(outcome("committed", "completed", ALL_OK), ttft_s=0.2, tpot_s=0.01)
    m.record(outcome("committed", "completed", ALL_OK), ttft_s=0.4, tpot_s=math.nan)
    m.record_pair(ttft_s=0.5, tpot_s=0.03, unconstrained_ttft_s=0.2, unconstrained_tpot_s=0.02)
    m.record_pair(ttft_s=0.3, tpot_s=None, unconstrained_ttft_s=0.2, unconstrained_tpot_s=0.02)
    lat = m.as_dict()["latency"]
    assert lat["ttft_s"]["count"] == 2
    assert lat["ttft_s"]["mean"] == pytest.approx(0.3)
    assert lat["tpot_s"]["count"] == 1  # nan: fewer than two tokens, not counted
    assert lat["pairs"] == 2
    assert lat["added_ttft_s"]["mean"] == pytest.approx(0.2)
    assert lat["added_tpot_s"]["count"] == 1
    assert lat["added_tpot_s"]["mean"] == pytest.approx(0.01)


def test_bad_input_is_a_configuration_error() -> None:
    m = Metrics()
    with pytest.raises(ConfigurationError, match="Outcome"):
        m.record({"status": "committed"})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="ttft_s"):
        m.record(outcome("committed", "completed", ALL_OK), ttft_s=-1.0)
    with pytest.raises(ConfigurationError, match="layer"):
        m.layer("parse")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="constraint"):
        m.compare_unconstrained(object(), "prompt", max_tokens=3)
    assert m.runs == 0


def test_record_is_thread_safe() -> None:
    m = Metrics()
    runs = hand_built()

    def work() -> None:
        for _ in range(200):
            for o in runs:
                m.record(o, ttft_s=0.1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = m.as_dict()
    assert d["runs"] == 4 * 200 * len(runs)
    assert d["layers"]["syntax"]["reached"] == 4 * 200 * 7
    assert d["latency"]["ttft_s"]["count"] == 4 * 200 * len(runs)


def test_reset_forgets() -> None:
    m = filled()
    m.reset()
    assert m.as_dict()["runs"] == 0
    assert m.as_dict()["layers"]["syntax"]["reached"] == 0


def test_compare_unconstrained_generates_both_ways_and_records_the_pair() -> None:
    import numpy as np

    from formcast.model.callable import CallableModel
    from formcast.vocab.vocabulary import Vocabulary

    vocab = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"],
                                   stop_token_ids=[256])
    target = b'{"n":12}'
    calls: list[int] = []

    def fn(seq: list[int]) -> np.ndarray:
        calls.append(len(seq))
        done = bytes(t for t in seq[1:] if t < 256)
        out = np.full(vocab.vocab_size, -5.0)
        out[target[len(done)] if len(done) < len(target) else 256] = 10.0
        return out

    model = CallableModel(fn, vocab)
    m = Metrics()
    got = m.compare_unconstrained(
        model, [ord("p")], schema={"type": "object", "properties": {"n": {"type": "integer"}},
                                   "required": ["n"], "additionalProperties": False},
        max_tokens=32, temperature=0.0,
    )
    assert calls  # the model ran
    assert got["added_ttft_s"] == pytest.approx(got["ttft_s"] - got["unconstrained_ttft_s"])
    assert got["tpot_s"] is not None
    assert got["unconstrained_tpot_s"] is not None
    lat = m.as_dict()["latency"]
    assert lat["pairs"] == 1
    assert lat["added_ttft_s"]["mean"] == pytest.approx(got["added_ttft_s"])
    assert lat["added_tpot_s"]["mean"] == pytest.approx(got["added_tpot_s"])
    assert m.runs == 0  # a latency pair is not a run
