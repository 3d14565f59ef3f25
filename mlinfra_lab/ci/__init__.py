"""Chapter package `mlinfra_lab.ci` (in progress)."""

__all__: list[str] = []
