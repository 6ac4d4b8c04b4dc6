//! POSIX ACL rules and inode flags through the engine's API, as the kernel's
//! ext4 applies them: access ACLs set the mode (and go when the mode says
//! it all), chmod changes the ACL, creates inherit default ACLs, immutable
//! and append-only inodes refuse what the VFS refuses with EPERM; then the
//! volume is e2fsck-clean and `debugfs` reads the flags we wrote.

mod common;

use blockdev::FileDevice;
use fs::{CreateKind, FsError, OpenAccess, SetAttr, Timestamp, Volume, VolumeOptions, XattrMode, ROOT_INO};
use std::sync::Arc;

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";
const IMMUTABLE: u32 = 0x10;
const APPEND: u32 = 0x20;
const SYNC: u32 = 0x8;
const NOATIME: u32 = 0x80;
const EXTENTS: u32 = 0x80000;
const DIRSYNC: u32 = 0x10000;

fn open_rw(img: &std::path::Path) -> Volume {
    let dev = Arc::new(FileDevice::open(img, true).unwrap());
    Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap()
}

/// An ACL in the xattr form from (tag, perm, id) triples.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}
const U: u32 = u32::MAX; // no id

fn mode_of(vol: &Volume, ino: u32) -> u16 {
    vol.inode(ino).unwrap().base.mode & 0o7777
}

fn acl_of(vol: &Volume, ino: u32, name: &[u8]) -> Option<Vec<u8>> {
    match vol.get_xattr(&vol.inode(ino).unwrap(), name, true) {
        Ok(v) => Some(v),
        Err(FsError::NoXattr) => None,
        Err(e) => panic!("{e}"),
    }
}

fn file(vol: &Volume, name: &str, perm: u16) -> u32 {
    vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, perm, 0, 0).unwrap().ino
}

fn eperm<T: std::fmt::Debug>(r: Result<T, FsError>, what: &str) {
    match r {
        Err(FsError::NotPermitted) => {}
        other => panic!("{what}: want EPERM, got {other:?}"),
    }
}

#[test]
fn access_acls_follow_and_set_the_mode() {
    let Some((work, src)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "acl.img", 16, &[], &src);
    let vol = open_rw(&img);

    // A named entry: stored, the group bits show the mask.
    let f = file(&vol, "f", 0o644);
    let full = acl(&[(1, 6, U), (2, 7, 1000), (4, 4, U), (0x10, 7, U), (0x20, 4, U)]);
    vol.set_xattr(f, ACCESS, &full, XattrMode::Any).unwrap();
    assert_eq!(mode_of(&vol, f), 0o674);
    assert_eq!(acl_of(&vol, f, ACCESS).unwrap(), full);

    // chmod moves the mask (not GROUP_OBJ), the owner and other entries.
    vol.setattr(f, &SetAttr { mode: Some(0o640), ..Default::default() }).unwrap();
    assert_eq!(
        acl_of(&vol, f, ACCESS).unwrap(),
        acl(&[(1, 6, U), (2, 7, 1000), (4, 4, U), (0x10, 4, U), (0x20, 0, U)])
    );

    // A minimal ACL is only a mode: nothing stored (generic/099's chacl).
    vol.set_xattr(f, ACCESS, &acl(&[(1, 4, U), (4, 7, U), (0x20, 6, U)]), XattrMode::Any).unwrap();
    assert_eq!(mode_of(&vol, f), 0o476);
    assert_eq!(acl_of(&vol, f, ACCESS), None);
    // Removing an ACL that is not there succeeds, as on ext4.
    vol.remove_xattr(f, ACCESS).unwrap();

    // Invalid ACLs are refused: a named entry without a mask.
    assert!(matches!(
        vol.set_xattr(f, ACCESS, &acl(&[(1, 6, U), (2, 7, 5), (4, 4, U), (0x20, 4, U)]), XattrMode::Any),
        Err(FsError::Invalid(_))
    ));
    // A default ACL is for directories only (EACCES).
    assert!(matches!(
        vol.set_xattr(f, DEFAULT, &acl(&[(1, 7, U), (4, 5, U), (0x20, 5, U)]), XattrMode::Any),
        Err(FsError::AccessDenied)
    ));

    // Setting an access ACL clears set-group-ID for a caller outside the group.
    vol.setattr(f, &SetAttr { mode: Some(0o2775), ..Default::default() }).unwrap();
    vol.set_xattr_by(f, ACCESS, &full, XattrMode::Any, &|gid| gid == 4242).unwrap();
    assert_eq!(mode_of(&vol, f), 0o674, "set-group-ID cleared");
    vol.setattr(f, &SetAttr { mode: Some(0o2775), ..Default::default() }).unwrap();
    vol.set_xattr_by(f, ACCESS, &full, XattrMode::Any, &|gid| gid == 0).unwrap();
    assert_eq!(mode_of(&vol, f), 0o2674, "set-group-ID kept for a group member");

    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

#[test]
fn creates_inherit_the_default_acl_instead_of_the_umask() {
    let Some((work, src)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "inherit.img", 16, &[], &src);
    let vol = open_rw(&img);

    // Without a default ACL the umask applies.
    let plain = vol.create_masked(ROOT_INO, b"plain", CreateKind::File, 0o666, 0o022, 0, 0).unwrap();
    assert_eq!(plain.base.mode & 0o777, 0o644);

    let d = vol.create_masked(ROOT_INO, b"d", CreateKind::Dir, 0o777, 0o022, 0, 0).unwrap().ino;
    // generic/099: default u::r-x,g::r--,o::--- ; umask 722 must not matter.
    let minimal = acl(&[(1, 5, U), (4, 4, U), (0x20, 0, U)]);
    vol.set_xattr(d, DEFAULT, &minimal, XattrMode::Any).unwrap();
    let f = vol.create_masked(d, b"f", CreateKind::File, 0o666, 0o722, 0, 0).unwrap();
    assert_eq!(f.base.mode & 0o7777, 0o440);
    assert_eq!(acl_of(&vol, f.ino, ACCESS), None, "equivalent to the mode: not stored");

    // Named entries: the new file gets an access ACL masked by the create mode.
    let rich = acl(&[(1, 7, U), (2, 7, 1000), (4, 5, U), (0x10, 7, U), (0x20, 5, U)]);
    vol.set_xattr(d, DEFAULT, &rich, XattrMode::Any).unwrap();
    let g = vol.create_masked(d, b"g", CreateKind::File, 0o640, 0o077, 0, 0).unwrap();
    assert_eq!(g.base.mode & 0o777, 0o640);
    assert_eq!(
        acl_of(&vol, g.ino, ACCESS).unwrap(),
        acl(&[(1, 6, U), (2, 7, 1000), (4, 5, U), (0x10, 4, U), (0x20, 0, U)])
    );
    assert_eq!(acl_of(&vol, g.ino, DEFAULT), None, "files get no default ACL");
    // A directory gets both; a symlink neither; a fifo the access ACL.
    let sub = vol.create_masked(d, b"sub", CreateKind::Dir, 0o755, 0o022, 0, 0).unwrap().ino;
    assert_eq!(acl_of(&vol, sub, DEFAULT).unwrap(), rich);
    assert_eq!(
        acl_of(&vol, sub, ACCESS).unwrap(),
        acl(&[(1, 7, U), (2, 7, 1000), (4, 5, U), (0x10, 5, U), (0x20, 5, U)])
    );
    let l = vol.create_masked(d, b"l", CreateKind::Symlink(b"g".to_vec()), 0o777, 0, 0, 0).unwrap().ino;
    assert_eq!((acl_of(&vol, l, ACCESS), acl_of(&vol, l, DEFAULT)), (None, None));
    let p = vol.create_masked(d, b"p", CreateKind::Fifo, 0o600, 0o022, 0, 0).unwrap().ino;
    assert!(acl_of(&vol, p, ACCESS).is_some());

    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

#[test]
fn immutable_and_append_only_refuse_as_ext4() {
    let Some((work, src)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "flags.img", 16, &[], &src);
    let vol = open_rw(&img);
    let f = file(&vol, "f", 0o644);
    vol.write(f, 0, b"hello").unwrap();
    let flags = vol.flags(&vol.inode(f).unwrap());
    assert_eq!(flags, EXTENTS);

    // +i needs CAP_LINUX_IMMUTABLE; odd requests are refused.
    eperm(vol.set_flags(f, flags | IMMUTABLE, false), "+i unprivileged");
    assert!(
        matches!(vol.set_flags(f, flags & !EXTENTS, true), Err(FsError::Unsupported(_))),
        "no migration off extents"
    );
    assert!(
        matches!(vol.set_flags(f, flags | DIRSYNC, true), Err(FsError::Unsupported(_))),
        "dirsync is for directories"
    );
    assert!(matches!(vol.set_flags(f, flags | 0x0800_0000, true), Err(FsError::Unsupported(_))), "not a visible flag");
    vol.set_flags(f, flags | IMMUTABLE, true).unwrap();
    eperm(vol.set_flags(f, flags | IMMUTABLE | NOATIME, true), "other changes while immutable");

    let inode = vol.inode(f).unwrap();
    assert_eq!(vol.flags(&inode), EXTENTS | IMMUTABLE);
    vol.check_open(&inode, OpenAccess::Read).unwrap();
    eperm(vol.check_open(&inode, OpenAccess::Write { append: true }), "open for append");
    eperm(vol.write(f, 5, b"x"), "write");
    eperm(vol.setattr(f, &SetAttr { size: Some(0), ..Default::default() }), "truncate");
    eperm(vol.setattr(f, &SetAttr { mode: Some(0o600), ..Default::default() }), "chmod");
    eperm(vol.setattr(f, &SetAttr { uid: Some(1), ..Default::default() }), "chown");
    let now = Timestamp { sec: 1, nsec: 0 };
    eperm(
        vol.setattr(f, &SetAttr { atime: Some(now), mtime: Some(now), times_now: true, ..Default::default() }),
        "touch",
    );
    eperm(vol.set_xattr(f, b"user.a", b"1", XattrMode::Any), "setxattr");
    eperm(vol.remove_xattr(f, b"user.a"), "removexattr");
    eperm(vol.link(f, ROOT_INO, b"f2"), "link");
    eperm(vol.unlink(ROOT_INO, b"f"), "unlink");
    eperm(vol.rename(ROOT_INO, b"f", ROOT_INO, b"g", false, false), "rename");
    eperm(vol.fallocate(f, 0, 4096, fs::Falloc::Allocate, false), "fallocate");
    assert_eq!(vol.read(&vol.inode(f).unwrap(), 0, 100).unwrap(), b"hello");

    // Append-only: writes at the end, "now" times; nothing else.
    vol.set_flags(f, EXTENTS | APPEND, true).unwrap();
    let inode = vol.inode(f).unwrap();
    eperm(vol.check_open(&inode, OpenAccess::Write { append: false }), "open without O_APPEND");
    vol.check_open(&inode, OpenAccess::Write { append: true }).unwrap();
    vol.write(f, 5, b" world").unwrap();
    eperm(vol.write(f, 0, b"J"), "overwrite");
    eperm(vol.setattr(f, &SetAttr { size: Some(1), ..Default::default() }), "truncate");
    eperm(vol.setattr(f, &SetAttr { atime: Some(now), mtime: Some(now), ..Default::default() }), "explicit times");
    vol.setattr(f, &SetAttr { atime: Some(now), mtime: Some(now), times_now: true, ..Default::default() }).unwrap();
    eperm(vol.fallocate(f, 0, 4096, fs::Falloc::PunchHole, true), "punch");
    vol.fallocate(f, 0, 8192, fs::Falloc::Allocate, true).unwrap();
    eperm(vol.unlink(ROOT_INO, b"f"), "unlink");
    eperm(vol.link(f, ROOT_INO, b"f2"), "link");
    assert_eq!(vol.read(&vol.inode(f).unwrap(), 0, 100).unwrap(), b"hello world");

    // Directories: immutable refuses new names, append-only refuses removal.
    let d = vol.create(ROOT_INO, b"d", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
    let inside = vol.create(d, b"x", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let dflags = vol.flags(&vol.inode(d).unwrap());
    vol.set_flags(d, dflags | APPEND, true).unwrap();
    vol.create(d, b"y", CreateKind::File, 0o644, 0, 0).unwrap();
    eperm(vol.unlink(d, b"x"), "unlink in append-only dir");
    eperm(vol.rename(d, b"x", ROOT_INO, b"x", false, false), "rename out of append-only dir");
    vol.write(inside, 0, b"files inside stay writable").unwrap();
    vol.set_flags(d, dflags | IMMUTABLE, true).unwrap();
    eperm(vol.create(d, b"z", CreateKind::Dir, 0o755, 0, 0), "mkdir in immutable dir");
    eperm(vol.link(f, d, b"l"), "link into immutable dir");
    eperm(vol.rename(ROOT_INO, b"d", ROOT_INO, b"e", false, false), "rename of immutable dir");
    vol.set_flags(d, dflags, true).unwrap();
    vol.unlink(d, b"x").unwrap();
    vol.set_flags(f, EXTENTS, true).unwrap();
    vol.unlink(ROOT_INO, b"f").unwrap();

    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

#[test]
fn flags_are_inherited_stored_and_honoured() {
    let Some((work, src)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "inherit-flags.img", 16, &[], &src);
    let vol = open_rw(&img);
    let d = vol.create(ROOT_INO, b"d", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
    let dflags = vol.flags(&vol.inode(d).unwrap());
    vol.set_flags(d, dflags | NOATIME | SYNC | DIRSYNC, false).unwrap();
    let f = vol.create(d, b"f", CreateKind::File, 0o644, 0, 0).unwrap();
    assert_eq!(vol.flags(&f), EXTENTS | NOATIME | SYNC, "file inherits noatime and sync, not dirsync");
    let sub = vol.create(d, b"sub", CreateKind::Dir, 0o755, 0, 0).unwrap();
    assert_eq!(vol.flags(&sub) & (NOATIME | SYNC | DIRSYNC), NOATIME | SYNC | DIRSYNC);
    // noatime: reads leave atime alone even under strictatime.
    assert!(!vol.touch_atime(f.ino, true).unwrap());
    // sync: the write is committed when it returns.
    let before = vol.write_stats().unwrap().commits;
    vol.write(f.ino, 0, b"durable").unwrap();
    assert_eq!(vol.write_stats().unwrap().commits, before + 1);

    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
    assert_eq!(common::debugfs_flags(&img, "/d/f") & (NOATIME | SYNC), NOATIME | SYNC);
}
