"""POSIX ACLs and inode flags against the kernel's ext4 (issue #11).

The same script of commands (setfacl/getfacl, chmod, creates under a default
ACL with different umasks, access checks as another user, chattr/lsattr and
every operation immutable and append-only files and directories refuse) runs
in a kernel ext4 mount of one fresh image and in an ext4lazy read-write mount
of another: exit codes and output must be identical. Then the ext4lazy image
is e2fsck-clean, and the kernel, mounting it, sees the same modes, ACLs and
flags on every path as on its own image."""

import os
import subprocess

import pytest

from harness import util
from test_readwrite import e2fsck_clean, ext4lazy_bin, ext4lazy_mounted, fresh_image, kernel_read, mount_point  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups --"

# One command per entry, run with `bash -c` in the mount point as root.
SCRIPT = [
    # Default ACL inheritance: the umask does not apply under a default ACL.
    "umask 022; mkdir d && setfacl -d -m u::rwx,u:65534:rx,g::r-x,m::rwx,o::r-x d && getfacl -cn d",
    "umask 022; touch d/f && mkdir d/sub && mknod d/p p && ln -s f d/l && stat -c '%n %A' d/f d/sub d/p",
    "getfacl -cn d/f d/sub d/p",
    "umask 077; touch d/f2 && mkdir d/sub2 && stat -c '%n %A' d/f2 d/sub2 && getfacl -cn d/f2 d/sub2",
    "mkdir m && setfacl -d -m u::r-x,g::r--,o::--- m && umask 722 && touch m/f && stat -c '%A' m/f && getfacl -cn m/f",
    "umask 022; mkdir plain && touch plain/f && stat -c '%A' plain/f && getfattr -m - -d plain/f",
    # Access ACLs and the mode.
    "touch f1 && setfacl -m u:65534:rw,g:100:r f1 && stat -c '%A' f1 && getfacl -cn f1",
    "chmod 640 f1 && getfacl -cn f1",
    "setfacl -m m::rwx f1 && stat -c '%A' f1",
    "chmod g-w f1 && getfacl -cn f1",
    "setfacl --set u::r,g::rwx,o::rw f1 && stat -c '%A' f1 && getfattr -m - -d f1",
    "setfacl -m u:65534:rw f1 && setfacl -b f1 && stat -c '%A' f1 && getfacl -cn f1",
    "setfacl -x u:65534 f1; setfacl -k f1; echo $?",
    "setfacl -d -m u::rwx f1",
    "chmod 2775 f1 && setfacl -m g:100:r f1 && stat -c '%A' f1",
    # The kernel enforces what we store.
    "echo data > acc && chmod 600 acc && setfacl -m u:65534:r acc && " + NOBODY + " cat acc",
    "setfacl -m m::- acc && " + NOBODY + " cat acc",
    "setfacl -x u:65534 acc && setfacl -m g:65534:r acc && " + NOBODY + " cat acc",
    # Inode flags.
    "echo hello > a && lsattr a && chattr +i a && lsattr a",
    "echo x >> a", "echo x > a", "rm -f a", "mv a b", "ln a c", "chmod 600 a", "chown 1 a",
    "touch a", "touch -d 2001-01-01 a", "setfattr -n user.x -v 1 a", "truncate -s 0 a",
    "setfacl -m u:65534:r a", "cat a", "chattr +d a",
    "chattr -i a && chattr +a a && lsattr a",
    "echo more >> a && cat a", "echo x > a", "truncate -s 0 a", "rm -f a", "mv a b", "ln a c",
    "chmod 600 a", "touch a; echo $?", "touch -d 2001-01-01 a", "setfattr -n user.x -v 1 a",
    "fallocate -l 1M a; echo $?", "fallocate -p -o 0 -l 4096 a",
    "chattr -a a && chattr +dAS a && lsattr a && chattr -dAS a",
    "chattr +D a", "chattr +T a",
    "mkdir ad && touch ad/x && chattr +a ad && lsattr -d ad",
    "touch ad/y && echo more >> ad/x && ls ad", "rm -f ad/x", "mv ad/x ad/z", "rmdir ad",
    "chattr -a ad && chattr +i ad && lsattr -d ad",
    "touch ad/n", "mkdir ad/n", "ln -s x ad/n", "rm -f ad/y", "echo ok >> ad/y && cat ad/y",
    "chattr -i ad && chattr +DS ad && lsattr -d ad && touch ad/inh && lsattr ad/inh",
    "chmod 666 ad/y && " + NOBODY + " chattr +i ad/y",
    "chattr +A plain && touch plain/g && lsattr plain/g",
]


def run_script(mnt):
    """(command, exit code, output) for each command, run in mnt."""
    out = []
    for cmd in SCRIPT:
        p = subprocess.run(["bash", "-c", cmd], cwd=mnt, capture_output=True, text=True, timeout=60)
        text = (p.stdout + p.stderr).replace(mnt, "MNT")
        out.append((cmd, p.returncode, text))
    return out


def snapshot(root):
    """{path: (mode, access ACL, default ACL, flags)} for every path but lost+found."""
    snap = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "lost+found"]
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            acls = []
            for attr in ("system.posix_acl_access", "system.posix_acl_default"):
                try:
                    acls.append(os.getxattr(p, attr, follow_symlinks=False))
                except OSError as e:
                    acls.append(e.strerror)
            flags = None
            if os.path.isfile(p) and not os.path.islink(p) or os.path.isdir(p) and not os.path.islink(p):
                flags = subprocess.run(["lsattr", "-d", p], capture_output=True, text=True).stdout.split()[0]
            snap[os.path.relpath(p, root)] = (oct(st.st_mode), *acls, flags)
    return snap


def test_acls_and_flags_match_the_kernel(ext4lazy_bin, workdir):
    kimg = fresh_image(workdir, "acl-kernel.img", size="32M")
    limg = fresh_image(workdir, "acl-ext4lazy.img", size="32M")
    kernel_out, kernel_snap = kernel_read(kimg, workdir, lambda m: (run_script(m), snapshot(m)))
    # Sanity: the script exercises refusals and successes on the kernel.
    assert any(rc != 0 and "Operation not permitted" in t for _, rc, t in kernel_out)
    assert any("----i---------e" in t for _, _, t in kernel_out)

    mnt = mount_point(workdir, "acl-mnt")
    with ext4lazy_mounted(ext4lazy_bin, limg, mnt, "rw,allow_other"):
        ours = run_script(mnt)
        ours_snap = snapshot(mnt)
    diffs = [f"$ {k[0]}\n  kernel: rc={k[1]} {k[2]!r}\n  ext4lazy: rc={o[1]} {o[2]!r}" for k, o in zip(kernel_out, ours) if k != o]
    assert not diffs, f"{len(diffs)} of {len(SCRIPT)} commands differ:\n" + "\n".join(diffs[:12])
    assert ours_snap == kernel_snap

    e2fsck_clean(limg)
    # The kernel reads our ACL attributes and flags as its own.
    assert kernel_read(limg, workdir, snapshot) == kernel_snap
