"""The lazy token index gives the eager index's masks, bit for bit (issue #31).

``CfgProgram`` builds its call-expanded lexer, and the augmented and cut tables its walks run
on, as walks reach them (``cfg_program.LAZY_INDEX``, the default); the eager build of earlier
sessions stays behind that switch for this test.  Each constraint is compiled both ways on the
Llama-3 vocabulary (the real trie: dense, sparse and class-trie walks all occur), seeded random
walks are drawn on the eager grammar, and every mask met along them must be identical in both.
The process-wide shared walks are cleared between the two compiles, so the lazy grammar walks
the vocabulary itself instead of reusing the eager grammar's walks.

Inputs: MaskBench schemas (a fixed spread of ../shared/data), the llama.cpp GBNF grammars, the
Lark and GBNF workloads, regexes with counted repeats (pushdown programs), the builtin JSON
grammar, and a lazy lexer forced past its state cap (the per-rule fallback mid-walk).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

import formcast.index.cfg_program as cfg_program
from formcast import CompiledGrammar, GrammarCompiler, Vocabulary
from formcast._native import compiled_modules
from formcast.automata.lexer import LazyExpandedLexer
from formcast.index.context import context_for
from formcast.vocab.loaders import load_vocabulary
from serialize_helpers import LARK, random_walks, replay_masks

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
MASKBENCH = SHARED / "JSONSchemaBench" / "maskbench" / "data"
GBNF_DIR = SHARED / "llama.cpp-grammars" / "grammars"
CFG_DIR = SHARED / "workloads" / "cfg"
REGEX_DIR = SHARED / "workloads" / "regex"

#: MaskBench schemas compared (a seeded sample of the sorted file names)
N_SCHEMAS = 14
WALKS, STEPS = 3, 24

#: ``cfg_program.LazyExpandedLexer`` can be patched (where formcast.index.cfg_program is compiled
#: with mypyc its code makes the class it imported: a patched module name is never called)
LEXER_PATCHABLE = not compiled_modules().get("formcast.index.cfg_program", False)


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary("llama3")


def _compile(
    vocab: Vocabulary, lazy: bool, method: str, args: tuple[Any, ...], kw: dict[str, Any]
) -> CompiledGrammar:
    context_for(vocab).cache(cfg_program.SHARED_WALKS).clear()
    with mock.patch.object(cfg_program, "LAZY_INDEX", lazy):
        compiled: CompiledGrammar = getattr(GrammarCompiler(vocab, cache_size=0), method)(
            *args, **kw
        )
    return compiled


def _compare(
    vocab: Vocabulary, method: str, args: tuple[Any, ...], kw: dict[str, Any], seed: int
) -> int:
    """Compile both ways, walk, compare every mask; the number of masks compared (0 when the
    constraint does not compile: then it must fail the same way both times)."""
    try:
        eager = _compile(vocab, False, method, args, kw)
    except Exception as e:  # the lazy compile must raise the same
        with pytest.raises(type(e)):
            _compile(vocab, True, method, args, kw)
        return 0
    with mock.patch.object(cfg_program, "LAZY_INDEX", False):
        walks = random_walks(eager, walks=WALKS, steps=STEPS, seed=seed)
        expected = replay_masks(eager, walks)
    lazy = _compile(vocab, True, method, args, kw)
    program = lazy.program
    if isinstance(program, cfg_program.CfgProgram) and program.lexer is not None:
        assert isinstance(program.lexer, LazyExpandedLexer)
    got = replay_masks(lazy, walks)
    assert got.shape == expected.shape
    bad = np.flatnonzero((got != expected).any(axis=1))
    assert bad.size == 0, f"masks differ at steps {bad.tolist()[:10]} of {len(got)}"
    return len(got)


def _maskbench() -> list[Path]:
    files = sorted(MASKBENCH.glob("*.json"))
    return sorted(random.Random(31).sample(files, min(N_SCHEMAS, len(files))))


def _skip_without(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"shared data missing: {path}")


@pytest.mark.parametrize("index", range(N_SCHEMAS))
def test_maskbench_schemas(vocab: Vocabulary, index: int) -> None:
    _skip_without(MASKBENCH)
    f = _maskbench()[index]
    doc = json.loads(f.read_text("utf-8"))
    _compare(vocab, "compile_json_schema", (doc.get("schema", doc),), {}, seed=index)


@pytest.mark.parametrize(
    "name", ["json.gbnf", "json_arr.gbnf", "arithmetic.gbnf", "c.gbnf", "chess.gbnf", "list.gbnf"]
)
def test_llama_cpp_gbnf_grammars(vocab: Vocabulary, name: str) -> None:
    path = GBNF_DIR / name
    _skip_without(path)
    assert _compare(vocab, "compile_grammar", (path.read_text("utf-8"),), {}, seed=7) > 0


@pytest.mark.parametrize(
    "name", ["c1_arith.lark", "c2_arith_stmt.lark", "c1_arith.gbnf", "c2_arith_stmt.gbnf"]
)
def test_grammar_workloads(vocab: Vocabulary, name: str) -> None:
    path = CFG_DIR / name
    _skip_without(path)
    kw = {"syntax": "lark"} if name.endswith(".lark") else {}
    assert _compare(vocab, "compile_grammar", (path.read_text("utf-8"),), kw, seed=3) > 0


def test_lark_and_builtin_json(vocab: Vocabulary) -> None:
    assert _compare(vocab, "compile_grammar", (LARK,), {"syntax": "lark"}, seed=1) > 0
    assert _compare(vocab, "compile_builtin_json_grammar", (), {}, seed=2) > 0


def _regexes() -> Iterator[str]:
    yield r"[a-z\" ]{0,300}x"
    yield r"(\w+-?){0,100}!"
    for f in sorted(REGEX_DIR.glob("*.json")):
        yield json.loads(f.read_text("utf-8"))["pattern"]


def test_regexes(vocab: Vocabulary) -> None:
    compared = 0
    for i, pattern in enumerate(_regexes()):
        compared += _compare(vocab, "compile_regex", (pattern,), {}, seed=i)
    assert compared > 0


def test_lexer_past_its_cap_falls_back_with_the_same_masks(vocab: Vocabulary) -> None:
    """A lazy lexer allowed one union state beyond the rule automata's overflows during the
    walks (c1_arith's lexer makes three): the classifier continues on the per-rule automata,
    and the masks do not change."""
    path = CFG_DIR / "c1_arith.gbnf"
    _skip_without(path)
    if not LEXER_PATCHABLE:
        pytest.skip("patches cfg_program.LazyExpandedLexer (cfg_program compiled with mypyc)")
    real = cfg_program.LazyExpandedLexer

    def tiny(auto: Any, max_states: int = 30_000) -> LazyExpandedLexer:
        return real(auto, sum(d.table.shape[0] for d in auto.dfas) + 1)

    source = path.read_text("utf-8")
    with mock.patch.object(cfg_program, "LazyExpandedLexer", tiny):
        assert _compare(vocab, "compile_grammar", (source,), {}, seed=5) > 0
        grammar = _compile(vocab, True, "compile_grammar", (source,), {})
        replay_masks(grammar, random_walks(grammar, walks=3, steps=24, seed=5))
    positions = grammar.program._positions
    assert isinstance(positions, cfg_program._LazyExitSplitClassifier)
    assert positions._fallback is not None


@pytest.mark.parametrize("index", [0, 3, 5, 9])
def test_lazy_digests_are_the_eager_digests(vocab: Vocabulary, index: int) -> None:
    """The lazy classifier's regions (the states a wide start reaches, refined on one column
    per byte class with integer row classes for the split labels) key the process-wide
    shared walks: on every rule position of a region (lexer states below ``offsets[-1]``
    are numbered alike in both builds) the region's classes are the eager build's classes,
    both ways, and where the eager refinement converged (so did the region's) its digest is
    the eager build's.  A wrong column order, label or numbering would give other classes
    or digests (walks shared across grammars where they differ)."""
    _skip_without(MASKBENCH)
    f = _maskbench()[index]
    doc = json.loads(f.read_text("utf-8"))
    schema = doc.get("schema", doc)
    eager = _compile(vocab, False, "compile_json_schema", (schema,), {})
    lazy = _compile(vocab, True, "compile_json_schema", (schema,), {})
    replay_masks(lazy, random_walks(lazy, walks=WALKS, steps=STEPS, seed=index))
    e_pos, l_pos = eager.program._positions, lazy.program._positions
    if not isinstance(l_pos, cfg_program._LazyExitSplitClassifier) or not l_pos._regions:
        pytest.skip("no wide start state met: no region")
    assert isinstance(e_pos, cfg_program._ExitSplitClassifier)
    n_global = int(l_pos.lexer.offsets[-1])
    eager_stable = e_pos._digest_class is e_pos._lex_class
    compared = classed = 0
    for rid, (_, states, part, dpart, *_) in enumerate(l_pos._regions):
        if eager_stable:
            assert dpart is part, rid
        eager_of_lazy: dict[int, int] = {}
        lazy_of_eager: dict[int, int] = {}
        for i, g in enumerate(states.tolist()):
            if not 0 < g < n_global:
                continue
            e, c = int(e_pos._lex_class[g]), int(part[i])
            assert eager_of_lazy.setdefault(c, e) == e, g
            assert lazy_of_eager.setdefault(e, c) == c, g
            classed += 1
            if eager_stable:
                got = l_pos._region_digest((rid, i))
                if got is not None:
                    assert got == e_pos.cut_signature(g), g
                    compared += 1
    assert classed > 0
    assert compared > 0 or not eager_stable
