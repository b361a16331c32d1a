"""Server-side execution of parsed calls through formcast.actions: the same layers and ledger
as the runner's own runs (``ActionRunner.commit_arguments``), exactly once per call id; and a
whole turn with a scripted model: generate under the tool constraint, parse, execute."""

from __future__ import annotations

import numpy as np
import pytest

from formcast import GrammarCompiler, generate
from formcast.actions import ActionRunner, Failure, MemoryLedger, Tool
from formcast.errors import ConfigurationError
from formcast.model import CallableModel
from formcast.tools import (
    HERMES,
    ToolCall,
    execute_tool_calls,
    function_tools,
    parse_tool_calls,
    tool_call_structural_tag,
)
from formcast.vocab.vocabulary import Vocabulary

TRANSFER = {"type": "object", "properties": {"to": {"type": "string"},
            "amount": {"type": "integer", "minimum": 1}, "currency": {"const": "EUR"}},
            "required": ["to", "amount", "currency"], "additionalProperties": False}
EOS = 256


def _vocab() -> Vocabulary:
    return Vocabulary([bytes([b]) for b in range(256)] + [b""], stop_token_ids=[EOS])


class Scripted(CallableModel):
    """Writes ``script`` one byte per token (the best allowed byte when the mask refuses it),
    then EOS."""

    def __init__(self, script: str) -> None:
        self.script = script.encode()
        self.prompt_len = 0
        super().__init__(self._logits, _vocab(), tokenize=self._tok, name="scripted")

    def _tok(self, text: str) -> list[int]:
        ids = list(text.encode())
        self.prompt_len = len(ids)
        return ids

    def _logits(self, seq: list[int]) -> np.ndarray:
        done = len(seq) - self.prompt_len
        out = np.zeros(EOS + 1)
        out[self.script[done] if done < len(self.script) else EOS] = 10.0
        return out


def _tool(executed: list[dict[str, object]]) -> Tool:
    def no_self(args: dict[str, object]) -> Failure | None:
        if args["to"] == "me":
            return Failure("business", "self_transfer", "cannot send to yourself", "/to")
        return None

    def run(args: dict[str, object], key: str) -> dict[str, object]:
        executed.append(args)
        return {"ok": True, "key": key}

    return Tool("transfer", TRANSFER, rules=[no_self], execute=run, defaults={"currency": "EUR"},
                description="send money")


def test_parsed_calls_commit_once_through_the_ledger() -> None:
    executed: list[dict[str, object]] = []
    tool = _tool(executed)
    ledger = MemoryLedger()
    runner = ActionRunner(Scripted(""), tool, ledger=ledger)
    calls = [ToolCall("transfer", {"to": "ana", "amount": 5}, id="call_1"),
             ToolCall("transfer", {"to": "me", "amount": 5}, id="call_2")]
    first = execute_tool_calls(calls, runner, principal="bob")
    assert [o.status for o in first] == ["committed", "rejected"]
    assert first[0].args == {"to": "ana", "amount": 5, "currency": "EUR"}  # server field filled
    assert first[0].result == {"ok": True, "key": "tool_call:call_1"}
    assert first[1].failures[0].code == "self_transfer"
    again = execute_tool_calls(calls[:1], runner, principal="bob")  # a retried turn
    assert again[0].status == "duplicate"
    assert again[0].result == first[0].result
    assert len(executed) == 1
    assert ledger.get("tool_call:call_1") is not None


def test_invalid_arguments_never_execute_and_unknown_tools_are_refused() -> None:
    executed: list[dict[str, object]] = []
    runner = ActionRunner(Scripted(""), _tool(executed))
    (out,) = execute_tool_calls([ToolCall("transfer", {"to": "ana", "amount": 0})], runner)
    assert out.status == "rejected"
    assert out.layers[-1].layer == "schema"
    assert executed == []
    with pytest.raises(ConfigurationError, match="unknown tool"):
        execute_tool_calls([ToolCall("refund", {})], runner)


def test_a_whole_turn_generate_parse_execute() -> None:
    executed: list[dict[str, object]] = []
    tool = _tool(executed)
    fns = function_tools([tool])
    assert "currency" not in fns[0].parameters["properties"]  # the server fills it
    # the model tries to write a second call: parallel_tool_calls=False ends the turn after one
    script = HERMES.render([("transfer", {"to": "ana", "amount": 7})])
    model = Scripted(script + "\n" + script)
    compiler = GrammarCompiler(model.vocab, cache_dir=False)
    tag = tool_call_structural_tag(fns, "required", parallel_tool_calls=False)
    result = generate(model, "pay ana 7", compiled=compiler.compile_structural_tag(tag),
                      max_tokens=200, chat=False)
    assert result.finish_reason == "completed", result.text
    content, calls = parse_tool_calls(result.text, fns)
    assert content == ""
    assert [c.arguments for c in calls] == [{"to": "ana", "amount": 7}]
    runner = ActionRunner(model, tool)
    (out,) = execute_tool_calls(calls, runner, text=result.text)
    assert out.committed
    assert executed == [{"to": "ana", "amount": 7, "currency": "EUR"}]
