"""Shared fixtures (kept small on purpose: most helpers live next to the tests that use them)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# the shared data checkout sits next to the repository: <repo>/../shared/data
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``<repo>/../shared/data``; the test is skipped (with the path) when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data directory not found at {SHARED_DATA}")
    return SHARED_DATA
