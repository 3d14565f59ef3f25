"""Command-line entry points of `mlinfra_lab.tracking` (registered by `mlinfra_lab.cli`)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this chapter's sub-commands; nothing yet."""
