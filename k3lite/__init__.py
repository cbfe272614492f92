"""k3lite: the shared package of the course "From GPT-2 to Kimi K3".

Readable PyTorch references of every mechanism (``k3lite.ops``), the layers built on them
(``k3lite.layers``), two whole models (``k3lite.models.gpt2``, ``k3lite.models.k3``) and Triton kernels
(``k3lite.kernels``) that are fast on a GPU and still run, interpreted, on a CPU.
"""

__version__ = "0.1.0"
