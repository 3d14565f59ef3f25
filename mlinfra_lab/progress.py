"""Progress bars drawn only where someone watches: elsewhere, one summary line when work ends.

Contract: ``progress_bar(iterable, desc=..., total=..., unit=...)`` returns a tqdm bar (from
``tqdm.auto``) that draws on a terminal and in a notebook (tqdm's widget), and, when its
output is not a terminal (a CI log, a pipe, a file), draws nothing and writes one line to
stderr as it closes: ``DESC: N/TOTAL UNIT in S s``. ``enabled=False`` shows neither. The
object answers what the package's callers use: iteration, ``update``, ``set_postfix``,
``set_postfix_str``, ``close`` and ``with``.

Decisions:
- tqdm's ``disable=None`` is the test for a terminal (tqdm checks ``file.isatty()``); its
  notebook bar reads ``None`` as "draw", so the chapters keep their widgets.
- Off a terminal a bar's ``\\r`` redraws pile up into one line of a log (tens of kilobytes
  for a long run); the summary line keeps what a log reader needs: how much, how long.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

__all__ = ["progress_bar"]

T = TypeVar("T")


class _SummaryLine:
    """Stands in for a bar that is not drawn: counts the work, says it once when closed."""

    def __init__(
        self, iterable: Iterable[Any] | None, desc: str, total: int | None, unit: str
    ) -> None:
        self.iterable, self.desc, self.unit, self.n = iterable, desc, unit, 0
        if total is None and isinstance(iterable, Sized):
            total = len(iterable)
        self.total, self.postfix, self._start, self._closed = total, "", time.monotonic(), False

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("this progress bar was made without an iterable: call update()")
        try:
            for item in self.iterable:
                yield item
                self.n += 1
        finally:
            self.close()

    def update(self, n: float = 1) -> None:
        self.n += int(n)

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        values = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        done = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        extra = f" ({self.postfix})" if self.postfix else ""
        seconds = time.monotonic() - self._start
        print(f"{self.desc}: {done} {self.unit} in {seconds:.1f} s{extra}", file=sys.stderr)

    def __enter__(self) -> _SummaryLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(
    iterable: Iterable[T] | None = None,
    *,
    desc: str,
    total: int | None = None,
    unit: str = "it",
    enabled: bool = True,
    **kwargs: Any,
) -> Any:
    """A tqdm bar on a terminal or in a notebook; elsewhere one summary line at its close.

    `kwargs` go to tqdm (``leave``, ``mininterval``, ...). With ``enabled=False`` nothing is
    drawn or written (tqdm's ``disable=True``).
    """
    from tqdm.auto import tqdm

    if not enabled:
        return tqdm(iterable, desc=desc, total=total, unit=unit, disable=True, **kwargs)
    bar = tqdm(iterable, desc=desc, total=total, unit=unit, disable=None, **kwargs)
    if not bar.disable:
        return bar
    bar.close()
    return _SummaryLine(iterable, desc, total, unit)
