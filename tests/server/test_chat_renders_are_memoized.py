"""A chat template keeps what it rendered (``JinjaChatTemplate``'s render memo): a conversation
rendered before is answered without jinja, with the very text a fresh render gives; templates
that read the clock or draw random values are rendered every time; errors are not kept.

The server renders the same system prompt and question again and again (each request of a
burst renders on the event loop before its first chunk): docs/benchmarks_server.md, session 23.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

pytest.importorskip("jinja2")

from formcast.errors import ChatTemplateError
from formcast.model import chat_jinja
from formcast.model.chat_jinja import JinjaChatTemplate

# shows every input's value *and* type, so that any conflation in the memo's key shows
_SHOW = (
    "{% for m in messages %}[{{ m.role }}|{{ m.content }}|{{ m.content is string }}|"
    "{{ m | tojson }}]{% endfor %}"
    "{% if tools is not none %}T{{ tools | tojson }}{% for t in tools %}{{ t is mapping }}"
    "{% endfor %}{% endif %}"
    "{% if documents is not none %}D{{ documents | tojson }}{{ documents is sequence }}"
    "{% endif %}"
    "{% if add_generation_prompt %}<gen>{% endif %}"
    "{{ x | tojson }}{{ x is number }}{{ x is string }}{{ x is boolean }}{{ x == 1 }}"
    "{% for v in vs %}{{ v | tojson }}{{ v is number }}{{ v is integer }}{% endfor %}"
    "{{ bos_token }}"
)

_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _inputs(rng: random.Random) -> tuple[list[Any], dict[str, Any]]:
    """Random render inputs whose values collide under sloppy keys: 1 / 1.0 / True / "1",
    lists / tuples, key orders, None vs missing, tools None vs []."""
    contents: list[Any] = ["1", "a", "", "1.0", "True", None,
                           [{"type": "text", "text": "1"}], ["a", "b"]]
    values: list[Any] = [1, 1.0, True, "1", 0, 0.0, False, "", None, [1], (1,), -0.0]
    msgs: list[Any] = []
    for _ in range(rng.randint(1, 3)):
        m: dict[str, Any] = {"role": rng.choice(["user", "assistant", "system"]),
                             "content": rng.choice(contents)}
        if rng.random() < 0.3:
            m["name"] = rng.choice(["n", "1", None])
        if rng.random() < 0.3:
            m = dict(reversed(list(m.items())))
        msgs.append(m)
    kw: dict[str, Any] = {"x": rng.choice(values), "vs": rng.choice([[1, 2], (1, 2), [1.0, 2],
                                                                     [True, 2], []])}
    if rng.random() < 0.5:
        kw["tools"] = rng.choice([None, [], [{"type": "function", "function": {"name": "f"}}]])
    if rng.random() < 0.3:
        kw["documents"] = rng.choice([[], [{"t": 1}], [{"t": 1.0}]])
    if rng.random() < 0.3:
        kw["add_generation_prompt"] = rng.choice([True, False])
    if rng.random() < 0.2:
        kw["system"] = rng.choice(["s", "1"])
    if rng.random() < 0.2:
        kw["bos_token"] = rng.choice(["<s>", "1"])
    return msgs, kw


def _fresh(source: str, msgs: list[Any], kw: dict[str, Any]) -> str:
    """The render of a template instance used once (nothing kept from before)."""
    return JinjaChatTemplate(source, bos_token="<s>").render(msgs, **kw)


def test_memoized_renders_equal_fresh_renders() -> None:
    """Differential: 300 random inputs, each rendered (again and again, in random order) by
    one long-lived template, equal the render of a fresh instance; the memo does answer."""
    rng = random.Random(23)
    kept = JinjaChatTemplate(_SHOW, bos_token="<s>")
    cases = [_inputs(rng) for _ in range(100)]
    order = cases * 3
    rng.shuffle(order)
    for msgs, kw in order:
        assert kept.render(msgs, **kw) == _fresh(_SHOW, msgs, kw), (msgs, kw)
    assert 0 < len(kept._renders) <= len(cases)


def test_a_repeated_render_does_not_call_jinja(monkeypatch: pytest.MonkeyPatch) -> None:
    template = JinjaChatTemplate(_CHATML)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "Hi (case 3)"}]
    first = template.render(msgs)
    calls = []
    real = JinjaChatTemplate._render_compiled

    def counted(self: JinjaChatTemplate, *args: Any) -> str:
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(JinjaChatTemplate, "_render_compiled", counted)
    assert template.render([dict(m) for m in msgs]) == first
    assert calls == []
    other = template.render([msgs[0], {"role": "user", "content": "Hi (case 4)"}])
    assert len(calls) == 1
    assert "case 4" in other
    template.render(msgs, add_generation_prompt=False)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "source",
    [
        "{{ strftime_now('%H:%M:%S.%f') }}{% for m in messages %}{{ m.content }}{% endfor %}",
        "{% set now = strftime_now %}{{ now('%f') }}",
        "{{ [1, 2, 3, 4, 5, 6, 7, 8, 9] | random }}",
        "{% filter random %}abcdefghijklmnop{% endfilter %}",
        "{{ lipsum(1) }}",
    ],
)
def test_templates_reading_the_clock_or_drawing_are_not_kept(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = JinjaChatTemplate(source)
    msgs = [{"role": "user", "content": "Hi"}]
    ticks = iter(range(1000))
    monkeypatch.setattr(chat_jinja, "_strftime_now", lambda fmt: f"t{next(ticks)}")
    texts = {template.render(msgs) for _ in range(40)}
    assert len(template._renders) == 0
    if "strftime_now" in source:
        assert len(texts) == 40  # every render saw the clock
    assert chat_jinja._compile(source)[1] is False


def test_a_pure_template_is_kept() -> None:
    assert chat_jinja._compile(_CHATML)[1] is True
    assert chat_jinja._compile("{{ messages | length }}{{ range(3) | list }}")[1] is True


def test_errors_are_not_kept() -> None:
    source = ("{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}"
              "{% endif %}{{ messages[0].content }}")
    template = JinjaChatTemplate(source)
    for _ in range(3):
        with pytest.raises(ChatTemplateError, match="user first"):
            template.render([{"role": "assistant", "content": "x"}])
    assert len(template._renders) == 0
    assert template.render([{"role": "user", "content": "x"}]) == "x"


def test_bounds_least_recently_used_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_jinja._RenderMemo, "MAX_ENTRIES", 4)
    template = JinjaChatTemplate(_CHATML)

    def msgs(i: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"q{i}"}]

    for i in range(6):
        template.render(msgs(i))
    assert len(template._renders) == 4
    template.render(msgs(2))  # now the most recent
    template.render(msgs(9))  # drops q3, the least recent
    kept = [k for _, k in template._renders._texts]
    assert not any("q3" in k for k in kept)
    assert any("q2" in k for k in kept)
    monkeypatch.setattr(chat_jinja._RenderMemo, "MAX_CHARS", 200)
    template.render([{"role": "user", "content": "x" * 500}])  # over the bound: not kept
    assert not any("xxxx" in t for t in template._renders._texts.values())


def test_pickled_without_its_memo() -> None:
    template = JinjaChatTemplate(_CHATML)
    text = template.render([{"role": "user", "content": "Hi"}])
    copy = pickle.loads(pickle.dumps(template))
    assert len(copy._renders) == 0
    assert copy == template
    assert copy.render([{"role": "user", "content": "Hi"}]) == text


def test_inputs_differing_in_one_thing_are_told_apart() -> None:
    """The same messages with one input changed at a time (tools None / [] / one tool,
    documents, the generation prompt, 1 / 1.0 / True / "1", list / tuple, key order, the
    system message, a special token overridden), all rendered by one template: each equals its
    fresh render."""
    kept = JinjaChatTemplate(_SHOW, bos_token="<s>")
    msgs = [{"role": "user", "content": "1"}]
    tool = {"type": "function", "function": {"name": "f"}}
    variants: list[tuple[list[Any], dict[str, Any]]] = [
        (msgs, {"x": 1, "vs": [1, 2]}),
        (msgs, {"x": 1, "vs": [1, 2], "tools": None}),
        (msgs, {"x": 1, "vs": [1, 2], "tools": []}),
        (msgs, {"x": 1, "vs": [1, 2], "tools": [tool]}),
        (msgs, {"x": 1, "vs": [1, 2], "documents": []}),
        (msgs, {"x": 1, "vs": [1, 2], "documents": [{"t": 1}]}),
        (msgs, {"x": 1, "vs": [1, 2], "add_generation_prompt": False}),
        (msgs, {"x": 1.0, "vs": [1, 2]}),
        (msgs, {"x": True, "vs": [1, 2]}),
        (msgs, {"x": "1", "vs": [1, 2]}),
        (msgs, {"x": 1, "vs": (1, 2)}),
        (msgs, {"x": 1, "vs": [1.0, 2]}),
        (msgs, {"x": 1, "vs": [1, 2], "system": "s"}),
        (msgs, {"x": 1, "vs": [1, 2], "bos_token": "<b>"}),
        ([{"content": "1", "role": "user"}], {"x": 1, "vs": [1, 2]}),
        ([{"role": "assistant", "content": "1"}], {"x": 1, "vs": [1, 2]}),
    ]
    for _ in range(2):
        for m, kw in variants:
            assert kept.render(m, **kw) == _fresh(_SHOW, m, kw), kw
