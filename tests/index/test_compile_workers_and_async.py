"""``GrammarCompiler(workers=N)`` and ``compile_async``: compiles off the serving thread.

* grammars compiled by a worker process give the masks of an in-process compile, bit for bit,
  and arrive with their first mask computed;
* the compile's own errors arrive with their type, message and attributes
  (``UnsupportedFeatureError.feature``/``where``, ``GrammarSyntaxError.line``/``column``,
  ``LimitExceededError.limit``);
* a worker killed mid-compile gives ``CompileWorkerError`` (pid, exit code), not a hang, and the
  next compile gets a fresh worker;
* ``compile_async`` returns what the synchronous method returns; cancelling its task kills the
  worker job (or unwinds an in-process compile) and writes nothing to the disk cache.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from formcast import CompileLimits, GrammarCompiler, Vocabulary
from formcast.errors import (
    CompileBudgetError,
    CompileWorkerError,
    ConfigurationError,
    FormcastError,
    GrammarSyntaxError,
    UnsupportedFeatureError,
)
from serialize_helpers import compile_named, random_walks, replay_masks, small_vocab

#: a regex whose DFA takes seconds to build (2^16 states): a compile to cancel or kill
#: ~1 s to compile in the compiled build (mypyc), ~16 s pure: every test below cancels or kills
#: it within 0.2 s of its start (session 25: ``{16}`` took 0.34 s compiled, so the compile
#: could finish before the cancel)
SLOW = "[ab]*a[ab]{18}"
BIG = CompileLimits(max_dfa_states=10**6, max_compile_work=10**11, max_compile_seconds=None)

pytestmark = pytest.mark.slow  # worker processes start in about a second each


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return small_vocab()


@pytest.fixture(scope="module")
def pooled(vocab: Vocabulary) -> Iterator[GrammarCompiler]:
    comp = GrammarCompiler(vocab, workers=1, limits=BIG, cache_size=0, cache_dir=False)
    yield comp
    comp.close()


def wait_for(cond, seconds: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


@pytest.mark.parametrize("name", ["regex", "json_schema", "gbnf", "lark", "builtin_json"])
def test_worker_grammars_give_in_process_masks(
    pooled: GrammarCompiler, vocab: Vocabulary, name: str
) -> None:
    remote = compile_named(pooled, name)
    assert pooled.worker_pids(), "compiled in a worker"
    assert remote.cache_info()["masks_cached"] >= 1  # the first mask came with it
    local = compile_named(GrammarCompiler(vocab, cache_size=0, cache_dir=False), name)
    walks = random_walks(local, walks=4, steps=15, seed=11)
    assert np.array_equal(replay_masks(remote, walks), replay_masks(local, walks))
    assert (remote.kind, remote.source, remote.options) == (local.kind, local.source, local.options)
    # (compile_work is not compared: it should not depend on what the process compiled
    # before, but this test process has compiled other grammars and the worker has not, and
    # today a few hundred units of a JSON Schema compile do depend on it)
    assert remote.compile_work > 0


def test_constraint_objects_compile_in_workers(pooled: GrammarCompiler, vocab: Vocabulary) -> None:
    from formcast import constraints as C

    answer = C.seq("x=", C.regex(r"[0-9]{1,3}"), C.select([";", "."]))
    remote = pooled.compile(answer)
    local = GrammarCompiler(vocab, cache_size=0, cache_dir=False).compile(answer)
    walks = random_walks(local, walks=3, steps=8, seed=2)
    assert np.array_equal(replay_masks(remote, walks), replay_masks(local, walks))
    assert remote.cache_info()["masks_cached"] >= 1  # came from the worker with its mask


def _error_of(fn) -> FormcastError:  # type: ignore[no-untyped-def]
    with pytest.raises(FormcastError) as e:
        fn()
    return e.value


def test_compile_errors_arrive_with_type_message_and_attributes(
    pooled: GrammarCompiler, vocab: Vocabulary
) -> None:
    local = GrammarCompiler(vocab, limits=BIG, cache_size=0, cache_dir=False)
    tiny = CompileLimits(max_dfa_states=50)
    cases = [
        ("compile_json_schema", ({"type": "string", "format": "no-such-format"},), {}),
        ("compile_grammar", ('root ::= "a" (\n',), {}),
        ("compile_grammar", ("start: a\na: /[/\n",), {"syntax": "lark"}),
    ]
    for method, args, kwargs in cases:
        theirs = _error_of(functools.partial(getattr(pooled, method), *args, **kwargs))
        ours = _error_of(functools.partial(getattr(local, method), *args, **kwargs))
        assert type(theirs) is type(ours), (method, theirs, ours)
        assert str(theirs) == str(ours)
        assert {k: v for k, v in vars(theirs).items() if isinstance(v, (str, int))} == {
            k: v for k, v in vars(ours).items() if isinstance(v, (str, int))
        }
    first = _error_of(
        lambda: pooled.compile_json_schema({"type": "string", "format": "no-such-format"})
    )
    assert isinstance(first, UnsupportedFeatureError)
    assert first.feature == "format"
    assert first.where == "#/format"
    syntax = _error_of(lambda: pooled.compile_grammar('root ::= "a" (\n'))
    assert isinstance(syntax, GrammarSyntaxError)
    assert syntax.line >= 1
    assert syntax.column >= 1
    limited = GrammarCompiler(vocab, workers=1, limits=tiny, cache_dir=False)
    try:
        err = _error_of(lambda: limited.compile_regex("[ab]*a[ab]{8}"))
        assert err.limit == "max_dfa_states"
        assert err.value == 50
        assert not isinstance(err, CompileBudgetError)
    finally:
        limited.close()


def test_a_worker_killed_mid_compile_is_a_typed_error(pooled: GrammarCompiler) -> None:
    outcome: list[BaseException | object] = []

    def compile_slow() -> None:
        try:
            outcome.append(pooled.compile_regex(SLOW))
        except BaseException as e:
            outcome.append(e)

    pooled.compile_regex("warm")  # a worker is up and idle
    (pid,) = pooled.worker_pids()
    t = threading.Thread(target=compile_slow)
    t.start()
    time.sleep(0.2)  # the job is running
    os.kill(pid, signal.SIGKILL)
    t.join(timeout=30)
    assert not t.is_alive(), "the compile hung after its worker died"
    (err,) = outcome
    assert isinstance(err, CompileWorkerError), err
    assert (err.pid, err.exitcode) == (pid, -signal.SIGKILL)
    assert "died" in str(err)
    assert "workers=0" in str(err)
    assert pooled.compile_regex("[xy]+").kind == "regex"  # a fresh worker took over
    assert pooled.worker_pids() != [pid]


UNIQUE_TAGS = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    "required": ["tags"],
}


def test_a_worker_compiles_a_spec_with_its_run_time_checks(
    pooled: GrammarCompiler, vocab: Vocabulary
) -> None:
    from formcast import constraints
    from formcast.index.spec import CombinatorSpec, JsonSchemaSpec
    from formcast.runtime.matcher import GrammarMatcher

    async def both() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(
            pooled.compile_async(JsonSchemaSpec.of(UNIQUE_TAGS)),
            pooled.compile_async(CombinatorSpec(constraints.json(UNIQUE_TAGS))),
        )

    for compiled in asyncio.run(both()):
        # loaded from the worker's bytes: the run-time uniqueItems check wraps the program again
        assert type(compiled.program).__name__ == "UniqueItemsProgram"
        m = GrammarMatcher(compiled)
        assert m.accept_bytes(b'{"tags":["a","b"]}')
        assert m.is_accepting()
        assert not GrammarMatcher(compiled).accept_bytes(b'{"tags":["a","a"]')
    with pytest.raises(ConfigurationError, match="takes no other arguments"):
        asyncio.run(pooled.compile_async(JsonSchemaSpec.of(UNIQUE_TAGS), "extra"))


def test_compile_async_returns_what_the_method_returns(
    pooled: GrammarCompiler, vocab: Vocabulary
) -> None:
    local = GrammarCompiler(vocab, cache_size=0, cache_dir=False)

    async def both() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(
            local.compile_async("json_schema", {"type": "array", "items": {"type": "integer"}}),
            pooled.compile_async(
                "compile_json_schema", {"type": "array", "items": {"type": "integer"}}
            ),
            local.compile_async("grammar", 'root ::= "x"+'),
        )

    a, b, c = asyncio.run(both())
    sync = GrammarCompiler(vocab, cache_size=0, cache_dir=False)
    expected = sync.compile_json_schema({"type": "array", "items": {"type": "integer"}})
    walks = random_walks(expected, walks=3, steps=10)
    assert np.array_equal(replay_masks(a, walks), replay_masks(expected, walks))
    assert np.array_equal(replay_masks(b, walks), replay_masks(expected, walks))
    assert c.kind == "gbnf"
    with pytest.raises(ConfigurationError, match="compile_async runs one of"):
        asyncio.run(local.compile_async("warm_up"))
    local.close()


def _cancel_after(comp: GrammarCompiler, seconds: float) -> None:
    async def main() -> None:
        task = asyncio.create_task(comp.compile_async("regex", SLOW))
        await asyncio.sleep(seconds)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_cancelling_kills_the_worker_job_and_writes_nothing(
    vocab: Vocabulary, tmp_path: Path
) -> None:
    comp = GrammarCompiler(vocab, workers=1, limits=BIG, cache_dir=tmp_path)
    try:
        comp.compile_regex("warm")
        (pid,) = comp.worker_pids()
        before = sorted(p.name for p in tmp_path.iterdir())
        t0 = time.monotonic()
        _cancel_after(comp, 0.2)
        assert wait_for(lambda: not alive(pid)), "the worker still runs the cancelled job"
        assert time.monotonic() - t0 < 5  # long before the compile could have finished
        assert wait_for(lambda: not comp.worker_pids())
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no file, no temp file
        assert comp.compile_regex("[xy]+").kind == "regex"  # a fresh worker
    finally:
        comp.close()


def test_cancelling_an_in_process_compile_unwinds_it(vocab: Vocabulary, tmp_path: Path) -> None:
    comp = GrammarCompiler(vocab, limits=BIG, cache_dir=tmp_path)
    _cancel_after(comp, 0.2)
    executor = comp._executor.threads
    assert executor is not None
    t0 = time.monotonic()
    executor.shutdown(wait=True)  # the compile thread stops at its next fuel charge
    assert time.monotonic() - t0 < 3
    assert list(tmp_path.iterdir()) == []
    assert comp.misses == 0
    comp._executor.threads = None
    assert comp.compile_regex("[xy]+").kind == "regex"
