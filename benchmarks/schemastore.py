#!/usr/bin/env python3
"""SchemaStore held-out samples: how many real schemas compile, why the others are refused, and
whether a compiled grammar ever accepts an instance the schema rejects.

Data: ``<repo>/../shared/data/SchemaStore/src`` — ``schemas/json/*.json`` (the schemas),
``test/<name>/`` and ``negative_test/<name>/`` (instances, JSON/YAML/TOML).

For each of ``--sample N`` schemas drawn with ``--seed`` (``random.Random(seed).sample`` of the
sorted file names; ``--files`` names them instead):

1. **formcast** compiles the schema from its path (relative ``$ref``s read the sibling files;
   ``JsonSchemaOptions(registry=formcast.json_schema_registry(<schemas folder>))`` resolves an
   ``http(s)`` reference to a SchemaStore URL by the ``$id`` of the local file; nothing is
   fetched) against a byte vocabulary (256 one-byte tokens and a stop token: the grammar is what
   is measured, not a tokenizer).  No wall-clock cap inside formcast (its deterministic fuel
   still applies); ``--timeout`` seconds of wall clock per schema (``signal.setitimer``) turn a
   runaway compile into the outcome ``timeout``.
2. **llguidance**, when ``import llguidance`` works, compiles the same schema document
   (``LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})`` then
   ``LLMatcher.validate_grammar``): its compiled/refused count is printed side by side (it sees
   the document only, so a sibling-file ``$ref`` is a refusal there).
3. A refusal is grouped by its reason: ``<error class>:<keyword or limit>`` (the feature of an
   :class:`~formcast.errors.UnsupportedFeatureError`, the limit of a
   :class:`~formcast.errors.LimitExceededError`, ``$ref:remote`` for a document outside the
   corpus).  An exception that is not a formcast error is a ``crash:<class>``.
4. For a compiled schema every instance of its test folders is written as compact JSON
   (``ensure_ascii=False``) and fed with ``accept_bytes``; the **oracle** is ``jsonschema``
   (``validator_for(schema)`` with that draft's format checker and a registry of every corpus
   schema by ``$id``, file URI and file name), not the folder the instance sits in.  An instance
   the oracle rejects and formcast accepts is **invalid accepted** — a soundness failure, always
   listed.  A valid instance formcast rejects is retried with its keys in schema order
   (``benchmarks/maskbench.py: reorder_to_schema``; formcast generates ``properties`` in schema
   order) and counted as *property order* when that passes, else *valid rejected*.  An instance
   the oracle cannot judge (an unresolvable reference) is counted as *no oracle* and skipped.

Usage::

    python benchmarks/schemastore.py --sample 120 --seed 1
    python benchmarks/schemastore.py --sample 120 --seed 2 --json out.json --engines formcast
    python benchmarks/schemastore.py --files cloudbuild.json,tsconfig.json --details

Cost: a sample of 120 takes a few minutes on one loaded core (a handful of schemas take tens of
seconds each).  Exit status 1 when an invalid instance was accepted or a crash happened.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STORE = REPO.parent / "shared" / "data" / "SchemaStore" / "src"
SCHEMAS = STORE / "schemas" / "json"
INSTANCE_SUFFIXES = (".json", ".yaml", ".yml", ".toml")


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


def _compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _reorder_function() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_formcast_maskbench_reorder", REPO / "benchmarks" / "maskbench.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reorder_to_schema


def instances(stem: str) -> list[tuple[str, Any]]:
    """``(folder/file name, value)`` of the instances of schema ``stem`` (unreadable: left out)."""
    out: list[tuple[str, Any]] = []
    for folder in ("test", "negative_test"):
        d = STORE / folder / stem
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
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
                _compact(value)
            except Exception:  # not JSON data (a YAML date, NaN...) or unreadable
                continue
            out.append((f"{folder}/{p.name}", value))
    return out


def refusal_reason(exc: BaseException) -> str:
    """The group of a compile failure: ``<error class>:<keyword or limit>``."""
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


class Oracle:
    """``jsonschema`` with every corpus schema registered (by ``$id``, file URI, file name)."""

    def __init__(self) -> None:
        import referencing
        import referencing.jsonschema

        resources = []
        for p in sorted(SCHEMAS.glob("*.json")):
            try:
                doc = json.loads(p.read_text(encoding="utf-8"))
            except Exception:
                continue
            if not isinstance(doc, dict):
                continue
            res = referencing.jsonschema.specification_with(
                doc.get("$schema", ""), default=referencing.jsonschema.DRAFT7
            ).create_resource(doc)
            uris = {p.name, p.resolve().as_uri()}
            if isinstance(doc.get("$id"), str):
                uris.add(doc["$id"])
            if isinstance(doc.get("id"), str):
                uris.add(doc["id"])
            resources += [(u, res) for u in uris]
        self.registry = referencing.Registry().with_resources(resources)

    def validator(self, schema: Any) -> Any:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        return cls(schema, registry=self.registry, format_checker=cls.FORMAT_CHECKER)


def _llguidance_outcome(schema: Any) -> str:
    import llguidance

    try:
        g = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False}
        )
        err = llguidance.LLMatcher.validate_grammar(g)
    except Exception as e:  # a refusal is an exception or an error string
        err = str(e) or type(e).__name__
    return "compiled" if not err else "refused"


def evaluate(
    name: str, st: dict[str, Any], timeout: float, engines: tuple[str, ...]
) -> dict[str, Any]:
    """One schema: formcast (and llguidance) outcome, instance verdicts against the oracle."""
    from formcast import GrammarMatcher, JsonSchemaOptions

    res: dict[str, Any] = {"name": name, "instances": {}}
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    if "llguidance" in engines and st.get("llguidance"):
        res["llguidance"] = _llguidance_outcome(schema)
    opts = JsonSchemaOptions(registry=st["registry"], max_compile_seconds=None)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    t0 = time.perf_counter()
    try:
        compiled = st["compiler"].compile_json_schema(SCHEMAS / name, opts)
        res["outcome"] = "compiled"
    except _Timeout:
        res["outcome"] = "timeout"
        return res
    except Exception as exc:
        res["outcome"] = refusal_reason(exc)
        res["detail"] = str(exc)[:240]
        return res
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        res["seconds"] = round(time.perf_counter() - t0, 3)

    def accepts(value: Any) -> bool:
        m = GrammarMatcher(compiled)
        return bool(m.accept_bytes(_compact(value).encode("utf-8")) and m.is_accepting())

    try:
        validator = st["oracle"].validator(schema)
    except Exception as exc:
        validator = None
        res["oracle_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    for inst, value in instances(name.removesuffix(".json")):
        try:
            if validator is None:
                raise RuntimeError("no validator")
            valid = validator.is_valid(value)
        except Exception:
            res["instances"][inst] = "no oracle"
            continue
        got = accepts(value)
        if not valid:
            res["instances"][inst] = "invalid accepted" if got else "invalid rejected"
        elif got:
            res["instances"][inst] = "valid accepted"
        else:
            alt = st["reorder"](value, schema)
            ok = _compact(alt) != _compact(value) and accepts(alt)
            res["instances"][inst] = "property order" if ok else "valid rejected"
    return res


def setup(engines: tuple[str, ...]) -> dict[str, Any]:
    import formcast
    from formcast import GrammarCompiler, Vocabulary

    vocab = Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )
    st: dict[str, Any] = {
        "compiler": GrammarCompiler(
            vocab, cache_size=0, limits=formcast.CompileLimits(max_compile_seconds=None)
        ),
        "registry": formcast.json_schema_registry(SCHEMAS),
        "oracle": Oracle(),
        "reorder": _reorder_function(),
    }
    if "llguidance" in engines:
        try:
            import llguidance  # noqa: F401

            st["llguidance"] = True
        except ImportError:
            print("llguidance: not installed (skipped)")
    return st


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=120, help="schemas to draw (default 120)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--files", help="comma-separated schema file names instead of a sample")
    ap.add_argument("--timeout", type=float, default=60.0, help="wall-clock seconds per schema")
    ap.add_argument("--engines", default="formcast,llguidance")
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("--details", action="store_true", help="print each schema's result")
    args = ap.parse_args(argv)
    if not SCHEMAS.is_dir():
        print(f"SchemaStore not found at {SCHEMAS}", file=sys.stderr)
        return 2
    names = sorted(p.name for p in SCHEMAS.glob("*.json"))
    if args.files:
        picked = [n.strip() for n in args.files.split(",") if n.strip()]
    else:
        picked = random.Random(args.seed).sample(names, min(args.sample, len(names)))
    engines = tuple(e.strip() for e in args.engines.split(","))
    st = setup(engines)
    results = []
    t0 = time.perf_counter()
    for i, name in enumerate(picked):
        r = evaluate(name, st, args.timeout, engines)
        results.append(r)
        if args.details:
            verdicts = Counter(r["instances"].values())
            print(
                f"[{i + 1}/{len(picked)}] {name}: {r['outcome']} ({r.get('seconds')} s)"
                f" {dict(verdicts) or ''} {r.get('detail', '')[:160]}",
                flush=True,
            )
    outcomes = Counter(r["outcome"] for r in results)
    verdicts = Counter(v for r in results for v in r["instances"].values())
    compiled = outcomes.get("compiled", 0)
    print(
        f"SchemaStore sample: {len(results)} schemas (seed {args.seed}), "
        f"{time.perf_counter() - t0:.0f} s"
    )
    print(f"formcast: {compiled} compiled, {len(results) - compiled} refused")
    if st.get("llguidance"):
        llg = Counter(r.get("llguidance") for r in results)
        print(f"llguidance: {llg.get('compiled', 0)} compiled, {llg.get('refused', 0)} refused")
    print("refusal reasons:")
    for reason, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
        if reason != "compiled":
            names_of = [r["name"] for r in results if r["outcome"] == reason]
            print(f"  {n:4d} {reason}: {', '.join(names_of[:6])}{' ...' if n > 6 else ''}")
    print("instances (oracle: jsonschema):", dict(sorted(verdicts.items())))
    bad = [
        f"{r['name']}: {inst}"
        for r in results
        for inst, v in r["instances"].items()
        if v == "invalid accepted"
    ]
    crashes = [r["name"] for r in results if r["outcome"].startswith("crash:")]
    for b in bad:
        print(f"INVALID ACCEPTED {b}")
    for c in crashes:
        print(f"CRASH {c}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 1 if bad or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
