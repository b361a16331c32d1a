"""The installed package is the build it claims to be, and the sdist can rebuild it.

``scripts/test_install.sh`` (run by ``.ci/run``) builds the sdist and, from it, the wheel with
``python -m build``, installs them in a fresh virtual environment and runs a subset of the suite
against each install with these variables set:

* ``FORMCAST_EXPECT_BUILD``: ``native`` (the wheel: every mypyc module and C kernel compiled)
  or ``pure`` (the sdist installed with ``FORMCAST_NATIVE=0``: nothing compiled).  The tests
  check that ``formcast`` is imported from that install (not from ``src/``), that its modules
  are (or are not) extensions, and that ``formcast --version`` says so;
* ``FORMCAST_SDIST``: the sdist, which must carry every ``.c``/``.h`` file of ``src/``.

Without them (the ordinary run from the source tree) the tests skip, saying what they need;
the editable install of the source tree is checked by ``test_native_build.py`` instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def _expected() -> str:
    build = os.environ.get("FORMCAST_EXPECT_BUILD", "")
    if not build:
        pytest.skip("FORMCAST_EXPECT_BUILD is not set (scripts/test_install.sh sets it)")
    assert build in ("native", "pure"), f"FORMCAST_EXPECT_BUILD={build!r}: native or pure"
    return build


def test_formcast_is_the_expected_install() -> None:
    build = _expected()
    import formcast
    from formcast import _native

    where = Path(formcast.__file__).resolve()
    assert not where.is_relative_to(SRC), f"formcast comes from the source tree: {where}"
    flags = _native.compiled_modules()
    assert set(flags) == {*_native.NATIVE_MODULES, *_native.NATIVE_KERNELS}
    if build == "native":
        missing = sorted(name for name, compiled in flags.items() if not compiled)
        assert not missing, f"not compiled in the installed wheel: {missing}"
    else:
        compiled = sorted(name for name, c in flags.items() if c)
        assert not compiled, f"compiled in the pure install: {compiled}"


def test_version_says_which_build_runs() -> None:
    build = _expected()
    from formcast import _native

    exe = Path(sys.executable).parent / "formcast"
    assert exe.is_file(), f"no console script at {exe}"
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.splitlines()[1]
    assert line == f"build: {_native.native_summary()}"
    if build == "native":
        assert line.startswith("build: mypyc-compiled"), line
    else:
        assert line.startswith("build: pure Python"), line


def test_the_sdist_carries_every_c_source() -> None:
    sdist = os.environ.get("FORMCAST_SDIST", "")
    if not sdist:
        pytest.skip("FORMCAST_SDIST is not set (scripts/test_install.sh sets it)")
    with tarfile.open(sdist) as tar:
        names = {"/".join(n.split("/")[1:]) for n in tar.getnames()}
    wanted = {
        str(p.relative_to(REPO)) for p in SRC.rglob("*") if p.suffix in (".c", ".h")
    }
    assert wanted, "no C sources under src/"
    assert not wanted - names, f"missing from {sdist}: {sorted(wanted - names)}"
    assert "LICENSE" in names
