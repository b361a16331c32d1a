"""A compile's fuel is a function of the compile alone, never of what the process did before.

``CompiledGrammar.compile_work`` (the units of ``CompileLimits.max_compile_work``) must come
out the same whether a constraint is compiled first in a fresh process or after any other
compiles, in any order: otherwise whether it fits the limit depends on history.  The
process-wide caches of compile work (the front-end's ``metered_cache`` helpers, the string
automata, the sub- and rule automata) make that hard: an entry built inside another one, or
whose nested entries the current compile already has, costs a fresh build a different amount
than its first build did.  :func:`formcast.limits.cached_work` records each entry's own work
and its nested cached calls and replays that tree against the compile's memo on a hit.

Two checks: a differential over fresh processes (MaskBench schemas from ``../shared/data``
plus small synthetic constraints with repeated formats and patterns and nested automata,
each compiled alone, then all in one process in both orders; every process with another
``PYTHONHASHSEED``, since set order must not change the fuel either), and an in-process check
of the mechanism on nested metered caches under every history and cache size (eviction
included).
No test here measures time.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from formcast.limits import WorkBudget, charge, compile_scope, metered_cache

MASKBENCH = ("JSONSchemaBench", "maskbench", "data")
# differed alone vs after other compiles before the replayed trees (sub-automata shared between
# rules, memo hits nested in cached builds), and small enough to compile in ~0.2 s each
MASKBENCH_FILES = (
    "Github_easy---o9938.json",
    "Glaiveai2K---generate_random_password_d435e6aa.json",
    "Kubernetes---kb_608_Normalized.json",
    "Github_easy---o76874.json",
    "Glaiveai2K---calculate_rental_income_bce2d46e.json",
)

PATTERN = "^[a-z][a-z0-9_]{1,12}$"
LETTERS = "^\\p{L}{2,6}$"
SYNTHETIC: dict[str, tuple[str, Any]] = {
    "repeated formats": (
        "json",
        {
            "type": "object",
            "properties": {
                **{f"e{i}": {"type": "string", "format": "email"} for i in range(4)},
                **{f"d{i}": {"type": "string", "format": "date-time"} for i in range(3)},
                "u": {"type": "string", "format": "uri"},
            },
        },
    ),
    "repeated patterns": (
        "json",
        {
            "type": "object",
            "properties": {f"p{i}": {"type": "string", "pattern": PATTERN} for i in range(4)},
            "patternProperties": {PATTERN: {"type": "string", "pattern": LETTERS}},
        },
    ),
    "pattern inside a string automaton": (
        "json",
        {
            "type": "object",
            "properties": {
                "a": {"allOf": [{"type": "string", "pattern": PATTERN}, {"maxLength": 8}]},
                "b": {"type": "string", "pattern": PATTERN, "format": "email"},
                "c": {"type": "string", "pattern": LETTERS, "not": {"const": "abc"}},
            },
        },
    ),
    "one pattern alone": ("json", {"type": "string", "pattern": PATTERN}),
    "one format alone": ("json", {"type": "string", "format": "email"}),
    "nested sub-automata": ("regex", "(\\p{L}{2,6}-){1,3}[\\p{L}\\p{N}]{3,9}"),
    "a shared sub-automaton": ("regex", "\\p{L}{2,6}|[\\p{L}\\p{N}]{3,9}@\\p{L}{2,6}"),
    # which required property is checked for emptiness first must not follow a set's order
    # (it varies with PYTHONHASHSEED)
    "an empty required property": (
        "json",
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        **{
                            f"k{i}": {"type": "string", "pattern": f"^[a-z]{{{i + 1}}}x{i}$"}
                            for i in range(8)
                        },
                        "k5": {"type": "string", "pattern": "^a{2}$", "minLength": 3},
                    },
                    "required": [f"k{i}" for i in range(8)],
                },
                {"type": "integer"},
            ]
        },
    ),
    "enum of patterns": (
        "json",
        {
            "type": "array",
            "items": {"anyOf": [{"type": "string", "pattern": LETTERS}, {"format": "date"}]},
        },
    ),
}

# compiles the named cases in the order given, in one process; prints {name: compile_work}
_SCRIPT = r"""
import json, sys
from formcast import GrammarCompiler, Vocabulary
from formcast.limits import CompileLimits

cases = json.load(open(sys.argv[1]))
vocab = Vocabulary.from_tokens(
    [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256], name="bytes"
)
compiler = GrammarCompiler(
    vocab, limits=CompileLimits(max_compile_seconds=None), cache_size=0
)
out = {}
for name in sys.argv[2:]:
    kind, payload = cases[name]
    try:
        if kind == "regex":
            out[name] = compiler.compile_regex(payload).compile_work
        else:
            out[name] = compiler.compile_json_schema(payload).compile_work
    except Exception as e:  # an outcome too: it must not depend on history either
        out[name] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""


def _compile_in_fresh_process(cases: Path, names: list[str], hash_seed: int) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(cases), *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},  # sets iterate differently
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow
def test_compile_work_is_the_same_alone_and_after_other_compiles(
    shared_data: Path, tmp_path: Path
) -> None:
    data = shared_data.joinpath(*MASKBENCH)
    cases: dict[str, tuple[str, Any]] = dict(SYNTHETIC)
    for f in MASKBENCH_FILES:
        path = data / f
        if not path.is_file():
            pytest.skip(f"MaskBench schema not found at {path}")
        cases[f] = ("json", json.loads(path.read_text())["schema"])
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    names = list(cases)
    forward = _compile_in_fresh_process(cases_file, names, 0)
    backward = _compile_in_fresh_process(cases_file, names[::-1], 1)
    differing = {}
    for i, name in enumerate(names):
        alone = _compile_in_fresh_process(cases_file, [name], 2 + i)[name]
        assert isinstance(alone, int), (name, alone)  # compiled, not an error
        assert alone > 0
        if not alone == forward[name] == backward[name]:
            differing[name] = (alone, forward[name], backward[name])
    assert not differing, f"compile_work (alone, after the others, reversed): {differing}"


# -- the mechanism, in process: nested metered caches under every history -----------------------


class _Family:
    """Three levels of metered caches (fresh stores: what a fresh process would have)."""

    def __init__(self, maxsize: int) -> None:
        @metered_cache(maxsize)
        def leaf(n: int) -> tuple[str, int]:
            charge(100 + n)
            return ("leaf", n)

        @metered_cache(maxsize)
        def mid(n: int) -> tuple[object, ...]:
            charge(10)
            return (leaf(n), leaf(n + 1), leaf(n))

        @metered_cache(maxsize)
        def top(n: int) -> tuple[object, ...]:
            charge(1)
            return (mid(n), mid(n + 1), leaf(n + 5))

        self.leaf, self.mid, self.top = leaf, mid, top


PROGRAMS: dict[str, Callable[[_Family], object]] = {
    "top": lambda f: f.top(0),
    "leaf then top": lambda f: (f.leaf(1), f.top(0)),
    "mid then top twice": lambda f: (f.mid(1), f.top(0), f.top(0)),
    "top then its parts": lambda f: (f.top(0), f.mid(0), f.leaf(6), f.leaf(5)),
    "two tops": lambda f: (f.top(1), f.top(0)),
    "leaves": lambda f: (f.leaf(2), f.leaf(0), f.leaf(2)),
}


def _fuel(family: _Family, program: Callable[[_Family], object]) -> int:
    budget = WorkBudget(10**9)
    with compile_scope(budget):
        program(family)
    return budget.used


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_nested_metered_caches_charge_what_a_fresh_build_would(name: str) -> None:
    program = PROGRAMS[name]
    alone = _fuel(_Family(4096), program)
    for maxsize in (1, 2, 4096):  # 1 and 2: entries evicted between and within compiles
        assert _fuel(_Family(maxsize), program) == alone
        for n in (1, 2):
            for history in itertools.permutations(PROGRAMS, n):
                family = _Family(maxsize)
                for earlier in history:
                    _fuel(family, PROGRAMS[earlier])
                    PROGRAMS[earlier](family)  # and outside any compile
                assert _fuel(family, program) == alone, (maxsize, history)


def test_an_evicted_entry_is_reused_while_an_entry_built_on_it_lives() -> None:
    """Values keep the sharing a fresh process gives them: ``top(0)`` holds ``leaf(0)``, and a
    later ``leaf(0)`` returns that object, not a rebuilt copy (identity-keyed passes charge
    per distinct node)."""
    family = _Family(1)
    budget = WorkBudget(10**9)
    with compile_scope(budget):
        top = family.top(0)
    family.leaf(7)  # evicts everything else from the one-entry stores
    with compile_scope(WorkBudget(10**9)):
        assert family.leaf(0) is top[0][0]  # type: ignore[index]
        assert family.top(0) is top
