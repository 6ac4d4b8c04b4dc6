"""Fixtures for the system tests.

Adapter under test: env EXT4LAZY_ADAPTER (ext4lazy | fuse2fs | kernel) or --adapter; default ext4lazy.
Binary: env EXT4LAZY_BIN, default <repo>/target/release/ext4lazy.
Images: built once per session under /var/tmp (or reused from EXT4LAZY_TEST_CACHE=DIR when set).
"""
import atexit
import json
import os
import shutil
import tempfile
import time

import pytest

from harness import adapters, compare, images, util


def pytest_addoption(parser):
    parser.addoption("--adapter", default=None, choices=adapters.ALL,
                     help="implementation under test (default: $EXT4LAZY_ADAPTER or ext4lazy)")


def adapter_name(config):
    return config.getoption("--adapter") or os.environ.get("EXT4LAZY_ADAPTER") or "ext4lazy"


def environment_problem(name):
    if os.geteuid() != 0:
        return "system tests need root (loop devices, kernel mounts, FUSE)"
    for tool in ("mkfs.ext4", "debugfs", "dumpe2fs", "e2fsck", "losetup", "setfacl"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    if name != "kernel" and not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    if name == "fuse2fs" and not shutil.which("fusermount3"):
        return "fusermount3 not installed (apt-get install fuse3)"
    return None


def pytest_report_header(config):
    name = adapter_name(config)
    a = adapters.get(name)
    extra = f" bin={a.bin}" if name == "ext4lazy" else ""
    return f"ext4lazy system tests: adapter={name}{extra}"


def pytest_collection_modifyitems(config, items):
    problem = environment_problem(adapter_name(config))
    if problem:
        skip = pytest.mark.skip(reason="environment: " + problem)
        for it in items:
            it.add_marker(skip)


# Skip reasons that mean an oracle or a tool the suite relies on is missing
# here (not a test that does not apply to this adapter or kernel).
ORACLE_MISSING = ("environment:", "needs root", "not installed", "/dev/fuse", "is not beside the repository")


def oracles_required():
    """tests/run.sh sets EXT4LAZY_REQUIRE_ORACLES=1: a missing oracle fails the run, as a skip is not a pass."""
    return os.environ.get("EXT4LAZY_REQUIRE_ORACLES") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and oracles_required() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if any(k in reason for k in ORACLE_MISSING):
            report.outcome = "failed"
            report.longrepr = f"oracle missing under EXT4LAZY_REQUIRE_ORACLES=1: {reason}"


@pytest.fixture(scope="session")
def adapter_id(request):
    return adapter_name(request.config)


@pytest.fixture(scope="session")
def adapter(adapter_id):
    a = adapters.get(adapter_id)
    ok, why = a.available()
    if not ok:
        # not a skip: the suite was asked to test this implementation and it is not there
        pytest.fail(f"adapter {adapter_id} unavailable: {why}", pytrace=False)
    return a


@pytest.fixture(scope="module")
def binary(adapter_id):
    """The ext4lazy binary, for the tests of its own commands (`ext4lazy bench`)."""
    if adapter_id != "ext4lazy":
        pytest.skip("`ext4lazy bench` is a command of the ext4lazy binary")
    return adapters.Ext4lazy().bin


_WORKDIRS = []


def _emergency_cleanup():
    for d in _WORKDIRS:
        with open("/proc/mounts") as f:
            mps = [line.split()[1].encode().decode("unicode_escape") for line in f]
        for mp in mps:
            if mp.startswith(d):
                util.force_unmount(mp)


atexit.register(_emergency_cleanup)


@pytest.fixture(scope="session")
def workdir(request):
    d = tempfile.mkdtemp(prefix="ext4lazy-systest-", dir="/var/tmp")
    _WORKDIRS.append(d)
    yield d
    _emergency_cleanup()
    shutil.rmtree(d, ignore_errors=True)
    # ext4lazy daemons log to /run/ext4lazy/<mountpoint with / as _>.log: keep them only when something failed
    if request.session.testsfailed == 0 and os.path.isdir("/run/ext4lazy"):
        prefix = d.strip("/").replace("/", "_")
        for f in os.listdir("/run/ext4lazy"):
            if f.startswith(prefix):
                try:
                    os.unlink(os.path.join("/run/ext4lazy", f))
                except OSError:
                    pass


@pytest.fixture(scope="session")
def store(workdir):
    cache = os.environ.get("EXT4LAZY_TEST_CACHE")
    if cache:
        _WORKDIRS.append(os.path.abspath(cache))
        s = images.ImageStore(cache, persistent=True)
    else:
        s = images.ImageStore(os.path.join(workdir, "images"))
    yield s
    s.cleanup()


class MountPool:
    """Makes fresh mount points; on teardown makes sure nothing stays mounted."""

    def __init__(self, workdir):
        self.workdir, self.n, self.live = workdir, 0, []

    def mountpoint(self, label="m"):
        self.n += 1
        p = os.path.join(self.workdir, f"mnt-{label}-{self.n}")
        os.makedirs(p, exist_ok=True)
        return p

    def mount(self, adapter, image, options=None, ro=True, label=None):
        mnt = self.mountpoint(label or adapter.name)
        m = adapter.mount(image, mnt, options=options, ro=ro)
        self.live.append(m)
        return m

    def teardown(self):
        for m in self.live:
            if not m.unmounted:
                try:
                    m.umount()
                except Exception:
                    pass
                m.adapter.cleanup(m)
                m.unmounted = True
        self.live.clear()


@pytest.fixture
def mounts(workdir):
    pool = MountPool(workdir)
    yield pool
    pool.teardown()


class ImplWalks:
    """Mount each image once with the adapter under test, walk it, unmount; cache the result per variant."""

    def __init__(self, adapter, store, workdir):
        self.adapter, self.store, self.workdir, self.cache = adapter, store, workdir, {}

    def get(self, name):
        if name not in self.cache:
            self.cache[name] = self._walk(name)
        res = self.cache[name]
        return res

    def _walk(self, name):
        v = images.VARIANTS[name]
        self.store.kernel_walk(v)          # oracle first, kept in memory: both walks see the same image build
        img = self.store.image(v)
        res = {"image": img, "error": None, "alive_after_walk": None}
        before = util.sparse_sha256(img)
        pool = MountPool(self.workdir)
        t0 = time.time()
        try:
            m = pool.mount(self.adapter, img, label=f"{self.adapter.name}-{name}")
            res["mount_s"] = time.time() - t0
            out = os.path.join(self.workdir, f"{name}.{self.adapter.name}.json")
            try:
                w = compare.walk(m.mnt, out, timeout=900 if v.big else 300,
                                 on_timeout=lambda: util.abort_fuse(m.mnt))
                res["walk"] = w
            except compare.WalkFailed as e:
                res["error"] = str(e)
            res["walk_s"] = time.time() - t0
            res["alive_after_walk"] = m.alive()
            try:
                m.umount()
            except AssertionError as e:
                res["umount_error"] = str(e)
        except adapters.MountFailed as e:
            res["error"] = str(e)
        finally:
            pool.teardown()
        res["image_unchanged"] = util.sparse_sha256(img) == before
        return res


@pytest.fixture(scope="session")
def impl_walks(adapter, store, workdir):
    return ImplWalks(adapter, store, workdir)


@pytest.fixture
def scratch_volume(adapter_id, workdir):
    """A fresh 64 MiB ext4 image (mkfs defaults) and an empty mount point, for read-write
    ext4lazy tests; `e2fsck -fn` must find the image clean when the test is done."""
    if adapter_id != "ext4lazy":
        pytest.skip("read-write runs are for ext4lazy")
    img = os.path.join(workdir, "scratch.img")
    mnt = os.path.join(workdir, "scratch-mnt")
    os.makedirs(mnt, exist_ok=True)
    util.run(["truncate", "-s", "64M", img])
    util.run(["mkfs.ext4", "-F", "-q", img])
    yield img, mnt
    p = util.run(["e2fsck", "-fn", img], check=False)
    assert p.returncode == 0, f"e2fsck -fn:\n{p.stdout}{p.stderr}"
