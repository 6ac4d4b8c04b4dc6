"""bench/suite/modeltime.py: a run on a model faster than the drive, brought back to the drive's speed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from bench.suite.modeltime import at_drive_speed  # noqa: E402


def test_the_drive_time_is_stretched_back():
    # 10 real s at speed 4, the drive busy 20 model s: 5 real s of drive work become 20
    assert at_drive_speed(10.0, 20.0, 4) == 25.0
    # at the drive's speed, or without the drive's figures, there is nothing to bring back
    assert at_drive_speed(10.0, 20.0, 1) is None
    assert at_drive_speed(10.0, None, 4) is None
