"""What a kernel compiled for sm_90 on a CPU says about itself: ptxas's registers and spills,
and the register budgets (``setmaxnreg``) the warp-specialised partitions ask for.

Contract: `ptxas_report(ptx)` runs the ptxas that ships with Triton (``-v``, sm_90a) on one
kernel's PTX and returns its registers/spills lines joined; `register_budgets(ptx)` lists the
``setmaxnreg`` instructions as ``("inc" | "dec", registers)``. Neither needs a GPU, so the
experiment scripts' ``--compile-only`` runs can report them before any device time is spent.
"""

import os
import re
import subprocess
import tempfile
from pathlib import Path


def ptxas_report(ptx: str) -> str:
    """ptxas -v's registers and spills lines for one kernel's PTX (Triton ships ptxas)."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        done = subprocess.run(
            [str(ptxas), "-v", "--gpu-name", "sm_90a", f.name, "-o", os.devnull],
            capture_output=True,
            text=True,
        )
    finally:
        os.unlink(f.name)
    lines = (done.stdout + done.stderr).splitlines()
    keep = [x.strip() for x in lines if "registers" in x or "spill" in x or "wgmma" in x.lower()]
    return "; ".join(keep)


def register_budgets(ptx: str) -> list[tuple[str, int]]:
    """The ``setmaxnreg.{inc,dec}`` instructions of the PTX, in order."""
    found = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
    return [(kind, int(regs)) for kind, regs in found]
