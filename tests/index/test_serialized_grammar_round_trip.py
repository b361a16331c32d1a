"""``CompiledGrammar.serialize`` / ``deserialize``: a loaded grammar is the grammar that was
written — every attribute, caches included — and gives bit-identical masks in a new process.

* **new process**: for each front-end (regex, a counted regex, JSON Schema with counters and
  recursion, GBNF, Lark, builtin JSON) the grammar is walked (seeded random walks over allowed
  tokens: the caches fill), serialized, loaded by a fresh interpreter that replays the walks;
  its masks equal those of a fresh compile in this process, bit for bit, and it computes no
  mask at all along the walks (it loaded warm).
* **every attribute**: the loaded object graph equals the original attribute by attribute
  (``serialize_helpers.assert_same_data``: every field of ``CompiledGrammar`` and of every
  object under it), so a field added later that the format does not carry fails here.
* serializing twice gives the same bytes' worth of data (a loaded grammar re-serializes to a
  grammar with the same data).
* lazy sections (the lexer and the position classifier): not loaded by cached masks, the
  cache accounting the same before and after they load, compared once loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from formcast import CompiledGrammar, GrammarCompiler
from serialize_helpers import (
    CONSTRAINTS,
    assert_same_data,
    compile_named,
    random_walks,
    replay_masks,
    run_in_new_process,
    small_vocab,
)

NAMES = sorted(CONSTRAINTS)

_REPLAY = """
import json, sys
import numpy as np
from serialize_helpers import small_vocab, replay_masks
from formcast import CompiledGrammar
vocab = small_vocab()
out = {}
for name in json.loads(sys.argv[1]):
    data = open(f"{sys.argv[2]}/{name}.fcg", "rb").read()
    grammar = CompiledGrammar.deserialize(data, vocab)
    walks = json.load(open(f"{sys.argv[2]}/{name}.walks.json"))
    before = grammar.cache_info()["mask_computations"]
    np.save(f"{sys.argv[2]}/{name}.masks.npy", replay_masks(grammar, walks))
    out[name] = grammar.cache_info()["mask_computations"] - before
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vocab():  # type: ignore[no-untyped-def]
    return small_vocab()


@pytest.mark.slow
def test_masks_bit_identical_in_a_new_process(vocab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    writer = GrammarCompiler(vocab)
    walks = {}
    for name in NAMES:
        grammar = compile_named(writer, name)
        walks[name] = random_walks(grammar, seed=len(name))
        (tmp_path / f"{name}.walks.json").write_text(json.dumps(walks[name]))
        (tmp_path / f"{name}.fcg").write_bytes(grammar.serialize())
    computed = json.loads(run_in_new_process(_REPLAY, json.dumps(NAMES), str(tmp_path)))
    fresh = GrammarCompiler(vocab, cache_size=0)
    for name in NAMES:
        expected = replay_masks(compile_named(fresh, name), walks[name])
        loaded = np.load(tmp_path / f"{name}.masks.npy")
        assert loaded.shape == expected.shape, name
        assert np.array_equal(loaded, expected), f"{name}: masks differ after loading"
        # every state on the walks was cached when the grammar was written: loaded warm
        assert computed[name] == 0, f"{name}: {computed[name]} masks recomputed after loading"


@pytest.mark.parametrize("name", NAMES)
def test_every_attribute_survives_a_round_trip(vocab, name: str) -> None:  # type: ignore[no-untyped-def]
    grammar = compile_named(GrammarCompiler(vocab), name)
    random_walks(grammar, walks=3, steps=12, seed=7)  # fill the caches first
    data = grammar.serialize()
    loaded = CompiledGrammar.deserialize(data, vocab)
    assert_same_data(grammar, loaded, vocab)
    # and once more: what was loaded writes the same data again
    assert_same_data(grammar, CompiledGrammar.deserialize(loaded.serialize(), vocab), vocab)


@pytest.mark.parametrize("name", ["json_schema", "gbnf", "regex_counted"])
def test_lazy_sections_load_on_first_use(vocab, name: str) -> None:  # type: ignore[no-untyped-def]
    """The lexer and the position classifier are loaded on first use: a cached mask needs
    neither; the cache accounting answers the same before and after they load; a loaded
    grammar re-serialized before they load writes the same data."""
    grammar = compile_named(GrammarCompiler(vocab), name)
    walks = random_walks(grammar, walks=2, steps=10, seed=5)
    data = grammar.serialize()
    loaded = CompiledGrammar.deserialize(data, vocab)
    lazy = {k for k, v in vars(loaded.program).items() if type(v).__name__ == "_LazyAttr"}
    assert lazy == {"lexer", "_positions"}
    computed = loaded.cache_info()["mask_computations"]
    assert np.array_equal(replay_masks(loaded, walks), replay_masks(grammar, walks))
    info, nbytes = loaded.cache_info(), loaded.nbytes()
    assert info["mask_computations"] == computed
    assert {k for k, v in vars(loaded.program).items() if type(v).__name__ == "_LazyAttr"} == lazy
    again = CompiledGrammar.deserialize(loaded.serialize(), vocab)  # sections loaded to write
    loaded.load_sections()
    assert not [v for v in vars(loaded.program).values() if type(v).__name__ == "_LazyAttr"]
    assert loaded.cache_info() == info
    assert loaded.nbytes() == nbytes
    assert_same_data(grammar, loaded, vocab)
    assert_same_data(grammar, again, vocab)


def test_a_loaded_grammar_keeps_working_past_its_caches(vocab) -> None:  # type: ignore[no-untyped-def]
    """States never visited before the write (so not in the file) are computed after loading,
    on the rebuilt derived tables, and equal a fresh compile's."""
    writer = GrammarCompiler(vocab)
    grammar = compile_named(writer, "json_schema")
    loaded = CompiledGrammar.deserialize(grammar.serialize(), vocab)  # cold: initial state only
    walks = random_walks(compile_named(GrammarCompiler(vocab, cache_size=0), "json_schema"), seed=3)
    fresh = compile_named(GrammarCompiler(vocab, cache_size=0), "json_schema")
    assert np.array_equal(replay_masks(loaded, walks), replay_masks(fresh, walks))
