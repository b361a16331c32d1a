"""The JSON-Schema-Test-Suite ratchet: every draft folder of ``tests/``, ``optional/`` included.

Each draft folder (``draft4``, ``draft6``, ``draft7``, ``draft2019-09``, ``draft2020-12``: every
one present; an unknown folder fails this test) is run with that draft as
``JsonSchemaOptions.default_draft`` and a registry of the suite's ``remotes/`` whose default
specification is that draft.  ``optional/`` is run too: ``optional/format/*`` with formcast's
default ``format_assertion=True`` (a format formcast does not know fails closed, so only the
formats it claims to enforce can accept or reject anything).

Per case the schema is compiled (with its run-time checks, such as ``uniqueItems`` over strings,
when the grammar has any; a compile-time ``UnsupportedFeatureError`` or
``LimitExceededError`` counts its tests as *unsupported*, an ``UnsatisfiableGrammarError`` as a
grammar that accepts nothing); each test instance is serialized compactly and run through the
byte-level :class:`~formcast.runtime.matcher.GrammarMatcher` (a vocabulary of the 256 single
bytes).  Outcomes:

* ``P`` pass — valid accepted or invalid rejected;
* ``F`` false positive — an invalid instance accepted: allowed only for the tests listed in
  :data:`NOT_ENFORCED` (each names the sentence of ``docs/json_schema.md`` that says it is not
  enforced); any other one fails this test, and so does a listed one that no longer happens;
* ``N`` false negative — a valid instance rejected (property order, integer spelling, format
  subsets... see ``docs/json_schema.md``);
* ``U`` unsupported — the schema failed closed at compile time.

``tests/data/json_schema_suite_baseline.json`` stores every test's outcome, per draft, with a
summary per draft.  A test that passed in the baseline and no longer does fails this test;
improvements are printed.  Regenerate the baseline with
``FORMCAST_UPDATE_BASELINE=1 pytest tests/jsonschema/test_json_schema_test_suite_ratchet.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from formcast.errors import LimitExceededError, UnsatisfiableGrammarError, UnsupportedFeatureError
from formcast.frontends.jsonschema.api import JsonSchemaOptions, schema_to_grammar
from formcast.ir.nodes import Grammar
from formcast.testing.reference import ReferenceRecognizer

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT.parent / "shared" / "data" / "JSON-Schema-Test-Suite"
BASELINE = Path(__file__).resolve().parents[1] / "data" / "json_schema_suite_baseline.json"
DOCS = ROOT / "docs" / "json_schema.md"

#: suite folder -> JsonSchemaOptions.default_draft
DRAFTS = {
    "draft4": "4",
    "draft6": "6",
    "draft7": "7",
    "draft2019-09": "2019-09",
    "draft2020-12": "2020-12",
}

#: Invalid instances that formcast accepts on purpose: ``"<file> / <case description> / <test
#: description>"`` (every draft) -> a phrase of ``docs/json_schema.md`` that documents the rule as
#: not enforced.  Everything else accepted while invalid fails the ratchet.
NOT_ENFORCED: dict[str, str] = {}


#: remote folders that belong to one version of the specification
_VERSION_FOLDER = re.compile(r"draft[0-9-]+|v[0-9]+")


def _spec(draft: str) -> Any:
    import referencing.jsonschema as rj

    return {
        "4": rj.DRAFT4,
        "6": rj.DRAFT6,
        "7": rj.DRAFT7,
        "2019-09": rj.DRAFT201909,
        "2020-12": rj.DRAFT202012,
    }[draft]


def _registry(draft: str) -> Any:
    """The suite's remotes, ``http://localhost:1234/<path>``; a document without ``$schema`` is
    read as ``draft`` (those under ``remotes/draftX/`` as draft X)."""
    import referencing

    resources = []
    for p in sorted((SUITE / "remotes").rglob("*.json")):
        rel = p.relative_to(SUITE / "remotes").as_posix()
        top = rel.split("/", 1)[0]
        if _VERSION_FOLDER.fullmatch(top) and top not in DRAFTS:
            continue  # draft 3's or the next version's remotes: not a draft formcast reads
        own = DRAFTS.get(top, draft)
        contents = json.loads(p.read_text(encoding="utf-8"))
        resources.append(
            (
                f"http://localhost:1234/{rel}",
                referencing.Resource.from_contents(contents, default_specification=_spec(own)),
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
            from formcast.testing.reference import ReferenceRecognizer

            rr = ReferenceRecognizer(grammar)
            return rr.matches
        from formcast.runtime.matcher import GrammarMatcher

        compiled = self.compiler.compile_grammar_ir(grammar)

        def matches(text: str) -> bool:
            m = GrammarMatcher(compiled)
            return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())

        return matches

    def build_schema(self, schema: Any, options: JsonSchemaOptions) -> Any:
        """The acceptance test of a schema whose grammar needs run-time checks (marks):
        compiled by ``compile_json_schema``, which carries them to the matcher."""
        from formcast.runtime.matcher import GrammarMatcher

        compiled = self.compiler.compile_json_schema(schema, options)

        def matches(text: str) -> bool:
            m = GrammarMatcher(compiled)
            return bool(m.accept_bytes(text.encode("utf-8")) and m.is_accepting())

        return matches


def suite_files(folder: Path) -> list[Path]:
    """The test files of one draft folder, ``optional/`` (and ``optional/format/``) included."""
    return sorted(folder.rglob("*.json"), key=lambda p: p.relative_to(folder).as_posix())


def run_draft(folder: str, matcher: _Matcher | None = None) -> dict[str, dict[str, str]]:
    """Outcome letters per case, keyed by file (relative to the draft folder) and
    ``<index> <description>``."""
    draft = DRAFTS[folder]
    options = JsonSchemaOptions(
        registry=_registry(draft), default_draft=draft, max_compile_seconds=None
    )
    matcher = matcher or _Matcher()
    base = SUITE / "tests" / folder
    results: dict[str, dict[str, str]] = {}
    for path in suite_files(base):
        per_case: dict[str, str] = {}
        for i, case in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            key = f"{i} {case['description']}"
            try:
                marks: list[Any] = []  # run-time checks (uniqueItems over strings)
                grammar, _ = schema_to_grammar(case["schema"], options, marks=marks)
                if marks and matcher.compiler is not None:
                    matches = matcher.build_schema(case["schema"], options)
                else:
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
        results[path.relative_to(base).as_posix()] = per_case
    return results


def run_suite() -> dict[str, dict[str, dict[str, str]]]:
    """Outcome letters per draft folder, file and case."""
    matcher = _Matcher()
    return {folder: run_draft(folder, matcher) for folder in drafts_present()}


def drafts_present() -> list[str]:
    return [d for d in DRAFTS if (SUITE / "tests" / d).is_dir()]


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


def draft_summary(results: dict[str, dict[str, str]]) -> dict[str, Any]:
    """:func:`summarize` of a draft, then of its required and its ``optional/`` tests."""
    required = {f: c for f, c in results.items() if not f.startswith("optional/")}
    optional = {f: c for f, c in results.items() if f.startswith("optional/")}
    return {**summarize(results), "required": summarize(required), "optional": summarize(optional)}


def _test_names(folder: str, file: str, case_key: str) -> list[str]:
    index = int(case_key.split(" ", 1)[0])
    cases = json.loads((SUITE / "tests" / folder / file).read_text(encoding="utf-8"))
    case = cases[index]
    return [f"{file} / {case['description']} / {t['description']}" for t in case["tests"]]


def false_positives(
    results: dict[str, dict[str, dict[str, str]]],
) -> tuple[list[str], set[str]]:
    """The false positives not in :data:`NOT_ENFORCED` and the entries of it that happened."""
    unexpected: list[str] = []
    seen: set[str] = set()
    for folder, files in results.items():
        for file, cases in files.items():
            for case_key, letters in cases.items():
                if "F" not in letters:
                    continue
                names = _test_names(folder, file, case_key)
                for k, letter in enumerate(letters):
                    if letter != "F":
                        continue
                    if names[k] in NOT_ENFORCED:
                        seen.add(names[k])
                    else:
                        unexpected.append(f"{folder}/{names[k]} (case {case_key}, test {k})")
    return unexpected, seen


@pytest.mark.slow
def test_json_schema_test_suite_ratchet() -> None:
    if not (SUITE / "tests").is_dir():
        pytest.skip(f"JSON-Schema-Test-Suite not found at {SUITE}")
    unknown = sorted(
        p.name
        for p in (SUITE / "tests").iterdir()
        if p.is_dir() and p.name not in DRAFTS and p.name != "draft3"
    )
    assert not unknown, f"suite folders with no draft mapping (add them to DRAFTS): {unknown}"
    docs = DOCS.read_text(encoding="utf-8")
    undocumented = {name: phrase for name, phrase in NOT_ENFORCED.items() if phrase not in docs}
    assert not undocumented, f"NOT_ENFORCED entries not documented in {DOCS}: {undocumented}"
    results = run_suite()
    summary = {folder: draft_summary(files) for folder, files in results.items()}
    unexpected, seen = false_positives(results)
    assert not unexpected, "invalid instances accepted:\n" + "\n".join(unexpected)
    stale = sorted(set(NOT_ENFORCED) - seen)
    assert not stale, (
        "allow-listed false positives that no longer happen (remove them from NOT_ENFORCED "
        "and from docs/json_schema.md):\n" + "\n".join(stale)
    )
    if os.environ.get("FORMCAST_UPDATE_BASELINE"):
        BASELINE.write_text(
            json.dumps({"summary": summary, "results": results}, indent=1, ensure_ascii=False)
            + "\n",
            encoding="utf-8",
        )
        return
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    assert sorted(baseline["results"]) == sorted(results), (
        "the baseline covers other drafts than the suite: regenerate it"
    )
    regressions: list[str] = []
    improvements: list[str] = []
    for folder, files in baseline["results"].items():
        for f, cases in files.items():
            for case, old in cases.items():
                new = results[folder].get(f, {}).get(case, "")
                for k, was in enumerate(old):
                    now = new[k] if k < len(new) else "?"
                    if was == "P" and now != "P":
                        regressions.append(f"{folder}/{f} / {case} / test {k}: {was} -> {now}")
                    elif was != "P" and now == "P":
                        improvements.append(f"{folder}/{f} / {case} / test {k}: {was} -> {now}")
    if improvements:
        print(
            f"\n{len(improvements)} suite tests improved (update the baseline with "
            "FORMCAST_UPDATE_BASELINE=1):\n" + "\n".join(improvements)
        )
    for folder, s in summary.items():
        print(f"\nJSON-Schema-Test-Suite {folder}: {s}")
    assert not regressions, "suite regressions:\n" + "\n".join(regressions)


# -- draft semantics the ratchet found (unit tests: no suite data needed) ------------------------

_DIALECTS = {
    "4": "http://json-schema.org/draft-04/schema#",
    "6": "http://json-schema.org/draft-06/schema#",
    "7": "http://json-schema.org/draft-07/schema#",
    "2019-09": "https://json-schema.org/draft/2019-09/schema",
    "2020-12": "https://json-schema.org/draft/2020-12/schema",
}


def _validator(draft: str) -> Any:
    import jsonschema

    return jsonschema.validators.validator_for({"$schema": _DIALECTS[draft]})


def _sibling_id_schema(draft: str) -> dict[str, Any]:
    """``$ref: foo.json`` next to an ``$id`` that would resolve it elsewhere (the suite's
    "$ref prevents a sibling $id from changing the base uri")."""
    ident = "id" if draft == "4" else "$id"
    return {
        ident: "http://example.com/sibling_id/base/",
        "definitions": {
            "foo": {ident: "http://example.com/sibling_id/foo.json", "type": "string"},
            "base_foo": {ident: "foo.json", "type": "number"},
        },
        "allOf": [{ident: "http://example.com/sibling_id/", "$ref": "foo.json"}],
    }


@pytest.mark.parametrize("draft", ["4", "6", "7", "2019-09", "2020-12"])
def test_ref_sibling_id_and_the_base_uri(draft: str) -> None:
    """Drafts 4-7: ``$ref`` ignores its siblings, ``$id`` included (``foo.json`` is the number
    schema); 2019-09+: the sibling ``$id`` is the ``$ref``'s base (the string schema)."""
    schema = _sibling_id_schema(draft)
    oracle = _validator(draft)(schema)
    for how in ("default_draft", "$schema"):
        if how == "$schema":
            grammar, _ = schema_to_grammar(dict(schema, **{"$schema": _DIALECTS[draft]}))
        else:
            grammar, _ = schema_to_grammar(schema, JsonSchemaOptions(default_draft=draft))
        rr = ReferenceRecognizer(grammar)
        for x in ("a", 1):
            assert rr.matches(json.dumps(x)) == oracle.is_valid(x), (draft, how, x)
    assert oracle.is_valid(1) == (draft in ("4", "6", "7"))


@pytest.mark.parametrize("root_draft", ["7", "2019-09", "2020-12"])
@pytest.mark.parametrize("remote_draft", ["4", "6", "7", "2019-09", "2020-12"])
def test_ref_target_is_read_in_the_draft_of_its_resource(
    root_draft: str, remote_draft: str
) -> None:
    """A remote without ``$schema`` keeps the default specification it was registered with: a
    draft-7 remote's ``$ref`` ignores its sibling ``$id`` even when the referrer is 2020-12."""
    import referencing

    remote = _sibling_id_schema(remote_draft)
    uri = "http://example.com/sibling_id/base/"
    registry = referencing.Registry().with_resource(
        uri, referencing.Resource.from_contents(remote, default_specification=_spec(remote_draft))
    )
    root = {"$schema": _DIALECTS[root_draft], "$ref": uri}
    grammar, _ = schema_to_grammar(root, JsonSchemaOptions(registry=registry))
    rr = ReferenceRecognizer(grammar)
    oracle = _validator(remote_draft)(remote)
    for x in ("a", 1):
        assert rr.matches(json.dumps(x)) == oracle.is_valid(x), (root_draft, remote_draft, x)


@pytest.mark.parametrize("draft", ["4", "6", "7", "2019-09", "2020-12"])
def test_prefix_items_is_a_keyword_of_2020_12_only(draft: str) -> None:
    """Before 2020-12 ``prefixItems`` is not a keyword: a schema-form ``items`` constrains every
    item (reading it as 2020-12 would exempt the first one)."""
    schema = {"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}
    oracle = _validator(draft)(schema)
    grammar, warnings = schema_to_grammar(schema, JsonSchemaOptions(default_draft=draft))
    rr = ReferenceRecognizer(grammar)
    for x in (["a"], [1], ["a", 1], [1, 1], ["a", "b"], []):
        assert rr.matches(json.dumps(x, separators=(",", ":"))) == oracle.is_valid(x), (draft, x)
    assert any(w.startswith("prefixItems at #") for w in warnings) == (draft != "2020-12")
    if draft != "2020-12":
        with pytest.raises(UnsupportedFeatureError, match="prefixItems"):
            schema_to_grammar(
                schema, JsonSchemaOptions(default_draft=draft, unknown_keywords="error")
            )


def _rfc1123_label(label: str, *, last: bool, n: int) -> bool:
    """The ``hostname`` subset's labels (letters, digits, hyphens; 1-``n`` characters; no hyphen
    first or last; the last label not all digits, and ending with a letter when a digit starts
    it), written independently of formats.py."""
    import re

    if not re.fullmatch(f"[A-Za-z0-9](?:[A-Za-z0-9-]{{0,{n - 2}}}[A-Za-z0-9])?", label):
        return False
    return not last or label[0].isalpha() or label[-1].isalpha()


def _hostname_reference(s: str) -> bool:
    """A first label of up to 63 characters, then up to 6 of up to 30; no A-label."""
    labels = s.split(".")
    return (
        len(labels) <= 7
        and all(
            _rfc1123_label(x, last=i == len(labels) - 1, n=63 if i == 0 else 30)
            for i, x in enumerate(labels)
        )
        and not any(x[:4].lower() == "xn--" for x in labels)
    )


def test_hostname_rejects_every_a_label() -> None:
    """``xn--`` labels (any case) are A-labels, valid only when their Punycode decodes to a valid
    U-label (IDNA2008): that is not checked, so none is accepted, valid or not; every other
    RFC 1123 label of the subset still is."""
    import itertools
    import random

    rr = ReferenceRecognizer(schema_to_grammar({"type": "string", "format": "hostname"})[0])
    for bad in ("xn--X", "XN--aa---o47jg78q", "xn--hello-txk", "a.Xn--zca29lwxobi7a.com", "xN--a"):
        assert not rr.matches(json.dumps(bad)), bad
    for good in ("x", "xn", "xn-a", "xna--b", "x--n", "ab--cd.example", "axn--b.com", "n.xnx"):
        assert rr.matches(json.dumps(good)), good
    # the whole language, on every short string over the letters that matter, and long ones
    words = ["".join(t) for n in range(1, 5) for t in itertools.product("xXnN-a1.", repeat=n)]
    rnd = random.Random(0)
    words += [
        "".join(rnd.choice("xnXN-a1.") for _ in range(rnd.randint(20, 70))) for _ in range(300)
    ]
    words += [p + "b" * k for p in ("xn--", "xn-a", "xa", "a") for k in range(24, 30)]
    for w in words:
        assert rr.matches(json.dumps(w)) == _hostname_reference(w), w
