"""``run_server`` (what ``formcast serve`` calls) runs uvicorn on asyncio's event loop, not on
uvicorn's "auto" choice (uvloop when installed): under uvloop a burst of requests already
received is read one connection per loop turn, interleaved with the handlers before it
(docs/benchmarks_server.md, session 22).  The HTTP parser stays uvicorn's choice (over
httptools, a protocol writing a response's head in one write: session 25).  What
start-up made is frozen out of the garbage collector's passes before serving."""

from __future__ import annotations

from typing import Any

import pytest
from server_harness import ToyModel

from formcast.server import ServerConfig
from formcast.server.app import run_server


def test_run_server_asks_uvicorn_for_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    seen: dict[str, Any] = {}

    def fake_run(app: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr(uvicorn, "run", fake_run)
    run_server(ToyModel(), ServerConfig(model_name="toy", compile_workers=0), port=1)
    assert seen["loop"] == "asyncio"
    # the parser stays uvicorn's pick: its httptools protocol extended (the head in one
    # write, formcast.server.http_protocol) when httptools is installed, else "auto" (h11)
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - the server extra pins httptools
        assert seen["http"] == "auto"
    else:
        assert isinstance(seen["http"], type)
        assert issubclass(seen["http"], HttpToolsProtocol)
    run_server(ToyModel(), ServerConfig(model_name="toy", compile_workers=0), port=1,
               loop="uvloop")
    assert seen["loop"] == "uvloop"


def test_start_up_objects_are_frozen_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    import uvicorn

    frozen: list[int] = []
    model = ToyModel()

    def fake_run(app: Any, **kwargs: Any) -> None:
        frozen.append(gc.get_freeze_count())

    monkeypatch.setattr(uvicorn, "run", fake_run)
    gc.unfreeze()
    try:
        run_server(model, ServerConfig(model_name="toy", compile_workers=0), port=1)
        # the model (and the app made from it) are in the permanent generation by then
        assert frozen
        assert frozen[0] > 0
        assert gc.is_tracked(model)
        assert not any(model is o for o in gc.get_objects())  # (the permanent generation's)
    finally:
        gc.unfreeze()
