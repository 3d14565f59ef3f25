"""Reading version 5's machine code without a GPU (`attention.machine_code`).

The text functions are checked on SASS lines written here (the shapes nvdisasm prints); the
build is checked on the real kernel, compiled for sm_90 in a child process: the plain
schedule never waits with a matmul in flight, the overlapped one does, and the ``-ps`` form
feeds P to its second matmul from shared memory, so no matmul reads registers as A.
How much of the softmax the SASS keeps in flight is a property of ptxas's version: it is
printed by the chapter and the experiment script, not asserted here.
"""

from __future__ import annotations

import pytest

from mlinfra_lab import runtime
from mlinfra_lab.attention.studies import machine_code as mc

LOOP = [
    "HGMMA.64x64x16.F32.BF16 R56, gdesc[UR36], RZ, !UPT, gsb0 ;",
    "HGMMA.64x128x16.F32.BF16 R88, R228, gdesc[UR8].tnspB, R88, gsb0 ;",
    "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;",
    "MUFU.EX2 R3, R4 ;",
    "@P1 MUFU.EX2 R5, R6 ;",
    "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
    "MUFU.EX2 R7, R8 ;",
    "STL [R1], R0 ;",
    "LDL R0, [R1] ;",
    "HGMMA.64x64x16.F32.BF16 R56, gdesc[UR36], RZ, !UPT, gsb0 ;",
]


def test_schedule_condenses_matmuls_waits_exp2s_and_spills():
    assert mc.schedule(LOOP) == "Mx2 W1 Ex2 W0 E S L M"
    assert mc.schedule(["MUFU.EX2 R1, R2 ;"] * 3 + ["IADD3 R1, R2, R3, RZ ;"]) == "Ex3"


def test_softmax_in_flight_counts_the_exp2s_before_the_next_wait():
    assert mc.softmax_in_flight(LOOP) == pytest.approx(2 / 3)
    early_wait = LOOP[:3] + [LOOP[5], LOOP[3], LOOP[4], LOOP[-1]]
    assert mc.softmax_in_flight(early_wait) == 0.0  # ptxas waited first: no overlap
    assert mc.softmax_in_flight([x for x in LOOP if "0x1" not in x]) is None  # never in flight


def test_register_a_matmuls_tells_registers_from_shared_memory():
    assert mc.register_a_matmuls(LOOP) == 1  # the P V with P in R228...


def test_a_kernel_without_machine_code_is_refused():
    class Interpreted:
        asm: dict = {}

    with pytest.raises(mc.MachineCodeError, match="no cubin"):
        mc.disassemble(Interpreted())


def test_version_5_builds_read_back_as_their_schedules_claim():
    """Built for sm_90 here (a child process, no interpreter): the table's D=128 overlapped
    configuration waits with a matmul in flight (W1), its plain control never does, and the
    ``-ps`` configuration's P V reads P from shared memory (no register A operand)."""
    runtime.ensure_triton_mode()  # this process may import triton: the interpreter first
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from mlinfra_lab.attention._gluon_fwd import GluonConfig, pick_config

    overlap, plain, staged = mc.forward_schedules(
        [
            (128, False, pick_config(128, False, 4096)),
            (128, False, GluonConfig(128, 64, 4, 2, overlap=False)),
            (128, True, GluonConfig(128, 64, 8, 2, True, p_smem=True)),
        ]
    )
    assert overlap["config"] == pick_config(128, False, 4096).name  # rows come back in order
    assert staged["config"].startswith("overlap-ps")
    assert "W1" in overlap["schedule"] and overlap["register_a_matmuls"] > 0
    assert plain["softmax_in_flight"] is None and "W1" not in plain["schedule"]
    assert staged["register_a_matmuls"] == 0 and "W1" in staged["schedule"]
    assert staged["smem_bytes"] > overlap["smem_bytes"]  # the P buffer


def test_early_rescale_build_multiplies_while_qk_runs():
    """The ``-er`` build (O rescaled right after Q K^T is issued) places most of the rescale's
    128 multiplies per thread among the Q K^T matmul instructions; the table configuration,
    whose rescale waits for P V, places none there."""
    runtime.ensure_triton_mode()
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from mlinfra_lab.attention._gluon_fwd import GluonConfig

    late, early = mc.forward_schedules(
        [
            (128, False, GluonConfig(128, 64, 4, 2, True)),
            (128, False, GluonConfig(128, 64, 4, 2, True, early_rescale=True)),
        ]
    )
    assert early["config"] == "overlap-er-m128n64w4s2"
    assert late["multiplies_under_qk"] == 0
    assert early["multiplies_under_qk"] >= 64


def test_multiplies_under_qk_reads_the_loop_segment():
    """Counted from the loop's first matmul to its first W1, never before the matmul."""
    lines = [
        "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ",
        "WARPGROUP.DEPBAR.LE gsb0, 0x0",
        "FMUL R1, R2, R3",  # the first tile's softmax: no matmul in flight
        "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ",
        "FMUL R4, R5, R6",
        "@P0 FMUL R7, R8, R9",
        "HGMMA.64x128x16.F32.BF16 R88, R60, gdesc[UR12], R88",
        "WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "FMUL R10, R11, R12",
    ]
    assert mc.multiplies_under_qk(lines) == 2
    assert mc.multiplies_under_qk(lines[:2]) is None
