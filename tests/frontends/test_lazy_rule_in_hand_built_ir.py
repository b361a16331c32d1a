"""``Rule.lazy`` in a grammar IR built by hand (``compile_grammar_ir``) means what it means in
the Lark reader: the option is never dropped (#29 item 1)."""

from __future__ import annotations

from formcast import GrammarCompiler, GrammarMatcher
from formcast.frontends.regex import parse_regex
from formcast.ir.nodes import Concat, Grammar, Literal, Rule, RuleRef
from formcast.vocab.vocabulary import Vocabulary


def _byte_vocab() -> Vocabulary:
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    return Vocabulary.from_tokens(tokens, stop_token_ids=[256], name="bytes-lazy-ir")


def _accepts(compiler: GrammarCompiler, grammar: Grammar, text: bytes) -> bool:
    matcher = GrammarMatcher(compiler.compile_grammar_ir(grammar))
    return all(matcher.accept_token(b) for b in text) and matcher.is_accepting()


def test_a_lazy_terminal_ends_at_its_first_possible_end() -> None:
    body = parse_regex("[a-z]+")
    lazy = Grammar(
        (
            Rule("start", Concat((Literal("<"), RuleRef("r"), Literal(">")))),
            Rule("r", body, terminal=True, lazy=True),
        ),
        "start",
    )
    greedy = Grammar(
        (
            Rule("start", Concat((Literal("<"), RuleRef("r"), Literal(">")))),
            Rule("r", body, terminal=True),
        ),
        "start",
    )
    compiler = GrammarCompiler(_byte_vocab())
    assert _accepts(compiler, lazy, b"<a>")
    assert not _accepts(compiler, lazy, b"<ab>")
    assert _accepts(compiler, greedy, b"<ab>")
