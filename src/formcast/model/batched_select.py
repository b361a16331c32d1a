"""The batched decoder of a loaded model, when formcast has one: :func:`batched_decoder_for`.

::

    from formcast.model.batched_select import batched_decoder_for

    decoder = batched_decoder_for(model, n_slots=8)      # None: serve it one sequence at a time

Which wrapper gets which decoder:

=====================================================  ======================================
``LlamaCppModel``                                      ``LlamaCppBatchedDecoder`` (its own
                                                       context on the loaded weights)
``TransformersModel``                                  ``TransformersBatchedDecoder``
``CallableModel``                                      ``CallableBatchedDecoder`` (tests, toy
                                                       worlds)
anything else                                          ``None``
=====================================================  ======================================

A model class is only looked at when its module is already imported (a model of it exists), so
asking never imports llama-cpp-python or torch.

Lifetime: the decoder returned shares the model's weights and is the caller's to close (the
llama.cpp one holds a context: ``close()`` it before the model is freed; formcast does it at
interpreter exit otherwise).  Cost: making the decoder allocates its per-slot caches
(llama.cpp: ``n_slots * n_ctx_per_slot`` KV cells up front).
"""

from __future__ import annotations

import sys
from typing import Any, cast

from .batched import BatchedDecoder
from .protocol import LanguageModel

__all__ = ["batched_decoder_for"]


def _class(module: str, name: str) -> type | None:
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls if isinstance(cls, type) else None


def batched_decoder_for(
    model: LanguageModel,
    *,
    n_slots: int,
    n_threads: int | None = None,
    n_ctx_per_slot: int | None = None,
) -> BatchedDecoder | None:
    """A batched decoder with ``n_slots`` slots over ``model`` (see the module table), or
    ``None`` when formcast has none for its class.

    Args:
        model: the loaded single-sequence wrapper.
        n_slots: sequences decoded together at most.
        n_threads: CPU threads (llama.cpp: the decoder's context; transformers:
            ``torch.set_num_threads``, process-wide).  ``None``: llama.cpp uses the cores this
            process may run on (:func:`~formcast.model.batched.default_threads`), torch keeps
            its own setting.
        n_ctx_per_slot: tokens one slot holds, prompt + output (``None``: the model's
            context).

    Raises:
        ConfigurationError: a bad size, or the backend refuses the decoder (llama.cpp cannot
            make the context, a transformers model with non-attention layers...).
    """
    llama = _class("formcast.model.llama_cpp", "LlamaCppModel")
    if llama is not None and isinstance(model, llama):
        from .llama_cpp_batched import LlamaCppBatchedDecoder

        return LlamaCppBatchedDecoder(
            cast(Any, model), n_slots=n_slots, n_ctx_per_slot=n_ctx_per_slot, n_threads=n_threads
        )
    hf = _class("formcast.model.transformers", "TransformersModel")
    if hf is not None and isinstance(model, hf):
        from .transformers_batched import TransformersBatchedDecoder

        return TransformersBatchedDecoder(
            cast(Any, model), n_slots=n_slots, max_context=n_ctx_per_slot, n_threads=n_threads
        )
    fn = _class("formcast.model.callable", "CallableModel")
    if fn is not None and isinstance(model, fn):
        from .callable_batched import CallableBatchedDecoder

        return CallableBatchedDecoder(cast(Any, model), n_slots=n_slots)
    return None
