"""``formcast._gc.gc_paused``: the compile pauses Python's cyclic collector and restores the
state it found, also when compiles nest or fail."""

from __future__ import annotations

import gc

import pytest

from formcast import GrammarCompiler
from formcast._gc import gc_paused
from formcast.errors import GrammarSyntaxError
from formcast.vocab.vocabulary import Vocabulary


def _vocab() -> Vocabulary:
    tokens = [bytes([b]) for b in range(32, 127)] + [b""]
    return Vocabulary(tokens, stop_token_ids=[len(tokens) - 1], name="bytes")


def test_paused_inside_restored_after_even_when_nested_or_failing() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer body still runs paused
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_compiler_pauses_only_when_asked() -> None:
    seen: list[bool] = []
    vocab = _vocab()
    compiler = GrammarCompiler(vocab, cache_size=0)
    off = GrammarCompiler(vocab, cache_size=0, pause_gc=False)
    import formcast.index.compiler as compiler_module

    real = compiler_module.compile_grammar_automaton

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    compiler_module.compile_grammar_automaton = spy  # type: ignore[assignment]
    try:
        compiler.compile_json_schema({"type": "array", "items": {"type": "integer"}})
        off.compile_json_schema({"type": "array", "items": {"type": "string"}})
    finally:
        compiler_module.compile_grammar_automaton = real
    assert seen == [False, True]
    assert gc.isenabled()
    with pytest.raises(GrammarSyntaxError):
        compiler.compile_grammar("root ::= (", syntax="gbnf")
    assert gc.isenabled()
