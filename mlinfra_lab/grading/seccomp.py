"""A seccomp filter that keeps a sandbox's processes out of new user namespaces.

Contract: `no_user_namespaces()` returns the filter as a compiled classic-BPF program
(``struct sock_filter`` records, the form ``bwrap --seccomp FD`` reads), or None on a CPU
this module has no system-call numbers for. The filter refuses ``unshare`` and ``clone``
with ``CLONE_NEWUSER`` (``EPERM``) and ``clone3`` (``ENOSYS``), kills a process that makes
a system call of another architecture, and allows everything else. `filter_fd(program)`
puts a program in a sealed memory file for bubblewrap to read.

Design decisions:
- Why: the sandbox's throwaway user has no capabilities, but it could make a user
  namespace of its own (``unshare -rm``), become root in it and mount a tmpfs or a ramfs of
  any size. Those files were counted by no budget: not the tmpfs sizes bubblewrap sets,
  not the memory watch (it reads the sandbox's own mounts; a ramfs has no size to read).
  An attack wrote 2,000 MB past a 1 GiB disk budget that way. Without a user namespace the
  sandbox's user can mount nothing, so refusing it closes every such mount at once.
- ``clone3`` takes its flags in a structure a classic-BPF filter cannot read, so it is
  refused outright with ``ENOSYS``: the C library then falls back to ``clone``, whose
  flags the filter can read (container runtimes answer ``clone3`` the same way).
- A filter once loaded cannot be removed by the processes under it, and their children
  inherit it. Hand-assembled, a dozen instructions, so it needs no libseccomp.
"""

from __future__ import annotations

import fcntl
import os
import platform
import struct

__all__ = ["CLONE_NEWUSER", "filter_fd", "no_user_namespaces"]

CLONE_NEWUSER = 0x10000000

# audit architecture, and the numbers of unshare, clone and clone3
_ARCHES = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}
_X32_BIT = 0x40000000  # x86-64's x32 ABI: the same calls under other numbers

# classic BPF opcodes (linux/filter.h) and seccomp's return values (linux/seccomp.h)
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # args[0]'s low 32 bits on a little-endian CPU


def _assemble(program: list[tuple]) -> bytes:
    """``(op, k)`` or ``(op, k, if_true, if_false)`` with label targets, and ``label``
    strings, to ``struct sock_filter`` records (jumps are relative to the next one)."""
    labels: dict[str, int] = {}
    code: list[tuple] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)
    out = b""
    for at, (op, k, *targets) in enumerate(code):
        jt, jf = (labels[t] - at - 1 if isinstance(t, str) else t for t in (targets or (0, 0)))
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out


def no_user_namespaces(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one's), or None where it has no numbers."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, unshare, clone, clone3 = arch
    program: list = [
        (_LD_ABS, _ARCH),
        (_JEQ, audit, 0, "kill"),
        (_LD_ABS, _NR),
    ]
    if audit == _ARCHES["x86_64"][0]:
        program.append((_JGE, _X32_BIT, "kill", 0))
    program += [
        (_JEQ, clone3, "nosys", 0),
        (_JEQ, unshare, "flags", 0),
        (_JEQ, clone, "flags", 0),
        (_RET, _ALLOW),
        "flags",
        (_LD_ABS, _ARG0_LOW),
        (_JSET, CLONE_NEWUSER, "eperm", 0),
        (_RET, _ALLOW),
        "eperm",
        (_RET, _ERRNO | _EPERM),
        "nosys",
        (_RET, _ERRNO | _ENOSYS),
        "kill",
        (_RET, _KILL),
    ]
    return _assemble(program)


def filter_fd(program: bytes) -> int:
    """A read-only memory file holding `program`, positioned at its start (inheritable:
    pass it to the child with ``pass_fds``; close it after the child has started)."""
    fd = os.memfd_create("mlinfra-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, program)
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
