"""The judge: each grader's checks run again in a kernel the student's code never ran in.

Contract: ``Judge(workdir, config, sandbox, slot, env)`` launches a second kernel for one
notebook (its own sandbox, working folder and, as root, user); ``judge.start(timeout)``
waits for it. For each grader cell, ``judge.before(text, student_workdir, num)`` returns
the `judge_record.prepare` expression the runner sends to the student's kernel with the
cell (the names the grader's judge text `text` takes from the student, and where to write
the record), and ``judge.check(text, names, record_path, timeout)`` runs the judge text on
that record and returns None (the judge passed the grader) or a one-line reason.
``judge.stop()`` ends the kernel. A grader passes only when it passed in the student's
kernel *and* here (the runner combines the two).

Why: the student's kernel is the student's interpreter. A function can patch ``numpy``
while it runs, return an object whose comparisons always agree, or rewrite the grading
helpers there; no restoring before a cell undoes what happens during it. The judge runs the
grader's own text, with the grader's own imports, on the *values* the student's functions
returned, decoded into plain types by `judge_wire`: whatever the student's code did to its
own interpreter, the comparisons that decide the score run in a clean one.

Design decisions:
- Replay, not rewrite: the graders stay ordinary notebook cells (nbval and students run them
  as written); the judge text is the grader's run text minus the read-only *launchers*,
  after the top-level imports of the instructor's setup cells (see `markers`), and
  `judge_names` finds which names it takes from the student.
- The record is read by this process from the student's working folder without following
  links, only as a regular file with one link, up to `MAX_RECORD_BYTES`, then removed;
  the judge gets a copy in its own folder. Its content is untrusted (see `judge_wire`).
- When the student's kernel wrote no usable record, the judge still runs the text with the
  student's names unbound: its helpers stay defined for later graders, and the grader fails
  with the record's problem.
- Both kernels get the same ``PYTHONHASHSEED`` (the runner sets it), so a grader that
  iterates over a set of strings calls the student's functions in the same order in both.
- A failure the judge reports is made of the grader's words: its assertion messages, or,
  for an exception the student's code raised (replayed from the record), the exception's
  class and a few words of its text (`messages.student_raised`), never a long payload.
- What the judge cannot see: what a student's function does besides returning (a store it
  changes, the number of times it calls a function the grader did not pass it). Those
  checks still run in the student's kernel, which must pass too. Nor can it stop a function
  that, in its own kernel, reads the expected value out of the grader's frame
  (``sys._getframe``) and returns it: the value is then right in both kernels. Closing that
  would take a grader that never runs in the student's interpreter at all (calls made over
  RPC); the instructors' page of the book lists these limits.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from .budgets import human_bytes
from .judge_names import JudgeNames
from .judge_replay import TOKEN as REPLAY_TOKEN
from .judge_wire import dump
from .kernel_client import Kernel, error_message, execute, expression_ok
from .messages import student_raised
from .sandbox import Sandbox

__all__ = ["JUDGE_SLOT_OFFSET", "MAX_RECORD_BYTES", "Judge", "read_record"]

MAX_RECORD_BYTES = 256 << 20  # a larger record fails the grader (return smaller values)
JUDGE_SLOT_OFFSET = 1000  # the judge of job slot k runs in sandbox slot k + this (its own uid)
_RECORD = "__import__('mlinfra_lab.grading.judge_record', fromlist=['prepare']).{}"
_REPLAY = "__import__('mlinfra_lab.grading.judge_replay', fromlist=['load']).load({!r}, {!r})"


def read_record(path: Path, cap: int = MAX_RECORD_BYTES) -> tuple[bytes | None, str]:
    """(the record at `path`, "") or (None, why not): see the module docstring."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, "your kernel wrote no record of this grader's calls"
    except OSError:
        return None, "your kernel's record of this grader's calls is not a plain file"
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        return None, "your kernel's record of this grader's calls is not a plain file"
    if info.st_size == 0:  # the file the judge made for it, never written
        os.close(fd)
        os.unlink(path)
        return None, "your kernel wrote no record of this grader's calls"
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > cap:
            return None, (
                f"your functions' results for this grader came to more than {human_bytes(cap)}"
            )
        data = fh.read(cap + 1)
    try:
        os.unlink(path)
    except OSError:
        pass
    if len(data) > cap:
        return None, f"your functions' results for this grader came to more than {human_bytes(cap)}"
    return data, ""


def _replayed(detail: dict[str, Any]) -> bool:
    """True when the judge's error is a student exception its replayer raised again (the
    deepest frame of the judge's own traceback is in `judge_replay`; no student code runs
    in the judge, so that traceback is the judge's). Replay mismatches are the judge's."""
    frames = [str(f) for f in detail.get("traceback") or []]
    if str(detail.get("ename")) in ("JudgeError", "WireError") or len(frames) < 2:
        return False
    return "judge_replay" in frames[-2]


class Judge:
    """The judge kernel of one notebook (see the module docstring)."""

    def __init__(
        self,
        workdir: Path,
        config: Any,
        sandbox: Sandbox,
        slot: int,
        env: tuple[tuple[str, str], ...],
    ) -> None:
        self.slot = slot + JUDGE_SLOT_OFFSET
        self.sandbox = sandbox
        self.workdir = workdir
        self.names = JudgeNames()
        self.problem: str | None = None
        self.replayed = False  # the last check failed on a student exception, replayed
        sandbox.prepare(workdir, self.slot)
        self.uid = sandbox.uid(self.slot)
        self.kernel = Kernel(workdir, config, sandbox, self.slot, env)

    def start(self, timeout: float) -> None:
        problem = self.kernel.start(timeout)
        if problem is not None:
            self.problem = f"the judge could not start: {problem}"

    def before(self, text: str, student_workdir: Path, num: int) -> tuple[list[str], Path, str]:
        """(names the judge text takes, the student's record path, the prepare expression)."""
        names = self.names.take(text)
        record = student_workdir / f".judge-record-{num}"
        record.unlink(missing_ok=True)
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)  # made here: the student's sealed folder takes no new file (`sandbox`)
        uid = self.sandbox.uid(self.slot - JUDGE_SLOT_OFFSET)
        if uid is not None:
            os.chown(record, uid, uid)
        return names, record, _RECORD.format(f"prepare({names!r}, {str(record)!r})")

    def check(self, text: str, names: list[str], record: Path, timeout: float) -> str | None:
        """Run `text` in the judge on the student's record; None or why the grader failed."""
        self.replayed = False
        data, why = read_record(record)
        if data is None:
            data = dump({"names": {}, "calls": []}, [])
        target = self.workdir / f"record-{record.name}"
        target.write_bytes(data)
        os.chmod(target, 0o644)
        if self.problem is not None:
            return self.problem
        loaded, state = execute(
            self.kernel,
            "",
            timeout,
            store_history=False,
            user_expressions={"l": _REPLAY.format(str(target), names)},
        )
        if state == "dead":
            self.problem = "the judge's kernel stopped answering"
            return self.problem
        if not expression_ok(loaded, "l", REPLAY_TOKEN):
            result = ((loaded.reply or {}).get("user_expressions") or {}).get("l") or {}
            why = why or f"your kernel's record could not be read: {error_message(result)}"
        got, state = execute(self.kernel, text, timeout, store_history=False)
        target.unlink(missing_ok=True)
        if state == "dead":
            self.problem = "the judge's kernel died or hung on an earlier grader"
            return "the judge's kernel died or hung on this grader"
        if state == "interrupted":
            return f"the judge ran past the {timeout:g} s limit of a cell on this grader"
        status = (got.reply or {}).get("status")
        if status == "ok" and got.error is None:
            return why or None
        detail = got.error or (got.reply if status == "error" else None)
        if why or not detail:
            return why or f"the judge replied {status!r}"
        if _replayed(detail):  # the student's own exception: its class, a little text
            self.replayed = True
            return student_raised(str(detail.get("ename", "")), str(detail.get("evalue", "")))
        return error_message(detail)

    def stop(self) -> None:
        self.kernel.stop()
