"""Helpers for tests that drive the command line in-process (``formcast.cli.main``)."""

from __future__ import annotations

import pytest

from formcast.cli import main as cli


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)`` -> (exit status, stdout, stderr); argparse's exits are statuses too."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
