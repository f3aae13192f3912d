"""A progress bar with rate and ETA, in plain text on stderr (no dependency).

On a terminal it redraws one line; elsewhere (CI logs, files) it prints a line at each
tenth of the work and at the end, so logs stay short.
"""
from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}:" if hours else "") + f"{rest // 60:0{2 if hours else 1}d}:{rest % 60:02d}"


class Progress:
    def __init__(self, stream=None, width: int = 30):
        self.stream = stream or sys.stderr
        self.width = width
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total = self.done = self.already = 0
        self.started = time.monotonic()
        self._shown_tenth = -1

    def start(self, *, todo: int, already: int) -> None:
        self.total, self.already, self.done = todo + already, already, 0
        self.started = time.monotonic()
        if already:
            self.note(f"{already} of {self.total} already graded in this folder; grading the "
                      f"other {todo}")
        self._draw()

    def advance(self) -> None:
        self.done += 1
        self._draw()

    def note(self, text: str) -> None:
        """A line above the bar (a failure, a remark); the bar is drawn again below it."""
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        if self.live and self.total:
            self._draw()
        self.stream.flush()

    def finish(self) -> None:
        if self.live:
            self.stream.write("\n")
        self.stream.flush()

    def line(self) -> str:
        count = self.already + self.done
        fraction = count / self.total if self.total else 1.0
        filled = int(self.width * fraction)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        left = self.total - count
        eta = _clock(left / rate) if rate else "?"
        return (f"[{bar}] {count}/{self.total} {fraction:4.0%}  {rate:.1f}/s  "
                f"elapsed {_clock(elapsed)}  ETA {eta if left else '0:00'}")

    def _draw(self) -> None:
        if self.live:
            self.stream.write("\r\033[K" + self.line())
        else:
            count = self.already + self.done
            tenth = 10 * count // self.total if self.total else 10
            if tenth == self._shown_tenth and count != self.total:
                return
            self._shown_tenth = tenth
            self.stream.write(self.line() + "\n")
        self.stream.flush()
