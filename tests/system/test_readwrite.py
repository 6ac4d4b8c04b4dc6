"""Read-write mounts against the real tools: mount(8) and fstab through the
installed helper, data written by ext4lazy read back by the kernel, e2fsck -fn
clean after every unmount, and a kill -9 of the daemon replayed by the kernel
with everything fsync'd intact."""

import contextlib
import json
import os
import signal
import subprocess
import time

import pytest

from harness import images, util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")


@pytest.fixture
def ext4lazy_bin(adapter_id, adapter):
    if adapter_id != "ext4lazy":
        pytest.skip("read-write tests are for ext4lazy")
    return adapter.bin


@pytest.fixture
def installed(ext4lazy_bin):
    """`ext4lazy install` (idempotent), undone after the test."""
    util.run([ext4lazy_bin, "install"])
    yield "/usr/local/bin/ext4lazy"
    util.run([ext4lazy_bin, "uninstall"], check=False)


def fresh_image(workdir, name, size="256M", opts=()):
    img = os.path.join(workdir, name)
    if os.path.exists(img):
        os.unlink(img)
    util.run(["truncate", "-s", size, img])
    util.run(["mkfs.ext4", "-F", "-q", *opts, img])
    return img


def e2fsck_clean(img):
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True)
    assert p.returncode == 0, f"e2fsck -fn {img}:\n{p.stdout}{p.stderr}"


def mount_point(workdir, name):
    """The directory workdir/name, made if missing, to mount on."""
    mnt = os.path.join(workdir, name)
    os.makedirs(mnt, exist_ok=True)
    return mnt


def kernel_read(img, workdir, fn):
    """Mount img with the kernel (replaying its journal if needed), call fn(mnt), unmount."""
    with images.KernelMount(img, os.path.join(workdir, "kmnt")) as mnt:
        return fn(mnt)


@contextlib.contextmanager
def ext4lazy_mounted(ext4lazy_bin, img, mnt, opts):
    """`ext4lazy mount -o opts img mnt`; `ext4lazy umount` (which waits for the write-back) on leaving."""
    util.run([ext4lazy_bin, "mount", "-o", opts, img, mnt])
    try:
        yield mnt
    finally:
        util.run([ext4lazy_bin, "umount", mnt])


def needs_recovery(img):
    """Whether dumpe2fs -h lists needs_recovery among img's features."""
    return "needs_recovery" in subprocess.run(["dumpe2fs", "-h", img], capture_output=True, text=True).stdout


def findmnt(mnt):
    p = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", mnt], capture_output=True, text=True)
    return p.stdout.split() if p.returncode == 0 else None


def test_mount8_helper_and_umount_by_image(installed, workdir):
    img = fresh_image(workdir, "helper.img")
    mnt = mount_point(workdir, "helper-mnt")
    util.run(["mount", "-t", "fuse.ext4lazy", img, mnt, "-o", "allow_other"])
    try:
        assert findmnt(mnt) == [img, "fuse.ext4lazy"]
        with open(os.path.join(mnt, "hello"), "w") as f:
            f.write("written through mount(8)\n")
        # A second mount of the same image is refused, nothing mounted.
        other = mount_point(workdir, "helper-mnt2")
        p = subprocess.run(["mount", "-t", "fuse.ext4lazy", img, other], capture_output=True, text=True)
        assert p.returncode != 0 and "already mounted" in p.stderr
        assert not util.in_proc_mounts(other)
    finally:
        # umount(8) by image runs our umount helper, which waits for the write-back.
        util.run(["umount", img])
    e2fsck_clean(img)
    assert kernel_read(img, workdir, lambda m: open(os.path.join(m, "hello")).read()) == "written through mount(8)\n"


def test_fstab_entry_with_systemd_options(installed, workdir):
    img = fresh_image(workdir, "fstab.img")
    mnt = mount_point(workdir, "fstab-mnt")
    line = f"{img} {mnt} fuse.ext4lazy rw,allow_other,noatime,_netdev,nofail,x-systemd.automount 0 0\n"
    with open("/etc/fstab", "a") as f:
        f.write(line)
    try:
        util.run(["mount", mnt])
        assert findmnt(mnt) == [img, "fuse.ext4lazy"]
        os.mkdir(os.path.join(mnt, "dir"))
        util.run(["umount", mnt])
        util.run(["mount", "-a", "-t", "fuse.ext4lazy"])
        assert os.path.isdir(os.path.join(mnt, "dir"))
        util.run(["umount", mnt])
    finally:
        with open("/etc/fstab") as f:
            kept = [l for l in f if l != line]
        with open("/etc/fstab", "w") as f:
            f.writelines(kept)
        if util.in_proc_mounts(mnt):
            util.force_unmount(mnt)
    e2fsck_clean(img)


def test_bad_option_mounts_nothing(installed, workdir):
    img = fresh_image(workdir, "badopt.img")
    mnt = mount_point(workdir, "badopt-mnt")
    p = subprocess.run(["mount", "-t", "fuse.ext4lazy", "-o", "no_such_option", img, mnt], capture_output=True, text=True)
    assert p.returncode != 0
    assert "no_such_option" in p.stderr
    assert not util.in_proc_mounts(mnt)


def write_tree(root, n):
    """A small tree of known contents; returns {relative path: bytes}."""
    want = {}
    for i in range(n):
        d = os.path.join(root, f"d{i % 7}", f"e{i % 3}")
        os.makedirs(d, exist_ok=True)
        data = (f"file {i} " * (i % 300 + 1)).encode()
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(data)
        want[os.path.relpath(os.path.join(d, f"f{i}"), root)] = data
    return want


def read_files(root):
    """Every file below root but lost+found, as write_tree returns them: {relative path: bytes}."""
    got = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if "lost+found" not in p:
                got[os.path.relpath(p, root)] = open(p, "rb").read()
    return got


@pytest.mark.parametrize("mkfs", [(), ("-b", "1024"), ("-O", "^has_journal")], ids=["default", "1k", "nojournal"])
def test_written_tree_reads_back_in_the_kernel(ext4lazy_bin, workdir, mkfs):
    img = fresh_image(workdir, "rw.img", opts=mkfs)
    mnt = mount_point(workdir, "rw-mnt")
    with ext4lazy_mounted(ext4lazy_bin, img, mnt, "rw"):
        want = write_tree(mnt, 600)
        os.rename(os.path.join(mnt, "d0"), os.path.join(mnt, "d6", "moved"))
        want = {(("d6/moved/" + k[3:]) if k.startswith("d0/") else k): v for k, v in want.items()}
        for k in [k for k in want if k.endswith("5")][:40]:
            os.unlink(os.path.join(mnt, k))
            del want[k]
    e2fsck_clean(img)
    assert kernel_read(img, workdir, read_files) == want


def resident_bytes(path):
    """Bytes of `path` in the host's page cache (fincore)."""
    p = util.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path])
    return int(p.stdout.split()[0])


@pytest.mark.parametrize("image_io", ["direct", "buffered"])
def test_direct_image_io_keeps_no_second_copy(ext4lazy_bin, workdir, image_io):
    """image_io=direct: the daemon's reads and writes leave nothing of the image in the host's page cache (the
    buffered run shows the measure can fail), and what it wrote reads back in the kernel, 1 KiB blocks included
    (requests below the direct-I/O granule go buffered)."""
    for mkfs in [(), ("-b", "1024")]:
        img = fresh_image(workdir, "dio.img", opts=mkfs)
        util.run(["sync"])
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        mnt = mount_point(workdir, "dio-mnt")
        with ext4lazy_mounted(ext4lazy_bin, img, mnt, f"rw,journal=lazy,image_io={image_io}"):
            want = write_tree(mnt, 200)
            for i in range(4):
                data = os.urandom(4 << 20)
                with open(os.path.join(mnt, f"big{i}"), "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                want[f"big{i}"] = data
        resident = resident_bytes(img)
        if image_io == "direct":
            assert resident < (1 << 20), f"{resident} bytes of the image cached with image_io=direct ({mkfs})"
        else:
            assert resident > (4 << 20), f"only {resident} bytes cached with image_io=buffered ({mkfs})"
        e2fsck_clean(img)
        assert kernel_read(img, workdir, read_files) == want


@pytest.mark.parametrize("journal", ["ordered", "lazy"])
def test_kill9_is_replayed_by_the_kernel(ext4lazy_bin, workdir, journal):
    img = fresh_image(workdir, "crash.img")
    mnt = mount_point(workdir, "crash-mnt")
    util.run([ext4lazy_bin, "mount", "-o", f"rw,commit=1,journal={journal}", img, mnt])
    pids = util.pids_holding(img)
    assert pids, "no daemon holds the image"
    synced = os.path.join(mnt, "synced")
    data = os.urandom(200_000)
    fd = os.open(synced, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    dfd = os.open(mnt, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    write_tree(mnt, 200)  # not synced: may or may not survive, but must stay consistent
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        util.wait_pid_gone(pid)
    # umount tells that the daemon died before its final write-back.
    p = subprocess.run([ext4lazy_bin, "umount", mnt], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "ended before its final write-back" in p.stderr, (p.returncode, p.stderr)
    assert not util.in_proc_mounts(mnt)
    # The stock tools see a journal to replay; the kernel replays it.
    assert needs_recovery(img)
    copy = img + ".copy"
    util.run(["cp", "--sparse=always", img, copy])
    assert kernel_read(img, workdir, lambda m: open(os.path.join(m, "synced"), "rb").read()) == data
    e2fsck_clean(img)
    # ext4lazy recovers the same crash itself on a read-write mount.
    with ext4lazy_mounted(ext4lazy_bin, copy, mnt, f"rw,journal={journal}"):
        assert open(synced, "rb").read() == data
    if journal == "lazy":
        kernel_read(copy, workdir, lambda m: None)  # the kernel replays what lazy mode left
    e2fsck_clean(copy)


def test_appends_to_a_written_file_race_stat_and_survive_a_crash(ext4lazy_bin, workdir):
    """An append rewrites a file's partly filled last block, already on disk:
    that block waits in memory with the appended ones. Sizes stay right for
    getattr racing the appends (the kernel puts an O_APPEND write at the size
    it last saw), and what waits goes out on time: after data_expire a crash
    keeps it, and the kernel and e2fsck accept the volume."""
    import ctypes
    import threading

    img = fresh_image(workdir, "appends.img")
    mnt = mount_point(workdir, "appends-mnt")
    util.run([ext4lazy_bin, "mount", "-o", "rw,commit=1,data_expire=1", img, mnt])
    pids = util.pids_holding(img)
    try:
        raced = os.path.join(mnt, "raced")
        with open(raced, "wb") as f:
            f.write(b"A" * 5000)
            os.fsync(f.fileno())
        stop = threading.Event()

        def stat_loop():
            while not stop.is_set():
                os.stat(raced)

        threads = [threading.Thread(target=stat_loop) for _ in range(3)]
        for t in threads:
            t.start()
        want = bytearray(b"A" * 5000)
        fd = os.open(raced, os.O_WRONLY | os.O_APPEND)
        try:
            for i in range(1500):
                piece = bytes([97 + i % 26]) * 7
                os.write(fd, piece)
                want += piece
                os.fsync(fd)
        finally:
            os.close(fd)
            stop.set()
            for t in threads:
                t.join()
        assert open(raced, "rb").read() == want
        # Appends with no fsync: one inside the last block only, one over
        # the last block into preallocated blocks past the end.
        short, prealloc = os.path.join(mnt, "short"), os.path.join(mnt, "prealloc")
        for path in (short, prealloc):
            with open(path, "wb") as f:
                f.write(b"A" * 5000)
                os.fsync(f.fileno())
        with open(short, "ab") as f:
            f.write(b"B" * 100)
        fd = os.open(prealloc, os.O_RDWR)
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        assert libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(65536)) == 0  # KEEP_SIZE
        os.pwrite(fd, b"C" * 8000, 5000)
        os.close(fd)
        time.sleep(4)  # data_expire=1 and commit=1, with room to spare
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            util.wait_pid_gone(pid)
        subprocess.run([ext4lazy_bin, "umount", mnt], capture_output=True, timeout=60)
    got = kernel_read(
        img, workdir, lambda m: {n: open(os.path.join(m, n), "rb").read() for n in ("raced", "short", "prealloc")}
    )
    assert got["raced"] == want
    assert got["short"] == b"A" * 5000 + b"B" * 100
    assert got["prealloc"] == b"A" * 5000 + b"C" * 8000
    e2fsck_clean(img)


@pytest.mark.parametrize("journal", ["ordered", "lazy"])
def test_the_bench_sync_makes_the_volume_durable(ext4lazy_bin, workdir, journal):
    """The bench's sync (shapes.syncfs): syncfs(2) never reaches a FUSE daemon, its fsync of the directory does;
    what was written before it survives a kill -9 at once (the kernel replays it), delayed data included."""
    from bench.suite.shapes import syncfs
    img = fresh_image(workdir, "bsync.img")
    mnt = mount_point(workdir, "bsync-mnt")
    util.run([ext4lazy_bin, "mount", "-o", f"rw,journal={journal}", img, mnt])
    pids = util.pids_holding(img)
    assert pids, "no daemon holds the image"
    want = write_tree(mnt, 120)
    syncfs(mnt)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        util.wait_pid_gone(pid)
    util.force_unmount(mnt)
    assert kernel_read(img, workdir, read_files) == want
    e2fsck_clean(img)


def test_lazy_volume_replays_in_the_kernel_and_switches_modes(ext4lazy_bin, workdir):
    img = fresh_image(workdir, "lazy.img")
    mnt = mount_point(workdir, "lazy-mnt")
    with ext4lazy_mounted(ext4lazy_bin, img, mnt, "rw,journal=lazy"):
        want = write_tree(mnt, 300)
    # Lazy mode leaves the metadata in the journal, for any ext4 to replay.
    assert needs_recovery(img)
    copy = img + ".copy"
    util.run(["cp", "--sparse=always", img, copy])
    assert kernel_read(copy, workdir, read_files) == want
    e2fsck_clean(copy)
    # `ext4lazy checkpoint` writes the journal home: no recovery needed, e2fsck clean as is.
    util.run(["cp", "--sparse=always", img, copy])
    util.run([ext4lazy_bin, "checkpoint", copy])
    assert not needs_recovery(copy)
    e2fsck_clean(copy)
    assert kernel_read(copy, workdir, read_files) == want
    # lazy -> ordered: the ordered mount recovers, and unmounts clean.
    with ext4lazy_mounted(ext4lazy_bin, img, mnt, "rw,journal=ordered"):
        assert read_files(mnt) == want
        os.unlink(os.path.join(mnt, sorted(want)[0]))
        del want[sorted(want)[0]]
    e2fsck_clean(img)
    # ordered -> lazy again, then the kernel's view.
    with ext4lazy_mounted(ext4lazy_bin, img, mnt, "rw,journal=lazy"):
        assert read_files(mnt) == want
        with open(os.path.join(mnt, "late"), "wb") as f:
            f.write(b"written in lazy mode")
        want["late"] = b"written in lazy mode"
    assert kernel_read(img, workdir, read_files) == want
    e2fsck_clean(img)


def test_every_translation_counts_once(ext4lazy_bin, workdir):
    """The hit rate per translation (StepAhead's Figure 5): a cold walk that lists with readdirplus and a cold
    stat of every name each count every name once, the first ones as misses, and the figures add up."""
    img = fresh_image(workdir, "walk.img")
    mnt = mount_point(workdir, "walk-mnt")
    with ext4lazy_mounted(ext4lazy_bin, img, mnt, "rw"):
        want = write_tree(mnt, 300)
    names = len(want) + 7 + 21                              # files, then the d* and d*/e* directories
    e2fsck_clean(img)
    assert kernel_read(img, workdir, read_files) == want
    for walk in ("listing", "stat"):
        with ext4lazy_mounted(ext4lazy_bin, img, mnt, "ro"):
            if walk == "listing":
                seen = sum(len(ds) + len(fs) for _, ds, fs in os.walk(mnt)) - 1      # lost+found
            else:
                seen = 0
                for d in range(7):
                    for e in range(3):
                        for i in range(300):
                            if os.path.lexists(os.path.join(mnt, f"d{d}", f"e{e}", f"f{i}")):
                                seen += 1
                seen += 7 + 21
            deadline = time.time() + 10               # the live figures are written on the daemon's tick
            while True:
                v = json.loads(util.run([ext4lazy_bin, "stat", "--json", mnt]).stdout)
                hits, misses = v["lookup_hits"], v["lookup_misses"]
                if hits + misses >= names or time.time() > deadline:
                    break
                time.sleep(0.3)
            assert seen == names, (walk, seen, names)
            assert hits + misses >= names and misses >= 1, (walk, v)
            assert abs(v["lookup_hit_rate"] - hits / (hits + misses)) < 1e-9


def test_live_figures_of_a_mounted_volume(ext4lazy_bin, workdir):
    img = fresh_image(workdir, "live.img")
    mnt = mount_point(workdir, "live-mnt")
    with ext4lazy_mounted(ext4lazy_bin, img, mnt, "rw,commit=1"):
        write_tree(mnt, 50)
        deadline = time.time() + 10
        while True:
            v = json.loads(util.run([ext4lazy_bin, "stat", "--json", mnt]).stdout)
            if v["write"]["commits"] > 0 or time.time() > deadline:
                break
            time.sleep(0.3)
        assert v["write"]["commits"] > 0 and v["write"]["journal_blocks_logged"] > 0, v
        assert v["read_only"] is False
    p = subprocess.run([ext4lazy_bin, "stat", mnt], capture_output=True, text=True)
    assert p.returncode != 0 and "not an ext4lazy mount point" in p.stderr
