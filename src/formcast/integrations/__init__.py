"""Engine integrations: formcast inside another engine's decoding loop, each an optional extra.

=================================================  ===========================================
:mod:`formcast.integrations.transformers`          :class:`FormcastLogitsProcessor` for
                                                   ``model.generate()`` (torch, transformers)
=================================================  ===========================================

The model wrappers that formcast's own loop drives (:class:`~formcast.model.LlamaCppModel`,
:class:`~formcast.model.TransformersModel`, :class:`~formcast.model.CallableModel`) live in
:mod:`formcast.model`.  Importing this package imports no model library.
"""
