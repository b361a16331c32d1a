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
    """The lazy index with no rule automaton small enough for the expanded lexer
    (cfg_program._LEXER_MAX_STATES 0): the per-rule classifier.  (A module constant: read
    through the module in both builds, where a patched imported function is never called by
    the mypyc-compiled cfg_program.)"""
    return mock.patch.multiple(cfg_program, LAZY_INDEX=True, _LEXER_MAX_STATES=0)


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
