#!/usr/bin/env python3
"""A digest of every mask formcast computes along MaskBench instances and grammar_bench documents.

Two builds whose digests are equal computed bit-identical masks (and accepted the same tokens)
on this corpus: run it with each build's ``PYTHONPATH`` and compare the last line.  Per MaskBench
schema of ``maskbench.py``'s sample (``--sample``, ``--seed``), a fresh
``GrammarCompiler(cache_size=0)`` compiles it and each instance is walked with a fresh matcher;
per grammar_bench workload, its two documents are walked on one compile (cold, then warm).  At
every step the mask's bytes (and whether the document's next token was accepted) go into one
sha256, and into a per-source digest (``--verbose`` prints those: where two builds differ).

Usage::

    PYTHONPATH=/tmp/fc-main python benchmarks/mask_digest.py --sample 40 --seed 11
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # the MaskBench harness: data, sample, tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--data", default=str(maskbench.DATA_DIR))
    ap.add_argument("--no-grammars", action="store_true", help="MaskBench instances only")
    ap.add_argument("--verbose", action="store_true", help="a digest per schema / workload")
    args = ap.parse_args()
    maskbench._single_thread_env()
    from tokenizers import Tokenizer

    import grammar_bench as gb
    from formcast import GrammarCompiler, GrammarMatcher, allocate_token_bitmask
    from formcast.errors import FormcastError
    from formcast.vocab.loaders import load_vocabulary

    tok = Tokenizer.from_file(maskbench.tokenizer_path())
    vocab = load_vocabulary("llama3")
    mask = allocate_token_bitmask(1, maskbench.VOCAB_SIZE)
    total = hashlib.sha256()
    count = 0

    def walk(grammar: object, ids: list[int], h: hashlib._Hash) -> int:
        matcher = GrammarMatcher(grammar)  # type: ignore[arg-type]
        n = 0
        for token in [*ids, None]:
            matcher.fill_next_token_bitmask(mask, 0)
            h.update(mask.tobytes())
            n += 1
            if token is None:
                break
            ok = matcher.accept_token(token)
            h.update(b"1" if ok else b"0")
            if not ok:
                break
        return n

    files = maskbench.select_files(
        argparse.Namespace(
            data=args.data, files=None, full=False, sample=args.sample, seed=args.seed
        )
    )
    for path in files:
        task = maskbench.prepare(path, tok)
        h = hashlib.sha256()
        try:
            grammar = GrammarCompiler(vocab, cache_size=0).compile_json_schema(task["schema"])
        except FormcastError as e:
            h.update(f"compile error {type(e).__name__}".encode())
        else:
            for inst in task["instances"]:
                count += walk(grammar, inst["ids"], h)
        total.update(h.digest())
        if args.verbose:
            print(path.name, h.hexdigest()[:16])
    if not args.no_grammars:
        for name, wl in gb.make_workloads().items():
            compiler = GrammarCompiler(vocab, cache_size=0)
            grammar = (
                compiler.compile_builtin_json_grammar()
                if wl.kind == "json"
                else compiler.compile_grammar(wl.gbnf)
            )
            h = hashlib.sha256()
            for doc in wl.docs:
                count += walk(grammar, tok.encode(doc, add_special_tokens=False).ids, h)
            total.update(h.digest())
            if args.verbose:
                print(name, h.hexdigest()[:16])
    print(f"{len(files)} schemas + grammars, {count} masks: {total.hexdigest()}")


if __name__ == "__main__":
    main()
