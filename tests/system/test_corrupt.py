"""Damaged images: a corrupt directory block, inode or extent block must give EIO on that object only
(the mount succeeds, the daemon survives, everything else stays readable and correct); a corrupt superblock
must make `mount` fail with one clear line and a non-zero exit.

These are contracts of ext4lazy.  Other adapters run the same steps; what they do is recorded in the xfail
reason (they are not failed).  The kernel's errno for the same damage is shown for reference (the kernel
returns EBADMSG for checksum failures and EUCLEAN for structural corruption; ext4lazy promises EIO).
"""
import errno
import os

import pytest

from harness import adapters, compare, images, util

pytestmark = [pytest.mark.corrupt, pytest.mark.ext4lazy_only]

EXPECTED_ERRNO = errno.EIO


@pytest.fixture(scope="module")
def bases(workdir):
    d = os.path.join(workdir, "corrupt")
    os.makedirs(d, exist_ok=True)
    out = {}
    for name, opts in (("csum", []), ("nocsum", ["-O", "^metadata_csum"])):
        img = images.build_small(os.path.join(d, f"base-{name}.img"), d, opts)
        mnt = os.path.join(d, "k")
        with images.KernelMount(img, mnt, "ro,noload"):
            out[name] = (img, compare.walk(mnt, os.path.join(d, f"base-{name}.json"))["records"])
    return out


def _op(kind, path):
    """Perform the read that must fail; return None on success or the errno."""
    try:
        if kind == "listdir":
            os.listdir(path)
        elif kind == "lstat":
            os.lstat(path)
        elif kind == "read":
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
        return None
    except OSError as e:
        return e.errno


def _damage(case, img):
    bs = images.block_size(img)
    if case == "dir_block":
        images.xor_bytes(img, images.first_block(img, "/victimdir") * bs + 24, 16)   # first entry after '..'
        return "victimdir", "listdir"
    if case == "inode":
        off, isz = images.inode_location(img, "/victimfile")
        images.xor_bytes(img, off + 4, 8)                                           # i_size_lo, i_atime
        return "victimfile", "lstat"
    if case == "extent_block":
        etb = images.extent_blocks(img, "/extfile")
        assert etb, "extfile has no extent tree block: fixture broken"
        images.xor_bytes(img, etb[0] * bs, 32)                                      # header + first entries
        return "extfile", "read"
    raise ValueError(case)


def _kernel_errno(img, rel, kind, workdir):
    mnt = os.path.join(workdir, "corrupt", "kref")
    try:
        with images.KernelMount(img, mnt, "ro,noload"):
            e = _op(kind, os.path.join(mnt, rel))
        return "ok" if e is None else errno.errorcode.get(e, e)
    except Exception as ex:
        return f"kernel mount failed: {str(ex).splitlines()[0]}"


def _conclude(adapter_id, problems, observed):
    if not problems:
        return
    msg = "; ".join(problems) + f" | observed: {observed}"
    if adapter_id == "ext4lazy":
        pytest.fail(msg, pytrace=False)
    pytest.xfail(f"{adapter_id} (recorded, not a failure): {msg}")


CASES = [("dir_block", "csum"), ("dir_block", "nocsum"), ("inode", "csum"), ("extent_block", "csum"),
         ("extent_block", "nocsum")]


@pytest.mark.parametrize("case,flavour", CASES, ids=[f"{c}-{f}" for c, f in CASES])
def test_damaged_object_gives_eio_and_the_rest_survives(case, flavour, bases, adapter, adapter_id, workdir, mounts):
    base, base_recs = bases[flavour]
    img = images.copy_image(base, os.path.join(workdir, "corrupt", f"{case}-{flavour}.img"))
    rel, kind = _damage(case, img)
    kref = _kernel_errno(images.copy_image(img, img + ".k"), rel, kind, workdir)
    os.unlink(img + ".k")
    problems, observed = [], {"kernel": kref}
    try:
        m = mounts.mount(adapter, img)
    except adapters.MountFailed as e:
        _conclude(adapter_id, [f"mount failed (must succeed): {e}"], observed)
        return
    e1 = _op(kind, os.path.join(m.mnt, rel))
    e2 = _op(kind, os.path.join(m.mnt, rel))          # again: a cached bad state must not turn into success
    observed[adapter_id] = [errno.errorcode.get(e, e) if e else "ok" for e in (e1, e2)]
    for e in (e1, e2):
        if e != EXPECTED_ERRNO:
            problems.append(f"{kind} {rel}: expected EIO, got {errno.errorcode.get(e, e) if e else 'success'}")
            break
    if not m.alive():
        problems.append("daemon/mount died after reading the damaged object")
    else:
        # every untouched object is still there and still right
        recs = compare.walk(m.mnt, os.path.join(workdir, "corrupt", f"{case}-{flavour}.{adapter_id}.json"),
                            timeout=300, on_timeout=lambda: util.abort_fuse(m.mnt))["records"]
        changed = []
        for p in sorted(base_recs):
            if p == "." or p == rel or p.startswith(rel + "/") or (p == "victimdir" and case == "dir_block"):
                continue
            for g in ("tree", "attrs", "content", "symlinks", "xattrs"):
                d = compare.diff({p: base_recs[p]}, {p: recs.get(p, {"lstat": "<absent>"})}, g)
                if d:
                    changed.append(f"{p} {d[0][1]}: {compare._short(d[0][2], 40)} -> {compare._short(d[0][3], 40)}")
                    break
        if changed:
            problems.append(f"{len(changed)} untouched path(s) wrong afterwards, e.g. " + "; ".join(changed[:4]))
        if not m.alive():
            problems.append("daemon/mount died while reading the undamaged files")
    _conclude(adapter_id, problems, observed)


SB_CASES = {"sb_checksum": (1024 + 0x78, 4),     # s_volume_name: only the checksum notices
            "sb_magic": (1024 + 0x38, 2)}         # s_magic


@pytest.mark.parametrize("case", list(SB_CASES))
def test_corrupt_superblock_refuses_to_mount(case, bases, adapter, adapter_id, workdir, mounts):
    base, _ = bases["csum"]
    img = images.copy_image(base, os.path.join(workdir, "corrupt", f"{case}.img"))
    images.xor_bytes(img, *SB_CASES[case])
    mnt = mounts.mountpoint(case)
    try:
        m = adapter.mount(img, mnt)
        mounts.live.append(m)
        _conclude(adapter_id, ["mount succeeded on a corrupt primary superblock"], {})
        return
    except adapters.MountFailed as e:
        problems = []
        lines = [line for line in str(e.stderr).splitlines() if line.strip()]
        if util.in_proc_mounts(mnt):
            problems.append("mount failed but left a mount behind")
        if e.rc == 0:
            problems.append("exit code 0")
        if adapter_id == "ext4lazy":
            if len(lines) != 1:
                problems.append(f"expected one error line, got {len(lines)}: {lines[:5]}")
            if any("panicked" in line for line in lines):
                problems.append("panic instead of an error")
        _conclude(adapter_id, problems, {"rc": e.rc, "stderr": lines[:3]})


@pytest.mark.parametrize("flavour", ["csum", "nocsum"])
def test_damaged_htree_index_gives_eio_or_the_right_answer(flavour, bases, adapter, adapter_id, workdir, mounts):
    """Damaged htree root (count/limit and the first index entries): an implementation may refuse (EIO) or
    fall back to scanning the leaf blocks, but it must never return wrong names, and it must survive."""
    base, base_recs = bases[flavour]
    img = images.copy_image(base, os.path.join(workdir, "corrupt", f"htree-{flavour}.img"))
    assert images.htree_levels(img, "/hdir") >= 0, "fixture: /hdir is not an htree"
    images.xor_bytes(img, images.first_block(img, "/hdir") * images.block_size(img) + 0x20, 16)
    kref = _kernel_errno(images.copy_image(img, img + ".k"), "hdir", "listdir", workdir)
    os.unlink(img + ".k")
    want = sorted(p.split("/", 1)[1] for p in base_recs if p.startswith("hdir/"))
    problems, observed = [], {"kernel listdir": kref}
    try:
        m = mounts.mount(adapter, img)
    except adapters.MountFailed as e:
        _conclude(adapter_id, [f"mount failed (must succeed): {e}"], observed)
        return
    d = os.path.join(m.mnt, "hdir")
    try:
        got = sorted(os.listdir(d))
        observed["listdir"] = f"{len(got)} names"
        if got != want:
            problems.append(f"listdir returned wrong names: {len(got)} vs {len(want)}, "
                            f"missing {sorted(set(want) - set(got))[:3]} extra {sorted(set(got) - set(want))[:3]}")
    except OSError as e:
        observed["listdir"] = errno.errorcode.get(e.errno, e.errno)
        if e.errno != errno.EIO:
            problems.append(f"listdir: expected EIO or the right names, got {observed['listdir']}")
    bad_lookups = []
    for name in want[::97] + ["h99999_not_there"]:
        try:
            st = os.lstat(os.path.join(d, name))
            if name not in want or st.st_size != base_recs["hdir/" + name]["size"]:
                bad_lookups.append(f"{name}: found, wrongly")
        except OSError as e:
            if e.errno not in (errno.EIO, errno.ENOENT) or (e.errno == errno.ENOENT and name in want):
                bad_lookups.append(f"{name}: {errno.errorcode.get(e.errno, e.errno)}")
    if bad_lookups:
        problems.append("lookups: " + "; ".join(bad_lookups[:5]))
    if not m.alive():
        problems.append("daemon/mount died")
    else:
        for p in ("other/o5", "victimfile", "sib03"):
            if _op("read", os.path.join(m.mnt, p)) is not None:
                problems.append(f"untouched {p} unreadable afterwards")
    _conclude(adapter_id, problems, observed)
