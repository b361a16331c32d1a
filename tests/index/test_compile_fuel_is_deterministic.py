"""The compile limit is deterministic fuel, charged by every stage of every compile path.

``CompileLimits.max_compile_work`` bounds one whole compile: front-ends (regex, GBNF, Lark,
the JSON Schema normalizer and its string automata), automata and token index.  Outcomes and
the fuel used are the same from run to run (process-wide caches charge a hit what the build
cost); the wall-clock cap is an option (and a 30 s safety net by default), checked wherever
fuel is charged.  No test here measures time.
"""

from __future__ import annotations

from typing import Any

import pytest

from formcast import GrammarCompiler, Vocabulary
from formcast.errors import CompileBudgetError, CompileTimeoutError, LimitExceededError
from formcast.frontends.jsonschema.api import JsonSchemaOptions
from formcast.ir.nodes import Grammar, Literal, Rule
from formcast.limits import CompileLimits, WorkBudget, charge, compile_scope, metered

NO_CLOCK = CompileLimits(max_compile_seconds=None)
NO_CLOCK_OPTS = JsonSchemaOptions(max_compile_seconds=None)


def byte_vocab() -> Vocabulary:
    return Vocabulary.from_tokens(
        [bytes([i]) for i in range(256)] + [b"<eos>"], stop_token_ids=[256]
    )


def overlapping_pattern_properties(n: int) -> dict[str, Any]:
    """``n`` patterns that all overlap (a key may contain any of the letters): the key
    languages split into up to ``2**n`` cells."""
    return {
        "type": "object",
        "patternProperties": {chr(97 + i): {"type": "integer", "minimum": i} for i in range(n)},
    }


def nested_if(n: int) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "integer"}
    for i in range(n):
        s = {
            "if": {"properties": {f"a{i}": {"const": i}}},
            "then": {"properties": {"b": s}},
            "else": {"properties": {"c": s}},
        }
    return s


PATHOLOGICAL = {
    "12 overlapping patternProperties": overlapping_pattern_properties(12),
    "12 nested if": nested_if(12),
    # (``^\p{L}{1,1500}$`` used to be here: its bounded repeat is now counted, 0.12M units)
    "nested letter repeats": {
        "type": "string",
        "pattern": "^(?:\\p{L}{1,10}[.-]){1,30}\\p{L}{1,10}$",
    },
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_schemas_stop_on_fuel_deterministically(name: str) -> None:
    schema = PATHOLOGICAL[name]
    messages = []
    for _ in range(2):  # the second run finds the process-wide caches warm
        compiler = GrammarCompiler(byte_vocab(), limits=NO_CLOCK, cache_size=0)
        with pytest.raises(CompileBudgetError) as e:
            compiler.compile_json_schema(schema, NO_CLOCK_OPTS)
        assert e.value.limit == "max_compile_work"
        assert not isinstance(e.value, CompileTimeoutError)
        messages.append(str(e.value))  # names the units used when it stopped
    assert "units used" in messages[0]
    assert messages[0] == messages[1]


@pytest.mark.parametrize(
    "schema",
    [
        overlapping_pattern_properties(3),
        nested_if(2),
        {"type": "string", "pattern": "^\\p{L}{1,8}$"},
        {"type": "object", "properties": {"k": {"type": "string", "format": "email"}}},
    ],
    ids=["patternProperties", "if", "letters", "format"],
)
def test_fuel_used_is_the_same_cold_and_warm(schema: dict[str, Any]) -> None:
    used = []
    for _ in range(2):
        compiler = GrammarCompiler(byte_vocab(), limits=NO_CLOCK, cache_size=0)
        used.append(compiler.compile_json_schema(schema, NO_CLOCK_OPTS).compile_work)
    assert used[0] > 0
    assert used[0] == used[1]
    # exactly that much fuel is enough (the token index's equivalence pass adapts to the fuel
    # left, so less fuel may still compile, with fewer shared walks)
    tight = CompileLimits(max_compile_work=used[0], max_compile_seconds=None)
    again = GrammarCompiler(byte_vocab(), limits=tight, cache_size=0).compile_json_schema(
        schema, NO_CLOCK_OPTS
    )
    assert again.compile_work == used[0]


def _compile_each_path(compiler: GrammarCompiler) -> dict[str, Any]:
    return {
        "regex": lambda: compiler.compile_regex("[a-z]{1,8}@[a-z]{1,8}"),
        "gbnf": lambda: compiler.compile_grammar('root ::= "a" root | "b"', syntax="gbnf"),
        "lark": lambda: compiler.compile_grammar('start: "a" start | "b"', syntax="lark"),
        "builtin_json": compiler.compile_builtin_json_grammar,
        "ir": lambda: compiler.compile_grammar_ir(Grammar((Rule("root", Literal("xy")),), "root")),
        "json_schema": lambda: compiler.compile_json_schema({"type": "integer"}),
    }


@pytest.mark.parametrize("path", ["regex", "gbnf", "lark", "builtin_json", "ir", "json_schema"])
def test_every_compile_path_charges_fuel_and_checks_the_deadline(path: str) -> None:
    compiled = _compile_each_path(GrammarCompiler(byte_vocab(), cache_size=0))[path]()
    assert compiled.compile_work > 0
    tiny = GrammarCompiler(byte_vocab(), limits=CompileLimits(max_compile_work=1), cache_size=0)
    with pytest.raises(CompileBudgetError) as e:
        _compile_each_path(tiny)[path]()
    assert e.value.limit == "max_compile_work"
    late = GrammarCompiler(
        byte_vocab(), limits=CompileLimits(max_compile_seconds=1e-9), cache_size=0
    )
    with pytest.raises(CompileTimeoutError) as t:
        _compile_each_path(late)[path]()
    assert t.value.limit == "max_compile_seconds"


def test_front_end_stages_charge_the_compile() -> None:
    """The JSON Schema front-end alone (no automata) charges the compile's fuel."""
    from formcast.frontends.jsonschema.api import schema_to_grammar

    budget = WorkBudget(10**12)
    with compile_scope(budget):
        schema_to_grammar({"type": "string", "pattern": "^[a-c]{2,9}$", "maxLength": 5})
    assert budget.used > 0
    with compile_scope(WorkBudget(10)), pytest.raises(CompileBudgetError):
        schema_to_grammar(overlapping_pattern_properties(4))


def test_the_budget_error_is_not_swallowed_by_fallbacks() -> None:
    """Fallbacks catch ``LimitExceededError`` (e.g. ``max_expression_size``) to try another
    way; running out of fuel must end the compile instead."""
    assert issubclass(CompileBudgetError, LimitExceededError)
    assert issubclass(CompileTimeoutError, CompileBudgetError)


def test_metered_counts_and_charges() -> None:
    value, cost = metered(lambda: (charge(5), 7)[1])
    assert (value, cost) == (7, 5)  # outside a compile: counted only
    budget = WorkBudget(100)
    with compile_scope(budget):
        value, cost = metered(lambda: (charge(30), "x")[1])
        assert budget.used == 30
        assert cost == 30
        with pytest.raises(CompileBudgetError):
            metered(lambda: charge(80))


def test_defaults() -> None:
    assert JsonSchemaOptions().max_compile_seconds is None  # no load-dependent default
    assert CompileLimits().max_compile_seconds == 30.0  # a generous safety net only
    assert CompileLimits().max_compile_work == 6_500_000
