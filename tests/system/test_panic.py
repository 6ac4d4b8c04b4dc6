"""No request is ever left unanswered (issue 23): a panic while serving a
request is caught at the request boundary, on both transports. The caller
gets EIO at once instead of hanging (a FUSE wait that not even SIGKILL
ends), the daemon goes on serving, a panic under the write lock turns the
volume read-only, and the volume still unmounts promptly and checks clean.

Panics are injected with the mount option inject_panic=OP[@INO|/NAME]
(README: for tests). Every file system call runs in a child process with a
deadline, so that a hang fails the test (after aborting the connection to
free the child) instead of hanging pytest."""

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

URING_SWITCH = "/sys/module/fuse/parameters/enable_uring"
# The caller's answer must come within this (measured around the system call alone).
ANSWER_S = 1.0
# A child that has not finished by then hangs: the test fails.
HANG_S = 10.0
# `ext4lazy umount` must return within this.
UMOUNT_S = 5.0

# One system call on a path, in a child: prints {"result": "ok"|errno name, "seconds": s, "data": ...}.
PROBE = r"""
import errno, json, os, sys, time
op, path = sys.argv[1], sys.argv[2]
data, fd = None, None
try:
    if op in ("write", "create"):
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if op == "create" else 0)
        t = time.monotonic()
        fd = os.open(path, flags, 0o644)
        if op == "write":
            t = time.monotonic()
            os.write(fd, b"x" * 4096)
    elif op == "mkdir":
        t = time.monotonic()
        os.mkdir(path)
    elif op == "stat":
        t = time.monotonic()
        os.stat(path)
    elif op == "unlink":
        t = time.monotonic()
        os.unlink(path)
    elif op == "read":
        t = time.monotonic()
        with open(path, "rb") as f:
            data = f.read().decode(errors="replace")
    result = "ok"
except OSError as e:
    result = errno.errorcode.get(e.errno, str(e.errno))
seconds = time.monotonic() - t
if fd is not None:
    try:
        os.close(fd)
    except OSError:
        pass
print(json.dumps({"result": result, "seconds": seconds, "data": data}))
"""


def probe(op, path, mnt):
    """Run `op` on `path` in a child; (result, seconds, data). A child still
    waiting after HANG_S fails the test, once the connection is aborted to free it."""
    p = subprocess.Popen([sys.executable, "-c", PROBE, op, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        util.abort_fuse(mnt)
        p.kill()
        p.communicate(timeout=30)
        pytest.fail(f"{op} {path}: no answer within {HANG_S} s: the request was left unanswered")
    assert p.returncode == 0, f"probe {op} {path}: {err}"
    r = json.loads(out)
    return r["result"], r["seconds"], r["data"]


def answered(op, path, mnt, want):
    """`op` on `path` gets `want` ("ok" or an errno name) within ANSWER_S; returns (seconds, data)."""
    result, seconds, data = probe(op, path, mnt)
    assert result == want, f"{op} {path}: {result}, expected {want}"
    assert seconds < ANSWER_S, f"{op} {path}: answered after {seconds:.3f} s"
    return seconds, data


@pytest.fixture(scope="module")
def uring_switch():
    """FUSE over io_uring allowed while this module's uring tests run, as
    `ext4lazy install` (and CI's scripts/setup.sh) leave it; restored after.
    A kernel without it cannot run them: they say so, loudly."""
    if not os.path.exists(URING_SWITCH):
        pytest.skip(f"this kernel has no FUSE over io_uring ({URING_SWITCH} is missing): transport=uring not tested")
    with open(URING_SWITCH) as f:
        before = f.read().strip()
    if before not in ("Y", "1"):
        try:
            with open(URING_SWITCH, "w") as f:
                f.write("Y")
        except OSError as e:
            pytest.fail(f"cannot switch FUSE over io_uring on ({URING_SWITCH}): {e}")
    yield
    if before not in ("Y", "1"):
        with open(URING_SWITCH, "w") as f:
            f.write(before)


@pytest.fixture(params=["dev", "uring"])
def transport(request, adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("inject_panic is an ext4lazy mount option")
    if request.param == "uring":
        request.getfixturevalue("uring_switch")
    return request.param


def possible_cpus():
    with open("/sys/devices/system/cpu/possible") as f:
        return int(f.read().strip().replace(",", "-").split("-")[-1]) + 1


def live_stats(bin, mnt, until, what):
    """The daemon's live figures (refreshed every second), once `until` holds (5 s at most)."""
    deadline = time.time() + 5
    while True:
        p = subprocess.run([bin, "stat", "--json", mnt], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        if until(s):
            return s
        assert time.time() < deadline, f"{what} not seen in the live figures within 5 s: {s['fuse']}"
        time.sleep(0.2)


class Volume:
    """A fresh image holding `keep`, mounted read-write with a panic trigger."""

    def __init__(self, bin, workdir, name, transport, trigger):
        self.bin, self.transport = bin, transport
        self.img = os.path.join(workdir, f"{name}.img")
        self.mnt = os.path.join(workdir, f"{name}-mnt")
        self.stats = os.path.join(workdir, f"{name}-stats.json")
        src = os.path.join(workdir, f"{name}-src")
        for p in (self.img, self.stats):
            if os.path.exists(p):
                os.unlink(p)
        os.makedirs(src, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        with open(os.path.join(src, "keep"), "w") as f:
            f.write("written by mkfs\n")
        util.run(["truncate", "-s", "64M", self.img])
        util.run(["mkfs.ext4", "-F", "-q", "-d", src, self.img])
        self.log = "/run/ext4lazy/" + os.path.realpath(self.mnt).strip("/").replace("/", "_") + ".log"
        self.log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        opts = f"rw,transport={transport},inject_panic={trigger},stats={self.stats}"
        util.run([bin, "mount", "-o", opts, self.img, self.mnt])
        self.mounted = True
        if transport == "uring":
            # Requests go to the rings once every queue is registered (until then, to /dev/fuse).
            live_stats(bin, self.mnt, lambda s: s["fuse"]["uring_queues"] >= possible_cpus(), "every io_uring queue")

    def path(self, name):
        return os.path.join(self.mnt, name)

    def log_text(self):
        with open(self.log, errors="replace") as f:
            f.seek(self.log_start)
            return f.read()

    def panic_lines(self):
        return [l for l in self.log_text().splitlines() if "panic serving" in l]

    def umount(self, fails_with=None):
        """`ext4lazy umount`, timed; returns the seconds it took. With
        `fails_with`, it must exit non-zero saying that."""
        t = time.monotonic()
        try:
            p = subprocess.run([self.bin, "umount", self.mnt], capture_output=True, text=True, timeout=60)
        finally:
            self.mounted = False
        if fails_with is None:
            assert p.returncode == 0, f"umount: {p.stderr}"
        else:
            assert p.returncode != 0 and fails_with in p.stderr, f"umount exited {p.returncode}: {p.stderr}"
        return time.monotonic() - t

    def final_stats(self):
        with open(self.stats) as f:
            return json.load(f)

    def cleanup(self):
        if self.mounted or util.in_proc_mounts(self.mnt):
            util.force_unmount(self.mnt)


@contextlib.contextmanager
def volume(adapter, workdir, name, transport, trigger):
    v = Volume(adapter.bin, workdir, name, transport, trigger)
    try:
        yield v
    finally:
        v.cleanup()


def check_panic_line(v, op, outcome):
    """One log line for the panic, naming the opcode, its place, the serving
    thread (so, the transport that caught it) and what the kernel got."""
    lines = v.panic_lines()
    assert len(lines) == 1, f"expected one panic line in {v.log}:\n{v.log_text()}"
    line = lines[0]
    assert f"panic serving {op} on " in line and "injected panic (inject_panic)" in line, line
    assert " at crates/" in line, f"no place: {line}"
    assert f"(thread fuse-{v.transport}-" in line, f"not caught on a {v.transport} thread: {line}"
    assert outcome in line, line
    return line


def check_transport_served(v, stats):
    fuse = stats["fuse"]
    if v.transport == "uring":
        assert fuse["requests_uring"] > 0, f"nothing went over io_uring: {fuse}"
    else:
        assert fuse["requests_uring"] == 0, fuse


def e2fsck_clean(img, replay=False):
    """`e2fsck -fn` finds nothing; with `replay`, also on a copy whose journal
    was replayed first (what the next mount, ext4lazy's or the kernel's, sees)."""
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True)
    assert p.returncode == 0, f"e2fsck -fn {img}:\n{p.stdout}{p.stderr}"
    if replay:
        copy = img + ".replayed"
        util.run(["cp", "--sparse=always", img, copy])
        p = subprocess.run(["e2fsck", "-y", "-E", "journal_only", copy], capture_output=True, text=True)
        assert p.returncode in (0, 1), f"e2fsck -E journal_only:\n{p.stdout}{p.stderr}"
        e2fsck_clean(copy)
        os.unlink(copy)


def test_a_panic_under_the_write_lock_is_answered_eio_and_turns_read_only(adapter, workdir, transport):
    with volume(adapter, workdir, f"panic-write-{transport}", transport, "WRITE") as v:
        # The WRITE's handler panics halfway through the engine's operation, holding the write lock.
        seconds, _ = answered("write", v.path("victim"), v.mnt, "EIO")
        print(f"{transport}: write answered EIO after {seconds * 1000:.1f} ms")
        line = check_panic_line(v, "WRITE", "answered EIO")
        assert "the volume is read-only" in line, line
        # Other requests are still served, on every worker.
        for _ in range(4):
            answered("stat", v.mnt, v.mnt, "ok")
            _, data = answered("read", v.path("keep"), v.mnt, "ok")
            assert data == "written by mkfs\n"
        # Further changes fail cleanly, at once.
        answered("create", v.path("after"), v.mnt, "EROFS")
        answered("mkdir", v.path("dir"), v.mnt, "EROFS")
        # Nothing more reached the disk at unmount, and umount says so.
        took = v.umount(fails_with="final write-back of")
        print(f"{transport}: umount took {took:.2f} s")
        assert took < UMOUNT_S, f"umount took {took:.1f} s"
        stats = v.final_stats()
    assert stats["fuse"]["panics"] == 1, stats["fuse"]
    # The daemon's own word for why it stopped writing.
    assert "panicked halfway" in (stats["failure"] or ""), stats["failure"]
    check_transport_served(v, stats)
    e2fsck_clean(v.img, replay=True)


def test_a_panic_without_the_write_lock_leaves_the_volume_writable(adapter, workdir, transport):
    with volume(adapter, workdir, f"panic-lookup-{transport}", transport, "LOOKUP/ghost") as v:
        seconds, _ = answered("stat", v.path("ghost"), v.mnt, "EIO")
        print(f"{transport}: lookup answered EIO after {seconds * 1000:.1f} ms")
        line = check_panic_line(v, "LOOKUP", "answered EIO")
        assert "read-only" not in line, line
        # Nothing changed halfway: writing goes on.
        answered("write", v.path("after"), v.mnt, "ok")
        answered("mkdir", v.path("dir"), v.mnt, "ok")
        answered("stat", v.path("ghost"), v.mnt, "EIO")
        took = v.umount()
        assert took < UMOUNT_S, f"umount took {took:.1f} s"
        stats = v.final_stats()
    assert stats["fuse"]["panics"] == 2 and stats["failure"] is None, stats
    check_transport_served(v, stats)
    e2fsck_clean(v.img)
    # Written home at unmount: the stock tools see it.
    p = subprocess.run(["debugfs", "-R", "ls -l /", v.img], capture_output=True, text=True)
    assert " after" in p.stdout and " dir" in p.stdout, p.stdout


def test_a_panic_in_forget_gets_no_reply_and_the_daemon_serves_on(adapter, workdir, transport):
    """FORGET takes no reply (the kernel sends it through /dev/fuse even when
    the rings serve the rest): a panic there is caught and logged, nothing
    is sent back, and the daemon goes on."""
    with volume(adapter, workdir, f"panic-forget-{transport}", transport, "FORGET") as v:
        answered("create", v.path("gone"), v.mnt, "ok")
        # The kernel forgets an unlinked inode as soon as it drops it.
        answered("unlink", v.path("gone"), v.mnt, "ok")
        deadline = time.time() + 5
        while not v.panic_lines() and time.time() < deadline:
            time.sleep(0.1)
        lines = v.panic_lines()
        assert lines, f"no FORGET arrived within 5 s:\n{v.log_text()}"
        line = lines[0]
        assert "panic serving FORGET" in line or "panic serving BATCH_FORGET" in line, line
        assert "(thread fuse-dev-" in line and "not answered (the opcode takes no reply)" in line, line
        answered("write", v.path("after"), v.mnt, "ok")
        answered("stat", v.mnt, v.mnt, "ok")
        took = v.umount()
        assert took < UMOUNT_S, f"umount took {took:.1f} s"
        stats = v.final_stats()
    assert stats["fuse"]["panics"] >= 1 and stats["failure"] is None, stats
    e2fsck_clean(v.img)
