"""Shared fixtures (kept small on purpose: most helpers live next to the tests that use them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run by default, so CI is reproducible; set
# HYPOTHESIS_PROFILE=explore to draw fresh random examples (and find new counterexamples).
settings.register_profile("formcast", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "formcast"))

REPO_ROOT = Path(__file__).resolve().parent.parent
# the shared data checkout sits next to the repository: <repo>/../shared/data
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``<repo>/../shared/data``; the test is skipped (with the path) when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data directory not found at {SHARED_DATA}")
    return SHARED_DATA
