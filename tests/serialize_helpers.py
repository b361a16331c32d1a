"""Test-only helpers for persistent compiled grammars (kept out of ``src``).

* :func:`small_vocab` - a deterministic ~1,800-token vocabulary (every byte, JSON-ish and
  word-like multi-byte tokens, multi-byte UTF-8, a stop token): cheap to rebuild in another
  process.
* :data:`CONSTRAINTS` - one constraint per front-end (regex, counted regex, JSON Schema with
  counters and recursion, JSON Schema with ``uniqueItems`` (run-time marks), GBNF, Lark,
  builtin JSON), as ``(method, args, kwargs)``.
* :func:`random_walks` / :func:`replay_masks` - seeded walks over allowed tokens, and the masks
  met along them.
* :func:`assert_same_data` - compares two object graphs attribute by attribute (every
  attribute of every object reachable from a compiled grammar, parser states by content, a
  loaded grammar's lazy sections once loaded), so a field that a round trip does not carry
  fails a test.
* :func:`run_in_new_process` - runs Python code in a fresh interpreter with ``src`` and
  ``tests`` importable.
"""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from formcast import CompiledGrammar, GrammarCompiler, GrammarMatcher, Vocabulary
from formcast.automata.pda import Frame, ParserState, PushdownAutomaton
from formcast.bitmask import allocate_token_bitmask
from formcast.cache import StepMemo
from formcast.index.context import TokenIndexContext
from formcast.index.serialize import PLAIN_CLASSES, _instance_attrs
from formcast.vocab.trie import TokenTrie

REPO = Path(__file__).resolve().parents[1]

_WORDS = [
    "name", "age", "id", "tags", "value", "items", "true", "false", "null", "type", "ab",
    "abc", "x", "y", "z", "hello", "world", "foo", "bar", "é", "€", "日本", "\\n", "\\u00",
]  # fmt: skip
_PUNCT = ['{"', '":', '",', '"}', '"]', '["', "},", "]}", ":[", ":{", ",", '"', "{", "}"]


def small_vocab() -> Vocabulary:
    """Every single byte, JSON punctuation runs, words (alone, quoted, with punctuation),
    digits runs and seeded random strings; the last id is the stop token."""
    rng = random.Random(1234)
    toks: list[bytes] = [bytes([b]) for b in range(256)]
    seen = set(toks)

    def add(t: bytes) -> None:
        if t and t not in seen:
            seen.add(t)
            toks.append(t)

    for w in _WORDS:
        for form in (w, f'"{w}', f'"{w}"', f'{w}"', f'{w}":', f" {w}", f'"{w}":'):
            add(form.encode())
    for p in _PUNCT:
        add(p.encode())
    for n in range(1, 60):
        add(str(n * 37).encode())
        add(("0" * (n % 7 + 1)).encode())
    alphabet = 'abcxyz019 .-_"{}[]:,\\é'
    for _ in range(1200):
        k = rng.randint(2, 9)
        add("".join(rng.choice(alphabet) for _ in range(k)).encode())
    toks.append(b"</s>")
    return Vocabulary.from_tokens(toks, stop_token_ids=[len(toks) - 1], name="serialize-test")


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 80},
        "age": {"type": "integer", "minimum": 0},
        "kind": {"enum": ["a", "b", "abc"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "child": {"$ref": "#"},
    },
    "required": ["name"],
}
GBNF = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "x"
"""
LARK = r"""
start: pair ("," pair)*
pair: KEY ":" value
value: NUMBER | WORD | "[" [value ("," value)*] "]"
KEY: /[a-z]+/
WORD: /"[a-z ]*"/
NUMBER: /[0-9]+/
"""
CONSTRAINTS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "regex": ("compile_regex", (r"[a-z]{2,6}(-[0-9]+)?@(foo|bar)\.(com|org)",), {}),
    "regex_counted": ("compile_regex", (r"[a-z\" ]{0,300}x",), {}),
    "json_schema": ("compile_json_schema", (SCHEMA,), {}),
    "json_schema_unique": (
        "compile_json_schema",
        ({"type": "array", "items": {"type": "string", "maxLength": 4}, "uniqueItems": True},),
        {},
    ),
    "gbnf": ("compile_grammar", (GBNF,), {}),
    "lark": ("compile_grammar", (LARK,), {"syntax": "lark"}),
    "builtin_json": ("compile_builtin_json_grammar", (), {}),
}


def compile_named(compiler: GrammarCompiler, name: str) -> CompiledGrammar:
    method, args, kwargs = CONSTRAINTS[name]
    compiled: CompiledGrammar = getattr(compiler, method)(*args, **kwargs)
    return compiled


def random_walks(
    compiled: CompiledGrammar, *, walks: int = 6, steps: int = 25, seed: int = 0
) -> list[list[int]]:
    """Seeded walks: at each step a random allowed text token (stop tokens end a walk)."""
    rng = random.Random(seed)
    vocab = compiled.vocab
    out: list[list[int]] = []
    for _ in range(walks):
        m = GrammarMatcher(compiled)
        path: list[int] = []
        for _ in range(steps):
            allowed = [t for t in m.allowed_token_ids().tolist() if t not in vocab.stop_token_ids]
            if not allowed:
                break
            t = rng.choice(allowed)
            assert m.accept_token(t)
            path.append(t)
        m.allowed_token_ids()  # the mask after the last token is met by a replay too
        out.append(path)
    return out


def replay_masks(compiled: CompiledGrammar, walks: list[list[int]]) -> np.ndarray:
    """Every mask met on ``walks`` (before each token and after the last), stacked."""
    rows: list[np.ndarray] = []
    for path in walks:
        m = GrammarMatcher(compiled)
        for t in [*path, None]:
            buf = allocate_token_bitmask(1, compiled.vocab_size)
            m.fill_next_token_bitmask(buf)
            rows.append(buf[0].copy())
            if t is not None:
                assert m.accept_token(t)
    return np.stack(rows)


def _state_key(s: ParserState) -> tuple[Any, ...]:
    return (s.accepting, s.error, tuple(sorted(_frame_key(f) for f in s.frames)))


def _frame_key(f: Frame | None) -> tuple[Any, ...]:
    out: list[tuple[int, int, int, int]] = []
    while f is not None:
        out.append((f.rule, f.state, f.need, f.left))
        f = f.parent
    return tuple(out)


def _canon(v: Any) -> Any:
    """A hashable content key for dict keys and set members."""
    if isinstance(v, ParserState):
        return ("state", _state_key(v))
    if isinstance(v, Frame):
        return ("frame", _frame_key(v))
    if isinstance(v, tuple):
        return tuple(_canon(x) for x in v)
    return v


def assert_same_data(a: Any, b: Any, vocab: Vocabulary, path: str = "grammar") -> None:
    """``b`` (a loaded copy) holds the same data as ``a``, attribute by attribute.  A loaded
    grammar's lazy sections are loaded first (compared once materialised)."""
    seen: set[tuple[int, int]] = set()
    if isinstance(b, CompiledGrammar):
        b.load_sections()

    def same(a: Any, b: Any, path: str) -> None:
        assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype, path
            assert a.shape == b.shape, path
            assert np.array_equal(a, b), f"{path}: array contents differ"
            assert a.flags.writeable == b.flags.writeable, f"{path}: writeable flag"
            return
        if a is None or isinstance(a, (bool, int, str, bytes)):
            assert a == b, f"{path}: {a!r} != {b!r}"
            return
        if isinstance(a, float):
            assert a == b or (a != a and b != b), f"{path}: {a!r} != {b!r}"
            return
        if isinstance(a, Vocabulary):
            assert b is vocab, f"{path}: not the vocabulary given to deserialize"
            return
        if isinstance(a, TokenTrie):
            tries = [vocab.trie, *(sub for sub, _ in vocab.trie._with_byte.values())]
            assert any(b is t for t in tries), f"{path}: not one of the vocabulary's tries"
            assert b.strings == a.strings, path
            return
        if isinstance(a, ParserState):
            assert _state_key(a) == _state_key(b), f"{path}: parser states differ"
            return
        if isinstance(a, Frame):
            assert _frame_key(a) == _frame_key(b), f"{path}: frames differ"
            return
        if isinstance(a, (type(threading.Lock()), type(threading.RLock()))):
            return
        if callable(a) and not dataclasses.is_dataclass(a) and type(a).__name__ == "function":
            assert a is b, f"{path}: functions differ"
            return
        if type(a).__name__ in ("UniqueItemsProgram", "ValueUniqueProgram"):
            # the run-time uniqueItems check: its grammar's program and marks are written, its
            # own caches are rebuilt on load
            same(a.cfg, b.cfg, f"{path}.cfg")
            same(a.marks, b.marks, f"{path}.marks")
            return
        if isinstance(a, TokenIndexContext):  # the vocabulary's, not carried: found again
            assert a is b, f"{path}: another context"
            return
        if isinstance(a, PushdownAutomaton):  # its own caches are rebuilt, not carried
            same(a.auto, b.auto, f"{path}.auto")
            same(a.limits, b.limits, f"{path}.limits")
            assert a.far_count == b.far_count, path
            return
        if isinstance(a, (dict, StepMemo)):
            ka = {_canon(k): v for k, v in a.items()}
            kb = {_canon(k): v for k, v in b.items()}
            assert ka.keys() == kb.keys(), f"{path}: keys differ"
            if isinstance(a, StepMemo):
                assert a.limit == b.limit, path
            for k, v in ka.items():
                same(v, kb[k], f"{path}[{k!r}]")
            if type(a).__name__ == "OrderedDict":
                assert [_canon(k) for k in a] == [_canon(k) for k in b], f"{path}: LRU order"
            return
        if isinstance(a, (frozenset, set)):
            assert {_canon(x) for x in a} == {_canon(x) for x in b}, path
            return
        if isinstance(a, (tuple, list)):
            assert len(a) == len(b), f"{path}: lengths {len(a)} != {len(b)}"
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, f"{path}[{i}]")
            return
        if isinstance(a, CompiledGrammar):
            for f in dataclasses.fields(a):
                same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
            return
        assert PLAIN_CLASSES.get(type(a).__name__) is type(a), f"{path}: {type(a)} not plain"
        if (id(a), id(b)) in seen:
            return
        seen.add((id(a), id(b)))
        attrs_a, attrs_b = _instance_attrs(a), _instance_attrs(b)
        omit = getattr(type(a), "_serialize_omit", frozenset())
        assert attrs_a.keys() == attrs_b.keys(), f"{path}: attributes differ"
        for k in attrs_a:
            if k in omit and attrs_b[k] is None:
                continue  # rebuilt on first use
            same(attrs_a[k], attrs_b[k], f"{path}.{k}")

    same(a, b, path)


def run_in_new_process(code: str, *args: str, timeout: float = 240) -> str:
    """Run ``code`` in a fresh interpreter (``sys.argv[1:]`` = ``args``); its stdout.
    Raises AssertionError with its stderr when it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), str(REPO / "tests"), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"the new process failed:\n{proc.stderr[-4000:]}"
    return proc.stdout
