"""``python -m mlinfra_lab.tracking.server [--db URL --artifacts ROOT --port N ...]``: `mlinfra-lab track serve`."""

import sys

from mlinfra_lab.cli import main

if __name__ == "__main__":
    sys.exit(main(["track", "serve", *sys.argv[1:]]))
