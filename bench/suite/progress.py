"""Progress lines with the current phase, a bar and an estimate of the time left (stderr)."""
import sys
import time


def fmt_s(s):
    s = int(max(0, s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    """`total` units of estimated cost; `done(cost)` after each phase.  The ETA scales the seconds spent so far
    per unit of cost to what is left (a first guess of 5 s per unit before anything has finished)."""

    def __init__(self, total, name="bench"):
        self.total, self.spent, self.name = max(total, 1e-9), 0.0, name
        self.t0 = time.monotonic()
        self.phase = ""

    def log(self, msg):
        print(f"[{self.name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def status(self, phase, frac_in_phase=0.0, cost=0.0):
        self.phase = phase
        done = self.spent + cost * frac_in_phase
        elapsed = time.monotonic() - self.t0
        rate = elapsed / done if done > 0 else 5.0
        left = (self.total - done) * rate
        n = int(20 * done / self.total)
        self.log(f"[{'#' * n}{'-' * (20 - n)}] {100 * done / self.total:3.0f}% elapsed {fmt_s(elapsed)} "
                 f"ETA {fmt_s(left)} | {phase}")

    def done(self, cost):
        self.spent += cost
