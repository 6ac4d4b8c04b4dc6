//! The `volume` and `journal` targets: a whole (small) image opened by the
//! engine, on an in-memory block device.
//!
//! `volume` input: `[mode]` then an image in `crate::image`'s form. Mode bits:
//! - 0x01: leave checksums as they are (else `image::fix_ext4` sets them all);
//! - 0x02: skip the read-write half;
//! - 0x04: after the read-write half, reopen what it left and walk it again;
//! - 0x08: lazy journaling for the read-write half;
//! - 0xF0: a parameter for the writes (offsets and lengths).
//!
//! Read-only: `Volume::open`, then a walk (readdir, lookup of every name and
//! of a missing one, stat, read of every file, SEEK_DATA/SEEK_HOLE, readlink,
//! every xattr), statfs and every group's bitmaps. Read-write: open again,
//! then create, write, truncate, mkdir, rename, set/remove xattr, link,
//! unlink and rmdir at the root and inside the first directory and on the
//! first file the walk found, then sync and shutdown. Errors are fine;
//! panics (debug assertions and overflow checks included), hangs and
//! runaway allocations are what the target finds.
//!
//! `journal` input: `[mode]` then a jbd2 journal in `crate::image`'s form
//! (block 0 the journal superblock; the block size is its `s_blocksize`).
//! Mode 0x01 leaves checksums alone. Recovery's passes over it, then
//! through `journal::Journal`: load, recover, replay to a device, a commit
//! of a new transaction, and a second recovery that must find it.
//!
//! This file is shared, with `#[path]`, by the fuzz crate and by the
//! engine's regression tests (crates/fs/tests/fuzz_inputs.rs): it may use
//! only `fs`, `journal`, `blockdev`, `ondisk`, std and `crate::image`.

use fs::{CreateKind, SetAttr, Volume, VolumeOptions, XattrMode, ROOT_INO};
use parking_lot_free::Mem;
use std::sync::Arc;

/// A block device in memory (a Mutex-guarded byte vector).
mod parking_lot_free {
    use blockdev::{check_request, BlockDevice, IoClass};
    use std::io;
    use std::sync::Mutex;

    pub struct Mem(pub Mutex<Vec<u8>>);

    impl BlockDevice for Mem {
        fn size(&self) -> u64 {
            self.0.lock().unwrap().len() as u64
        }
        fn read_at(&self, offset: u64, buf: &mut [u8], _class: IoClass) -> io::Result<()> {
            let d = self.0.lock().unwrap();
            check_request(d.len() as u64, 512, offset, buf.len())?;
            buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, offset: u64, buf: &[u8], _class: IoClass) -> io::Result<()> {
            let mut d = self.0.lock().unwrap();
            check_request(d.len() as u64, 512, offset, buf.len())?;
            d[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }
}

/// Caps on the walk: enough for the seed images, bounded for mutated ones.
const MAX_INODES: usize = 2000;
const MAX_NAMES: usize = 4000;
const READ_CAP: usize = 256 << 10;

fn options(read_only: bool, lazy: bool) -> VolumeOptions {
    VolumeOptions { read_only, lazy, cache_bytes: 1 << 20, data_writeback_bytes: 0, ..Default::default() }
}

/// A directory met by [`walk`]: its inode and one of its names.
type DirSeen = (u32, Vec<u8>);
/// A regular file met by [`walk`]: its parent, its inode and its name.
type FileSeen = (u32, u32, Vec<u8>);

/// Walk everything reachable from the root; returns the first directory
/// (other than the root) and the first regular file met, with a name of each.
fn walk(vol: &Volume) -> (Option<DirSeen>, Option<FileSeen>) {
    let (mut first_dir, mut first_file) = (None, None);
    let mut stack = vec![ROOT_INO];
    let mut seen = std::collections::HashSet::new();
    let mut names = 0;
    while let Some(ino) = stack.pop() {
        if !seen.insert(ino) || seen.len() > MAX_INODES {
            continue;
        }
        let Ok(inode) = vol.inode(ino) else { continue };
        let _ = vol.stat(&inode);
        if let Ok(list) = vol.list_xattr(&inode, true) {
            for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                let _ = vol.get_xattr(&inode, name, true);
            }
        }
        let _ = vol.xattrs(&inode, false);
        if inode.is_dir() {
            let mut children = Vec::new();
            let _ = vol.read_dir(&inode, 0, &mut |e| {
                children.push((e.name, e.ino));
                names += 1;
                names < MAX_NAMES
            });
            // Resume from a cookie halfway through, as a second readdir call does.
            let mut cookies = Vec::new();
            let _ = vol.read_dir(&inode, 0, &mut |e| {
                cookies.push(e.next);
                cookies.len() < 3
            });
            if let Some(&c) = cookies.get(1) {
                let _ = vol.read_dir(&inode, c, &mut |_| false);
            }
            let _ = vol.lookup(&inode, b"no-such-name-in-this-directory");
            for (name, child) in children {
                if name == b"." || name == b".." {
                    continue;
                }
                let _ = vol.lookup(&inode, &name);
                if let Ok(ci) = vol.inode(child) {
                    if ci.is_dir() && first_dir.is_none() {
                        first_dir = Some((ino, name.clone()));
                    } else if ci.is_reg() && first_file.is_none() {
                        first_file = Some((ino, child, name.clone()));
                    }
                }
                stack.push(child);
            }
        } else if inode.is_symlink() {
            let _ = vol.read_link(&inode);
        } else if inode.is_reg() {
            let size = inode.size();
            let _ = vol.read(&inode, 0, READ_CAP);
            let _ = vol.read(&inode, size.saturating_sub(4096), 8192);
            let _ = vol.read(&inode, u64::MAX - 10, 100);
            let _ = vol.seek(&inode, 0, fs::Seek::Data);
            let _ = vol.seek(&inode, 0, fs::Seek::Hole);
            let _ = vol.seek(&inode, size / 2, fs::Seek::Data);
        }
    }
    let _ = vol.statfs();
    for g in 0..vol.group_count().min(64) {
        let _ = vol.block_bitmap(g);
        let _ = vol.inode_bitmap(g);
    }
    (first_dir, first_file)
}

/// The `volume` target.
pub fn volume(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut img = crate::image::decode(rest);
    if mode & 0x01 == 0 {
        crate::image::fix_ext4(&mut img);
    }
    let dev = Arc::new(Mem(std::sync::Mutex::new(img.clone())));
    let Ok(vol) = Volume::open(dev, options(true, false)) else { return };
    let (dir, file) = walk(&vol);
    drop(vol);
    if mode & 0x02 != 0 {
        return;
    }
    let dev = Arc::new(Mem(std::sync::Mutex::new(img)));
    let Ok(vol) = Volume::open(dev.clone(), options(false, mode & 0x08 != 0)) else { return };
    read_write(&vol, mode >> 4, dir, file);
    let _ = vol.shutdown();
    drop(vol);
    if mode & 0x04 != 0 {
        let after = dev.0.lock().unwrap().clone();
        let dev = Arc::new(Mem(std::sync::Mutex::new(after)));
        if let Ok(vol) = Volume::open(dev, options(true, false)) {
            walk(&vol);
        }
    }
}

/// A few of every kind of change, where the walk found room for them.
fn read_write(vol: &Volume, p: u8, dir: Option<(u32, Vec<u8>)>, file: Option<(u32, u32, Vec<u8>)>) {
    let p = u64::from(p);
    let bs = u64::from(vol.block_size());
    let data: Vec<u8> = (0..(1 + p * 1531) as usize).map(|i| i as u8).collect();
    // At the root.
    if let Ok(f) = vol.create(ROOT_INO, b"fz-new", CreateKind::File, 0o644, 0, 0) {
        let _ = vol.write(f.ino, p * bs / 3, &data);
        let _ = vol.write(f.ino, 12 * bs + p, &data[..data.len().min(100)]);
        let _ = vol.setattr(f.ino, &SetAttr { size: Some(bs + p), ..Default::default() });
        let _ = vol.set_xattr(f.ino, b"user.fz", &data[..data.len().min(200)], XattrMode::Any);
        let _ = vol.link(f.ino, ROOT_INO, b"fz-link");
    }
    let d = vol.create(ROOT_INO, b"fz-dir", CreateKind::Dir, 0o755, 0, 0).ok();
    let _ = vol.create(ROOT_INO, b"fz-sym", CreateKind::Symlink(vec![b'x'; 20 + p as usize * 9]), 0o777, 0, 0);
    if let Some(d) = &d {
        let _ = vol.rename(ROOT_INO, b"fz-new", d.ino, b"moved", false, false);
        let _ = vol.unlink(d.ino, b"moved");
    }
    let _ = vol.unlink(ROOT_INO, b"fz-link");
    // Inside what the image already holds.
    if let Some((parent, name)) = dir {
        if let Ok(Some((ino, _))) = vol.inode(parent).and_then(|i| vol.lookup(&i, &name)) {
            for i in 0..3 + p {
                let _ = vol.create(
                    ino,
                    format!("fz-{i}-{}", "n".repeat(i as usize * 13)).as_bytes(),
                    CreateKind::File,
                    0o600,
                    0,
                    0,
                );
            }
            let _ = vol.create(ino, b"fz-subdir", CreateKind::Dir, 0o700, 0, 0);
            let _ = vol.rmdir(ino, b"fz-subdir");
            let _ = vol.unlink(ino, b"fz-1-nnnnnnnnnnnnn");
            let _ = vol.rename(parent, &name, ROOT_INO, b"fz-moved-dir", false, false);
            let _ = vol.rmdir(ROOT_INO, b"fz-moved-dir");
        }
    }
    if let Some((parent, ino, name)) = file {
        let _ = vol.write(ino, p * 4099, &data);
        let _ = vol.setattr(ino, &SetAttr { size: Some(p * bs / 2), ..Default::default() });
        let _ = vol.write(ino, 3 * bs, &data[..data.len().min(bs as usize)]);
        let _ = vol.remove_xattr(ino, b"user.fz");
        let _ = vol.unlink(parent, &name);
    }
    if let Some(d) = d {
        let _ = vol.rmdir(ROOT_INO, b"fz-dir");
        let _ = d;
    }
    let _ = vol.sync();
}

/// A journal held in memory, read by journal block number.
struct MemJournal {
    bs: u32,
    bytes: Vec<u8>,
}

impl journal::JournalReader for MemJournal {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn len_blocks(&self) -> u64 {
        (self.bytes.len() / self.bs as usize) as u64
    }
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let bs = self.bs as usize;
        let start =
            usize::try_from(jblock).ok().and_then(|j| j.checked_mul(bs)).filter(|&s| s + bs <= self.bytes.len());
        let Some(start) = start else {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "past the journal's end"));
        };
        buf.copy_from_slice(&self.bytes[start..start + bs]);
        Ok(())
    }
}

/// Blocks of static space after the journal on the target's device.
const STATIC_BLOCKS: u64 = 64;

/// The `journal` target.
pub fn journal_target(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut img = crate::image::decode(rest);
    if img.len() < 1024 {
        return;
    }
    let bs = ondisk::bytes::be32(&img, 0x0C) as usize;
    if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) || !img.len().is_multiple_of(bs) {
        return;
    }
    let n = img.len() / bs;
    if mode & 0x01 == 0 {
        let offsets: Vec<usize> = (0..n).map(|j| j * bs).collect();
        crate::image::fix_journal(&mut img, &offsets, bs);
    }
    let reader = MemJournal { bs: bs as u32, bytes: img.clone() };
    let first = journal::recover(&reader);
    if let Ok(rec) = &first {
        let mut buf = vec![0u8; bs];
        for (&blk, _) in rec.blocks.iter().take(64) {
            let _ = rec.read_replayed(&reader, blk, &mut buf);
        }
        let _ = rec.kernel_would_fail();
    }

    // The same journal at the start of a device, with static blocks after it.
    let mut disk = img;
    disk.resize((n as u64 + STATIC_BLOCKS) as usize * bs, 0);
    let dev = Arc::new(Mem(std::sync::Mutex::new(disk)));
    let Ok(map) = journal::JournalMap::contiguous(0, n as u64, bs as u32) else { return };
    let Ok(mut j) = journal::Journal::load(dev.clone(), map.clone()) else { return };
    if j.needs_recovery() {
        let Ok(rec) = j.recover() else { return };
        if let Ok(r) = &first {
            assert_eq!(rec.blocks, r.blocks, "recovery through the reader and through Journal agree");
        }
        if j.replay_to_disk(&rec).is_err() {
            return;
        }
    }
    let (compat, incompat) = journal::ext4_features(mode & 0x02 == 0, mode & 0x04 == 0);
    if j.set_features(compat, incompat).is_err() {
        return;
    }
    // A new transaction: one block and a revoke, in the static space.
    let home = n as u64 + 1;
    let mut t = journal::Transaction::new(bs as u32);
    let contents: Vec<u8> = (0..bs).map(|i| (i * 7 + usize::from(mode)) as u8).collect();
    t.log(home, &contents).expect("a block-sized copy");
    t.revoke(home + 1);
    if j.commit(&t).is_err() {
        return;
    }
    drop(j);
    // Read back from the device: recovery must find the new copy.
    let after = dev.0.lock().unwrap().clone();
    let Ok(j) = journal::Journal::load(Arc::new(Mem(std::sync::Mutex::new(after))), map) else {
        panic!("a journal we just committed to no longer loads");
    };
    let rec = j.recover().expect("a journal we just committed to recovers");
    let mut buf = vec![0u8; bs];
    assert!(rec.read_replayed(&j, home, &mut buf).expect("the copy reads"), "the committed block is replayed");
    assert_eq!(buf, contents, "the replayed copy is what was committed");
}
