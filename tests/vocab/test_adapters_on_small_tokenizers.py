"""Unit tests of the tokenizer sources (:mod:`formcast.vocab.sources`, through the
``Vocabulary.from_*`` constructors) on small tokenizers built in the test.

Expected bytes come from an oracle outside the adapter wherever one exists: the tokenizer's own
encoder (the bytes of the ids a text encodes to must concatenate to that text), its decoder (for
pieces that are complete UTF-8), the source data (tiktoken ranks, ``<0xNN>`` piece names) or
well-known GPT-2 byte-level spellings (``Ġ`` is a space, ``Ċ`` a newline).  No network.
"""

from __future__ import annotations

import io
import json
import random
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from formcast.errors import VocabularyError
from formcast.vocab.sources import KNOWN_STOP_TOKENS, RawVocabulary
from formcast.vocab.sources.huggingface import read_huggingface
from formcast.vocab.vocabulary import Vocabulary

TEXTS = [
    "hello world",
    " hello  world ",
    "x",
    " ",
    "\n\n\t x\r\n",
    "naïve café – Ünïcödé ß",
    "日本語のテキストと中文",
    "😀🦙 emoji ZWJ 👩\u200d👩\u200d👧 flags 🇫🇷",
    "\x00\x01\x7f control",
    "a" * 40,
    "1234567890 3.14",
    "العربية Ελληνικά עברית",
    "\u00a0nbsp\u00adshy\u2581lower-one-eighth-block",
    '<tool_call>{"a": 1}</tool_call>',
]

_POOLS = (
    "abcdefghijklmnopqrstuvwxyz",
    "ABCXYZ",
    " \t\n",
    "0123456789",
    "éèêëüößñçÅØ",
    "日本語中文한국어",
    "😀🦙🚀👍🏽",
    ".,;:!?\"'()[]{}<>",
    "\u00a0\u2581\u00ad\u200d\x00",
)


def random_texts(seed: int, n: int) -> Iterator[str]:
    """Texts mixing ASCII, Latin-1, CJK, emoji, whitespace and odd code points."""
    rng = random.Random(seed)
    for _ in range(n):
        yield "".join(rng.choice(rng.choice(_POOLS)) for _ in range(rng.randint(1, 30)))


def joined(vocab: Vocabulary, ids: Sequence[int]) -> bytes:
    return b"".join(vocab.tokens[i] for i in ids)


# ============================================================================================
# Hugging Face: byte-level BPE
# ============================================================================================
@pytest.fixture(scope="module")
def tk() -> Any:
    return pytest.importorskip("tokenizers", reason="needs tokenizers: pip install tokenizers")


def byte_level_oracle(tk: Any) -> dict[str, int]:
    """Character -> byte of the byte-level alphabet, read off tokenizers' ByteLevel
    pre-tokenizer on characters covering every byte that valid UTF-8 can contain."""
    pre = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    samples = [chr(c) for c in range(0x800)]  # 1-byte, and 2-byte leads C2..DF, all 80..BF
    samples += [chr(max(k << 12, 0x800) + 0x100) for k in range(16)]  # 3-byte leads E0..EF
    samples += [chr(c) for c in (0x10000, 0x40000, 0x80000, 0xC0000, 0x100000)]  # F0..F4
    oracle: dict[str, int] = {}
    for s in samples:
        ((mapped, _),) = pre.pre_tokenize_str(s)
        raw = s.encode()
        assert len(mapped) == len(raw)
        for ch, b in zip(mapped, raw):
            assert oracle.setdefault(ch, b) == b
    return oracle


def mapped(tk: Any, text: str) -> str:
    """``text`` spelled in the byte-level alphabet (by tokenizers itself)."""
    pre = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return "".join(piece for piece, _ in pre.pre_tokenize_str(text))


MERGED_WORDS = ("hello", " world", " hello", "ä", "😀", "日本")


def byte_level_tokenizer(
    tk: Any,
    *,
    specials: Sequence[str] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    added: Sequence[str] = ("<tool_call>", "</tool_call>"),
) -> Any:
    alphabet = sorted(tk.pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges: list[tuple[str, str]] = []
    for word in MERGED_WORDS:
        chars = mapped(tk, word)
        cur = chars[0]
        for ch in chars[1:]:
            if (cur, ch) not in merges:
                merges.append((cur, ch))
            cur += ch
            vocab.setdefault(cur, len(vocab))
    tok = tk.Tokenizer(tk.models.BPE(vocab, merges))
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.add_special_tokens(list(specials))
    tok.add_tokens([tk.AddedToken(a, special=False, normalized=False) for a in added])
    return tok


def test_byte_level_alphabet_inverts_the_gpt2_byte_map(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    oracle = byte_level_oracle(tk)
    alphabet = tk.pre_tokenizers.ByteLevel.alphabet()
    assert len(alphabet) == 256
    for ch in alphabet:
        tid = tok.token_to_id(ch)
        if ch in oracle:
            assert vocab.tokens[tid] == bytes([oracle[ch]]), ch
    # the 13 bytes that never occur in UTF-8 (C0, C1, F5..FF) take the 13 remaining characters
    unreachable = {bytes([b]) for b in (0xC0, 0xC1, *range(0xF5, 0x100))}
    rest = {vocab.tokens[tok.token_to_id(ch)] for ch in alphabet if ch not in oracle}
    assert rest == unreachable
    assert len(oracle) == 256 - len(unreachable)


def test_byte_level_merged_and_partial_utf8_pieces(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    for word in MERGED_WORDS:
        assert vocab.tokens[tok.token_to_id(mapped(tk, word))] == word.encode()
    # a piece holding half of a character has exactly those bytes (no U+FFFD anywhere)
    half = mapped(tk, "😀")[:2]
    assert vocab.tokens[tok.token_to_id(half)] == "😀".encode()[:2] == b"\xf0\x9f"
    assert all(b"\xef\xbf\xbd" not in t for t in vocab.tokens)
    # well-known GPT-2 spellings
    assert vocab.tokens[tok.token_to_id("Ġ")] == b" "
    assert vocab.tokens[tok.token_to_id("Ċ")] == b"\n"


@pytest.mark.parametrize("texts", [TEXTS, list(random_texts(1, 200))], ids=["fixed", "random"])
def test_byte_level_round_trip(tk: Any, texts: list[str]) -> None:
    tok = byte_level_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    for text in texts:
        ids = tok.encode(text).ids
        assert joined(vocab, ids) == text.encode(), text
        assert not any(i in vocab.special_token_ids for i in ids)


def test_byte_level_decoder_agrees_on_every_complete_token(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    for tid, tb in enumerate(vocab.tokens):
        if tid in vocab.special_token_ids:
            continue
        try:
            text = tb.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert tok.decode([tid], skip_special_tokens=False) == text


def test_special_and_added_tokens(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    eot, start, end = (tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    call = tok.token_to_id("<tool_call>")
    assert {eot, start, end} <= vocab.special_token_ids
    assert vocab.stop_token_ids == {eot, end}  # inferred: both are known end tokens
    assert vocab.tokens[start] == b"<|im_start|>"  # kept for messages...
    assert vocab.token_bytes(start) == b""  # ...but never matched as text
    assert call not in vocab.special_token_ids
    assert vocab.tokens[call] == b"<tool_call>"
    assert vocab.is_text_token(call)
    assert len(vocab.tokens) == tok.get_vocab_size(with_added_tokens=True)


def test_added_tokens_are_the_text_they_match(tk: Any) -> None:
    tok = byte_level_tokenizer(tk, added=("    ", "<tool_call>"))
    vocab = Vocabulary.from_huggingface(tok)
    for text in ("    ", "a    b<tool_call>c"):
        assert joined(vocab, tok.encode(text).ids) == text.encode()
    assert vocab.tokens[tok.token_to_id("    ")] == b"    "


def test_added_tokens_under_a_byte_level_normalizer(tk: Any) -> None:
    # tokenizers stores a normalized added token in normalized (byte-level) spelling and
    # matches it against the byte-level-normalized input
    alphabet = sorted(tk.pre_tokenizers.ByteLevel.alphabet())
    tok = tk.Tokenizer(tk.models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.normalizer = tk.normalizers.ByteLevel()
    tok.decoder = tk.decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.add_tokens(
        [
            tk.AddedToken("Ġhi", normalized=True, special=False),
            tk.AddedToken(" yo", normalized=False, special=False),
        ]
    )
    vocab = Vocabulary.from_huggingface(tok)
    hi, yo = tok.token_to_id("Ġhi"), tok.token_to_id(" yo")
    assert vocab.tokens[hi] == "Ġhi".encode()
    assert vocab.tokens[yo] == b" yo"
    assert hi in tok.encode("xĠhi").ids
    assert yo in tok.encode("a yo b").ids
    for text in ("xĠhi", "a yo b", *TEXTS):
        ids = tok.encode(text).ids
        assert joined(vocab, ids) == text.encode(), text


# the characters of the 13 bytes that never occur in UTF-8 (C0, C1, F5..FF)
NON_UTF8_BYTE_CHARS = "ÀÁõö÷øùúûüýþÿ"


def test_deepseek_style_added_latin1_tokens(tk: Any) -> None:
    # DeepSeek's BPE alphabet lacks the 13 byte characters that never occur in UTF-8 and adds
    # them back as non-special added tokens.  Encoding maps the *text* "ø" to such a token, so
    # its bytes are "ø" in UTF-8 (as in llama.cpp) -- not the byte 0xF8 that the ByteLevel
    # decoder would produce.
    alphabet = sorted(set(tk.pre_tokenizers.ByteLevel.alphabet()) - set(NON_UTF8_BYTE_CHARS))
    tok = tk.Tokenizer(tk.models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.add_special_tokens(["<｜end▁of▁sentence｜>"])
    tok.add_tokens([tk.AddedToken(c, special=False, normalized=True) for c in NON_UTF8_BYTE_CHARS])
    vocab = Vocabulary.from_huggingface(tok)
    for ch in NON_UTF8_BYTE_CHARS:
        tid = tok.token_to_id(ch)
        assert tid >= len(alphabet)
        assert vocab.tokens[tid] == ch.encode()
    for text in ("søren", "ÀÁ øù", *TEXTS):
        assert joined(vocab, tok.encode(text).ids) == text.encode(), text


def test_holes_in_the_id_space_are_empty_special_ids(tk: Any) -> None:
    alphabet = sorted(tk.pre_tokenizers.ByteLevel.alphabet())
    vocab_map = {c: i for i, c in enumerate(alphabet)}
    vocab_map["Ġh"] = 260  # ids 256..259 unused by the model
    tok = tk.Tokenizer(tk.models.BPE(vocab_map, [("Ġ", "h")]))
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    eos = tok.token_to_id("<|endoftext|>")
    vocab = Vocabulary.from_huggingface(tok)
    assert len(vocab.tokens) == 261
    holes = set(range(256, 260)) - {eos}
    assert holes
    assert all(vocab.tokens[i] == b"" for i in holes)
    assert holes <= vocab.special_token_ids
    assert vocab.tokens[260] == b" h"
    assert vocab.stop_token_ids == {eos}


def test_vocab_size_pads_the_logits_width(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = Vocabulary.from_huggingface(tok, vocab_size=n + 64)
    assert (len(vocab.tokens), vocab.vocab_size) == (n, n + 64)
    assert not any(vocab.is_text_token(i) for i in range(n, n + 64))
    assert vocab.token_bytes(n + 10) == b""
    with pytest.raises(VocabularyError, match="vocab_size"):
        Vocabulary.from_huggingface(tok, vocab_size=n - 1)
    with pytest.raises(VocabularyError, match="vocab_size"):
        Vocabulary.from_huggingface(tok, vocab_size="big")  # type: ignore[arg-type]


def test_explicit_stop_ids(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    start = tok.token_to_id("<|im_start|>")
    assert Vocabulary.from_huggingface(tok, stop_token_ids=[start]).stop_token_ids == {start}
    assert Vocabulary.from_huggingface(tok, stop_token_ids=start).stop_token_ids == {start}
    # a text token given as a stop becomes special (it can then only end the output)
    h = tok.token_to_id("h")
    v = Vocabulary.from_huggingface(tok, stop_token_ids=(h,))
    assert h in v.special_token_ids
    with pytest.raises(VocabularyError, match="empty"):
        Vocabulary.from_huggingface(tok, stop_token_ids=[])
    with pytest.raises(VocabularyError, match="int"):
        Vocabulary.from_huggingface(tok, stop_token_ids=["eos"])  # type: ignore[list-item]
    with pytest.raises(VocabularyError, match="int"):
        Vocabulary.from_huggingface(tok, stop_token_ids=[2.0])  # type: ignore[list-item]
    np = pytest.importorskip("numpy")
    stops = Vocabulary.from_huggingface(tok, stop_token_ids=np.array([start])).stop_token_ids
    assert stops == {start}
    assert Vocabulary.from_huggingface(tok, vocab_size=np.int64(5000)).vocab_size == 5000
    with pytest.raises(VocabularyError, match="out of range"):
        Vocabulary.from_huggingface(tok, stop_token_ids=[10**6])


def test_stop_inference_fails_with_advice(tk: Any) -> None:
    # "</s>" as a *non-special* added token is text, never an inferred stop
    tok = byte_level_tokenizer(tk, specials=("<pad>", "<|im_start|>"), added=("</s>",))
    with pytest.raises(VocabularyError, match="stop_token_ids") as exc:
        Vocabulary.from_huggingface(tok)
    assert "<pad>" in str(exc.value)
    vocab = Vocabulary.from_huggingface(tok, stop_token_ids=[tok.token_to_id("<pad>")])
    assert vocab.tokens[tok.token_to_id("</s>")] == b"</s>"


@pytest.mark.parametrize(
    ("specials", "stops"),
    [
        (("<|endoftext|>", "<|end|>", "<|user|>"), {"<|endoftext|>", "<|end|>"}),  # Phi-3
        (("<|return|>", "<|call|>", "<|end|>", "<|start|>"), {"<|return|>", "<|call|>"}),  # harmony
        (("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"), {"<|end_of_text|>", "<|eot_id|>"}),
        (("<bos>", "<eos>", "<end_of_turn>", "<start_of_turn>"), {"<eos>", "<end_of_turn>"}),
        (("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"), {"<｜end▁of▁sentence｜>"}),
    ],
)
def test_stop_inference_by_family(tk: Any, specials: tuple[str, ...], stops: set[str]) -> None:
    assert stops <= KNOWN_STOP_TOKENS
    tok = byte_level_tokenizer(tk, specials=specials)
    vocab = Vocabulary.from_huggingface(tok)
    assert vocab.stop_token_ids == {tok.token_to_id(s) for s in stops}


class FakeTransformersTokenizer:
    """The attributes from_huggingface reads from a transformers fast tokenizer."""

    def __init__(self, backend: Any, eos_token_id: int | None, special_ids: Sequence[int]):
        self.backend_tokenizer = backend
        self.eos_token_id = eos_token_id
        self.all_special_ids = list(special_ids)
        self.name_or_path = "org/toy-model"


def test_transformers_style_wrapper(tk: Any) -> None:
    tok = byte_level_tokenizer(tk, specials=("<|my_eos|>", "<|im_end|>"))
    my_eos, im_end = tok.token_to_id("<|my_eos|>"), tok.token_to_id("<|im_end|>")
    call = tok.token_to_id("<tool_call>")
    vocab = Vocabulary.from_huggingface(FakeTransformersTokenizer(tok, my_eos, [my_eos, call]))
    assert vocab.stop_token_ids == {my_eos, im_end}  # declared EOS + known end tokens
    assert call in vocab.special_token_ids  # registered as special by transformers
    assert vocab.name == "org/toy-model"
    bare = FakeTransformersTokenizer(tok, None, [])
    assert Vocabulary.from_huggingface(bare, name="x").name == "x"


def test_vocabulary_classmethods_build_the_source_tables(tk: Any) -> None:
    tok = byte_level_tokenizer(tk)
    raw = read_huggingface(tok, vocab_size=1000, name="toy")
    assert isinstance(raw, RawVocabulary)
    direct = Vocabulary(
        raw.tokens,
        stop_token_ids=raw.stop_token_ids,
        special_token_ids=raw.special_token_ids,
        vocab_size=raw.vocab_size,
        name=raw.name,
    )
    via = Vocabulary.from_huggingface(tok, vocab_size=1000, name="toy")
    assert via.fingerprint == direct.fingerprint == Vocabulary.from_raw(raw).fingerprint
    assert via.name == "toy"


class JsonOnlyTokenizer:
    """A tokenizer known only by its tokenizer.json (what from_huggingface reads)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    def to_str(self) -> str:
        return json.dumps(self.spec)


def test_old_tokenizer_json_without_model_type() -> None:
    alphabet_spec = {
        "model": {"vocab": {"Ġ": 0, "h": 1, "i": 2, "Ġh": 3}, "merges": ["Ġ h"]},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [{"id": 5, "content": "<|endoftext|>", "special": True}],
    }
    vocab = Vocabulary.from_huggingface(JsonOnlyTokenizer(alphabet_spec))
    assert vocab.tokens == (b" ", b"h", b"i", b" h", b"", b"<|endoftext|>")
    assert vocab.special_token_ids == {4, 5}
    assert vocab.stop_token_ids == {5}


def test_metaspace_pre_tokenizer_without_decoder() -> None:
    spec = {
        "model": {
            "type": "Unigram",
            "unk_id": 0,
            "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["b", -2.0]],
        },
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁"},
        "decoder": None,
        "added_tokens": [{"id": 3, "content": "</s>", "special": True}],
    }
    vocab = Vocabulary.from_huggingface(JsonOnlyTokenizer(spec))
    assert vocab.tokens == (b"<unk>", b" a", b"b", b"</s>")
    assert vocab.special_token_ids == {0, 3}


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"decoder": {"type": "CTC"}}, "decoder 'CTC'"),
        (
            {
                "pre_tokenizer": {"type": "ByteLevel"},
                "decoder": {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            },
            "mixes byte-level",
        ),
        ({"model": {"type": "Mystery", "vocab": {"a": 0}}}, "unknown model type 'Mystery'"),
        ({"model": None}, "no 'model' section"),
        ({"model": {"type": "BPE", "vocab": None, "merges": []}}, "no model vocabulary"),
        ({"model": {"type": "BPE", "vocab": {}, "merges": []}, "added_tokens": []}, "no tokens"),
    ],
)
def test_malformed_or_unsupported_tokenizer_json(changes: dict[str, Any], match: str) -> None:
    spec: dict[str, Any] = {
        "model": {"type": "BPE", "vocab": {"Ġ": 0, "a": 1}, "merges": []},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [{"id": 2, "content": "<|endoftext|>", "special": True}],
    }
    spec.update(changes)
    with pytest.raises(VocabularyError, match=match):
        Vocabulary.from_huggingface(JsonOnlyTokenizer(spec))


# ============================================================================================
# Hugging Face: SentencePiece style
# ============================================================================================
SPM_PIECES = ("▁", "h", "e", "l", "o", "w", "r", "d", "x", "y", "a", "b")
SPM_WORDS = ("▁hello", "▁world", "▁he")


def spm_bpe_tokenizer(tk: Any) -> Any:
    """Llama-2 style: BPE + byte fallback, Prepend/Replace normalizer, Replace/ByteFallback/
    Fuse/Strip decoder, <unk>/<s>/</s> specials."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for p in SPM_PIECES:
        vocab[p] = len(vocab)
    merges: list[tuple[str, str]] = []
    for word in SPM_WORDS:
        cur = word[0]
        for ch in word[1:]:
            if (cur, ch) not in merges:
                merges.append((cur, ch))
            cur += ch
            vocab.setdefault(cur, len(vocab))
    tok = tk.Tokenizer(tk.models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = tk.normalizers.Sequence(
        [tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")]
    )
    tok.decoder = tk.decoders.Sequence(
        [
            tk.decoders.Replace("▁", " "),
            tk.decoders.ByteFallback(),
            tk.decoders.Fuse(),
            tk.decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(
        [tk.AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")]
    )
    tok.add_tokens(
        [
            tk.AddedToken("▁▁", special=False, normalized=True),
            tk.AddedToken("<tool>", special=False, normalized=False),
        ]
    )
    return tok


def test_spm_byte_fallback_pieces_are_single_bytes(tk: Any) -> None:
    tok = spm_bpe_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    for b in range(256):
        assert vocab.tokens[tok.token_to_id(f"<0x{b:02X}>")] == bytes([b])
    assert vocab.tokens[tok.token_to_id("▁hello")] == b" hello"
    assert vocab.tokens[tok.token_to_id("▁")] == b" "


@pytest.mark.parametrize("texts", [TEXTS, list(random_texts(2, 200))], ids=["fixed", "random"])
def test_spm_round_trip_with_dummy_prefix(tk: Any, texts: list[str]) -> None:
    tok = spm_bpe_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        # the Prepend("▁") normalizer adds the dummy-prefix space; a literal "▁" in the text is
        # a space to a SentencePiece-style tokenizer (its own decoder says so too)
        assert joined(vocab, ids) == (" " + text).replace("▁", " ").encode(), text


def test_spm_decoder_agrees_on_every_complete_token(tk: Any) -> None:
    tok = spm_bpe_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    x = tok.token_to_id("x")
    checked = 0
    for tid, tb in enumerate(vocab.tokens):
        if tid in vocab.special_token_ids:
            continue
        try:
            text = tb.decode("utf-8")
        except UnicodeDecodeError:
            continue
        # "x" first: the Strip decoder only strips the very first space of the output
        assert tok.decode([x, tid], skip_special_tokens=False) == "x" + text, tid
        checked += 1
    assert checked > 128 + len(SPM_PIECES)
    # the normalized added token "▁▁" is stored (and matched, and decoded) as "▁▁▁": the
    # Prepend("▁") normalizer applies to its content too
    assert vocab.tokens[tok.token_to_id("▁▁")] == b"   "
    assert vocab.tokens[tok.token_to_id("<tool>")] == b"<tool>"


def test_spm_specials_and_stop(tk: Any) -> None:
    tok = spm_bpe_tokenizer(tk)
    vocab = Vocabulary.from_huggingface(tok)
    assert {0, 1, 2} <= vocab.special_token_ids
    assert vocab.stop_token_ids == {2}
    assert not vocab.is_text_token(0)


def test_unigram_metaspace(tk: Any) -> None:
    pieces: list[tuple[str, float]] = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    pieces += [(f"<0x{b:02X}>", -20.0) for b in range(256)]
    pieces += [(p, -5.0) for p in SPM_PIECES]
    pieces += [(w, -1.0) for w in SPM_WORDS]
    tok = tk.Tokenizer(tk.models.Unigram(pieces, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = tk.decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.add_special_tokens(["<s>", "</s>"])
    vocab = Vocabulary.from_huggingface(tok)
    assert vocab.tokens[tok.token_to_id("▁world")] == b" world"
    assert vocab.tokens[tok.token_to_id("<0xE2>")] == b"\xe2"
    assert 0 in vocab.special_token_ids  # the unknown piece, from unk_id
    assert vocab.stop_token_ids == {2}
    for text in [*TEXTS, *random_texts(3, 100)]:
        ids = tok.encode(text, add_special_tokens=False).ids
        got = joined(vocab, ids)
        # Metaspace prepends "▁" unless the text already starts with one
        want = text if text.startswith((" ", "▁")) else " " + text
        assert got == want.replace("▁", " ").encode(), text


# ============================================================================================
# Hugging Face: unsupported kinds and bad input
# ============================================================================================
def test_wordpiece_is_rejected(tk: Any) -> None:
    tok = tk.Tokenizer(tk.models.WordPiece({"[UNK]": 0, "hello": 1, "##lo": 2}, unk_token="[UNK]"))
    tok.decoder = tk.decoders.WordPiece()
    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_huggingface(tok)


def test_wordlevel_is_rejected(tk: Any) -> None:
    tok = tk.Tokenizer(tk.models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    with pytest.raises(VocabularyError, match="WordLevel"):
        Vocabulary.from_huggingface(tok)


def test_bpe_without_decoding_hints_is_rejected(tk: Any) -> None:
    tok = tk.Tokenizer(tk.models.BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")]))
    with pytest.raises(VocabularyError, match="unsupported Hugging Face tokenizer kind"):
        Vocabulary.from_huggingface(tok)


def test_bpe_with_word_suffix_is_rejected(tk: Any) -> None:
    model = tk.models.BPE(
        {"a": 0, "b</w>": 1, "ab</w>": 2}, [("a", "b</w>")], end_of_word_suffix="</w>"
    )
    tok = tk.Tokenizer(model)
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel()
    tok.decoder = tk.decoders.BPEDecoder(suffix="</w>")
    with pytest.raises(VocabularyError, match="end_of_word_suffix"):
        Vocabulary.from_huggingface(tok)


def test_regex_replace_decoder_is_rejected(tk: Any) -> None:
    tok = tk.Tokenizer(tk.models.BPE({"a": 0, "▁": 1}, []))
    tok.decoder = tk.decoders.Replace(tk.Regex("▁+"), " ")
    with pytest.raises(VocabularyError, match="regex"):
        Vocabulary.from_huggingface(tok)


@pytest.mark.parametrize("obj", [object(), "gpt2", 42])
def test_not_a_huggingface_tokenizer(obj: object) -> None:
    with pytest.raises(VocabularyError, match="not a Hugging Face tokenizer"):
        Vocabulary.from_huggingface(obj)


# ============================================================================================
# tiktoken
# ============================================================================================
@pytest.fixture(scope="module")
def toy_encoding() -> Any:
    tiktoken = pytest.importorskip("tiktoken", reason="needs tiktoken: pip install tiktoken")
    ranks = {bytes([b]): b for b in range(256)}
    for piece in (b"he", b"ll", b"llo", b"hello", b" wo", "😀".encode()[:2]):
        ranks[piece] = len(ranks)
    return tiktoken.Encoding(
        "toy",
        pat_str=r"\s?[^\s]+|\s+",
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 300, "<|fim_prefix|>": 301, "<|endofprompt|>": 305},
    )


def test_tiktoken_bytes_holes_and_specials(toy_encoding: Any) -> None:
    enc = toy_encoding
    vocab = Vocabulary.from_tiktoken(enc)
    assert len(vocab.tokens) == enc.n_vocab == 306
    ranks = enc._mergeable_ranks  # the source data, as an oracle
    for piece, rank in ranks.items():
        assert vocab.tokens[rank] == piece
    holes = set(range(len(ranks), 300)) | {302, 303, 304}
    assert all(vocab.tokens[i] == b"" for i in holes)
    assert vocab.special_token_ids == holes | {300, 301, 305}
    assert vocab.tokens[300] == b"<|endoftext|>"
    assert vocab.stop_token_ids == {300}
    assert vocab.name == "toy"


def test_tiktoken_round_trip(toy_encoding: Any) -> None:
    vocab = Vocabulary.from_tiktoken(toy_encoding)
    for text in [*TEXTS, *random_texts(4, 200)]:
        assert joined(vocab, toy_encoding.encode_ordinary(text)) == text.encode(), text


def test_tiktoken_options_and_errors(toy_encoding: Any) -> None:
    vocab = Vocabulary.from_tiktoken(toy_encoding, stop_token_ids=[301], vocab_size=320, name="n")
    assert vocab.stop_token_ids == {301}
    assert (vocab.vocab_size, vocab.name) == (320, "n")
    with pytest.raises(VocabularyError, match=r"not a tiktoken\.Encoding"):
        Vocabulary.from_tiktoken(object())


# ============================================================================================
# SentencePiece
# ============================================================================================
SPM_CORPUS = [
    "hello world, the quick brown fox jumps over the lazy dog",
    "hello there general kenobi",
    "über naïve café, jalapeño",
    "numbers 123 456 and symbols: {} [] ()",
]


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def spm_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    spm = pytest.importorskip(
        "sentencepiece", reason="needs sentencepiece: pip install sentencepiece"
    )
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_CORPUS * 30),
        model_writer=buf,
        model_type=request.param,
        vocab_size=315,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        user_defined_symbols=["<tool>", "▁▁"],
        control_symbols=["<|im_end|>"],
        minloglevel=2,
    )
    path = tmp_path_factory.mktemp("spm") / f"toy-{request.param}.model"
    path.write_bytes(buf.getvalue())
    return path


def test_sentencepiece_pieces(spm_model: Path) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    vocab = Vocabulary.from_sentencepiece(sp)
    assert len(vocab.tokens) == sp.get_piece_size()
    e = sp.piece_to_id("e")
    assert e != sp.unk_id()
    n_bytes = 0
    for tid in range(sp.get_piece_size()):
        piece = sp.id_to_piece(tid)
        if sp.is_control(tid) or sp.is_unknown(tid):
            assert tid in vocab.special_token_ids
        elif sp.is_byte(tid):
            assert vocab.tokens[tid] == bytes([int(piece[3:5], 16)])
            n_bytes += 1
        else:
            # SentencePiece's own decoder ("e" first, so no dummy-prefix space is stripped)
            assert sp.decode([e, tid]) == "e" + vocab.tokens[tid].decode(), piece
            assert tid not in vocab.special_token_ids
    assert n_bytes == 256
    assert vocab.tokens[sp.piece_to_id("<tool>")] == b"<tool>"
    assert vocab.tokens[sp.piece_to_id("▁▁")] == b"  "
    assert vocab.stop_token_ids == {sp.eos_id(), sp.piece_to_id("<|im_end|>")}
    assert {sp.bos_id(), sp.unk_id()} <= vocab.special_token_ids


def test_sentencepiece_round_trip(spm_model: Path) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    vocab = Vocabulary.from_sentencepiece(spm_model)
    for text in [*TEXTS, *random_texts(5, 200)]:
        ids = sp.encode(text)
        # dummy prefix; SentencePiece reads a literal "▁" as a space
        assert joined(vocab, ids) == (" " + text).replace("▁", " ").encode(), text


def test_sentencepiece_sources_agree(spm_model: Path) -> None:
    import sentencepiece as spm

    by_path = Vocabulary.from_sentencepiece(spm_model)
    by_str = Vocabulary.from_sentencepiece(str(spm_model))
    by_bytes = Vocabulary.from_sentencepiece(spm_model.read_bytes())
    by_proc = Vocabulary.from_sentencepiece(spm.SentencePieceProcessor(model_file=str(spm_model)))
    assert by_path.fingerprint == by_str.fingerprint == by_bytes.fingerprint == by_proc.fingerprint
    assert by_path.name == spm_model.name
    assert by_bytes.name == "sentencepiece"


class FakeSentencePieceTokenizer:
    """A transformers tokenizer backed by SentencePiece only (``sp_model``, no Rust backend)."""

    def __init__(self, sp: Any, added: dict[int, Any], eos_token_id: int) -> None:
        self.sp_model = sp
        self.added_tokens_decoder = added
        self.eos_token_id = eos_token_id
        self.all_special_ids = [eos_token_id]
        self.name_or_path = "org/spm"


def test_transformers_sentencepiece_tokenizer(spm_model: Path) -> None:
    import sentencepiece as spm
    from tokenizers import AddedToken  # the type transformers uses for added tokens

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    n = sp.get_piece_size()
    added = {
        n + 1: AddedToken("<|turn_end|>", special=True),
        n + 2: AddedToken("▁extra", special=False),
    }
    vocab = Vocabulary.from_huggingface(FakeSentencePieceTokenizer(sp, added, eos_token_id=n + 1))
    ref = Vocabulary.from_sentencepiece(sp)
    assert vocab.tokens[:n] == ref.tokens
    assert vocab.tokens[n:] == (b"", b"<|turn_end|>", b" extra")
    assert vocab.special_token_ids == ref.special_token_ids | {n, n + 1}
    assert vocab.stop_token_ids == ref.stop_token_ids | {n + 1}
    assert vocab.name == "org/spm"


def test_sentencepiece_errors(tmp_path: Path) -> None:
    pytest.importorskip("sentencepiece")
    with pytest.raises(VocabularyError, match="not found"):
        Vocabulary.from_sentencepiece(tmp_path / "missing.model")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"this is not a model")
    with pytest.raises(VocabularyError, match="cannot load"):
        Vocabulary.from_sentencepiece(bad)
    with pytest.raises(VocabularyError, match="SentencePieceProcessor"):
        Vocabulary.from_sentencepiece(3.14)


def test_sentencepiece_without_eos_needs_stop_ids(tmp_path: Path) -> None:
    spm = pytest.importorskip("sentencepiece")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_CORPUS * 30),
        model_writer=buf,
        vocab_size=60,
        eos_id=-1,
        minloglevel=2,
    )
    with pytest.raises(VocabularyError, match="stop_token_ids"):
        Vocabulary.from_sentencepiece(buf.getvalue())
    assert Vocabulary.from_sentencepiece(buf.getvalue(), stop_token_ids=[0]).stop_token_ids == {0}


# ============================================================================================
# GGUF
# ============================================================================================
@pytest.fixture(scope="module")
def gguf_mod() -> Any:
    return pytest.importorskip("gguf", reason="needs gguf to write test files: pip install gguf")


def write_gguf(
    gguf: Any,
    path: Path,
    *,
    model: str,
    tokens: Sequence[str | bytes],
    types: Sequence[int] | None,
    big_endian: bool = False,
    pre: str | None = None,
    ids: dict[str, int] | None = None,
) -> Path:
    import numpy as np

    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    w = gguf.GGUFWriter(str(path), arch="llama", endianess=endian)
    w.add_name("toy model")
    # values of every kind before and after the vocabulary, for the reader to skip
    w.add_uint8("x.u8", 7)
    w.add_int16("x.i16", -3)
    w.add_float32("x.f32", 1.5)
    w.add_float64("x.f64", 2.5)
    w.add_bool("x.bool", True)
    w.add_uint64("x.u64", 2**40)
    w.add_array("x.ints", [1, 2, 3])
    w.add_array("x.strs", ["a", "bc"])
    w.add_array("x.nested", [[1, 2], [3]])
    w.add_array("x.nested_strs", [["a"], ["b", "c"]])
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(list(tokens))
    if types is not None:
        w.add_token_types(list(types))
    w.add_token_merges(["a b", "ab c"])
    w.add_token_scores([0.0] * len(tokens))
    for key, value in (ids or {}).items():
        w.add_uint32(f"tokenizer.ggml.{key}", value)
    w.add_string("tokenizer.chat_template", "{{ messages }}")
    w.add_tensor("weight", np.arange(16, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# (token text, type, expected bytes, special?)
GPT2_CASES: list[tuple[str, int, bytes, bool]] = [
    ("<|endoftext|>", CONTROL, b"<|endoftext|>", True),
    ("Ġhello", NORMAL, b" hello", False),
    ("Ċ", NORMAL, b"\n", False),
    ("ĉ", NORMAL, b"\t", False),
    ("Ã©", NORMAL, "é".encode(), False),
    ("ðŁ", NORMAL, b"\xf0\x9f", False),  # half of 😀
    ("ĺĢ", NORMAL, b"\x98\x80", False),  # the other half
    ("<|im_start|>", USER_DEFINED, b"<|im_start|>", True),  # looks special
    ("[PAD7]", USER_DEFINED, b"[PAD7]", True),  # converter placeholder
    ("<tool>", USER_DEFINED, b"<tool>", False),  # raw text
    ("   ", USER_DEFINED, b"   ", False),
    ("ø", USER_DEFINED, "ø".encode(), False),  # raw text, not the byte 0xF8
    ("</s>", NORMAL, b"</s>", False),  # a text token that happens to read "</s>"
    ("<|im_end|>", CONTROL, b"<|im_end|>", True),
    ("<unused0>", UNUSED, b"", True),
    ("<unk>", UNKNOWN, b"<unk>", True),
]


def test_gguf_gpt2(gguf_mod: Any, tmp_path: Path) -> None:
    path = write_gguf(
        gguf_mod,
        tmp_path / "gpt2.gguf",
        model="gpt2",
        tokens=[c[0] for c in GPT2_CASES],
        types=[c[1] for c in GPT2_CASES],
        ids={"eos_token_id": 0},
    )
    vocab = Vocabulary.from_gguf(path)
    for tid, (text, _, want, special) in enumerate(GPT2_CASES):
        assert vocab.tokens[tid] == want, text
        assert (tid in vocab.special_token_ids) == special, text
    assert vocab.tokens[5] + vocab.tokens[6] == "😀".encode()
    # eos plus the control token "<|im_end|>"; the normal token "</s>" is text
    assert vocab.stop_token_ids == {0, 13}
    assert vocab.name == "toy model"
    assert Vocabulary.from_gguf(path, name="other").name == "other"


SPM_CASES: list[tuple[str, int, bytes, bool]] = [
    ("<unk>", UNKNOWN, b"<unk>", True),
    ("<s>", CONTROL, b"<s>", True),
    ("</s>", CONTROL, b"</s>", True),
    ("<0x0A>", BYTE, b"\n", False),
    ("<0xE2>", BYTE, b"\xe2", False),
    ("▁hello", NORMAL, b" hello", False),
    ("▁▁", NORMAL, b"  ", False),
    ("world▁", NORMAL, b"world ", False),
    ("<tool>", USER_DEFINED, b"<tool>", False),
    ("<|end|>", CONTROL, b"<|end|>", True),
]


@pytest.mark.parametrize("big_endian", [False, True], ids=["le", "be"])
@pytest.mark.parametrize("model", ["llama", "t5", "gemma4"])
def test_gguf_sentencepiece_style(
    gguf_mod: Any, tmp_path: Path, model: str, big_endian: bool
) -> None:
    path = write_gguf(
        gguf_mod,
        tmp_path / "spm.gguf",
        model=model,
        tokens=[c[0] for c in SPM_CASES],
        types=[c[1] for c in SPM_CASES],
        big_endian=big_endian,
        ids={"eos_token_id": 2, "eot_token_id": 9},
    )
    vocab = Vocabulary.from_gguf(path)
    for tid, (text, _, want, special) in enumerate(SPM_CASES):
        assert vocab.tokens[tid] == want, text
        assert (tid in vocab.special_token_ids) == special, text
    assert vocab.stop_token_ids == {2, 9}


def test_gguf_escaped_whitespace_bpe(gguf_mod: Any, tmp_path: Path) -> None:
    # llama.cpp's "gemma4" pre-tokenizer: BPE pieces spelled with "▁", not byte-level
    path = write_gguf(
        gguf_mod,
        tmp_path / "g.gguf",
        model="gpt2",
        pre="gemma4",
        tokens=["<eos>", "▁hi", "Ġ"],
        types=[CONTROL, NORMAL, NORMAL],
    )
    vocab = Vocabulary.from_gguf(path)
    assert vocab.tokens == (b"<eos>", b" hi", "Ġ".encode())
    assert vocab.stop_token_ids == {0}  # inferred from the control token's text


def test_gguf_without_token_types_and_with_padding(gguf_mod: Any, tmp_path: Path) -> None:
    path = write_gguf(
        gguf_mod,
        tmp_path / "n.gguf",
        model="gpt2",
        tokens=["a", "Ġb"],
        types=None,
        ids={"eos_token_id": 0},
    )
    vocab = Vocabulary.from_gguf(path, vocab_size=64)
    assert vocab.tokens == (b"a", b" b")
    assert vocab.vocab_size == 64


@pytest.mark.parametrize(
    ("model", "match"),
    [("bert", "WordPiece"), ("rwkv", "rwkv"), ("plamo2", "plamo2"), ("mystery", "mystery")],
)
def test_gguf_unsupported_models(gguf_mod: Any, tmp_path: Path, model: str, match: str) -> None:
    path = write_gguf(gguf_mod, tmp_path / "u.gguf", model=model, tokens=["a"], types=[NORMAL])
    with pytest.raises(VocabularyError, match=match):
        Vocabulary.from_gguf(path)


def test_gguf_bad_vocabularies(gguf_mod: Any, tmp_path: Path) -> None:
    p = write_gguf(gguf_mod, tmp_path / "a.gguf", model="gpt2", tokens=["a", "b"], types=[1])
    with pytest.raises(VocabularyError, match="token_type"):
        Vocabulary.from_gguf(p)
    p = write_gguf(gguf_mod, tmp_path / "b.gguf", model="gpt2", tokens=[b"\xff"], types=[1])
    with pytest.raises(VocabularyError, match="token 0 is not valid UTF-8"):
        Vocabulary.from_gguf(p, stop_token_ids=[0])
    p = write_gguf(gguf_mod, tmp_path / "c.gguf", model="llama", tokens=["<0xZZ>"], types=[BYTE])
    with pytest.raises(VocabularyError, match="byte token 0"):
        Vocabulary.from_gguf(p, stop_token_ids=[0])
    p = write_gguf(gguf_mod, tmp_path / "d.gguf", model="gpt2", tokens=["a", "b"], types=[1, 1])
    with pytest.raises(VocabularyError, match="stop_token_ids"):
        Vocabulary.from_gguf(p)
    assert Vocabulary.from_gguf(p, stop_token_ids=[1]).stop_token_ids == {1}


def test_gguf_without_vocabulary(gguf_mod: Any, tmp_path: Path) -> None:
    path = tmp_path / "novocab.gguf"
    w = gguf_mod.GGUFWriter(str(path), arch="llama")
    w.add_name("weights only")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(VocabularyError, match="no tokenizer vocabulary"):
        Vocabulary.from_gguf(path)


def test_gguf_file_errors(gguf_mod: Any, tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="not found"):
        Vocabulary.from_gguf(tmp_path / "missing.gguf")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(VocabularyError, match="empty"):
        Vocabulary.from_gguf(empty)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(VocabularyError, match="not a GGUF file"):
        Vocabulary.from_gguf(junk)
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(b"GGUF" + struct.pack("<IIII", 1, 0, 0, 0) + bytes(16))
    with pytest.raises(VocabularyError, match="version 1"):
        Vocabulary.from_gguf(v1)
    good = write_gguf(
        gguf_mod,
        tmp_path / "good.gguf",
        model="gpt2",
        tokens=[f"tok{i}" for i in range(50)],
        types=[NORMAL] * 50,
        ids={"eos_token_id": 0},
    )
    data = good.read_bytes()
    cut = data.index(b"tok25")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(data[:cut])
    with pytest.raises(VocabularyError, match="truncated or corrupt"):
        Vocabulary.from_gguf(truncated)
    # a string length pointing far past the end of the file
    corrupt = tmp_path / "corrupt.gguf"
    at = data.index(b"tok10") - 8
    corrupt.write_bytes(data[:at] + struct.pack("<Q", 2**40) + data[at + 8 :])
    with pytest.raises(VocabularyError, match="truncated or corrupt"):
        Vocabulary.from_gguf(corrupt)


# ============================================================================================
# module hygiene
# ============================================================================================
def test_importing_the_sources_imports_no_tokenizer_library() -> None:
    code = (
        "import sys, formcast.vocab.sources.huggingface, formcast.vocab.sources.tiktoken\n"
        "import formcast.vocab.sources.sentencepiece, formcast.vocab.sources.gguf\n"
        "heavy = {'tokenizers', 'tiktoken', 'gguf', 'sentencepiece', 'transformers', 'torch'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
