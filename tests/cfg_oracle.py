"""The CFG oracle tests (tests/index/test_cfg_mask_vs_reference.py) as a module that the tests of
other components import to rerun them under other settings (counted repeats, the exit byte).

The module is registered under the name pytest itself gives it, so it is imported once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "test_cfg_mask_vs_reference"
_PATH = Path(__file__).resolve().parent / "index" / f"{_NAME}.py"


def _load() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    spec.loader.exec_module(module)
    return module


oracle_tests = _load()
