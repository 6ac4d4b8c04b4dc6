//! Crash cuts on the differential fuzzer's generators (crates/opfuzz).
//!
//! The same profiles that push structures to the sizes where their shape
//! changes (fragmented files whose extent trees split and deepen, htree
//! directories that split their leaves and gain a level, inline data that
//! outgrows its inode, xattrs that move to a block and back) run through the
//! library on a device that records every write and flush. The stream is
//! then cut at many points, unflushed writes land all, none or shuffled, and
//! every image is recovered by the kernel's ext4 (mount) and by ext4lazy: the
//! tree must be exactly the state after some operation between the last
//! completed fsync and the cut, and `e2fsck -fn` clean.
//!
//! Only operations that are atomic across a crash are run: in ordered mode an
//! overwrite of written bytes in place reaches the disk before the metadata
//! that goes with it (as the kernel's), so writes, truncations and
//! punches that would rewrite visible bytes in place are skipped.
//!
//! Scale with EXT4LAZY_CRASH_OPS_CUTS (cuts per profile and mode, default 30)
//! and EXT4LAZY_CRASH_OPS (operations per profile, default as below).

mod common;

use blockdev::fault::{crash_image, Event, Volatile};
use blockdev::{BlockDevice, FaultDevice, FileDevice};
use fs::{CreateKind, Falloc, FsError, Inode, Mapping, SetAttr, Timestamp, Volume, VolumeOptions, XattrMode, ROOT_INO};
use opfuzz::apply::Outcome;
use opfuzz::gen::{self, Gen, Switches};
use opfuzz::op::{falloc, rename, Op};
use opfuzz::rng::{fill, Fnv};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What a path holds, as both recoveries can read it (lost+found included:
/// the generators change it too).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    File { size: u64, digest: u64, mode: u32, xattrs: u64 },
    Dir { mode: u32, xattrs: u64 },
    Link(Vec<u8>),
    Other { mode: u32 },
}

type State = BTreeMap<String, Entry>;

/// One operation of the workload: where the device's stream stood when it
/// returned, whether it was an fsync, and the paths it changed.
struct Step {
    end: usize,
    sync: bool,
    changes: Vec<(String, Option<Entry>)>,
}

/// A file's content digest: FNV-1a over 8-byte words (a byte at a time was
/// most of this suite's run time). Both sides hash the whole file at once.
fn content_digest(data: &[u8]) -> u64 {
    let mut h = Fnv::default().0;
    let words = data.chunks_exact(8);
    let tail = words.remainder();
    for w in words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(0x100_0000_01b3);
    }
    let mut f = Fnv(h);
    f.update(tail);
    f.0
}

fn digest_of(mut read: impl FnMut(u64, usize) -> Vec<u8>, size: u64) -> u64 {
    let mut data = Vec::with_capacity(size as usize);
    while (data.len() as u64) < size {
        let n = (size - data.len() as u64).min(1 << 20) as usize;
        let b = read(data.len() as u64, n);
        let short = b.len() < n;
        data.extend_from_slice(&b);
        if short {
            break;
        }
    }
    content_digest(&data)
}

fn xattr_digest(mut list: Vec<(Vec<u8>, Vec<u8>)>) -> u64 {
    list.retain(|(n, _)| n.starts_with(b"user.") || n.starts_with(b"trusted."));
    list.sort();
    let mut h = Fnv::default();
    for (n, v) in list {
        h.update(&n);
        h.update(&[0]);
        h.update(&v);
        h.update(&[0xff]);
    }
    h.0
}

// ---------------------------------------------------------------------------
// Reading a state through the library and through a mounted directory.

fn entry_of_volume(vol: &Volume, inode: &Inode) -> Entry {
    let mode = u32::from(inode.base.mode) & 0o7777;
    let xattrs = || xattr_digest(vol.xattrs(inode, true).unwrap());
    if inode.is_dir() {
        Entry::Dir { mode, xattrs: xattrs() }
    } else if inode.is_symlink() {
        Entry::Link(vol.read_link(inode).unwrap())
    } else if inode.is_reg() {
        let size = inode.size();
        Entry::File { size, digest: digest_of(|o, n| vol.read(inode, o, n).unwrap(), size), mode, xattrs: xattrs() }
    } else {
        Entry::Other { mode }
    }
}

fn lookup_path(vol: &Volume, path: &str) -> Option<Inode> {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = vol.lookup(&vol.inode(ino).ok()?, part.as_bytes()).ok()??.0;
    }
    vol.inode(ino).ok()
}

fn state_of_volume(vol: &Volume) -> State {
    let mut out = State::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((ino, prefix)) = stack.pop() {
        let dir = vol.inode(ino).unwrap();
        let mut children = Vec::new();
        vol.read_dir(&dir, 0, &mut |e| {
            children.push((String::from_utf8(e.name).unwrap(), e.ino));
            true
        })
        .unwrap();
        for (name, child) in children {
            if name == "." || name == ".." {
                continue;
            }
            let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            let inode = vol.inode(child).unwrap();
            if inode.is_dir() {
                stack.push((child, path.clone()));
            }
            out.insert(path, entry_of_volume(vol, &inode));
        }
    }
    out
}

fn state_of_dir(root: &Path) -> State {
    let mut out = State::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            let p = e.path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mode = md.mode() & 0o7777;
            let xattrs = || {
                let names = xattr::list(&p);
                xattr_digest(names.into_iter().map(|n| (n.clone(), xattr::get(&p, &n))).collect())
            };
            let entry = if md.is_dir() {
                stack.push((p.clone(), path.clone()));
                Entry::Dir { mode, xattrs: xattrs() }
            } else if md.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes())
            } else if md.is_file() {
                let data = std::fs::read(&p).unwrap();
                Entry::File { size: md.len(), digest: content_digest(&data), mode, xattrs: xattrs() }
            } else {
                Entry::Other { mode }
            };
            out.insert(path, entry);
        }
    }
    out
}

/// Extended attributes of a path in a mounted tree (no symlink following).
mod xattr {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn c(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    pub fn list(p: &Path) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 65536];
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { libc::llistxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 0, "llistxattr {}", p.display());
        buf[..n as usize].split(|&b| b == 0).filter(|s| !s.is_empty()).map(<[u8]>::to_vec).collect()
    }

    pub fn get(p: &Path, name: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 65536];
        let name = CString::new(name).unwrap();
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { libc::lgetxattr(c(p).as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 0, "lgetxattr {}", p.display());
        buf.truncate(n as usize);
        buf
    }
}

// ---------------------------------------------------------------------------
// Running the generator's operations on the library.

fn errno(e: &FsError) -> Outcome {
    Outcome::Err(e.errno())
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn ino_of(vol: &Volume, path: &str) -> Result<Inode, Outcome> {
    lookup_path(vol, path).ok_or(Outcome::Err(libc::ENOENT))
}

/// For the operations whose syscalls follow symbolic links (open, truncate,
/// chmod): the regular file or directory at `path`; a symlink is skipped.
fn target_of(vol: &Volume, path: &str) -> Result<Inode, Outcome> {
    let i = ino_of(vol, path)?;
    if i.is_symlink() {
        return Err(Outcome::Err(-1));
    }
    Ok(i)
}

/// Whether writing bytes [from, to) of `inode` could change bytes a reader
/// sees in place (mapped, written blocks below the size): not atomic across
/// a crash in ordered mode.
fn rewrites_visible_bytes(vol: &Volume, inode: &Inode, from: u64, to: u64) -> bool {
    if inode.has_flag(ondisk::inode::flags::INLINE_DATA) {
        return false; // inline data is in the inode: journaled with it
    }
    let bs = u64::from(vol.block_size());
    let to = to.min(inode.size());
    let mut l = from / bs;
    while l * bs < to {
        let m = vol.map_block(inode, l, to.div_ceil(bs) - l).unwrap();
        if matches!(m, Mapping::Mapped { unwritten: false, .. }) {
            return true;
        }
        l += m.len();
    }
    false
}

/// Run `op` on the volume. None: skipped (not crash-atomic, or not a change).
fn apply(vol: &Volume, op: &Op) -> Option<Outcome> {
    let bs = u64::from(vol.block_size());
    let parent = |p: &str| ino_of(vol, split(p).0).map(|i| i.ino);
    let r: Result<Outcome, Outcome> = (|| {
        Ok(match op {
            Op::Create { path, mode } => {
                let p = parent(path)?;
                vol.create(p, split(path).1.as_bytes(), CreateKind::File, (*mode & 0o7777) as u16, 0, 0)
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Mkdir { path, mode } => {
                let p = parent(path)?;
                vol.create(p, split(path).1.as_bytes(), CreateKind::Dir, (*mode & 0o7777) as u16, 0, 0)
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Mkfifo { path, mode } => {
                let p = parent(path)?;
                vol.create(p, split(path).1.as_bytes(), CreateKind::Fifo, (*mode & 0o7777) as u16, 0, 0)
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Symlink { target, path } => {
                let p = parent(path)?;
                vol.create(p, split(path).1.as_bytes(), CreateKind::Symlink(target.as_bytes().to_vec()), 0o777, 0, 0)
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Write { path, off, len, seed } => {
                let i = target_of(vol, path)?;
                if rewrites_visible_bytes(vol, &i, *off, off + len) {
                    return Err(Outcome::Err(-1));
                }
                let n = vol.write(i.ino, *off, &fill(*seed, *len as usize)).map_err(|e| errno(&e))?;
                Outcome::Ok(n as u64)
            }
            Op::Append { path, len, seed } => {
                let i = target_of(vol, path)?;
                let n = vol.write(i.ino, i.size(), &fill(*seed, *len as usize)).map_err(|e| errno(&e))?;
                Outcome::Ok(n as u64)
            }
            Op::Truncate { path, size } => {
                let i = target_of(vol, path)?;
                // Cutting into a written block zeroes its tail in place.
                if size % bs != 0 && *size < i.size() && rewrites_visible_bytes(vol, &i, *size, size + 1) {
                    return Err(Outcome::Err(-1));
                }
                vol.setattr(i.ino, &SetAttr { size: Some(*size), ..Default::default() }).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Fallocate { path, mode, off, len } => {
                let i = target_of(vol, path)?;
                let keep = mode & falloc::KEEP_SIZE != 0;
                let kind = if mode & falloc::PUNCH_HOLE != 0 {
                    Falloc::PunchHole
                } else if mode & falloc::ZERO_RANGE != 0 {
                    Falloc::ZeroRange
                } else if mode & (falloc::COLLAPSE_RANGE | falloc::INSERT_RANGE) != 0 {
                    return Err(Outcome::Err(libc::EOPNOTSUPP));
                } else {
                    Falloc::Allocate
                };
                // Punch and zero rewrite the partial blocks at their ends in place.
                if kind != Falloc::Allocate {
                    let end = off + len;
                    let partial = |at: u64| !at.is_multiple_of(bs) && rewrites_visible_bytes(vol, &i, at, at + 1);
                    if partial(*off) || partial(end) {
                        return Err(Outcome::Err(-1));
                    }
                }
                vol.fallocate(i.ino, *off, *len, kind, keep).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Rename { from, to, flags } => {
                let (fp, tp) = (parent(from)?, parent(to)?);
                let (fname, tname) = (split(from).1.as_bytes(), split(to).1.as_bytes());
                let noreplace = flags & rename::NOREPLACE != 0;
                if flags & rename::WHITEOUT != 0 {
                    vol.rename_whiteout(fp, fname, tp, tname, noreplace, 0, 0).map_err(|e| errno(&e))?;
                } else {
                    vol.rename(fp, fname, tp, tname, noreplace, flags & rename::EXCHANGE != 0)
                        .map_err(|e| errno(&e))?;
                }
                Outcome::Ok(0)
            }
            Op::Link { from, to } => {
                let i = ino_of(vol, from)?;
                vol.link(i.ino, parent(to)?, split(to).1.as_bytes()).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Unlink { path } => {
                vol.unlink(parent(path)?, split(path).1.as_bytes()).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Rmdir { path } => {
                vol.rmdir(parent(path)?, split(path).1.as_bytes()).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::SetXattr { path, name, len, seed, flags } => {
                let i = ino_of(vol, path)?;
                let mode = match *flags as i32 {
                    libc::XATTR_CREATE => XattrMode::Create,
                    libc::XATTR_REPLACE => XattrMode::Replace,
                    _ => XattrMode::Any,
                };
                vol.set_xattr(i.ino, name.as_bytes(), &fill(*seed, *len as usize), mode).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::RemoveXattr { path, name } => {
                let i = ino_of(vol, path)?;
                vol.remove_xattr(i.ino, name.as_bytes()).map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Chmod { path, mode } => {
                let i = target_of(vol, path)?;
                vol.setattr(i.ino, &SetAttr { mode: Some((*mode & 0o7777) as u16), ..Default::default() })
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Chown { path, uid, gid } => {
                let i = ino_of(vol, path)?;
                vol.setattr(i.ino, &SetAttr { uid: Some(*uid), gid: Some(*gid), ..Default::default() })
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Utimes { path, atime, mtime } => {
                let i = ino_of(vol, path)?;
                let t = |ns: i64| Timestamp {
                    sec: ns.div_euclid(1_000_000_000),
                    nsec: ns.rem_euclid(1_000_000_000) as u32,
                };
                vol.setattr(i.ino, &SetAttr { atime: Some(t(*atime)), mtime: Some(t(*mtime)), ..Default::default() })
                    .map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Fsync { .. } => {
                vol.sync().map_err(|e| errno(&e))?;
                Outcome::Ok(0)
            }
            Op::Read { .. } | Op::Remount => return Err(Outcome::Err(-1)),
        })
    })();
    match r {
        Ok(o) => Some(o),
        Err(Outcome::Err(-1)) => None,
        Err(o) => Some(o),
    }
}

/// The entries `op` may have changed, read back: its paths, the subtrees
/// under them before and after (a rename moves a directory's), and for a
/// file with other names, every path (hard links share contents).
fn refresh(vol: &Volume, op: &Op, state: &mut State) -> Vec<(String, Option<Entry>)> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    let mut linked = BTreeSet::new();
    for p in op.paths() {
        if p.is_empty() {
            continue; // the root: not a path of the state, and ops on it change no other
        }
        paths.insert(p.to_string());
        let prefix = format!("{p}/");
        paths.extend(state.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).map(|(k, _)| k.clone()));
        match lookup_path(vol, p) {
            Some(i) if i.is_dir() => paths.extend(state_of_subtree(vol, p).into_keys()),
            Some(i) if i.is_reg() && i.base.links_count > 1 => {
                linked.insert(i.ino);
            }
            _ => {}
        }
    }
    if !linked.is_empty() {
        paths.extend(state.keys().filter(|k| lookup_path(vol, k).is_some_and(|i| linked.contains(&i.ino))).cloned());
    }
    let mut changes = Vec::new();
    for p in paths {
        let now = lookup_path(vol, &p).map(|i| entry_of_volume(vol, &i));
        if state.get(&p) != now.as_ref() {
            match &now {
                Some(e) => state.insert(p.clone(), e.clone()),
                None => state.remove(&p),
            };
            changes.push((p, now));
        }
    }
    changes
}

fn state_of_subtree(vol: &Volume, dir: &str) -> State {
    let Some(d) = lookup_path(vol, dir) else { return State::new() };
    let mut out = State::new();
    let mut stack = vec![(d.ino, dir.to_string())];
    while let Some((ino, prefix)) = stack.pop() {
        let mut children = Vec::new();
        vol.read_dir(&vol.inode(ino).unwrap(), 0, &mut |e| {
            children.push((String::from_utf8(e.name).unwrap(), e.ino));
            true
        })
        .unwrap();
        for (name, child) in children {
            if name == "." || name == ".." {
                continue;
            }
            let path = format!("{prefix}/{name}");
            let inode = vol.inode(child).unwrap();
            if inode.is_dir() {
                stack.push((child, path.clone()));
            }
            out.insert(path, entry_of_volume(vol, &inode));
        }
    }
    out
}

/// The shapes the workload drove the structures through, at most: extent
/// depth, htree levels, files written inline, inodes with an xattr block.
#[derive(Clone, Copy, Debug, Default)]
struct Shapes {
    extent_depth: u16,
    htree_levels: u8,
    inline: usize,
    xattr_blocks: usize,
}

fn shapes_now(vol: &Volume, state: &State, seen: &mut Shapes) {
    let mut inline = 0;
    let mut blocks = 0;
    for p in state.keys() {
        let Some(i) = lookup_path(vol, p) else { continue };
        if i.has_flag(ondisk::inode::flags::INLINE_DATA) {
            inline += 1;
        }
        if i.file_acl() != 0 {
            blocks += 1;
        }
        if i.has_flag(ondisk::inode::flags::EXTENTS) && (i.is_reg() || i.is_dir()) {
            if let Ok((depth, _)) = vol.extent_tree_shape(&i) {
                seen.extent_depth = seen.extent_depth.max(depth);
            }
        }
        if i.is_dir() && i.has_flag(ondisk::inode::flags::INDEX) {
            if let Ok(Mapping::Mapped { pblk, .. }) = vol.map_block(&i, 0, 1) {
                if let Ok(root) = ondisk::htree::DxNode::parse_root(&vol.meta(pblk).unwrap(), ondisk::Location::Unknown)
                {
                    seen.htree_levels = seen.htree_levels.max(root.indirect_levels + 1);
                }
            }
        }
    }
    seen.inline = seen.inline.max(inline);
    seen.xattr_blocks = seen.xattr_blocks.max(blocks);
}

/// Run `ops` operations of `profile`; returns the steps (step 0: the state at mount).
fn workload(
    vol: &Volume,
    dev: &FaultDevice<FileDevice>,
    profile: &'static gen::Profile,
    seed: u64,
    ops: usize,
) -> (Vec<Step>, Shapes) {
    let mut shapes = Shapes::default();
    let mut g = Gen::new(profile, seed, Switches::default());
    let mut state = state_of_volume(vol);
    let initial = state.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
    let mut steps = vec![Step { end: dev.event_count(), sync: true, changes: initial }];
    let mut skipped = 0;
    for n in 0..ops {
        let op = g.next_op();
        let Some(out) = apply(vol, &op) else {
            skipped += 1;
            g.observe(&op, &Outcome::Err(libc::EINVAL));
            continue;
        };
        g.observe(&op, &out);
        if let Outcome::Err(e) = out {
            assert!(e != libc::EIO, "{}: op {n} `{op}` failed with EIO", profile.name);
        }
        let changes = refresh(vol, &op, &mut state);
        steps.push(Step { end: dev.event_count(), sync: matches!(op, Op::Fsync { .. }) && out.is_ok(), changes });
        if n % 97 == 0 {
            // The background tick: commits and write-back with zero intervals.
            vol.background_tick().unwrap();
        }
        if n % 50 == 0 || n + 1 == ops {
            shapes_now(vol, &state, &mut shapes);
        }
    }
    debug_assert_eq!(state, state_of_volume(vol), "the incremental state drifted");
    eprintln!("{}: {ops} operations, {skipped} skipped as not crash-atomic; shapes reached: {shapes:?}", profile.name);
    (steps, shapes)
}

/// Whether `got` is the state after one of the steps in `range`. The
/// difference is kept as a set of paths and updated step by step.
fn matches_a_step(got: &State, steps: &[Step], range: std::ops::RangeInclusive<usize>) -> Result<(), String> {
    let mut state = State::new();
    for s in &steps[..=*range.start()] {
        apply_changes(&mut state, &s.changes);
    }
    let mut differ: BTreeSet<String> =
        got.keys().chain(state.keys()).filter(|k| got.get(*k) != state.get(*k)).cloned().collect();
    let mut best = (differ.len(), *range.start());
    if differ.is_empty() {
        return Ok(());
    }
    for i in range.clone().skip(1) {
        apply_changes(&mut state, &steps[i].changes);
        for (p, _) in &steps[i].changes {
            if got.get(p) == state.get(p) {
                differ.remove(p);
            } else {
                differ.insert(p.clone());
            }
        }
        if differ.is_empty() {
            return Ok(());
        }
        best = best.min((differ.len(), i));
    }
    let mut closest = State::new();
    for s in &steps[..=best.1] {
        apply_changes(&mut closest, &s.changes);
    }
    let sample: Vec<String> = got
        .keys()
        .chain(closest.keys())
        .filter(|k| got.get(*k) != closest.get(*k))
        .take(4)
        .map(|p| format!("{}: recovered {:?}, the state {:?}", &p[..p.len().min(60)], got.get(p), closest.get(p)))
        .collect();
    Err(format!("none of the states {range:?}; closest is {} with {} paths differing: {sample:#?}", best.1, best.0))
}

fn apply_changes(state: &mut State, changes: &[(String, Option<Entry>)]) {
    for (p, e) in changes {
        match e {
            Some(e) => state.insert(p.clone(), e.clone()),
            None => state.remove(p),
        };
    }
}

fn allowed(steps: &[Step], cut: usize) -> std::ops::RangeInclusive<usize> {
    let first = steps.iter().rposition(|s| s.sync && s.end <= cut).unwrap_or(0);
    let last = steps.iter().position(|s| s.end >= cut).unwrap_or(steps.len() - 1);
    first..=last.max(first)
}

fn opts(lazy: bool) -> VolumeOptions {
    VolumeOptions {
        read_only: false,
        lazy,
        commit_interval: Duration::ZERO,
        dirty_expire: Duration::ZERO,
        // The oracle wants every recovered state to be one the operations
        // passed through; delayed allocation commits metadata (a file's
        // times, its xattrs) before its data, as the kernel's delalloc, so
        // its crashes are checked by tests/delalloc_crash.rs instead.
        delalloc_bytes: 0,
        ..Default::default()
    }
}

fn kernel_state(img: &Path, mnt: &Path) -> State {
    common::kernel_mounted(img, mnt, state_of_dir)
}

fn ext4lazy_state(img: &Path, lazy: bool) -> State {
    let vol = Volume::open(Arc::new(FileDevice::open(img, true).unwrap()), opts(lazy)).unwrap();
    let s = state_of_volume(&vol);
    vol.shutdown().unwrap();
    s
}

struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }
}

/// One profile in one journal mode (the same operations in both): run, cut,
/// recover twice, check.
fn cut_profile(name: &str, lazy: bool, ops: usize, seed: u64, want: impl Fn(&Shapes)) {
    let Some((work, empty)) = common::setup_empty() else { return };
    assert!(common::is_root(), "crash cuts need the kernel's mount (root)");
    let profile = gen::profile(name).unwrap_or_else(|| panic!("no profile {name}"));
    let ops = std::env::var("EXT4LAZY_CRASH_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(ops);
    let cuts: usize = std::env::var("EXT4LAZY_CRASH_OPS_CUTS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let mkfs: Vec<&str> = profile.mkfs.iter().copied().chain(["-J", "size=4"]).collect();
    let img = common::make_image(work.path(), "crash.img", profile.size >> 20, &mkfs, &empty);
    let base = std::fs::read(&img).unwrap();
    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts(lazy)).unwrap();
    let (steps, shapes) = workload(&vol, &dev, profile, seed, ops);
    want(&shapes);
    if let Ok(pfx) = std::env::var("EXT4LAZY_CRASH_OPS_TRACE") {
        for (i, s) in steps.iter().enumerate() {
            for (p, e) in &s.changes {
                if p.starts_with(&pfx) {
                    eprintln!(
                        "step {i} (end {}): {} -> {}",
                        s.end,
                        &p[..p.len().min(40)],
                        if e.is_some() { "present" } else { "gone" }
                    );
                }
            }
        }
    }
    drop(vol); // a crash: no unmount
    let events = dev.events();
    let flushes: Vec<usize> =
        events.iter().enumerate().filter(|(_, e)| matches!(e, Event::Flush)).map(|(i, _)| i + 1).collect();
    let tag = format!("{name} {}", if lazy { "lazy" } else { "ordered" });
    eprintln!("{tag}: {} steps, {} device events, {} flushes", steps.len() - 1, events.len(), flushes.len());
    let mnt = work.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut rng = Lcg(seed);
    for i in 0..cuts {
        let cut = if i % 2 == 0 && !flushes.is_empty() {
            (flushes[rng.below(flushes.len())] + rng.below(3)).min(events.len())
        } else {
            1 + rng.below(events.len())
        };
        let volatile = Volatile::in_turn(i);
        let range = allowed(&steps, cut);
        let mut bytes = base.clone();
        crash_image(&mut bytes, &events, cut, volatile);
        let what = format!("{tag}: cut {cut}/{} ({volatile:?})", events.len());
        let k_img = work.path().join(format!("cut-{i}-kernel.img"));
        common::write_image(&k_img, &bytes);
        if let Err(e) = matches_a_step(&kernel_state(&k_img, &mnt), &steps, range.clone()) {
            panic!("{what}, kernel: {e}");
        }
        common::e2fsck_clean(&k_img);
        std::fs::remove_file(&k_img).unwrap();
        let l_img = work.path().join(format!("cut-{i}-ext4lazy.img"));
        common::write_image(&l_img, &bytes);
        if let Err(e) = matches_a_step(&ext4lazy_state(&l_img, lazy), &steps, range) {
            panic!("{what}, ext4lazy: {e}");
        }
        common::e2fsck_clean_after_replay(&l_img);
        std::fs::remove_file(&l_img).unwrap();
    }
    eprintln!("{tag}: {cuts} crash images recovered by the kernel and ext4lazy");
}

fn deep(s: &Shapes) {
    assert!(s.extent_depth >= 2, "the extent trees must reach depth 2: {s:?}");
}

fn htree(s: &Shapes) {
    assert!(s.htree_levels >= 2, "a directory must reach a two-level htree: {s:?}");
}

fn inline(s: &Shapes) {
    assert!(s.inline > 0, "files must be written inline: {s:?}");
}

fn xattr_block(s: &Shapes) {
    assert!(s.xattr_blocks > 0, "xattrs must move to a block: {s:?}");
}

#[test]
fn deep_extent_trees_ordered() {
    cut_profile("deep-extents", false, 2500, 11, deep);
}

#[test]
fn deep_extent_trees_lazy() {
    cut_profile("deep-extents", true, 2500, 11, deep);
}

#[test]
fn htree_splits_ordered() {
    cut_profile("htree", false, 2500, 13, htree);
}

#[test]
fn htree_splits_lazy() {
    cut_profile("htree", true, 2500, 13, htree);
}

#[test]
fn inline_growth_ordered() {
    cut_profile("inline", false, 800, 15, inline);
}

#[test]
fn inline_growth_lazy() {
    cut_profile("inline", true, 800, 15, inline);
}

#[test]
fn xattr_moves_ordered() {
    cut_profile("xattr", false, 800, 17, xattr_block);
}

#[test]
fn xattr_moves_lazy() {
    cut_profile("xattr", true, 800, 17, xattr_block);
}
