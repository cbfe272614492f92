"""Choosing the next token, shared by ``GPT2.generate`` and ``K3.generate``."""

from __future__ import annotations

import torch


def check_options(max_new_tokens, temperature: float, top_k: int | None, vocab_size: int) -> None:
    """The options of ``generate``: a ValueError naming the one that is out of range."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and not 1 <= top_k <= vocab_size:
        raise ValueError(f"top_k must be in [1, {vocab_size}] or None, got {top_k}")


def choose_next(logits: torch.Tensor, temperature: float, top_k: int | None,
                generator: torch.Generator | None) -> torch.Tensor:
    """``logits [B, vocab]`` -> next token ``[B, 1]``: arg-max at temperature 0, else a sample from the
    softmax of ``logits / temperature`` restricted to the ``top_k`` most likely tokens if given."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probabilities = torch.softmax(logits, dim=-1)
    if generator is not None and generator.device != probabilities.device:
        probabilities = probabilities.to(generator.device)
    return torch.multinomial(probabilities, 1, generator=generator).to(logits.device)
