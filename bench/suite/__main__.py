"""Entry point: `python3 bench/suite ARGS` (what `ext4lazy bench ARGS` runs)."""
import os
import sys

# Run as a directory, sys.path[0] is bench/suite itself: replace it by bench/ so that the package imports as
# `suite` and none of its module names can shadow a standard-library module.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
sys.path.insert(0, os.path.dirname(_here))

from suite import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
