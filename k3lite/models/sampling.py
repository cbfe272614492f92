"""Choosing the next token, shared by ``GPT2.generate`` and ``K3.generate``."""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch


class OptionTypeError(TypeError, ValueError):
    """An option of ``generate`` of the wrong type: a TypeError, and a ValueError as these checks raised before."""


def check_options(max_new_tokens, temperature: float, top_k: int | None, vocab_size: int) -> None:
    """The options of ``generate``, checked before any work: a TypeError naming the one of the wrong type (a string
    for a number, a fraction for a count; :class:`OptionTypeError`, also a ValueError), a ValueError naming the one
    out of range (NaN and infinity included)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral):
        raise OptionTypeError(f"max_new_tokens must be an int >= 0, got {type(max_new_tokens).__name__} "
                              f"{max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, Real):
        raise OptionTypeError(f"temperature must be a number >= 0 (0 = greedy), got {type(temperature).__name__} "
                              f"{temperature!r}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, Integral):
            raise OptionTypeError(f"top_k must be an int in [1, {vocab_size}] or None, got {type(top_k).__name__} "
                                  f"{top_k!r}")
        if not 1 <= top_k <= vocab_size:
            raise ValueError(f"top_k must be in [1, {vocab_size}] or None, got {top_k}")


def choose_next(logits: torch.Tensor, temperature: float, top_k: int | None,
                generator: torch.Generator | None) -> torch.Tensor:
    """``logits [B, vocab]`` -> next token ``[B, 1]``: arg-max at temperature 0, else a sample from the
    softmax of ``logits / temperature`` restricted to the ``top_k`` most likely tokens if given."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth_largest = torch.topk(logits, int(top_k), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probabilities = torch.softmax(logits, dim=-1)
    if generator is not None and generator.device != probabilities.device:
        probabilities = probabilities.to(generator.device)
    return torch.multinomial(probabilities, 1, generator=generator).to(logits.device)
