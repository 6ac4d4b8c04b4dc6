"""A record's workload in a process of its own (`bench run --memory`, bench/suite/memcg.py).

Why a process of its own, not the bench moving itself into the record's cgroup and back: under a limit the kernel
may OOM-kill a process of the cgroup; a workload process that dies leaves the bench alive to unmount, tear down and
record the failure, and nothing the bench holds (its results, its worker pool, the figures of earlier records) is
charged to the record.  The process is a fresh interpreter (`python3 -m bench.suite.child`), not a fork of the
bench: a fork would copy the bench's heap page by page into the record's cgroup as Python touches it, so the
charge would depend on how much the bench had done before.  It is started through `sh -c 'echo $$ > PROCS; exec
...'`, so it is in the cgroup from its first instruction, and so is everything it starts: the worker pool (made on
first use, the time it takes is not timed) and the workload's commands.

Parent -> child (stdin): a pickle of the workload, the mount point, the suite and the `bench run` arguments (the
suite's configure() runs again here: the arc suite keeps its options in module state), the workers, the timeout,
the system, and the workload's environment (LD_PRELOAD for `-preload` systems: put in os.environ for the
workload's programs, as the bench does in-process, not on this interpreter itself).
Child -> parent (stdout, one JSON object a line): {"progress": f}, {"log": text}, then {"done": {"extra", "t0",
"t1", "cgroup"}} or {"error": text, "traceback": text}.  The workload's own output goes to stderr.
"""
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import time
import traceback

from harness import util

from .core import Ctx, WorkloadError
from .memcg import PLACE, memory_path


class ChildCtx(Ctx):
    """Ctx whose worker pool is made on first use (a workload that uses none, as Postmark, has no idle workers
    charged to its cgroup); the seconds spent making it are reported so that they are not timed."""

    def __init__(self, workers, timeout, log, progress, system):
        self._pool, self.setup_s = None, 0.0
        super().__init__(None, workers, timeout, log, progress, system)

    @property
    def pool(self):
        if self._pool is None and self.workers > 1:
            t = time.monotonic()
            self._pool = multiprocessing.get_context("fork").Pool(self.workers)
            self.setup_s += time.monotonic() - t
        return self._pool

    @pool.setter
    def pool(self, _):
        pass

    def close(self):
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()


def run(w, root, ctx, procs_file, env, suite, args, binary):
    """Parent side: run workload `w` in a child placed in the cgroup whose cgroup.procs is `procs_file`;
    (extra, t0, t1, the child's memory cgroup).  Raises WorkloadError when it fails or dies."""
    payload = pickle.dumps({"workload": w, "root": root, "workers": ctx.workers, "timeout": ctx.timeout,
                            "system": ctx.system, "env": env, "suite": suite, "args": args, "binary": binary})
    path = os.pathsep.join(filter(None, [util.REPO, os.environ.get("PYTHONPATH")]))
    cmd = ["sh", "-c", PLACE, procs_file, sys.executable, "-m", "bench.suite.child"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=path))
    done = err = None
    try:
        try:
            p.stdin.write(payload)
            p.stdin.close()
        except BrokenPipeError:
            pass
        for line in p.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "progress" in msg:
                ctx.progress(msg["progress"])
            elif "log" in msg:
                ctx.log(msg["log"])
            elif "done" in msg:
                done = msg["done"]
            elif "error" in msg:
                err = msg
        rc = p.wait()
    except BaseException:
        p.kill()
        p.wait()
        raise
    if err:
        raise WorkloadError(err["error"] + (f" (workload process exited rc={rc})" if rc else ""))
    if rc != 0 or done is None:
        how = f"killed by signal {-rc}" if rc < 0 else f"exited rc={rc}"
        raise WorkloadError(f"the workload process {how} before it finished")
    return done["extra"], done["t0"], done["t1"], done["cgroup"]


def main():
    data = pickle.load(sys.stdin.buffer)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                   # the workload's prints and its programs' stdout: stderr, not the protocol
    sys.stdout = sys.stderr

    def send(**msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    os.environ.update(data["env"])
    ctx = ChildCtx(data["workers"], data["timeout"], lambda m: send(log=m),
                   lambda f, what="": send(progress=f), data["system"])
    rc = 0
    try:
        from .suites import all_suites
        suite = all_suites().get(data["suite"])
        if suite and suite.configure:
            suite.configure(data["args"], data["binary"])
        w = data["workload"]
        t0 = time.monotonic()
        extra = w.run(data["root"], ctx) or {}
        t1 = time.monotonic()
        send(done={"extra": extra, "t0": t0 + ctx.setup_s, "t1": t1, "cgroup": memory_path("self")})
    except BaseException as e:          # noqa: BLE001 - every failure goes back to the bench
        send(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
        print(traceback.format_exc(), file=sys.stderr)
        rc = 1
    finally:
        ctx.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
