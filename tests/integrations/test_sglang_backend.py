"""Runs the SGLang backend's cases (test_sglang_cases.py) in an interpreter of their own.

``import sglang`` monkey-patches transformers internals at import time
(``sglang.srt.utils.hf_transformers_patches``); running the cases in a child pytest keeps the
rest of the suite on an unpatched transformers.  The child's failures are shown here; in CI a
missing sglang makes the cases fail (not skip), and so this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("test_sglang_cases.py")
TESTS = Path(__file__).resolve().parents[1]


def test_sglang_backend_cases_in_their_own_interpreter() -> None:
    env = dict(os.environ, FORMCAST_SGLANG_CASES="1")
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(CASES)],
        cwd=str(TESTS.parent), env=env, capture_output=True, text=True, timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-12000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), out[-4000:]
    assert "failed" not in summary, out[-12000:]
    assert "error" not in summary, out[-12000:]
    # a skip there (sglang missing outside CI, no structural tags) is reported, never silent
    if "skipped" in summary:
        print(out[-4000:])
