"""Chapter package `mlinfra_lab.tracking` (in progress)."""

__all__: list[str] = []
