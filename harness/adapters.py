"""Pluggable "implementation under test": ext4lazy, fuse2fs or the kernel's ext4.

Every adapter mounts an image read-only (by default) at a mount point and unmounts it, and can tell whether its
daemon is still alive.  The same differential tests run against any of them; the kernel is always the oracle.
"""
import os
import subprocess
import time

from . import util

ALL = ("ext4lazy", "fuse2fs", "kernel")


class MountFailed(Exception):
    def __init__(self, adapter, cmd, rc, stderr):
        self.adapter, self.cmd, self.rc, self.stderr = adapter, cmd, rc, stderr
        super().__init__(f"{adapter}: mount failed (rc={rc}): {' '.join(cmd)}\n{stderr.strip()[-3000:]}")


class Mounted:
    def __init__(self, adapter, image, mnt, pid=None, log=None, proc=None):
        self.adapter, self.image, self.mnt, self.pid, self.log, self.proc = adapter, image, mnt, pid, log, proc
        self.unmounted = False

    def alive(self):
        """True when the mount is still served (daemon alive, mount present, root stat-able)."""
        if not util.in_proc_mounts(self.mnt):
            return False
        if self.pid is not None and not util.pid_alive(self.pid):
            return False
        p = subprocess.run(["stat", "-c", "%i", self.mnt], capture_output=True, timeout=30)
        return p.returncode == 0

    def umount(self):
        if not self.unmounted:
            self.adapter.umount(self)
            self.unmounted = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.umount()


class Adapter:
    name = "?"
    fuse = True
    replays_in_place = False   # True: replaying a journal writes to the image (kernel), so give it a copy

    def available(self):
        """(ok, reason)"""
        return True, ""

    def default_options(self, ro=True):
        return ["ro"] if ro else ["rw"]

    def mount(self, image, mnt, options=None, ro=True, timeout=60):
        raise NotImplementedError

    def mount_cmd(self, image, mnt, options):
        raise NotImplementedError

    def umount(self, m):
        raise NotImplementedError

    def cleanup(self, m):
        """Finalizer-grade teardown: never raises, never leaves a mount or a daemon behind."""
        try:
            util.force_unmount(m.mnt)
        finally:
            if m.pid and util.pid_alive(m.pid):
                try:
                    os.kill(m.pid, 9)
                except ProcessLookupError:
                    pass
            if m.proc is not None:
                try:
                    m.proc.wait(timeout=10)
                except Exception:
                    pass


def _wait_mounted(mnt, proc, timeout):
    t = time.time() + timeout
    while time.time() < t:
        if util.in_proc_mounts(mnt):
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


class Ext4lazy(Adapter):
    name = "ext4lazy"

    def __init__(self, binary=None):
        self.bin = binary or os.environ.get("EXT4LAZY_BIN") or os.path.join(util.REPO, "target", "release",
                                                                           "ext4lazy")

    def available(self):
        if not os.access(self.bin, os.X_OK):
            return False, f"ext4lazy binary not found or not executable: {self.bin} (set EXT4LAZY_BIN)"
        return True, ""

    def mount_cmd(self, image, mnt, options):
        cmd = [self.bin, "mount"]
        if options:
            cmd += ["-o", ",".join(options)]
        return cmd + [image, mnt]

    def mount(self, image, mnt, options=None, ro=True, timeout=60):
        opts = self.default_options(ro) if options is None else options
        cmd = self.mount_cmd(image, mnt, opts)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        except subprocess.TimeoutExpired as e:
            util.force_unmount(mnt)
            raise MountFailed(self.name, cmd, "timeout", f"`ext4lazy mount` did not return within {timeout}s")
        if p.returncode != 0:
            if util.in_proc_mounts(mnt):
                util.force_unmount(mnt)
                raise MountFailed(self.name, cmd, p.returncode, p.stderr + "\n(and it left a mount behind)")
            raise MountFailed(self.name, cmd, p.returncode, p.stderr)
        if not util.in_proc_mounts(mnt):
            raise MountFailed(self.name, cmd, 0, "exit 0 but nothing is mounted at " + mnt)
        holders = [pid for pid in util.pids_holding(image) if pid != os.getpid()]
        return Mounted(self, image, mnt, pid=holders[0] if holders else None)

    def umount(self, m):
        cmd = [self.bin, "umount", m.mnt]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, errors="replace")
        except subprocess.TimeoutExpired:
            self.cleanup(m)
            raise AssertionError("`ext4lazy umount` did not return within 60 s")
        if p.returncode != 0 or util.in_proc_mounts(m.mnt):
            self.cleanup(m)
            raise AssertionError(f"`ext4lazy umount {m.mnt}` failed rc={p.returncode}: {p.stderr.strip()}")


class Fuse2fs(Adapter):
    name = "fuse2fs"

    def available(self):
        from shutil import which
        if not which("fuse2fs"):
            return False, "fuse2fs not installed (apt-get install fuse2fs)"
        return True, ""

    def default_options(self, ro=True):
        return ["ro", "fakeroot"] if ro else ["rw", "fakeroot"]

    def mount_cmd(self, image, mnt, options):
        cmd = ["fuse2fs", image, mnt]
        if options:
            cmd += ["-o", ",".join(options)]
        return cmd

    def mount(self, image, mnt, options=None, ro=True, timeout=60):
        opts = self.default_options(ro) if options is None else options
        cmd = self.mount_cmd(image, mnt, opts) + ["-f"]     # foreground: we own the daemon's pid
        log = open(os.path.join(os.path.dirname(os.path.abspath(mnt)), f".fuse2fs-{os.getpid()}-{time.time_ns()}.log"),
                   "w+")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if not _wait_mounted(mnt, proc, timeout):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            util.force_unmount(mnt)
            log.seek(0)
            raise MountFailed(self.name, cmd, proc.returncode, log.read())
        return Mounted(self, image, mnt, pid=proc.pid, log=log, proc=proc)

    def umount(self, m):
        subprocess.run(["fusermount3", "-u", m.mnt], capture_output=True)
        try:
            m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.cleanup(m)
        if util.in_proc_mounts(m.mnt):
            util.force_unmount(m.mnt)


class Kernel(Adapter):
    name = "kernel"
    fuse = False
    replays_in_place = True

    def default_options(self, ro=True):
        return ["ro", "noload"] if ro else ["rw"]

    def mount_cmd(self, image, mnt, options):
        return ["mount", "-t", "ext4", "-o", ",".join(options or []), "<loop of %s>" % image, mnt]

    def mount(self, image, mnt, options=None, ro=True, timeout=60):
        opts = self.default_options(ro) if options is None else options
        cmd = self.mount_cmd(image, mnt, opts)
        p = subprocess.run(["losetup", "-f", "--show", image], capture_output=True, text=True)
        if p.returncode != 0:
            raise MountFailed(self.name, ["losetup", "-f", "--show", image], p.returncode, p.stderr)
        dev = p.stdout.strip()
        cmd[-2] = dev
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            subprocess.run(["losetup", "-d", dev], capture_output=True)
            raise MountFailed(self.name, cmd, p.returncode, p.stderr)
        return Mounted(self, image, mnt)

    def umount(self, m):
        subprocess.run(["umount", m.mnt], capture_output=True)
        if util.in_proc_mounts(m.mnt):
            util.force_unmount(m.mnt)
        util.detach_loops(m.image)

    def cleanup(self, m):
        util.force_unmount(m.mnt)
        util.detach_loops(m.image)


def get(name):
    return {"ext4lazy": Ext4lazy, "fuse2fs": Fuse2fs, "kernel": Kernel}[name]()
