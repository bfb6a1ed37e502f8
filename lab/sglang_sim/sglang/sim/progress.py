"""tqdm look-alike progress bars, written to stderr with '\\r' like tqdm does.

Two styles, as in SGLang's log:
  shards  "Multi-thread loading shards:  42% Completed | 27/64 [00:03<00:04,  7.90it/s]"
          (SGLang's bar_format ends in a newline, so every refresh is "\\r...\\n")
  batches "Capturing batches (bs=16 avail_mem=12.10 GB):  25%|██▌       | 1/4 [00:00<00:01,  3.10it/s]"
          (plain tqdm: refreshes are "\\r..." without newline, one newline at close)
"""

import sys
import time
from typing import TextIO

_BLOCKS = " ▏▎▍▌▋▊▉█"
_BAR_WIDTH = 10


def _fmt_interval(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _bar(fraction: float) -> str:
    full, partial = divmod(int(fraction * _BAR_WIDTH * 8), 8)
    if full >= _BAR_WIDTH:
        return _BLOCKS[-1] * _BAR_WIDTH
    return _BLOCKS[-1] * full + _BLOCKS[partial] + " " * (_BAR_WIDTH - full - 1)


class ProgressBar:
    """A tqdm-style bar; `shards=True` gives SGLang's weight-loading format."""

    def __init__(self, total: int, desc: str = "", shards: bool = False, stream: TextIO = None):
        self.total, self.desc, self.shards = total, desc, shards
        self.stream = stream or sys.stderr
        self.n = 0
        self.start = time.monotonic()
        self._display()

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._display()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._display()

    def close(self) -> None:
        self._display()
        self.stream.write("\n")
        self.stream.flush()

    def _display(self) -> None:
        self.stream.write("\r" + self._meter() + ("\n" if self.shards else ""))
        self.stream.flush()

    def _meter(self) -> str:
        elapsed = time.monotonic() - self.start
        fraction = self.n / self.total if self.total else 1.0
        if self.n and elapsed > 0:
            rate = self.n / elapsed
            rate_fmt = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
            remaining = _fmt_interval((self.total - self.n) / rate)
        else:
            rate_fmt, remaining = "?it/s", "?"
        times = f"[{_fmt_interval(elapsed)}<{remaining}, {rate_fmt}]"
        pct = f"{fraction * 100:3.0f}%"
        if self.shards:
            return f"{self.desc}: {pct} Completed | {self.n}/{self.total} {times}"
        prefix = f"{self.desc}: " if self.desc else ""
        return f"{prefix}{pct}|{_bar(fraction)}| {self.n}/{self.total} {times}"
