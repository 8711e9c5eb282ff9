"""Progress on stderr, one helper for every command.

:class:`ProgressBar` is a tqdm bar over counted steps (sweep runs, fuzz scenarios, the
benchmarks of calibrate, the simulations of validate), or nothing when it is not shown;
:class:`StatusLine` is one line redrawn in place, for work that counts its own progress (a
run's :class:`tlbsim.RunControl`, a recording's instructions). tqdm is imported only when a
bar is shown, so that commands without one do not pay for it.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, Self, TextIO


class ProgressBar:
    """A tqdm bar on stderr over ``total`` steps, or nothing at all when not ``enabled``.

    ``leave``: keep the finished bar on the screen (tqdm's default) or erase it."""

    def __init__(self, total: int, *, desc: str, unit: str, enabled: bool, leave: bool = True) -> None:
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave)

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def step(self, what: str, n: int = 1) -> None:
        """``n`` steps done, the last one named ``what`` (shown after the bar)."""
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(n)

    def advance_to(self, done: int) -> None:
        """``done`` steps done in all (for callers that report a running count)."""
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def add(self, n: int) -> None:
        """``n`` more steps than the bar was created with."""
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def set_description(self, desc: str) -> None:
        if self.bar is not None:
            self.bar.set_description(desc)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class StatusLine:
    """One line of text on stderr, redrawn in place by each :meth:`show`."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.drawn = False

    def show(self, text: str) -> None:
        # "\r" back to the line's start, "\x1b[K" erases what a longer previous text left
        self.stream.write("\r" + text + "\x1b[K")
        self.stream.flush()
        self.drawn = True

    def clear(self) -> None:
        """Erase the line (when one was drawn): the terminal is as before."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def end(self) -> None:
        """Move to the next line, keeping the last text shown."""
        self.stream.write("\n")
        self.stream.flush()


def rate_line(done: int, total: int, unit: str, elapsed: float) -> str:
    """`12,345,678 / 50,000,000 accesses (24.7%), 3.1 M/s, ETA 12 s` (no total: no % or ETA)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    line = f"{done:,}" + (f" / {total:,}" if total else "") + f" {unit}"
    if total:
        line += f" ({100.0 * done / total:.1f}%)"
    line += f", {rate / 1e6:.2f} M/s" if rate >= 1e5 else f", {rate:,.0f}/s"
    if total and rate > 0 and done < total:
        line += f", ETA {(total - done) / rate:,.0f} s"
    return line
