//! A panic under the write lock (a bug, not a device error): the volume must
//! turn read-only at once, keep serving reads from a consistent memory, refuse
//! every later change without hanging, and leave an image that checks clean.
//! (parking_lot's locks do not poison, so nothing else would stop the next
//! writer from carrying on from a half-done state.)

mod common;

use blockdev::{BlockDevice, FileDevice, IoClass};
use fs::{CreateKind, FsError, Volume, VolumeOptions, ROOT_INO};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn open_rw(dev: Arc<dyn BlockDevice>) -> Volume {
    Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap()
}

fn lookup(vol: &Volume, name: &str) -> Option<u32> {
    let root = vol.inode(ROOT_INO).unwrap();
    vol.lookup(&root, name.as_bytes()).unwrap().map(|(ino, _)| ino)
}

fn make_file(vol: &Volume, name: &str, data: &[u8]) -> u32 {
    let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(ino, 0, data).unwrap();
    ino
}

/// Every change is refused as read-only, and nothing claims durability.
fn assert_read_only(vol: &Volume, ino: u32) {
    assert!(matches!(vol.create(ROOT_INO, b"late", CreateKind::File, 0o644, 0, 0), Err(FsError::ReadOnly)));
    assert!(matches!(vol.write(ino, 0, b"late"), Err(FsError::ReadOnly)));
    assert!(vol.sync().is_err(), "fsync must not claim success");
    assert!(vol.shutdown().is_err(), "unmount reports the failure");
}

#[test]
fn a_panic_halfway_through_an_operation_rolls_it_back_and_turns_read_only() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "halfway.img", 16, &[], &empty);
    let vol = open_rw(Arc::new(FileDevice::open(&img, true).unwrap()));
    let kept = make_file(&vol, "kept", b"synced before the panic\n");
    vol.sync().unwrap();
    make_file(&vol, "unsynced", b"in memory only\n");

    let armed = fs::inject::Armed::arm();
    let r = catch_unwind(AssertUnwindSafe(|| vol.create(ROOT_INO, b"halfway", CreateKind::Dir, 0o755, 0, 0)));
    drop(armed);
    let payload = r.expect_err("the armed operation panicked");
    assert_eq!(payload.downcast_ref::<String>().map(String::as_str), Some(fs::inject::MESSAGE));

    let why = vol.failure().expect("read-only at once, before any other writer comes");
    assert!(why.contains("panicked halfway"), "{why}");
    // Memory is as the last whole operation left it: no half directory.
    assert_eq!(lookup(&vol, "halfway"), None);
    assert!(lookup(&vol, "unsynced").is_some());
    let inode = vol.inode(kept).unwrap();
    assert_eq!(vol.read(&inode, 0, 100).unwrap(), b"synced before the panic\n");
    assert_read_only(&vol, kept);
    drop(vol);
    // The home locations hold the last commit; so does the journal.
    common::e2fsck_clean(&img);
    common::e2fsck_clean_after_replay(&img);
    let vol = open_rw(Arc::new(FileDevice::open(&img, true).unwrap()));
    assert!(lookup(&vol, "kept").is_some() && lookup(&vol, "halfway").is_none());
    vol.shutdown().unwrap();
}

/// A device whose flush panics once armed (a broken driver): the panic
/// unwinds through a commit, outside any operation's undo record.
struct PanickyFlush {
    inner: FileDevice,
    armed: AtomicBool,
}

impl BlockDevice for PanickyFlush {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        self.inner.read_at(offset, buf, class)
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        self.inner.write_at(offset, buf, class)
    }
    fn flush(&self) -> io::Result<()> {
        assert!(!self.armed.load(Ordering::SeqCst), "the device's flush panics, as armed");
        self.inner.flush()
    }
}

#[test]
fn a_panic_in_a_commit_turns_the_volume_read_only() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "commit.img", 16, &[], &empty);
    let dev = Arc::new(PanickyFlush { inner: FileDevice::open(&img, true).unwrap(), armed: AtomicBool::new(false) });
    let vol = open_rw(dev.clone());
    let kept = make_file(&vol, "kept", b"synced\n");
    vol.sync().unwrap();
    make_file(&vol, "cut", b"its commit panics\n");
    dev.armed.store(true, Ordering::SeqCst);
    assert!(catch_unwind(AssertUnwindSafe(|| vol.sync())).is_err(), "the commit's flush panicked");
    dev.armed.store(false, Ordering::SeqCst);
    let why = vol.failure().expect("read-only");
    assert!(why.contains("panicked holding the write lock"), "{why}");
    assert_read_only(&vol, kept);
    drop(vol);
    // The journal may end in the commit the panic cut short: a replay ignores it.
    common::e2fsck_clean_after_replay(&img);
}
