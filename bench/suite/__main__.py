"""Entry point: `python3 bench/suite ARGS` (what `ext4lazy bench ARGS` runs)."""
import os
import sys

# The one place the import path is set: run as a directory, sys.path[0] is bench/suite itself; replace it by the
# repository root, so that the package imports as `bench.suite` beside `harness` and none of its module names
# (`core`, `report`, ...) can shadow another module.
_here = os.path.dirname(os.path.abspath(__file__))
_repo = os.path.dirname(os.path.dirname(_here))
sys.path = [_repo] + [p for p in sys.path if os.path.abspath(p or ".") != _here]

from bench.suite import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
