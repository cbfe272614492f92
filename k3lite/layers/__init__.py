"""The modules built on ``k3lite.ops``, one file per mechanism.

* ``kda_layer``: the Kimi Delta Attention token mixer (``KDALayer``, ``KDACache``);
* ``mla``: Multi-head Latent Attention with absorbed decoding (``MLA``, ``MLACache``);
* ``moe``: sigmoid-routed, latent mixture of experts with SiTU (``MoE``, ``GatedMLP``, ``SigmoidRouter``);
* ``attnres``: Attention Residuals (``AttnResMixer``, ``AttnResSources``);
* ``norms``: ``RMSNorm`` and ``GatedRMSNorm``, the one RMSNorm of every model in k3lite;
* ``conv``: ``ShortConv``, the short causal convolution of every linear-attention layer in k3lite.

Import from the submodules (``from k3lite.layers.mla import MLA``); nothing is imported here, so
loading one layer never pulls in the others.
"""
