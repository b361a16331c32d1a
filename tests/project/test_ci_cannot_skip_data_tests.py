"""CI cannot pass while skipping the tests that need ``../shared/data`` (tests/conftest.py).

Each case runs pytest in a subprocess on a scratch copy of ``tests/conftest.py`` (and
``_assets.py``), laid out as ``<tmp>/repo/tests``, so ``../shared/data`` is ``<tmp>/shared/data``
and can be created or left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SAMPLE = '''
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def test_needs_data():
    if not (DATA / "JSONTestSuite").is_dir():
        pytest.skip(f"{DATA / 'JSONTestSuite'} is missing")


def test_needs_data_relative_path():
    pytest.skip("MaskBench data not found (expected <repo>/../shared/data)")


def test_unrelated_skip():
    pytest.skip("needs a GPU")


def test_fixture(shared_data):
    assert shared_data == DATA
'''


def _run(tmp_path: Path, *, data: bool, ci: str | None) -> subprocess.CompletedProcess[str]:
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    for name in ("conftest.py", "_assets.py"):
        shutil.copy(TESTS / name, tests / name)
    (tests / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    if data:
        (tmp_path / "shared" / "data").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path / "repo",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci", [None, "", "0", "false"])
def test_outside_ci_missing_data_skips(tmp_path: Path, ci: str | None) -> None:
    proc = _run(tmp_path, data=False, ci=ci)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 skipped" in proc.stdout
    assert "shared data directory not found at" in proc.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_missing_data_fails_the_run(tmp_path: Path, ci: str) -> None:
    proc = _run(tmp_path, data=False, ci=ci)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "CI is set but the shared test data is missing at" in out
    assert str(tmp_path / "shared" / "data") in out


def test_in_ci_a_skip_for_missing_shared_data_is_a_failure(tmp_path: Path) -> None:
    """The directory is there but part of it is not: those skips fail, other skips stay."""
    proc = _run(tmp_path, data=True, ci="true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FAILED tests/test_sample.py::test_needs_data " in out
    assert "FAILED tests/test_sample.py::test_needs_data_relative_path " in out
    assert "CI is set and shared test data is missing" in out
    assert "SKIPPED [1] tests/test_sample.py" in out
    assert "needs a GPU" in out
    assert "PASSED tests/test_sample.py::test_fixture" in out
    assert "2 failed, 1 passed, 1 skipped" in out


def test_outside_ci_partial_data_skips(tmp_path: Path) -> None:
    proc = _run(tmp_path, data=True, ci=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 3 skipped" in proc.stdout
