"""The mypyc-compiled build (``formcast._native``) gives the same masks as the pure-Python one.

The compiled copy is built once per source state by ``scripts/build_native.sh`` (a few minutes
of CPU) into a cache directory keyed by a digest of every file under ``src/formcast``, the
build script, the interpreter and the mypy version: ``$FORMCAST_NATIVE_BUILD_CACHE`` or
``~/.cache/formcast/native-build/<digest>``; later runs on the same machine reuse it.  Each
check runs in a fresh interpreter with ``PYTHONPATH`` set to that copy (or to ``src``):

* the modules of :data:`~formcast._native.NATIVE_MODULES` really are extensions there;
* :mod:`native_masks` (MaskBench schemas, the builtin JSON grammar, llama.cpp's c.gbnf, a
  regex, a Lark grammar on the Llama-3 vocabulary) meets the same mask digest at every step
  under both builds, and a grammar serialized by one build loads in the other with the same
  masks;
* a subset of the suite (automata, serialization, disk cache, brute-force mask oracle) passes
  against the compiled copy.

Without mypyc or a C compiler the tests skip, saying which is missing; under ``CI=true`` (CI
installs the dev extra, which brings mypy and so mypyc) that is a failure.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from _assets import in_ci

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
BUILD_SCRIPT = REPO / "scripts" / "build_native.sh"
HELPER = Path(__file__).resolve().parent / "native_masks.py"
#: the existing tests that also run against the compiled copy (about 60 s there)
SUBSET = (
    "tests/automata",
    "tests/ir",
    "tests/index/test_compile_fuel_independent_of_history.py",
    "tests/index/test_serialized_grammar_round_trip.py",
    "tests/index/test_disk_cache_of_compiled_grammars.py",
    "tests/index/test_mask_equals_brute_force_oracle.py",
    "tests/index/test_cfg_mask_vs_reference.py",
    "tests/vocab/test_native_trie_walk.py",
    "tests/vocab/test_trie_classify_walk.py",
    "tests/vocab/test_walk_writes_rows.py",
    "tests/index/test_disk_cache_mapped_files.py",
    "tests/automata/test_native_columns.py",
    # session 18: walks resumed after stops (_trie_walk.classify_from), local digests on large
    # lexers, count-down counted windows
    "tests/vocab/test_walk_resumes_after_stops.py",
    "tests/index/test_local_digests.py",
    "tests/index/test_counted_countdown_matches_old_windows.py",
    # session 21: the trie walk's subtree memo (C only; skipped in the pure package)
    "tests/vocab/test_trie_subtree_memo.py",
    # session 22: the text memo of the trie walk (C only), the region search on compiled lexers
    "tests/vocab/test_trie_text_memo.py",
    "tests/index/test_region_search_same_as_before.py",
    # session 22: the compiled parser (automata.pda) through its private caches and capped steps
    "tests/index/test_disk_load_does_no_parser_work_before_the_first_step.py",
    "tests/index/test_cfg_capped_verify_steps.py",
    # session 23: candidate checks run inside the compiled parser (pda.check_strings/_suffixes)
    "tests/index/test_native_candidate_checks.py",
    # session 23: regions grown by new states (equivalence.grown_classes, class_level compiled)
    "tests/index/test_grown_regions.py",
    # session 23: counted windows narrowed to byte classes, the trie handle of classify calls
    "tests/vocab/test_trie_narrow_walk.py",
    "tests/index/test_counted_narrow_windows.py",
    "tests/vocab/test_trie_classify_handle.py",
    # session 24: share measurement in the compiled parser (pda.measure_shares), no parser cycles
    "tests/index/test_json38_shares_and_cycles.py",
    # session 24: key rule DFAs minimal under the JSON settings (the C minimization)
    "tests/frontends/test_key_rule_dfa_size.py",
    # session 24: no subtree memo built for a small (exit-byte) trie
    "tests/vocab/test_small_trie_memo.py",
    # session 24: a lazy walk's WalkRows and inlined start row
    "tests/index/test_lazy_walk_rows_tuple.py",
    # session 25: the token index (index.cfg_program) compiled: its persisted classes, the lazy
    # fields of a loaded program, the lazy classifier's tables and regions
    "tests/index/test_persisted_classes_declare_their_fields.py",
    "tests/index/test_lazy_index_matches_eager.py",
    "tests/index/test_lazy_tables_grow_mid_walk.py",
    "tests/index/test_region_classes.py",
    "tests/index/test_exit_byte_split.py",
    "tests/index/test_rule_classifier_matches_oracle.py",
    # session 26: checks from the unbounded counted state and by the parser-state table, regions
    # grown by a copy, lexer states known past the digest bound across regions
    "tests/index/test_verdict40_checks.py",
    "tests/index/test_grow40_copied_regions.py::test_regions_are_the_oracle_and_survive_a_load",
    "tests/index/test_digest40_past_states.py",
)


def _missing_toolchain() -> str | None:
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (pip install mypy, or the dev extra)"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc!r} is not on PATH)"
    if shutil.which("bash") is None:
        return "no bash to run scripts/build_native.sh"
    return None


def _source_digest() -> str:
    import mypy.version

    h = hashlib.sha256()
    h.update(f"{sys.version}|{platform.machine()}|{mypy.version.__version__}\n".encode())
    h.update(BUILD_SCRIPT.read_bytes())
    for p in sorted((SRC / "formcast").rglob("*")):
        if p.is_file() and p.suffix in (".py", ".typed", ".c", ".h"):
            h.update(str(p.relative_to(SRC)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _env(pythonpath: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(pythonpath)
    return env


@pytest.fixture(scope="session")
def native_dir() -> Path:
    """The compiled copy of the package (built here, or found in the cache)."""
    reason = _missing_toolchain()
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI is set, so the compiled build may not skip: {reason}")
        pytest.skip(reason)
    root = Path(
        os.environ.get("FORMCAST_NATIVE_BUILD_CACHE")
        or Path.home() / ".cache" / "formcast" / "native-build"
    )
    final = root / _source_digest()
    if (final / "formcast" / "_native.py").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(work)],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, (
        f"build_native.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    try:
        work.rename(final)
    except OSError:  # another session built the same sources first
        shutil.rmtree(work, ignore_errors=True)
    return final


def _run(args: list[str], pythonpath: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = _env(pythonpath)
    if pythonpath != SRC:  # the kernel tests may not skip in the compiled copy
        env["FORMCAST_EXPECT_NATIVE"] = "1"
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


def test_the_listed_modules_are_compiled_in_the_native_copy(native_dir: Path) -> None:
    code = (
        "import json, formcast, formcast._native as n;"
        "print(json.dumps([formcast.__file__, n.compiled_modules(), n.native_summary()]))"
    )
    proc = _run(["-c", code], native_dir, 120)
    assert proc.returncode == 0, proc.stderr
    where, flags, summary = json.loads(proc.stdout)
    assert Path(where).is_relative_to(native_dir)
    assert flags, "NATIVE_MODULES is empty"
    assert all(flags.values()), f"not compiled in {native_dir}: {flags}"
    assert summary.startswith("mypyc-compiled")
    pure = _run(["-c", code], SRC, 120)
    assert pure.returncode == 0, pure.stderr
    assert not any(json.loads(pure.stdout)[1].values()), "src/formcast holds compiled modules"


def test_both_builds_declare_the_same_serialized_fields(native_dir: Path) -> None:
    """A compiled class keeps its fields in ``__mypyc_attrs__`` (no ``__slots__``): the
    registry reads them, so every persisted class declares the same fields (and the class-level
    declarations stay class attributes) in both builds, and the disk cache's layout digest is
    the same (a file written by one build is read by the other)."""
    code = (
        "import json; from formcast.index.persist import registry as r;"
        "print(json.dumps([r.layout_digest(), r.FIELDS, {n: sorted(o) for n, o in r.OMIT.items()},"
        " {n: sorted(f) for n, f in r.LAZY_FIELDS.items()}]))"
    )
    native = _run(["-c", code], native_dir, 120)
    assert native.returncode == 0, native.stderr
    pure = _run(["-c", code], SRC, 120)
    assert pure.returncode == 0, pure.stderr
    assert json.loads(native.stdout) == json.loads(pure.stdout)


def test_masks_are_identical_and_serialized_grammars_cross_builds(
    native_dir: Path, shared_data: Path, tmp_path: Path
) -> None:
    runs = {
        "native": (native_dir, None),  # compiled, writes its grammars
        "pure": (SRC, "native"),  # pure Python, loads the compiled build's grammars
        "native_loads_pure": (native_dir, "pure"),
    }
    reports: dict[str, dict[str, Any]] = {}
    for name, (path, load) in runs.items():
        args = [str(HELPER), str(shared_data), str(tmp_path / name)]
        if load is not None:
            args.append(str(tmp_path / load))
        proc = _run(args, path, 600)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-4000:]}"
        reports[name] = json.loads((tmp_path / name / "report.json").read_text("utf-8"))
    native, pure, again = reports["native"], reports["pure"], reports["native_loads_pure"]
    assert all(native["compiled"].values())
    assert not any(pure["compiled"].values())
    masks = pure["masks"]
    assert len(masks) >= 8
    for name, digests in masks.items():
        assert len(digests) > 10, name
        assert native["masks"][name] == digests, f"{name}: compiled masks differ"
        assert pure["loaded"][name] == digests, f"{name}: compiled -> pure load differs"
        assert again["loaded"][name] == digests, f"{name}: pure -> compiled load differs"


def test_a_subset_of_the_suite_passes_against_the_compiled_copy(native_dir: Path) -> None:
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUBSET]
    proc = _run(args, native_dir, 900)
    out = f"{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, f"under {native_dir}:\n{out}"
    assert " passed" in proc.stdout
