"""Shared fixtures (kept small on purpose: most helpers live next to the tests that use them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from _assets import in_ci

# Property tests draw the same examples on every run by default, so CI is reproducible; set
# HYPOTHESIS_PROFILE=explore to draw fresh random examples (and find new counterexamples).
settings.register_profile("formcast", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "formcast"))

REPO_ROOT = Path(__file__).resolve().parent.parent
# the shared data checkout sits next to the repository: <repo>/../shared/data
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def needs_shared_data(reason: str) -> bool:
    """Does a skip reason say that ``../shared/data`` (or something inside it) is missing?

    Tests name the missing path in their skip message; the path is written either resolved
    (``/x/shared/data/...``) or relative to the repository (``<repo>/../shared/data/...``).
    """
    return str(SHARED_DATA) in reason or "shared/data" in reason.replace("\\", "/")


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the shared data must be there: without it ~90 tests would silently skip."""
    if in_ci() and not SHARED_DATA.is_dir():
        raise pytest.UsageError(
            f"CI is set but the shared test data is missing at {SHARED_DATA}: the tests that "
            "need it would be skipped. Check it out there (or unset CI to allow the skips)."
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In CI, a skip because shared data is missing is turned into a failure."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()) or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    if needs_shared_data(reason):
        report.outcome = "failed"
        report.longrepr = f"CI is set and shared test data is missing: {reason}"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``<repo>/../shared/data``; the test is skipped (with the path) when it is absent.

    In CI (``CI=true``) the skip is a failure instead (see ``pytest_runtest_makereport``).
    """
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data directory not found at {SHARED_DATA}")
    return SHARED_DATA
