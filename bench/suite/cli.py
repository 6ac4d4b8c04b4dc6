"""`ext4lazy bench list | run | report` (docs/BENCH.md)."""
import argparse
import os
import shlex
import shutil
import subprocess
import sys

from harness import util

from . import devices, memcg, merge, paper, report, systems
from .merge import MergeError
from .runner import Refused, Runner
from .suites import all_suites


def cmd_list(_args):
    print("suites (--suite):")
    for s in all_suites().values():
        first = s.doc.strip().splitlines()[0]
        print(f"  {s.name:14s} {first}")
        print(f"  {'':14s} default systems: {','.join(s.default_systems)}")
    print("systems (--systems A,B,...):")
    for n in systems.names():
        print(f"  {n:28s} {systems.get(n).doc}")
    print(f"  {'SYSTEM@PATH':28s} an ext4lazy system run with the ext4lazy binary at PATH (A/B runs of two builds)")
    print("devices (--device):")
    print("  file           an image file on this machine's disk")
    for m in devices.MODELS:
        print(f"  {m:14s} the disk model (docs/DISKMODELS.md); --speed S runs it S times faster than the drive")
    return 0


def parse_run(argv):
    ap = argparse.ArgumentParser(prog="ext4lazy bench run", description="Run a suite; see `ext4lazy bench list`.")
    ap.add_argument("--suite", required=True)
    ap.add_argument("--device", required=True, help="file, cmr, smr-seagate or smr-wd")
    ap.add_argument("--systems", default=None, help="comma list (default: the suite's)")
    ap.add_argument("--scale", type=float, default=0.01, help="multiplies every workload's counts (1 = the paper)")
    ap.add_argument("--speed", type=float, default=1.0, help="disk-model speed factor (1 = the real drive)")
    ap.add_argument("--out", required=True, help="results directory (resumable: finished records are kept)")
    ap.add_argument("--size", default=None, help="partition size, e.g. 64G (default: from the suite and scale)")
    ap.add_argument("--workers", type=int, default=8, help="worker processes for the creates (the paper's 8)")
    ap.add_argument("--timeout", type=int, default=6 * 3600, help="per workload, seconds")
    ap.add_argument("--no-traces", dest="traces", action="store_false",
                    help="no per-request model traces (no offset plots; saves disk at large scales)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every (system, workload) N times, each repetition of a group on fresh volumes, the "
                         "systems interleaved; records hold the mean and every repetition")
    ap.add_argument("--memory", default=None, type=memory_arg, metavar="MiB|max",
                    help="each record (system, workload, repetition) in a fresh memory cgroup with this limit, "
                         "holding the workload's processes and the file-system daemon, the disk models outside "
                         "(docs/BENCH.md); `max`: the same cgroups without a limit, to measure the peak")
    ap.add_argument("--groups", default=None, type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                    help="run only these groups of the suite (e.g. micro's `dirs`: MakeDirs and the walks of its "
                         "tree), to measure one at a larger scale")
    ap.add_argument("--keep", action="store_true", help="keep the images in OUT/work (debugging)")
    ap.add_argument("--no-plots", dest="plots", action="store_false")
    # the arc suite's own (docs/ARC.md); refused for the others
    ap.add_argument("--jobs", default=None, help="arc: control-directory sizes N[,N...] (default: the thesis's "
                    "5K..160K x --scale)")
    ap.add_argument("--layout", default=None, choices=("flat", "arc6", "arc7"), help="arc: directory layout (flat)")
    return ap.parse_args(argv)


def memory_arg(s):
    """--memory: MiB (a positive number) or `max`."""
    if s.strip().lower() == "max":
        return "max"
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is neither MiB nor `max`")
    if not v > 0:
        raise argparse.ArgumentTypeError("the limit must be positive")
    return int(v) if v == int(v) else v


def size_arg(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = s.strip().upper().rstrip("B").rstrip("I")
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def cmd_run(argv):
    args = parse_run(argv)
    args.command = "ext4lazy bench " + shlex.join(["run"] + argv)
    suites = all_suites()
    try:
        if os.geteuid() != 0:
            raise Refused("needs root (loop devices, mounts, drop_caches, tracefs)")
        if args.suite not in suites:
            raise Refused(f"unknown suite {args.suite!r}; suites: {', '.join(suites)}")
        suite = suites[args.suite]
        if args.device not in devices.DEVICES:
            raise Refused(f"unknown device {args.device!r}; devices: {', '.join(devices.DEVICES)}")
        if not (args.scale > 0) or not (args.speed > 0):
            raise Refused("--scale and --speed must be positive")
        if args.repeat < 1:
            raise Refused("--repeat must be at least 1")
        if args.memory is not None:
            try:
                memcg.find()
            except memcg.Unavailable as e:
                raise Refused(f"--memory: {e}")
        try:
            chosen = [systems.get(n.strip()) for n in (args.systems or ",".join(suite.default_systems)).split(",")
                      if n.strip()]
        except ValueError as e:
            raise Refused(str(e))
        args.size = size_arg(args.size) if args.size else None
        binary = os.environ.get("EXT4LAZY_BIN") or shutil.which("ext4lazy")
        if not binary or not os.access(binary, os.X_OK):
            raise Refused("no ext4lazy binary: run this as `ext4lazy bench ...` or set EXT4LAZY_BIN")
        binary = os.path.abspath(binary)
        if suite.configure:
            try:
                suite.configure(args, binary)
            except ValueError as e:
                raise Refused(str(e))
        elif args.jobs is not None or args.layout is not None:
            raise Refused(f"--jobs and --layout are options of the arc suite, not of {args.suite}")
        for s in chosen:
            ok, why = s.available(binary)
            if not ok:
                raise Refused(f"system {s.name}: {why}")
        os.makedirs(args.out, exist_ok=True)
        runner = Runner(args, suite, chosen, binary)
        failures = runner.run()
    except Refused as e:
        print(f"ext4lazy bench: refused: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ext4lazy bench: interrupted; volumes torn down; finished records are in {args.out}/results.json "
              "(run the same command again to resume)", file=sys.stderr)
        return 130
    write_report(args.out, args.plots)
    if failures:
        print(f"ext4lazy bench: {failures} record(s) failed (see the report's notes)", file=sys.stderr)
    return 1 if failures else 0


def run_plotter(module, out):
    """The PNGs that `python3 -m MODULE OUT` draws, run in the system's interpreter, which has matplotlib."""
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    # a module of this package: the repository root on its path, as __main__ sets it here
    path = os.pathsep.join(filter(None, [util.REPO, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    p = subprocess.run([py, "-m", module, out], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"ext4lazy bench: plots failed: {p.stderr.strip()[-800:]}", file=sys.stderr)
    return [line.strip() for line in p.stdout.splitlines() if line.strip().endswith(".png")]


def write_report(out, plots=True):
    pngs = run_plotter("bench.suite.plots", out) if plots else []
    path = report.write(out, pngs)
    print(f"ext4lazy bench: wrote {os.path.join(out, 'results.json')}, {path}"
          + (f" and {len(pngs)} plot(s)" if pngs else ""), file=sys.stderr)
    return path


def parse_paper(argv):
    ap = argparse.ArgumentParser(prog="ext4lazy bench paper", description="Run every experiment behind the papers' "
                                 "figures (bench/suite/paper.py PLAN) into OUT/<experiment>, then write OUT/paper.md "
                                 "and OUT/paper-*.png with the published numbers beside ours.")
    ap.add_argument("--out", required=True, help="results directory (resumable, as for `bench run`)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of every experiment (the paper: at least 5)")
    ap.add_argument("--only", default=None, help="comma list of experiments (default: all; `--list` names them)")
    ap.add_argument("--scale-factor", type=float, default=1.0, help="multiplies every experiment's scale")
    ap.add_argument("--speed", type=float, default=1.0, help="disk-model speed factor (1 = the real drive)")
    ap.add_argument("--report", action="store_true", help="only rewrite paper.md and the plots from OUT")
    ap.add_argument("--list", action="store_true", help="print the plan's `bench run` commands and stop")
    ap.add_argument("--no-plots", dest="plots", action="store_false")
    return ap.parse_args(argv)


def cmd_paper(argv):
    args = parse_paper(argv)
    try:
        chosen = paper.plan(args.only.split(",") if args.only else None)
    except ValueError as e:
        print(f"ext4lazy bench paper: refused: {e}", file=sys.stderr)
        return 2
    if not (args.scale_factor > 0) or not (args.speed > 0) or args.repeat < 1:
        print("ext4lazy bench paper: refused: --scale-factor and --speed must be positive, --repeat at least 1",
              file=sys.stderr)
        return 2
    runs = [(e, paper.run_argv(e, args.out, args.repeat, args.scale_factor, args.speed)) for e in chosen]
    if args.list:
        for e, a in runs:
            print(f"{e.name:22s} ext4lazy bench run {shlex.join(a)}")
        return 0
    failed = []
    if not args.report:
        for i, (e, a) in enumerate(runs, 1):
            print(f"ext4lazy bench paper: experiment {i} of {len(runs)}: {e.name} ({', '.join(e.figures)})",
                  file=sys.stderr)
            rc = cmd_run(a + ([] if args.plots else ["--no-plots"]))
            if rc == 130:
                return rc
            if rc != 0:
                failed.append(e.name)
    os.makedirs(args.out, exist_ok=True)
    if args.plots:
        run_plotter("bench.suite.paper", args.out)
    path = paper.write(args.out)
    print(f"ext4lazy bench paper: wrote {path}", file=sys.stderr)
    if failed:
        print(f"ext4lazy bench paper: failed or refused: {', '.join(failed)} (their reports say why)", file=sys.stderr)
    return 1 if failed else 0


def main(argv):
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: ext4lazy bench list\n"
              "       ext4lazy bench run --suite SUITE --device DEVICE [--systems A,B,...] [--scale X] [--speed S] "
              "[--repeat N] [--memory MiB] --out DIR\n"
              "       ext4lazy bench paper --out DIR [--repeat N] [--only A,B] [--report]  (every paper figure)\n"
              "       ext4lazy bench report DIR        (rewrite DIR/report.md and the plots)\n"
              "       ext4lazy bench merge OUT IN1 IN2 ... (results of runs made side by side, for one report)\n"
              "`ext4lazy bench run --help` lists every option; docs/BENCH.md explains them.")
        return 0
    if argv[0] == "list":
        return cmd_list(argv[1:])
    if argv[0] == "run":
        return cmd_run(argv[1:])
    if argv[0] == "paper":
        return cmd_paper(argv[1:])
    if argv[0] == "report" and len(argv) == 2:
        if not os.path.exists(os.path.join(argv[1], "results.json")):
            print(f"ext4lazy bench: no results.json in {argv[1]}", file=sys.stderr)
            return 2
        write_report(argv[1])
        return 0
    if argv[0] == "merge" and len(argv) >= 3:
        try:
            n = merge.merge(argv[1], argv[2:])
        except (MergeError, OSError, ValueError) as e:
            print(f"ext4lazy bench: merge: {e}", file=sys.stderr)
            return 2
        print(f"ext4lazy bench: {n} records from {len(argv) - 2} directories in {argv[1]} "
              f"(`ext4lazy bench report {argv[1]}` writes their report)", file=sys.stderr)
        return 0
    print(f"ext4lazy bench: unknown command {' '.join(argv)!r} (try `ext4lazy bench help`)", file=sys.stderr)
    return 2
