"""Bounded retry with feedback: a retried attempt gets the failures back in its prompt (text:
appended; chat: an extra user turn), marked untrusted; the key is the same on every attempt;
the feedback is replaceable; the policy refuses layers that must not be retried."""

from __future__ import annotations

import pytest
from runner_helpers import GOOD, TOO_MUCH, UNKNOWN_ORDER, Executions, ScriptedModel, refund_tool

from formcast import ConfigurationError
from formcast.actions import (
    UNTRUSTED_NOTE,
    ActionRunner,
    Outcome,
    RetryPolicy,
    default_feedback,
    feedback_message,
)
from formcast.model.chat import CHATML


def test_retry_gives_the_failures_back_and_commits() -> None:
    ex = Executions()
    model = ScriptedModel([TOO_MUCH, GOOD])
    runner = ActionRunner(model, refund_tool(ex), max_tokens=80, chat=False,
                          retry=RetryPolicy(max_attempts=3))
    out = runner.run("refund order A1")
    assert out.status == "committed"
    assert out.attempts == 2
    assert [lr.layer for lr in out.history[0]][-1] == "business"
    assert not out.history[0][-1].ok
    assert out.history[1] == out.layers
    assert len(ex.calls) == 1
    first, second = model.prompts
    assert first == "refund order A1"
    assert second.startswith("refund order A1\n\n")
    assert "- business | amount_exceeds_order | /amount | the amount 120 exceeds" in second
    assert UNTRUSTED_NOTE in second
    assert '<untrusted source="validation feedback">' in second
    assert '<untrusted source="previous answer">\n' + TOO_MUCH + "\n</untrusted>" in second


def test_the_key_is_made_once_and_reused_by_every_retry() -> None:
    ex = Executions()
    runner = ActionRunner(ScriptedModel([UNKNOWN_ORDER, TOO_MUCH, GOOD]), refund_tool(ex),
                          max_tokens=80, retry=RetryPolicy(max_attempts=3))
    out = runner.run("refund")
    assert out.attempts == 3
    assert out.status == "committed"
    assert ex.calls[0][1] == out.idempotency_key
    assert len(out.idempotency_key) == 32
    other = runner.run("refund")
    assert other.idempotency_key != out.idempotency_key


def test_chat_prompts_get_an_extra_user_turn() -> None:
    model = ScriptedModel([TOO_MUCH, GOOD], chat_template=CHATML)
    runner = ActionRunner(model, refund_tool(), max_tokens=80, retry=RetryPolicy(max_attempts=2))
    out = runner.run("refund order A1")
    assert out.status == "committed"
    second = model.prompts[1]
    assert second.count("<|im_start|>user") == 2
    assert "<|im_start|>assistant\n" + TOO_MUCH in second
    assert "amount_exceeds_order" in second


def test_default_feedback_on_messages() -> None:
    so_far = Outcome("rejected", "completed", (), 1, "k", text="{}")
    msgs = default_feedback([{"role": "user", "content": "hi"}], so_far)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == "{}"
    assert "Previous answer" not in msgs[2]["content"]
    assert feedback_message(so_far).endswith("Answer again with a corrected JSON value.")
    with pytest.raises(ConfigurationError, match="token-id"):
        default_feedback([1, 2, 3], so_far)


def test_feedback_is_replaceable() -> None:
    calls: list[tuple[object, Outcome]] = []

    def mine(prompt: object, so_far: Outcome) -> str:
        calls.append((prompt, so_far))
        return f"{prompt} / fix {so_far.failures[0].code}"

    model = ScriptedModel([TOO_MUCH, GOOD])
    runner = ActionRunner(model, refund_tool(), max_tokens=80, chat=False,
                          retry=RetryPolicy(max_attempts=2, feedback=mine))
    assert runner.run("refund").status == "committed"
    assert model.prompts[1] == "refund / fix amount_exceeds_order"
    assert calls[0][1].attempts == 1
    assert calls[0][1].text == TOO_MUCH


def test_syntax_failures_are_retried_until_attempts_run_out() -> None:
    ex = Executions()
    model = ScriptedModel([GOOD])
    runner = ActionRunner(model, refund_tool(ex), max_tokens=80,
                          retry=RetryPolicy(max_attempts=2, retry_on=("syntax",)))
    out = runner.run("refund", stop='"reason"')  # every attempt is cut by the stop string
    assert out.attempts == 2
    assert len(model.prompts) == 2
    assert out.history[0][0].failures[0].code == "stop"
    assert out.status == "handed_off"
    assert ex.calls == []


@pytest.mark.parametrize("bad", [
    {"max_attempts": 0}, {"max_attempts": True}, {"retry_on": ("permission",)},
    {"retry_on": ("execution",)}, {"retry_on": ("nope",)}, {"retry_on": "schema"},
    {"feedback": "text"},
])
def test_policy_validation(bad: dict) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**bad)


def test_interruptions_are_never_retried() -> None:
    model = ScriptedModel([GOOD], delay=lambda done: 0.3 if len(done) > 3 else 0.0)
    runner = ActionRunner(model, refund_tool(), max_tokens=80, timeout_s=0.05,
                          retry=RetryPolicy(max_attempts=3))
    out = runner.run("refund")
    assert out.finish_reason == "timeout"
    assert out.attempts == 1
    assert len(model.prompts) == 1


def test_token_id_prompts_need_a_feedback_of_their_own_before_anything_runs() -> None:
    model = ScriptedModel([TOO_MUCH, GOOD])
    runner = ActionRunner(model, refund_tool(), max_tokens=80, retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ConfigurationError, match="token-id prompt"):
        runner.run([1, 2, 3])
    assert model.prompts == []
    one = ActionRunner(model, refund_tool(), max_tokens=80)  # no retry: token ids are fine
    assert one.run([114, 101]).attempts == 1


def test_chat_message_prompts_get_the_extra_turns() -> None:
    model = ScriptedModel([TOO_MUCH, GOOD], chat_template=CHATML)
    runner = ActionRunner(model, refund_tool(), max_tokens=80, retry=RetryPolicy(max_attempts=2))
    out = runner.run([{"role": "user", "content": "refund order A1"}])
    assert out.status == "committed"
    assert model.prompts[1].count("<|im_start|>user") == 2
