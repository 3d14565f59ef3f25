"""A hung rank is named from every rank's stack dump, and the job leaves no process behind.

The end-to-end tests run the harness on real gloo ranks with a short process-group timeout:
the rank with the `hang` fault blocks in its data read, the others wait for it in DDP's
all-reduce until the timeout fails them. Their timings are generous (the dumps fire seconds
after a step that computes for tens of milliseconds, the timeout seconds after that), so the
verdicts do not depend on the machine's load. The parsing tests use dumps written here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from dataclasses import replace

import pytest

from mlinfra_lab.scaling import (
    NoStackDumpsError,
    OversubscribedWarning,
    RankHungError,
    RankLostError,
    RunConfig,
    RunConfigError,
    name_hung_rank,
    parse_stack_dump,
    profile,
    read_stack_dumps,
)

pytestmark = pytest.mark.scaling

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
WAITING = f"""\
# mlinfra stack dumps: rank {{rank}}, pid 10, main thread 0x00007f0000000001
Timeout (0:00:02)!
Thread 0x00007f0000000001 (most recent call first):
  File "{SITE}/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "{SITE}/torch/_tensor.py", line 623 in backward
  File "/src/mlinfra_lab/scaling/harness.py", line 219 in run_rank
"""
STUCK = f"""\
# mlinfra stack dumps: rank {{rank}}, pid 11, main thread 0x00007f0000000002
Timeout (0:00:02)!
Thread 0x00007f0000000009 (most recent call first):
  File "{STDLIB}/threading.py", line 327 in wait

Thread 0x00007f0000000002 (most recent call first):
  File "{STDLIB}/threading.py", line 327 in wait
  File "/src/mlinfra_lab/scaling/workload.py", line 115 in _read_from_dead_mount
  File "/src/mlinfra_lab/scaling/workload.py", line 97 in __getitem__
  File "/src/mlinfra_lab/scaling/harness.py", line 197 in run_rank
"""
PYSPY_ALLREDUCE = f"""\
Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce ({SITE}/torch/distributed/distributed_c10d.py:2800)
    wrapper ({SITE}/torch/distributed/c10d_logger.py:81)
    train_step (train.py:40)
"""


def _write(folder, texts: dict[int, str]) -> None:
    for rank, text in texts.items():
        (folder / f"rank{rank}.stacks").write_text(text.format(rank=rank))


def test_the_rank_outside_a_collective_is_named_from_the_latest_main_thread_dump(tmp_path):
    # rank 2 dumped twice: first while computing, then stuck; the latest dump counts
    header, rest = STUCK.split("\n", 1)
    early = (
        "Timeout (0:00:02)!\nThread 0x00007f0000000002 (most recent call first):\n"
        '  File "/src/mlinfra_lab/scaling/workload.py", line 40 in forward\n\n'
    )
    _write(tmp_path, {0: WAITING, 1: PYSPY_ALLREDUCE, 2: f"{header}\n{early}{rest}"})
    verdict = name_hung_rank(read_stack_dumps(tmp_path, 3))
    assert verdict.stuck == (2,)
    assert sorted(verdict.waiting) == [0, 1]
    assert verdict.message.startswith("rank 2 is stuck outside any collective, in wait")
    assert "_read_from_dead_mount (workload.py:115)" in verdict.message
    assert "a collective (all_reduce)" in verdict.waiting[1]
    assert "rank 2: STUCK in" in verdict.report()


def test_a_missing_dump_is_reported_and_no_dump_at_all_is_an_error(tmp_path):
    _write(tmp_path, {0: WAITING, 1: STUCK})
    verdict = name_hung_rank(read_stack_dumps(tmp_path, 3))
    assert verdict.stuck == (1,) and verdict.missing == (2,)
    assert "rank 2 left no dump" in verdict.message
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "rank0.stacks").write_text("# mlinfra stack dumps: rank 0, pid 1, main thread 0x1\n")
    with pytest.raises(NoStackDumpsError, match="py-spy dump"):
        read_stack_dumps(empty, 2)


def test_ranks_that_all_wait_point_at_mismatched_collectives(tmp_path):
    _write(tmp_path, {0: WAITING, 1: PYSPY_ALLREDUCE})
    verdict = name_hung_rank(read_stack_dumps(tmp_path, 2))
    assert verdict.stuck == ()
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in verdict.message


def test_stack_dumper_dumps_a_late_step_and_on_a_signal(tmp_path):
    """A real rank-like process: a step that outlasts `after_s` dumps where it blocks, and
    SIGUSR1 dumps again while it still blocks in C (a lock wait), as py-spy dump would."""
    path = tmp_path / "rank3.stacks"
    script = textwrap.dedent(
        f"""
        import threading, time
        from mlinfra_lab.scaling.stacks import StackDumper
        dumper = StackDumper({str(path)!r}, 3, after_s=0.2)
        def blocked_in_a_lock():
            dumper.arm()
            threading.Event().wait()
        print("ready", flush=True)
        blocked_in_a_lock()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        # the caller's frame line is written after the frames inside it: the dump is complete
        _wait_for(lambda: path.read_text().count("in blocked_in_a_lock\n") >= 1)
        proc.send_signal(signal.SIGUSR1)
        _wait_for(lambda: path.read_text().count("in blocked_in_a_lock\n") >= 2)
    finally:
        proc.kill()
        proc.wait(30)
    stack = parse_stack_dump(path.read_text(), 3)
    assert stack is not None and stack.waiting_for is None
    assert stack.frames[0].func == "wait" and stack.job_frame is not None
    assert stack.job_frame.func == "blocked_in_a_lock"
    assert "Timeout (0:00:00.200000)!" in stack.text  # the first dump was the step's


def _wait_for(check, seconds: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the dump never appeared"
        time.sleep(0.05)


def test_a_dump_must_come_before_the_timeout_that_ends_the_wait():
    with pytest.raises(RunConfigError, match="shorter than pg_timeout_s"):
        RunConfig(pg_timeout_s=3, stack_dump_s=3)


HANG = RunConfig(steps=4, warmup=1, timeout_s=120, pg_timeout_s=8).with_faults("hang:rank=2,step=2")


def _children() -> set[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(os.getpid())], capture_output=True, text=True
    ).stdout
    return {int(p) for p in out.split()}


def _rank_processes() -> set[int]:
    """Live descendants of the fork server: the ranks (the server itself stays)."""
    found = set()
    for pid in _children():
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True
        )
        found |= {int(p) for p in out.stdout.split()}
    return found


def test_the_hung_rank_is_named_from_the_dumps_and_no_rank_outlives_the_job():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        with pytest.raises(RankHungError) as info:
            profile(replace(HANG, stack_dump_s=3.0), 3, show_progress=False)
    verdict = info.value.verdict
    assert verdict.stuck == (2,), verdict.report()
    assert sorted(verdict.waiting) == [0, 1]
    assert all("all-reduce" in w for w in verdict.waiting.values())
    assert "_read_from_dead_mount" in verdict.stacks[2].where()
    assert str(info.value).startswith("rank 2 is stuck outside any collective")
    assert not _rank_processes(), "a rank outlived the job"


def test_without_the_dumps_the_first_error_names_a_rank_that_only_waited():
    """The process group's timeout fails the healthy ranks; the hung one raises nothing.
    Without stack dumps the launcher can only report the first to fail: a victim."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        with pytest.raises(RankLostError) as info:
            profile(HANG, 3, show_progress=False)
    assert not isinstance(info.value, RankHungError)
    assert str(info.value).startswith(("rank 0 exited with code 1", "rank 1 exited with code 1"))
    assert not _rank_processes(), "a rank outlived the job"


def test_a_straggler_with_dumps_armed_finishes_and_step_4_names_it():
    """A straggler is slow, not stuck: its steps end, so the job ends, and the dumps its long
    steps triggered are never read; the straggler scores name it."""
    config = RunConfig(steps=2, warmup=1, timeout_s=120, pg_timeout_s=8, stack_dump_s=0.05)
    run = profile(config.with_faults("straggler:rank=1,ms=200"), 2, show_progress=False)
    scores = run.straggler_scores()
    assert scores.index(max(scores)) == 1 and max(scores) > 1.3
