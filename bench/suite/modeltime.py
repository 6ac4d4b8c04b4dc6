"""Runs on a model made faster than the drive (`--speed S`), brought back to the drive's own speed.

At speed S the served model takes busy/S real seconds for `busy` model seconds of drive work, so a phase that
took `real` seconds would take about real - busy/S + busy at the drive's speed.  That is exact when the host
never works while the drive does (one request at a time, nothing read ahead in the background), and too long
by the overlap otherwise: an upper bound.  Whether it is close enough for a workload is measured, not assumed:
the same run at speed 1 and at speed S (docs/BENCH.md, "Faster than the drive")."""


def at_drive_speed(real_s, busy_s, speed):
    """Seconds a phase of `real_s` would take at speed 1, its drive busy `busy_s` model seconds; None where the
    drive's busy time is unknown (no served model) or the run was at the drive's speed already."""
    if busy_s is None or not speed or speed == 1:
        return None
    return round(real_s + busy_s * (1 - 1 / speed), 3)
