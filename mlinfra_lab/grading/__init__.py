"""Chapter package `mlinfra_lab.grading` (in progress)."""

__all__: list[str] = []
