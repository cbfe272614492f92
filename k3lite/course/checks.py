"""Checks that a chapter prints instead of a number that varies from CPU to CPU.

A trained loss or a sampled text depends on the order in which floats are added, which differs between
CPUs, instruction sets and thread counts. The raw value is printed in a cell marked ``NBVAL_IGNORE_OUTPUT``;
the compared cell prints a claim about it that holds on every machine and fails loudly when it does not::

    expect("validation loss < 2.7", history.val_loss[-1] < 2.7)   # prints "validation loss < 2.7: True"
"""

from __future__ import annotations


def expect(claim: str, ok: bool) -> None:
    """Print ``"<claim>: True"`` when ``ok`` holds; raise ``AssertionError`` naming the claim when it does not."""
    if not isinstance(claim, str) or not claim.strip():
        raise ValueError(f"claim must be a non-empty string describing the check, got {claim!r}")
    if not bool(ok):
        raise AssertionError(f"expected: {claim}")
    print(f"{claim}: True")
