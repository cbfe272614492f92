"""One small training loop shared by every chapter.

A model is anything that maps token ids ``[B, T]`` to logits ``[B, T, vocab]``. The loop is plain
AdamW with a linear warm-up and cosine decay, gradient clipping, and a history of losses, so a
chapter can plot what happened.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from numbers import Integral

import torch
import torch.nn.functional as F


class TrainingDiverged(FloatingPointError):
    """The loss or the gradient norm of a step was not finite (NaN or infinity): training stopped before that step's
    update, so the model keeps the parameters of the step before. ``step`` is the step, ``history`` what was recorded
    up to it."""

    def __init__(self, message: str, step: int, history: "TrainHistory"):
        super().__init__(message)
        self.step, self.history = step, history


@dataclass
class TrainHistory:
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; targets equal to -100 are ignored."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def learning_rate(step: int, total_steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay to a tenth of it."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(model: torch.nn.Module, next_batch, *, steps: int, lr: float = 3e-3, warmup: int = 20,
          weight_decay: float = 0.1, clip: float = 1.0, eval_batch=None, eval_every: int = 0,
          log_every: int = 1) -> TrainHistory:
    """Train ``model`` for ``steps`` optimiser steps.

    ``next_batch(step)`` returns ``(inputs, targets)``. If ``eval_batch`` (a fixed
    ``(inputs, targets)`` pair) and ``eval_every`` are given, the validation loss is recorded too.
    The training loss is recorded every ``log_every`` steps and at the last one.

    A step whose loss or gradient norm is not finite (the run diverged) stops the loop before its update, with a
    :class:`TrainingDiverged` error naming the step (a ``FloatingPointError``): the parameters keep the values they had
    before that step, never NaN. Lower ``lr`` or raise ``warmup`` and train again.
    """
    for name, value, least in (("steps", steps, 1), ("log_every", log_every, 1), ("eval_every", eval_every, 0),
                               ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    history = TrainHistory()
    start = time.perf_counter()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps, lr, warmup)
        model.train()
        inputs, targets = next_batch(step)
        loss = lm_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        # One number read back per step (as the history's loss is at log_every=1): a NaN or infinite loss or gradient
        # would turn every parameter into NaN at the update (clipping scales an infinite gradient by 0, giving NaN),
        # and the run would go on silently.
        if not torch.isfinite(loss.detach() + norm.to(loss.dtype)).item():
            history.seconds = time.perf_counter() - start
            raise TrainingDiverged(
                f"training diverged at step {step} (of {steps}): loss {loss.item():.4g}, gradient norm "
                f"{norm.item():.4g}; stopped before that step's update, so the parameters are "
                f"{f'those after step {step - 1}' if step else 'the initial ones'}. Lower lr (now {lr:g}) or raise "
                f"warmup (now {warmup})", step, history)
        optimizer.step()
        if step % log_every == 0 or step == steps - 1:
            history.steps.append(step)
            history.train_loss.append(loss.item())
        if eval_batch is not None and eval_every and (step % eval_every == 0 or step == steps - 1):
            history.val_steps.append(step)
            history.val_loss.append(evaluate(model, *eval_batch))
    history.seconds = time.perf_counter() - start
    return history


@torch.no_grad()
def evaluate(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Loss on a fixed batch, in eval mode."""
    model.eval()
    return lm_loss(model(inputs), targets).item()


@torch.no_grad()
def accuracy(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of the positions whose target is not -100 where the arg-max prediction is right."""
    mask = targets != -100
    if not mask.any():
        # The mean over no positions would be NaN, which reads like a broken model rather than a bad batch.
        raise ValueError(f"targets must have at least one position that is not -100, got shape {tuple(targets.shape)}")
    model.eval()
    predictions = model(inputs).argmax(dim=-1)
    return (predictions[mask] == targets[mask]).float().mean().item()
