"""Analytic FLOP counts of the attention mixers, per head and per sequence.

What is counted: the matrix products, with one multiply-add = **2 FLOPs** (the convention of
``torch.utils.flop_counter.FlopCounterMode`` and of the Kimi Linear paper). Element-wise work
(masks, exp of the gates, scaling) and the triangular solve of the delta rule are not counted;
they are lower order and FlopCounterMode does not count them either. Sizes: ``L`` (or ``T``)
tokens, ``d`` head dimension (``d_k`` keys, ``d_v`` values when they differ), ``C`` chunk size.

The same numbers in the units people quote:

=========================== ================================ ==============================
                            multiply-adds (the article)       FLOPs (this module)
=========================== ================================ ==============================
chunked linear attn, state  ``2 L d^2`` (Q S and K^T V)        ``4 L d^2``
chunked linear attn, intra  ``2 L C d`` (Q K^T and scores V)   ``4 L C d``
full attention (dense)      ``2 L^2 d``                        ``4 L^2 d``
full attention (causal)     ``L^2 d``                          ``2 L^2 d``  (Kimi's comparison)
=========================== ================================ ==============================

So "state part 2Ld², intra part 2LCd, full attention 2L²d" is exact when read as multiply-adds of
dense matrix products; chunking with C = L turns the intra part into full attention and C = 1
leaves only the state part (plus 4Ld for the 1x1 "scores"). The tests check every count here
against FlopCounterMode run on the implementations in ``k3lite.ops``.
"""

from __future__ import annotations

from typing import NamedTuple


class Split(NamedTuple):
    """FLOPs of a chunked mixer, split into the part that goes through the state and the rest."""

    state: int   # reading and writing the d_k x d_v memory: linear in L, independent of C
    intra: int   # score matrices on the diagonal blocks: grows with C

    @property
    def total(self) -> int:
        return self.state + self.intra


def _chunk_lengths(L: int, C: int) -> list[int]:
    if L < 1 or C < 1:
        raise ValueError(f"L and C must be >= 1, got L={L}, C={C}")
    return [C] * (L // C) + ([L % C] if L % C else [])


def linear_attention_chunked(L: int, d_k: int, C: int, d_v: int | None = None) -> Split:
    """FLOPs per head of ``k3lite.ops.linear_attention.chunked``: ``O = Q S + (Q K^T ⊙ M) V``, ``S += K^T V``.

    state = ``2 L d_k d_v`` (Q S) + ``2 L d_k d_v`` (K^T V) = ``4 L d^2``;
    intra = per chunk of c tokens ``2 c^2 d_k`` (Q K^T) + ``2 c^2 d_v`` (scores V) = ``4 L C d`` when
    C divides L. A shorter last chunk (L mod C = r) costs ``4 r^2 d`` instead of ``4 r C d``. The
    products are dense: the causal mask zeroes half of each score block after it was computed.
    """
    d_v = d_k if d_v is None else d_v
    state = 2 * L * d_k * d_v + 2 * L * d_k * d_v
    intra = sum(2 * c * c * d_k + 2 * c * c * d_v for c in _chunk_lengths(L, C))
    return Split(state, intra)


def full_attention(L: int, d_k: int, d_v: int | None = None, *, causal: bool = False) -> int:
    """FLOPs per head of attention over L tokens: ``2 L^2 d_k`` (Q K^T) + ``2 L^2 d_v`` (weights V).

    ``causal=True`` counts only the lower triangle (what a causal kernel skips to), i.e. half:
    ``2 L^2 d`` for d_k = d_v = d, the number the Kimi Linear paper compares against. The softmax
    itself is not counted.
    """
    d_v = d_k if d_v is None else d_v
    dense = 2 * L * L * d_k + 2 * L * L * d_v
    return dense // 2 if causal else dense


def kda_chunked(T: int, d: int, C: int) -> Split:
    """FLOPs per head of the matrix products in ``k3lite.ops.kda.chunked`` (d_k = d_v = d).

    Chunks hold P tokens (C rounded up to a power of two, the tail padded); n = ceil(T / C).
    state, per chunk: ``[W; Q ⊙ e^G] S`` (``4 P d^2``) and the update ``(e^{G_C - G} ⊙ K)^T V'``
    (``2 P d^2``): ``6 T d^2`` in all, exactly the d^2 term of the Kimi Linear formula.
    intra, per chunk: ``A_qk V'`` (``2 P^2 d``) and the decayed key-key and query-key scores.
    Those are built by halving (``kda._pairwise_decayed``): a block of b tokens costs two
    ``(b/2) x d x (b/2)`` products for the pairs across its middle, and the halves recurse. Summed
    over the levels that is ``2 P (P - 1) d``, so only the lower triangle is ever computed, as in a
    kernel. Total intra: ``4 T C d - 2 T d`` when C is a power of two dividing T. The triangular
    solve is not a matrix product and is not counted, as in FlopCounterMode.
    """
    n = len(_chunk_lengths(T, C))
    P = 1 << (C - 1).bit_length()
    state = n * 6 * P * d * d
    intra = n * (2 * P * P * d + 2 * P * (P - 1) * d)
    return Split(state, intra)


def kimi_linear_kda(T: int, d: int, C: int) -> int:
    """The Kimi Linear paper's FLOPs per head for chunked KDA: ``6 T d^2 + 3 T C d + T C^2``.

    The ``6 T d^2`` are the three state products (see :func:`kda_chunked`). The intra-chunk terms
    count three lower-triangular ``C x C x d`` products (``3 T C d``: key-key and query-key scores
    and ``A_qk V'``) and the chunk's inverse (``T C^2``); our torch reference does ``4 T C d``
    there and leaves the inverse to a triangular solve. Compare with
    :func:`full_attention` ``(causal=True) = 2 T^2 d``.
    """
    return 6 * T * d * d + 3 * T * C * d + T * C * C
