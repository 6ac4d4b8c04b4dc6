"""Small process / mount helpers shared by the tests and the benchmark."""
import contextlib
import json
import os
import shlex
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CmdError(Exception):
    def __init__(self, cmd, rc, out, err):
        self.cmd, self.rc, self.out, self.err = cmd, rc, out, err
        super().__init__(f"command failed (rc={rc}): {shlex.join(cmd)}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")


def run(cmd, check=True, timeout=600, input=None, env=None):
    """Run a command, capture text output; raise CmdError on non-zero exit when check."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input, env=env,
                       errors="replace")
    if check and p.returncode != 0:
        raise CmdError(cmd, p.returncode, p.stdout, p.stderr)
    return p


def mounted_at(mnt):
    """The /proc/self/mountinfo entry (fstype, source) for mountpoint mnt, or None."""
    mnt = os.path.realpath(mnt)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            mp = parts[4].encode().decode("unicode_escape")
            if mp == mnt:
                sep = parts.index("-")
                found = (parts[sep + 1], parts[sep + 2])
    return found


def in_proc_mounts(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return any(line.split()[1].encode().decode("unicode_escape") == mnt for line in f)


def fuse_conn_id(mnt):
    """The FUSE connection number (st_dev minor) of a mount, for /sys/fs/fuse/connections/N/abort."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[4].encode().decode("unicode_escape") == os.path.realpath(mnt):
                maj, mnr = parts[2].split(":")
                return int(mnr)
    return None


def abort_fuse(mnt):
    cid = fuse_conn_id(mnt)
    if cid is not None and os.path.exists(f"/sys/fs/fuse/connections/{cid}/abort"):
        try:
            with open(f"/sys/fs/fuse/connections/{cid}/abort", "w") as f:
                f.write("1")
        except OSError:
            pass


def force_unmount(mnt):
    """Best-effort teardown of whatever is mounted at mnt (used in finalizers)."""
    for _ in range(5):
        if not in_proc_mounts(mnt):
            return True
        fs = mounted_at(mnt)
        if fs and fs[0].startswith("fuse"):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
            if in_proc_mounts(mnt):
                abort_fuse(mnt)
        subprocess.run(["umount", mnt], capture_output=True)
        if in_proc_mounts(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        time.sleep(0.2)
    return not in_proc_mounts(mnt)


def pids_holding(path):
    """PIDs of processes that have `path` open (scans /proc/*/fd)."""
    path = os.path.realpath(path)
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        d = f"/proc/{pid}/fd"
        try:
            for fd in os.listdir(d):
                try:
                    if os.readlink(f"{d}/{fd}") == path:
                        out.append(int(pid))
                        break
                except OSError:
                    pass
        except OSError:
            pass
    return out


def proc_stat(pid):
    """The fields of /proc/PID/stat from the state on (proc(5) field 3 is [0]), or None once the process is gone.
    The command name before them is in brackets and may hold spaces and brackets: split after the last ")"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid):
    fields = proc_stat(pid)
    return bool(fields) and fields[0] != "Z"


def wait_pid_gone(pid, timeout=20):
    t = time.time() + timeout
    while time.time() < t:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def loops_for(image):
    p = subprocess.run(["losetup", "-j", os.path.realpath(image)], capture_output=True, text=True)
    return [line.split(":", 1)[0] for line in p.stdout.splitlines() if line.strip()]


def detach_loops(image):
    for dev in loops_for(image):
        subprocess.run(["losetup", "-d", dev], capture_output=True)


@contextlib.contextmanager
def sysctl_at_least(path, value):
    """The integer sysctl at `path` (/proc/sys/...) at least `value` while the block runs, then as it was.
    Yields (before, during). Left alone where it cannot be changed (not root): what needs root skips itself."""
    with open(path) as f:
        before = int(f.read())
    during = before
    if before < value:
        try:
            with open(path, "w") as f:
                f.write(f"{value}\n")
            during = value
        except OSError:
            pass
    try:
        yield before, during
    finally:
        if during != before:
            with open(path, "w") as f:
                f.write(f"{before}\n")


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def sparse_sha256(path):
    """sha256 over (offset, bytes) of every data segment of a (sparse) file: cheap for big sparse images."""
    import hashlib
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        h.update(str(size).encode())
        off = 0
        while off < size:
            try:
                data = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            pos = data
            while pos < hole:
                b = os.pread(fd, min(8 << 20, hole - pos), pos)
                if not b:
                    break
                # hash block-aligned chunks so the segmentation (which may differ run to run) doesn't matter
                # for all-zero pages: skip zero pages entirely
                for i in range(0, len(b), 4096):
                    page = b[i:i + 4096]
                    if page.count(0) != len(page):
                        h.update((pos + i).to_bytes(8, "little"))
                        h.update(page)
                pos += len(b)
            off = hole
    finally:
        os.close(fd)
    return h.hexdigest()


def bench(binary, *args, timeout=900):
    """Run `ext4lazy bench ARGS` with the ext4lazy binary `binary`; the completed process."""
    return subprocess.run([binary, "bench", *args], capture_output=True, text=True, timeout=timeout)


def live_stats(binary, mnt, until=lambda s: True, timeout=5):
    """A daemon's live figures (`ext4lazy stat --json`, refreshed every second), once `until` holds or after
    `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        p = subprocess.run([binary, "stat", "--json", mnt], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        if until(s) or time.time() > deadline:
            return s
        time.sleep(0.25)
