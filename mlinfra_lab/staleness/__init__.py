"""Chapter package `mlinfra_lab.staleness` (in progress)."""

__all__: list[str] = []
