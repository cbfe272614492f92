"""Show the package's own source in a chapter, so a listing can never drift from the code it teaches.

    show(kernels.recurrent_step._decode_step)                       # the whole function, highlighted
    show(chunk_fwd._state_pass, "for i_t in range", "b_s +=")       # from the first line holding one
                                                                    # text to the first later line holding
                                                                    # the other, both included

A slice is named by two texts that occur in the source (a marker comment, or a line of code). When the
code changes so that a text is gone, :func:`source` raises ValueError instead of showing something else:
the chapter fails loudly and is fixed, rather than teaching code that no longer exists.
"""

from __future__ import annotations

import inspect
import textwrap


def _unwrap(obj):
    # @triton.jit gives a JITFunction (or, in the interpreter, an InterpretedFunction); both keep the
    # Python function they wrap as .fn.
    while hasattr(obj, "fn") and not inspect.isfunction(obj):
        obj = obj.fn
    return obj


def source(obj, start: str | None = None, end: str | None = None) -> str:
    """The source of ``obj`` (a function, a @triton.jit kernel, a class or a module), dedented.

    With ``start`` the text begins at the first line containing ``start``; with ``end`` it stops after the
    first line at or after the start containing ``end``. Raises ValueError naming the missing text.
    """
    if end is not None and start is None:
        raise ValueError("end needs a start: pass start (the text of the first line to show) as well")
    text = inspect.getsource(_unwrap(obj))
    lines = text.splitlines()
    name = getattr(_unwrap(obj), "__qualname__", getattr(obj, "__name__", repr(obj)))
    if start is not None:
        first = _find(lines, start, 0, name, "start")
        last = _find(lines, end, first, name, "end") if end is not None else len(lines) - 1
        lines = lines[first:last + 1]
    return textwrap.dedent("\n".join(lines))


def _find(lines, text, begin, name, what):
    for number in range(begin, len(lines)):
        if text in lines[number]:
            return number
    raise ValueError(f"{what} text {text!r} does not occur in the source of {name}"
                     + (f" at or after line {begin + 1}" if begin else "")
                     + "; the code changed: update the listing")


class Listing:
    """Source text that a notebook shows as a highlighted Python block and a console as plain text.

    The notebook gets it as Markdown (a fenced ``python`` block), which JupyterLab, the book (myst-nb) and
    the slide decks all highlight, and whose height the deck builder can estimate line by line.
    """

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        fence = "````" if "```" in self.text else "```"
        return f"{fence}python\n{self.text}\n{fence}"

    def __repr__(self) -> str:
        return self.text


def show(obj, start: str | None = None, end: str | None = None) -> Listing:
    """:func:`source` as a :class:`Listing`, for the last line of a notebook cell."""
    return Listing(source(obj, start, end))
