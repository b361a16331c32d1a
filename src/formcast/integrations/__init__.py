"""Engine integrations: formcast inside another engine's decoding loop, each an optional extra.

=================================================  ===========================================
:mod:`formcast.integrations.transformers`          :class:`FormcastLogitsProcessor` for
                                                   ``model.generate()`` (torch, transformers)
:mod:`formcast.integrations.llama_cpp`             a numpy logits processor and stopping
                                                   criterion for llama-cpp-python's
                                                   ``create_completion`` / chat completion
:mod:`formcast.integrations.vllm`                  vLLM's ``StructuredOutputBackend`` and
                                                   ``StructuredOutputGrammar`` (``formcast[vllm]``)
:mod:`formcast.integrations.vllm_plugin`           the ``vllm.general_plugins`` entry point that
                                                   makes ``{"backend": "formcast"}`` valid
:mod:`formcast.integrations.sglang`                SGLang's ``BaseGrammarBackend`` and
                                                   ``BaseGrammarObject``, registered from the
                                                   ``sglang.srt.plugins`` entry point
=================================================  ===========================================

The model wrappers that formcast's own loop drives (:class:`~formcast.model.LlamaCppModel`,
:class:`~formcast.model.TransformersModel`, :class:`~formcast.model.CallableModel`) live in
:mod:`formcast.model`.  Importing this package imports no model library; see docs/engines.md.
"""
