"""Chapter package `mlinfra_lab.attention` (in progress)."""

__all__: list[str] = []
