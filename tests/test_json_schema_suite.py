"""The JSON-Schema-Test-Suite ratchet (draft 2020-12, required tests; ``optional/`` skipped).

Per case the schema is compiled (a compile-time ``UnsupportedFeatureError`` or
``LimitExceededError`` counts its tests as *unsupported*, an ``UnsatisfiableGrammarError`` as a
grammar that accepts nothing); each test instance is serialized compactly and run through the
byte-level :class:`~formcast.runtime.matcher.GrammarMatcher` (a vocabulary of the 256 single
bytes).  Outcomes:

* ``P`` pass — valid accepted or invalid rejected;
* ``F`` false positive — an invalid instance accepted: **never allowed**;
* ``N`` false negative — a valid instance rejected (property order, integer spelling, format
  subsets... see ``docs/json_schema.md``);
* ``U`` unsupported — the schema failed closed at compile time.

``tests/data/json_schema_suite_baseline.json`` stores every test's outcome.  A test that passed
in the baseline and no longer does fails this test; improvements are printed.  Regenerate the
baseline with ``FORMCAST_UPDATE_BASELINE=1 pytest tests/test_json_schema_suite.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from formcast.errors import LimitExceededError, UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.grammar.ir import Grammar
from formcast.grammar.json_schema import JsonSchemaOptions, schema_to_grammar

SUITE = Path(__file__).resolve().parents[2] / "shared" / "data" / "JSON-Schema-Test-Suite"
BASELINE = Path(__file__).resolve().parent / "data" / "json_schema_suite_baseline.json"


def _registry() -> Any:
    import referencing
    import referencing.jsonschema

    resources = []
    for p in sorted((SUITE / "remotes").rglob("*.json")):
        rel = p.relative_to(SUITE / "remotes").as_posix()
        contents = json.loads(p.read_text(encoding="utf-8"))
        resources.append(
            (
                f"http://localhost:1234/{rel}",
                referencing.Resource.from_contents(
                    contents, default_specification=referencing.jsonschema.DRAFT202012
                ),
            )
        )
    return referencing.Registry().with_resources(resources)


class _Matcher:
    """Byte-level acceptance through the fast runtime (falls back on the reference recognizer)."""

    def __init__(self) -> None:
        self.compiler: Any = None
        try:
            from formcast.index.compiler import GrammarCompiler
            from formcast.vocab.vocabulary import Vocabulary

            if hasattr(GrammarCompiler, "compile_grammar_ir"):
                vocab = Vocabulary.from_tokens(
                    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
                )
                self.compiler = GrammarCompiler(vocab, cache_size=0)
        except ImportError:  # pragma: no cover
            self.compiler = None

    def build(self, grammar: Grammar) -> Any:
        if self.compiler is None:
            from formcast.grammar.reference import ReferenceRecognizer

            rr = ReferenceRecognizer(grammar)
            return rr.matches
        from formcast.runtime.matcher import GrammarMatcher

        compiled = self.compiler.compile_grammar_ir(grammar)

        def matches(text: str) -> bool:
            m = GrammarMatcher(compiled)
            return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())

        return matches


def run_suite() -> dict[str, dict[str, str]]:
    """Outcome letters per case, keyed by file and ``<index> <description>``."""
    options = JsonSchemaOptions(registry=_registry())
    matcher = _Matcher()
    results: dict[str, dict[str, str]] = {}
    for path in sorted((SUITE / "tests" / "draft2020-12").glob("*.json")):
        per_case: dict[str, str] = {}
        for i, case in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            key = f"{i} {case['description']}"
            try:
                grammar, _ = schema_to_grammar(case["schema"], options)
                matches = matcher.build(grammar)
            except UnsatisfiableGrammarError:

                def matches(text: str) -> bool:
                    return False

            except (UnsupportedFeatureError, LimitExceededError):
                per_case[key] = "U" * len(case["tests"])
                continue
            letters = ""
            for t in case["tests"]:
                text = json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False)
                got = matches(text)
                letters += "P" if got == t["valid"] else ("F" if got else "N")
            per_case[key] = letters
        results[path.name] = per_case
    return results


def summarize(results: dict[str, dict[str, str]]) -> dict[str, Any]:
    letters = "".join(x for cases in results.values() for x in cases.values())
    n = len(letters)
    return {
        "tests": n,
        "pass": letters.count("P"),
        "pass_percent": round(100 * letters.count("P") / max(n, 1), 1),
        "false_positive": letters.count("F"),
        "false_negative": letters.count("N"),
        "unsupported": letters.count("U"),
    }


@pytest.mark.slow
def test_json_schema_test_suite_ratchet() -> None:
    if not (SUITE / "tests" / "draft2020-12").is_dir():
        pytest.skip(f"JSON-Schema-Test-Suite not found at {SUITE}")
    results = run_suite()
    summary = summarize(results)
    false_positives = [
        f"{f} / {case}: {letters}"
        for f, cases in results.items()
        for case, letters in cases.items()
        if "F" in letters
    ]
    assert not false_positives, "invalid instances accepted:\n" + "\n".join(false_positives)
    if os.environ.get("FORMCAST_UPDATE_BASELINE"):
        BASELINE.write_text(
            json.dumps({"summary": summary, "results": results}, indent=1, ensure_ascii=False)
            + "\n",
            encoding="utf-8",
        )
        return
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    regressions: list[str] = []
    improvements: list[str] = []
    for f, cases in baseline["results"].items():
        for case, old in cases.items():
            new = results.get(f, {}).get(case, "")
            for k, was in enumerate(old):
                now = new[k] if k < len(new) else "?"
                if was == "P" and now != "P":
                    regressions.append(f"{f} / {case} / test {k}: {was} -> {now}")
                elif was != "P" and now == "P":
                    improvements.append(f"{f} / {case} / test {k}: {was} -> {now}")
    if improvements:
        print(
            f"\n{len(improvements)} suite tests improved (update the baseline with "
            "FORMCAST_UPDATE_BASELINE=1):\n" + "\n".join(improvements)
        )
    print(f"\nJSON-Schema-Test-Suite draft2020-12: {summary}")
    assert not regressions, "suite regressions:\n" + "\n".join(regressions)
