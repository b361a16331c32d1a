"""Every mistake in a constraint object is a typed error that says where it is (a path such as
``seq[1].select[1]``) and what to do; the compile limits apply as to every front-end."""

from __future__ import annotations

import pytest

from formcast import (
    CompileBudgetError,
    CompileLimits,
    ConfigurationError,
    ConstraintError,
    GrammarCompiler,
    GrammarSyntaxError,
    LimitExceededError,
    UnsatisfiableGrammarError,
    UnsupportedFeatureError,
    Vocabulary,
)
from formcast import constraints as C


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    tokens = [bytes([b]) for b in range(32, 127)] + [b"\n", b"<eos>"]
    return GrammarCompiler(Vocabulary.from_tokens(tokens, stop_token_ids=[len(tokens) - 1]))


def test_an_undefined_rule_is_named_at_its_use() -> None:
    c = C.seq("a", C.select(["x", C.rule("item")]))
    with pytest.raises(ConstraintError, match=r"rule 'item' is used but never defined") as e:
        c.to_grammar()
    assert e.value.path == "seq[1].select[1]"
    assert "define('item'" in str(e.value)


def test_a_rule_defined_twice_differently_is_refused() -> None:
    c = C.seq(C.define("x", "a"), C.define("x", "b"))
    with pytest.raises(ConstraintError, match="defined twice") as e:
        c.to_grammar()
    assert e.value.path == "seq[1]"
    assert "first at seq[0]" in str(e.value)
    C.seq(C.define("x", "a"), C.define("x", "a")).to_grammar()  # the same body twice is fine


def test_regex_syntax_errors_are_raised_where_the_regex_is_written() -> None:
    with pytest.raises(GrammarSyntaxError):
        C.regex("a(b")


def test_schema_errors_keep_their_type_and_get_the_path() -> None:
    c = C.seq("a", C.select(["x", C.json({"type": "string", "uniqueItem": True})]))
    with pytest.raises(UnsupportedFeatureError) as e:
        c.to_grammar()
    assert e.value.feature == "uniqueItem"
    assert "seq[1].select[1]" in str(e.value)
    assert e.value.constraint_path == "seq[1].select[1]"  # type: ignore[attr-defined]


def test_only_json_shaped_constraints_stand_in_a_schema() -> None:
    c = C.json({"type": "object", "properties": {"x": C.seq("a", "b")}})
    with pytest.raises(UnsupportedFeatureError, match=r"json#/properties/x"):
        c.to_grammar()
    with pytest.raises(UnsupportedFeatureError, match="dialect"):
        C.json({"properties": {"x": C.regex("a", dialect="python")}}).to_grammar()


def test_state_machine_structure_errors_name_the_states() -> None:
    with pytest.raises(ConstraintError, match=r"states 'lost' cannot be reached"):
        C.StateMachine("s", ["t"], [("s", "a", "t"), ("lost", "b", "t")])
    with pytest.raises(ConstraintError, match=r"states 'trap' can never reach an accepting"):
        C.StateMachine("s", ["t"], [("s", "a", "t"), ("s", "b", "trap"), ("trap", "c", "trap")])
    with pytest.raises(ConstraintError, match="at least one accepting"):
        C.StateMachine("s", [], [("s", "a", "t")])
    with pytest.raises(ConstraintError, match=r"\(source, label, target\)") as e:
        C.StateMachine("s", ["t"], [("s", "a", "t"), ("s", "t")])
    assert e.value.path == "transitions[1]"


@pytest.mark.parametrize(
    ("labels", "common"),
    [
        (("go", "go"), "'go'"),
        (("yes", C.regex("[a-z]+")), "'yes'"),
        ((C.regex("[a-c]x"), C.regex("c[x-z]")), "'cx'"),
        ((C.select(["a", "b"]), C.select(["a", "b"])), "the same strings"),
    ],
)
def test_ambiguous_transitions_are_named_with_a_common_string(labels: tuple, common: str) -> None:
    m = C.StateMachine("s", ["t", "u"], [("s", labels[0], "t"), ("s", labels[1], "u")])
    with pytest.raises(ConstraintError, match="ambiguous transitions") as e:
        m.check()
    assert common in str(e.value)
    assert "transitions[0]" in str(e.value)
    assert "transitions[1]" in str(e.value)
    with pytest.raises(ConstraintError, match="ambiguous"):  # also on every compile
        C.seq("x", m).to_grammar()


def test_disjoint_labels_are_not_ambiguous() -> None:
    C.StateMachine(
        "s", ["t", "u"], [("s", C.regex("[a-c]x"), "t"), ("s", C.regex("[d-f]x"), "u")]
    ).check()


def test_a_label_must_consume_output() -> None:
    for label in ("", C.regex("a*"), C.optional("a")):
        with pytest.raises(ConstraintError, match="empty") as e:
            C.StateMachine("s", ["t"], [("s", "x", "m"), ("m", label, "t")]).check()
        assert e.value.path == "transitions[1]"


def test_bad_arguments_are_refused_at_construction() -> None:
    with pytest.raises(ConstraintError, match="expected a constraint or a str") as e:
        C.seq("a", 3)  # type: ignore[arg-type]
    assert e.value.path == "seq[1]"
    with pytest.raises(ConstraintError, match="max is below min"):
        C.repeat("a", 3, 2)
    with pytest.raises(ConstraintError, match="must be an int"):
        C.repeat("a", -1)
    with pytest.raises(ConstraintError, match="list of options"):
        C.select("ab")  # type: ignore[arg-type]
    with pytest.raises(ConstraintError, match="at least one option"):
        C.select([])
    with pytest.raises(ConstraintError, match="rule name"):
        C.rule("has space")
    with pytest.raises(ConfigurationError, match="JSON Schema"):
        C.json(42)


def test_deep_nesting_is_refused_with_advice() -> None:
    c: C.Constraint = C.literal("x")
    for _ in range(C.core.MAX_NESTING + 5):
        c = C.optional(c)
    with pytest.raises(ConstraintError, match="define"):
        c.to_grammar()


def test_the_compile_limits_apply(compiler: GrammarCompiler) -> None:
    tight = GrammarCompiler(compiler.vocab, limits=CompileLimits(max_repeat=10))
    with pytest.raises(LimitExceededError, match=r"repeat\(max=50\) at seq\[1\]"):
        tight.compile(C.seq("a", C.repeat("b", 0, 50)))
    with pytest.raises(LimitExceededError) as e:
        tight.compile(C.seq("a", C.regex("b{50}")))
    assert e.value.constraint_path == "seq[1]"  # type: ignore[attr-defined]
    starved = GrammarCompiler(compiler.vocab, limits=CompileLimits(max_compile_work=2000))
    with pytest.raises(CompileBudgetError):
        starved.compile(C.seq("a", C.regex("[a-z]{1,40}@[a-z]{1,40}"), C.any_json()))


def test_an_empty_language_is_unsatisfiable(compiler: GrammarCompiler) -> None:
    with pytest.raises(UnsatisfiableGrammarError):
        compiler.compile(C.seq("a", C.define("r", C.seq("(", C.rule("r"), ")"))))


def test_compile_takes_constraints_only(compiler: GrammarCompiler) -> None:
    with pytest.raises(ConfigurationError, match=r"formcast\.constraints"):
        compiler.compile("a|b")  # type: ignore[arg-type]
