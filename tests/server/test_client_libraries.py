"""The client libraries people already use, unchanged, against a real server on 127.0.0.1
(#30): instructor (its default TOOLS mode), langchain-openai (``with_structured_output``,
``bind_tools``), pydantic-ai (``OpenAIChatModel`` and ``OpenAIResponsesModel``), openai-agents
(its default model: the Responses API), litellm.  Offline: the clients only talk to loopback
(``OPENAI_API_KEY=dummy``, telemetry and tracing off, litellm's local cost map).

The toy model (:mod:`server_harness`) follows a scripted reply while the constraint allows it:
a call of the tool the request declares, or a JSON document -- so each library's own parsing
and validation are the oracle (a ``Person`` comes back, a tool call names its tool).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
from typing import Any

import pytest
from pydantic import BaseModel
from server_harness import ToyModel, running_server

from _assets import in_ci
from formcast.server import ServerConfig

os.environ.setdefault("OPENAI_API_KEY", "dummy")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("LANGSMITH_TRACING", "false")

PERSON_JSON = '{"name":"Ada","age":36}'
PERSON_ARGS = '{"name": "Ada", "age": 36}'


def call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def reply(prompt: str) -> str:
    if "21 degrees" in prompt:
        return "It is 21 degrees in Paris."
    if "weather?" in prompt:
        return call("get_weather", '{"city": "Paris"}')
    listed = re.search(r'<tools>\n\{"type": "function", "function": \{"name": "(\w+)"', prompt)
    if listed:  # the first tool the request declares (Person, PartialPerson, final_result)
        return call(listed.group(1), PERSON_ARGS)
    return PERSON_JSON if "person" in prompt.lower() else "Hello there."


class Person(BaseModel):
    name: str
    age: int


ADA = Person(name="Ada", age=36)
ASK = "Extract the person: Ada, 36."


def need(module: str, *, in_test_extra: bool = True) -> None:
    """Skip (fail under CI: scripts/test.sh installs every one) when ``module`` is missing."""
    if importlib.util.find_spec(module) is None:
        why = f"{module} is not installed (the test extra installs it)"
        if not in_test_extra:  # instructor: its jiter pin conflicts with openai's (pyproject)
            why = (f"{module} is not installed: pip install --no-deps instructor==1.17.0 "
                   "(scripts/test.sh does)")
        if in_ci():
            pytest.fail(f"CI is set, so this may not skip: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def server() -> Any:
    with running_server(ToyModel(reply), ServerConfig(model_name="toy")) as srv:
        yield srv


def test_instructor_default_tools_mode(server: Any) -> None:
    need("instructor", in_test_extra=False)
    import instructor
    import openai

    client = instructor.from_openai(openai.OpenAI(base_url=server.base_url, api_key="x",
                                                  max_retries=0))
    assert client.mode == instructor.Mode.TOOLS
    person = client.chat.completions.create(model="toy", response_model=Person,
                                            messages=[{"role": "user", "content": ASK}],
                                            temperature=0, max_retries=0)
    assert person.model_dump() == ADA.model_dump()


def test_langchain_structured_output_and_bind_tools(server: Any) -> None:
    need("langchain_openai")
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="toy", base_url=server.base_url, api_key="x", temperature=0,
                     max_retries=0)
    assert llm.with_structured_output(Person).invoke(ASK) == ADA

    def get_weather(city: str) -> str:
        """The weather of a city."""
        return "21 degrees"

    msg = llm.bind_tools([get_weather]).invoke("weather?")
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [("get_weather",
                                                                 {"city": "Paris"})]
    assert "<tool_call>" not in str(msg.content)


@pytest.mark.parametrize("kind", ["OpenAIChatModel", "OpenAIResponsesModel"])
def test_pydantic_ai_both_model_classes(server: Any, kind: str) -> None:
    need("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models import openai as models
    from pydantic_ai.providers.openai import OpenAIProvider

    model = getattr(models, kind)("toy", provider=OpenAIProvider(base_url=server.base_url,
                                                                  api_key="x"))
    agent = Agent(model, output_type=Person)
    assert agent.run_sync(ASK, model_settings={"temperature": 0}).output == ADA


def test_openai_agents_default_model(server: Any) -> None:
    need("agents")
    import openai
    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=server.base_url, api_key="x",
                                                 max_retries=0), use_for_tracing=False)
    agent = Agent(name="extractor", instructions="Extract the person.", model="toy",
                  output_type=Person)
    result = asyncio.run(Runner.run(agent, ASK))
    assert result.final_output == ADA


def test_litellm_completion_and_tools(server: Any) -> None:
    need("litellm")
    import litellm

    litellm.telemetry = False
    r = litellm.completion(model="openai/toy", api_base=server.base_url, api_key="x",
                           messages=[{"role": "user", "content": ASK}], temperature=0,
                           response_format=Person)
    assert Person.model_validate_json(r.choices[0].message.content) == ADA
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "required": ["city"],
                                              "properties": {"city": {"type": "string"}}}}}]
    r = litellm.completion(model="openai/toy", api_base=server.base_url, api_key="x",
                           messages=[{"role": "user", "content": "weather?"}], tools=tools,
                           temperature=0)
    [c] = r.choices[0].message.tool_calls
    assert (c.function.name, c.function.arguments) == ("get_weather", '{"city": "Paris"}')


def test_instructor_create_partial_streams_before_the_end(server: Any) -> None:
    """#30 item 4: tool-call arguments arrive as generated, so instructor's partial objects
    grow over several steps (they all came at once before)."""
    need("instructor", in_test_extra=False)
    import instructor
    import openai

    client = instructor.from_openai(openai.OpenAI(base_url=server.base_url, api_key="x",
                                                  max_retries=0))
    partials = [p.model_dump() for p in client.chat.completions.create_partial(
        model="toy", response_model=Person, messages=[{"role": "user", "content": ASK}],
        temperature=0, max_retries=0)]
    distinct = [p for k, p in enumerate(partials) if k == 0 or p != partials[k - 1]]
    assert len(distinct) >= 3, distinct
    assert distinct[-1] == ADA.model_dump()


def test_pydantic_ai_run_stream_streams_before_the_end(server: Any) -> None:
    need("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("toy", provider=OpenAIProvider(base_url=server.base_url,
                                                           api_key="x"))
    agent = Agent(model, output_type=Person)

    async def main() -> list[Any]:
        async with agent.run_stream(ASK, model_settings={"temperature": 0}) as result:
            return [o async for o in result.stream_output(debounce_by=None)]

    outputs = asyncio.run(main())
    assert len(outputs) >= 3, outputs  # partial outputs as the arguments grow
    assert outputs[-1] == ADA


def test_openai_agents_runs_a_tool_and_streams(server: Any) -> None:
    """A whole agent turn over the Responses API: the model calls a function tool, the runner
    runs it and sends its result back as a function_call_output item, the model answers --
    streamed (Runner.run_streamed) with the arguments arriving as generated."""
    need("agents")
    import openai
    from agents import (
        Agent,
        Runner,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=server.base_url, api_key="x",
                                                 max_retries=0), use_for_tracing=False)
    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        seen.append(city)
        return "21 degrees"

    agent = Agent(name="weather", instructions="Answer.", model="toy", tools=[get_weather])

    async def main() -> tuple[Any, list[str]]:
        result = Runner.run_streamed(agent, "weather?")
        kinds = [getattr(e, "data", None) and e.data.type async for e in result.stream_events()
                 if e.type == "raw_response_event"]
        return result, [k for k in kinds if k]

    result, kinds = asyncio.run(main())
    assert seen == ["Paris"]
    assert result.final_output == "It is 21 degrees in Paris."
    assert kinds.count("response.function_call_arguments.delta") >= 3
