"""StepAhead's full-path hints (issue 7, item 3c): programs run with LD_PRELOAD=libext4lazy_preload.so get exactly
the results they get without it (values and errors, from threads, a forked child and an exec'd program), and on a
cold mount with `-o stepahead` their paths reach the daemon, which prefetches through them (the mount's stats).

ext4lazy only.  The library is $EXT4LAZY_PRELOAD, else libext4lazy_preload.so beside the ext4lazy binary.
A stale knowledge base is covered below the mount, in crates/fs/tests/stepahead.rs (path_hints_never_change_results:
a KB made wrong on purpose), since a mount's KB starts empty and follows every change made through it.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from harness import images, util

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preload_probe.py")


@pytest.fixture(autouse=True)
def only_ext4lazy(adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("the preload library talks to ext4lazy daemons")


@pytest.fixture(autouse=True, scope="module")
def hint_queue():
    """The kernel queues at most net.unix.max_dgram_qlen datagrams on the daemon's hint socket (10 unless
    systemd raised it to 512); on a busy machine a burst of stats outruns the receiver and most hints are
    dropped unseen. The benchmark suite runs `-preload` systems with 512 (docs/STEPAHEAD.md): so do these tests."""
    with util.sysctl_at_least("/proc/sys/net/unix/max_dgram_qlen", 512):
        yield


@pytest.fixture
def library(adapter):
    lib = os.environ.get("EXT4LAZY_PRELOAD") or os.path.join(os.path.dirname(adapter.bin), "libext4lazy_preload.so")
    if not os.path.isfile(lib):
        pytest.fail(f"no preload library at {lib}: cargo build --release --workspace builds it beside ext4lazy")
    return lib


def tree_paths(root):
    """Every path below `root` (bytes, relative), plus paths that fail: missing names, through files, too long,
    with '..' and '.'."""
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root).encode("utf-8", "surrogateescape") if d != root else b""
        for n in dirs + files:
            n = n.encode("utf-8", "surrogateescape") if isinstance(n, str) else n
            out.append(rel + b"/" + n if rel else n)
    out.sort()
    extra = []
    for p in out[::50]:
        extra += [p + b"/no-such-name", p + b"/../" + os.path.basename(p), b"./" + p, p + b"/" + b"n" * 256]
    return out + extra + [b"no-such-dir/x", b".", b""]      # not "..": the mount point's parent is not ours


def cold_mount(adapter, mounts, img, stats, label):
    if os.path.exists(stats):
        os.unlink(stats)
    util.drop_caches()
    return mounts.mount(adapter, img, options=["ro", "stepahead", f"stats={stats}"], label=label)


def run_probe(mnt, paths, lib):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    p = subprocess.run([sys.executable, PROBE], input=b"\0".join(paths), cwd=mnt, env=env, capture_output=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    return json.loads(p.stdout)


def final_stats(path):
    with open(path) as f:
        return json.load(f)


def test_results_identical_with_the_library(store, adapter, mounts, workdir, library):
    img = store.image(images.VARIANTS["default"])
    m = mounts.mount(adapter, img, options=["ro"], label="pl-list")
    paths = tree_paths(m.mnt)
    m.umount()
    assert len(paths) > 1000, len(paths)
    got = {}
    for lib in (None, library):
        stats = os.path.join(workdir, "preload-probe.json")
        m = cold_mount(adapter, mounts, img, stats, "pl-probe")
        out = run_probe(m.mnt, paths, lib)
        m.umount()
        s = final_stats(stats)
        got.setdefault(lib, []).append(out)
        if lib:
            assert s["path_hints"] > len(paths), s
            assert s["path_hint_blocks"] > 0, s
        else:
            assert s["path_hints"] == 0, s
    without, with_lib = got[None][0], got[library][0]
    assert_same(paths, without, with_lib, "without and with the library")
    errors = {v for r in without["main"] for v in r.values() if isinstance(v, str) and v.startswith("!")}
    assert {"!ENOENT", "!ENOTDIR", "!ENAMETOOLONG", "!EROFS", "!ELOOP"} <= errors, errors


def assert_same(paths, a, b, what):
    for part in a:
        if part == "main":
            diffs = [(p, {k: (x[k], y.get(k)) for k in x if x[k] != y.get(k)}) for p, x, y in zip(paths, a[part], b[part])
                     if x != y]
            assert not diffs, f"{what}: {len(diffs)} paths differ, first: {diffs[:3]}"
        else:
            assert a[part] == b[part], f"{what}: {part} differs"


def test_cold_stat_of_deep_paths_reads_through_the_prefetcher(store, adapter, mounts, workdir, library):
    """`stat` of every file by its full path, sorted (the stepahead suite's workload), on cold mounts."""
    img = store.image(images.VARIANTS["default"])
    m = mounts.mount(adapter, img, options=["ro"], label="pl-list2")
    files = sorted(os.path.relpath(os.path.join(d, f), m.mnt) for d, _, fs in os.walk(m.mnt) for f in fs)
    m.umount()
    assert len(files) > 1000 and sum(f.count("/") >= 10 for f in files) >= 2, len(files)  # the 60- and 14-deep chains
    lst = os.path.join(workdir, "preload-paths")
    with open(lst, "wb") as f:
        f.write(b"\0".join(p.encode("utf-8", "surrogateescape") for p in files))
    runs = {}
    for lib in (None, library):
        stats = os.path.join(workdir, "preload-stat.json")
        m = cold_mount(adapter, mounts, img, stats, "pl-stat")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        if lib:
            env["LD_PRELOAD"] = lib
        p = subprocess.run(["xargs", "-0", "-a", lst, "stat", "--format=%n %f %s %h %Y"], cwd=m.mnt, env=env,
                           capture_output=True, timeout=600)
        m.umount()
        runs[lib] = (p.returncode, p.stdout, p.stderr, final_stats(stats))
    (rc0, out0, err0, s0), (rc1, out1, err1, s1) = runs[None], runs[library]
    assert (rc0, out0, err0) == (rc1, out1, err1)
    assert rc0 == 0 and out0.count(b"\n") >= len(files), (out0.count(b"\n"), len(files))  # a name may hold a newline
    print(f"without: misses {s0['translation_misses']} prefetched {s0['prefetch_blocks']}; with: misses "
          f"{s1['translation_misses']} prefetched {s1['prefetch_blocks']} hints {s1['path_hints']} dropped "
          f"{s1['path_hints_dropped']} hint blocks {s1['path_hint_blocks']} wasted {s1['prefetch_wasted_blocks']}")
    # most paths: datagrams the socket queue drops while the daemon is busy are never seen
    assert s0["path_hints"] == 0 and s1["path_hints"] >= len(files) // 2
    assert s1["path_hint_blocks"] > 0
    assert s1["prefetch_blocks"] > s0["prefetch_blocks"], (s0, s1)
    assert s1["prefetch_used_blocks"] > s0["prefetch_used_blocks"], (s0, s1)


def test_no_socket_without_stepahead_and_none_left_after_unmount(store, adapter, mounts):
    img = store.image(images.VARIANTS["default"])
    m = mounts.mount(adapter, img, options=["ro"], label="pl-nosa")
    sock = hint_socket(m.mnt)
    assert not os.path.exists(sock)
    m.umount()
    m = mounts.mount(adapter, img, options=["ro", "stepahead"], label="pl-sa")
    sock = hint_socket(m.mnt)
    assert os.path.exists(sock) and oct(os.stat(sock).st_mode & 0o777) == oct(0o600)
    m.umount()
    assert not os.path.exists(sock)


def hint_socket(mnt):
    """/run/ext4lazy/<FNV-1a 64 of the canonical mount point>.hints (crates/preload, src/cmd/hints.rs)."""
    h = 0xcbf29ce484222325
    for b in os.path.realpath(mnt).encode():
        h = ((h ^ b) * 0x100000001b3) % (1 << 64)
    return f"/run/ext4lazy/{h:016x}.hints"


NOBODY = 65534


def as_user(uid, fn):
    """Run `fn()` in a forked child that has become `uid` (group `uid`, no supplementary groups): its exit status
    (0 when `fn` returned True). A fork, not an exec: no interpreter path need be open to that user."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            code = 0 if fn() else 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def send_hint_as(uid, sock, path):
    """One datagram on the hint socket from a process of `uid`, as the library sends it."""
    def send():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(path.encode("utf-8", "surrogateescape"), sock)
        return True
    assert as_user(uid, send) == 0


def live_stats_file(mnt):
    """/run/ext4lazy/<canonical mount point, / as _>.stats.json (src/cmd/mount.rs, live_stats_path)."""
    return "/run/ext4lazy/" + os.path.realpath(mnt).strip("/").replace("/", "_") + ".stats.json"


def live_stats(adapter, mnt, until):
    """The live figures, once `until` holds (30 s at most)."""
    return util.live_stats(adapter.bin, mnt, until, timeout=30)


def test_hints_only_for_what_the_sender_may_look_up(adapter, mounts, workdir):
    """Any local user may send hints (with allow_other the socket is 0666; nothing relies on that mode): the daemon
    takes each sender's uid and gid from the kernel (SO_PASSCRED) and reads and learns only what that user could
    look up. `nobody`'s hint into root's 0700 directory is refused (counted) and nothing in it is learnt, while its
    hint into an open directory is taken; root's hint for the same secret path is taken. The figures that show
    this are root's only (live file and -o stats= file 0600)."""
    src = os.path.join(workdir, "hint-perm-src")
    os.makedirs(os.path.join(src, "secret", "sub"))
    os.makedirs(os.path.join(src, "pub", "open"))
    for i in range(150):
        with open(os.path.join(src, "secret", f"name-{i:03d}"), "w") as f:
            f.write("x")
    with open(os.path.join(src, "secret", "sub", "f"), "w") as f:
        f.write("y")
    with open(os.path.join(src, "pub", "open", "f"), "w") as f:
        f.write("z")
    os.chmod(src, 0o755)
    os.chmod(os.path.join(src, "secret"), 0o700)
    img = os.path.join(workdir, "hint-perm.img")
    util.run(["mkfs.ext4", "-F", "-q", "-d", src, img, "16M"])
    stats = os.path.join(workdir, "hint-perm-stats.json")
    m = mounts.mount(adapter, img, options=["ro", "stepahead", "allow_other", f"stats={stats}"], label="pl-perm")
    sock = hint_socket(m.mnt)
    assert oct(os.stat(sock).st_mode & 0o777) == oct(0o666)
    mnt = os.path.realpath(m.mnt)
    # Nothing has listed anything yet: the KB is empty (no walk of the mount before the hints).
    send_hint_as(NOBODY, sock, mnt + "/secret/sub/f")
    send_hint_as(NOBODY, sock, mnt + "/pub/open/f")
    s1 = live_stats(adapter, m.mnt, until=lambda s: s.get("path_hints", 0) >= 2)
    print(f"after nobody's hints: {s1['path_hints']} hints, {s1.get('path_hints_denied')} denied, "
          f"KB {s1['kb_entries']} entries in {s1['kb_dirs']} directories, {s1['path_hint_blocks']} blocks")
    assert s1["path_hints"] == 2 and s1["path_hints_dropped"] == 0, s1
    assert s1.get("path_hints_denied") == 1, s1
    assert s1["kb_dirs"] >= 3, s1                              # /, pub, pub/open (not lost+found: 0700 too)
    assert s1["kb_entries"] < 150, s1                          # not secret's 152 names
    send_hint_as(0, sock, mnt + "/secret/sub/f")
    s2 = live_stats(adapter, m.mnt, until=lambda s: s.get("path_hints", 0) >= 3)
    print(f"after root's: {s2['path_hints']} hints, {s2.get('path_hints_denied')} denied, "
          f"KB {s2['kb_entries']} entries in {s2['kb_dirs']} directories, {s2['path_hint_blocks']} blocks")
    assert s2["path_hints"] == 3 and s2["path_hints_denied"] == 1, s2
    assert s2["kb_entries"] >= s1["kb_entries"] + 150, (s1, s2)
    assert s2["path_hint_blocks"] > s1["path_hint_blocks"], (s1, s2)
    # The figures tell who learnt what: root's only, and `nobody` cannot read them.
    live = live_stats_file(m.mnt)
    assert oct(os.stat(live).st_mode & 0o777) == oct(0o600) and os.stat(live).st_uid == 0
    def refused():
        try:
            open(live).close()
        except PermissionError:
            return True
        return False
    assert as_user(NOBODY, refused) == 0, "nobody could open the live figures"
    m.umount()
    assert oct(os.stat(stats).st_mode & 0o777) == oct(0o600)
    with open(stats) as f:
        final = json.load(f)
    assert final["path_hints_denied"] == 1, final
