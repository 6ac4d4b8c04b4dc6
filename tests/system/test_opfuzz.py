"""The differential operation fuzzer (crates/opfuzz, `ext4lazy-opfuzz`) against the kernel's ext4.

- `test_ci_batch[PROFILE-MODE]`: the fixed-seed CI batch (`ext4lazy-opfuzz ci --list`), one test per profile
  and journal mode: random operation sequences applied to a kernel loop mount and to ext4lazy on copies of one
  fresh image; every errno compared, whole trees after every batch, unmount, `e2fsck -fn` on both, remount.
- `test_regression[NAME]`: every divergence found so far, saved as tests/opfuzz/regressions/NAME.ops, replayed
  in both modes. tests/opfuzz/known/*.ops are open divergences, the kernel's own included (docs/TESTING.md): xfail until fixed.

Every run has a deadline; the binary aborts a hung FUSE connection itself, and on our deadline every mount
under the run's work directory is torn down (abort included), so a hung daemon fails a test, never the suite.
"""
import glob
import os
import shutil
import subprocess
import tempfile

import pytest

from harness import adapters, util

REPO = util.REPO
OPS_DIR = os.path.join(REPO, "tests", "opfuzz")
# Profiles that cannot pass before a known fix lands (docs/TESTING.md, "opfuzz divergences"): xfail, not
# skip, so a fix shows as XPASS. None open now (the extent-depth panic, D5, was fixed on main).
KNOWN = {}
RUN_TIMEOUT = 900


def opfuzz_bin():
    b = os.environ.get("EXT4LAZY_OPFUZZ_BIN")
    if b:
        return b
    return os.path.join(os.path.dirname(adapters.Ext4lazy().bin), "ext4lazy-opfuzz")


def ci_runs():
    """(profile, mode) of the CI batch, from the binary itself (one list, in main.rs)."""
    try:
        out = subprocess.run([opfuzz_bin(), "ci", "--list"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    runs = [tuple(line.split()[:2]) for line in out.splitlines() if line.strip()]
    return runs or [("mixed", "ordered")]  # binary missing: one case, which then fails and says so


def run_opfuzz(args, label):
    if not os.access(opfuzz_bin(), os.X_OK):
        pytest.fail(f"{opfuzz_bin()} not built (cargo build --release --workspace)", pytrace=False)
    work = tempfile.mkdtemp(prefix=f"ext4lazy-opfuzz-{label}-", dir="/var/tmp")
    cmd = [opfuzz_bin(), "--bin", adapters.Ext4lazy().bin, "--workdir", work, "--quiet", "--op-timeout", "30"] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", f"no exit after {RUN_TIMEOUT} s\n{e.stdout or ''}"
    finally:
        # Whatever is still mounted under the work dir (a killed run): abort, unmount.
        with open("/proc/mounts") as f:
            mps = [line.split()[1] for line in f if line.split()[1].startswith(work)]
        for mp in mps:
            util.force_unmount(mp)
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        # Keep the replay files; drop the images.
        for img in glob.glob(os.path.join(work, "*", "*.img")):
            os.unlink(img)
    return rc, out, work


@pytest.mark.parametrize("profile,mode", ci_runs(), ids=lambda v: v)
def test_ci_batch(profile, mode, adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("opfuzz compares ext4lazy with the kernel")
    if profile in KNOWN and os.environ.get("OPFUZZ_SKIP_KNOWN"):
        pytest.xfail(KNOWN[profile])  # saves the op timeout of each known hang
    rc, out, work = run_opfuzz(["ci", "--only", profile, "--mode", mode], f"{profile}-{mode}")
    if rc != 0 and profile in KNOWN:
        pytest.xfail(f"{KNOWN[profile]}\n{out[-2000:]}")
    assert rc == 0, f"ext4lazy-opfuzz ci --only {profile} --mode {mode} (rc {rc}, work dir {work}):\n{out[-6000:]}"
    assert "ok [" in out


def ops_files(sub):
    return sorted(glob.glob(os.path.join(OPS_DIR, sub, "*.ops")))


@pytest.mark.parametrize("path", ops_files("regressions"), ids=lambda p: os.path.basename(p)[:-4])
def test_regression(path, adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("opfuzz compares ext4lazy with the kernel")
    name = os.path.basename(path)[:-4]
    rc, out, work = run_opfuzz(["replay", path, "--mode", "both"], name)
    assert rc == 0, f"ext4lazy-opfuzz replay {path} (rc {rc}, work dir {work}):\n{out[-6000:]}"


@pytest.mark.parametrize("path", ops_files("known"), ids=lambda p: os.path.basename(p)[:-4])
def test_known_divergence(path, adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("opfuzz compares ext4lazy with the kernel")
    name = os.path.basename(path)[:-4]
    rc, out, work = run_opfuzz(["replay", path, "--mode", "both"], name)
    shutil.rmtree(work, ignore_errors=True)  # expected to diverge: nothing to keep
    if rc != 0:
        pytest.xfail(f"open divergence (docs/TESTING.md):\n{out[-1500:]}")
