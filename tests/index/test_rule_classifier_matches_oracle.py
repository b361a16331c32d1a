"""The per-rule classifier of the token index (used where the call-expanded lexer is too large
to determinize: every stack top is classified on its own rule's automaton and calls become
candidates) gives the oracle's masks too: the CFG oracle tests run again with the expanded
lexer turned off.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

import formcast.index.cfg_program as cfg_program
from cfg_oracle import oracle_tests
from formcast import Vocabulary

SETTINGS = oracle_tests.SETTINGS
RandomGrammar = oracle_tests.RandomGrammar


def _lexer_off() -> Any:
    """The eager index (cfg_program.LAZY_INDEX off) with the expanded lexer refused."""
    return mock.patch.multiple(
        cfg_program, LAZY_INDEX=False, build_expanded_lexer=mock.Mock(return_value=None)
    )


@SETTINGS
@given(g=oracle_tests.grammars(), vocab=oracle_tests.vocabularies(), data=st.data())
def test_masks_match_the_oracle_without_the_expanded_lexer(
    g: RandomGrammar, vocab: Vocabulary, data
) -> None:
    with _lexer_off():
        oracle_tests.test_masks_match_the_oracle_on_random_walks.hypothesis.inner_test(
            g, vocab, data
        )


def test_the_lexer_off_switch_reaches_the_rule_classifier() -> None:
    """The patch above really selects the per-rule classifier."""
    with _lexer_off():
        compiled = oracle_tests.compile_gbnf(oracle_tests.BYTE_VOCAB, 'root ::= "(" root ")" | "x"')
    assert isinstance(compiled.program._positions, cfg_program._RuleClassifier)
