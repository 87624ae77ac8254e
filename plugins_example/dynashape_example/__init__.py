"""com.microsoft contrib ops of ONNX Runtime's transformer optimizer as a dynashape plugin.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md): ``Gelu``, ``FastGelu`` and
``BiasGelu`` in :mod:`.gelu`; ``EmbedLayerNormalization`` and ``SkipLayerNormalization`` in
:mod:`.layernorm`; ``Attention`` and ``RelativePositionBias`` in :mod:`.attention`; ``Tokenizer``
in :mod:`.tokenizer`; the others in :mod:`.activations`, :mod:`.mha` and :mod:`.quantization`.

Each module is a lazy library: the entry point imports only this package and its index
(:mod:`.index`, the ops of each module), and a module is imported when a model first uses one
of its ops. After adding or removing an op, regenerate the index::

    dynashape plugins --index dynashape_example.gelu dynashape_example.layernorm \
        dynashape_example.attention dynashape_example.activations dynashape_example.mha \
        dynashape_example.quantization dynashape_example.tokenizer > plugins_example/dynashape_example/index.py
"""
from __future__ import annotations

from dynashape.libindex import lazy_plugin

from .index import INDEX

DOMAIN = "com.microsoft"

#: the object the entry point ``dynashape_example:plugin`` names
plugin = lazy_plugin(INDEX)
