"""Chapter package `mlinfra_lab.scaling` (in progress)."""

__all__: list[str] = []
