//! The write path against oracles: random namespace and data operations
//! applied both to a volume and to an in-memory model; then the volume must
//! pass `e2fsck -fn` and read back exactly as the model says.

mod common;

use blockdev::FileDevice;
use fs::{CreateKind, Mapping, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
enum Node {
    File(Vec<u8>),
    Dir,
    Link(Vec<u8>),
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn open_rw(img: &std::path::Path) -> Volume {
    let dev = Arc::new(FileDevice::open(img, true).unwrap());
    Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap()
}

/// Resolve a model path ("a/b") to its inode on the volume.
fn resolve(vol: &Volume, path: &str) -> u32 {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        let dir = vol.inode(ino).unwrap();
        ino = vol.lookup(&dir, part.as_bytes()).unwrap().unwrap_or_else(|| panic!("{path}: {part} missing")).0;
    }
    ino
}

fn parent_and_name(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some((p, n)) => (p, n),
        None => ("", path),
    }
}

/// Compare the whole volume with the model.
fn check(vol: &Volume, model: &BTreeMap<String, Node>) {
    for (path, node) in model {
        let ino = resolve(vol, path);
        let inode = vol.inode(ino).unwrap();
        match node {
            Node::File(data) => {
                assert!(inode.is_reg(), "{path}");
                assert_eq!(inode.size(), data.len() as u64, "{path} size");
                let got = vol.read(&inode, 0, data.len() + 10).unwrap();
                assert!(got == *data, "{path}: contents differ");
            }
            Node::Dir => {
                assert!(inode.is_dir(), "{path}");
                let mut names = Vec::new();
                vol.read_dir(&inode, 0, &mut |e| {
                    if e.name != b"." && e.name != b".." {
                        names.push(String::from_utf8(e.name).unwrap());
                    }
                    true
                })
                .unwrap();
                names.sort();
                let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
                let mut want: Vec<String> = model
                    .keys()
                    .filter(|k| {
                        k.starts_with(&prefix)
                            && !k.is_empty()
                            && k.len() > prefix.len()
                            && !k[prefix.len()..].contains('/')
                    })
                    .map(|k| k[prefix.len()..].to_string())
                    .collect();
                if path.is_empty() {
                    want.push("lost+found".into());
                }
                want.sort();
                assert_eq!(names, want, "listing of {path:?}");
                let subdirs = model
                    .iter()
                    .filter(|(k, v)| {
                        **v == Node::Dir
                            && k.starts_with(&prefix)
                            && !k.is_empty()
                            && k.len() > prefix.len()
                            && !k[prefix.len()..].contains('/')
                    })
                    .count();
                let extra = if path.is_empty() { 1 } else { 0 }; // lost+found
                assert_eq!(u32::from(inode.links_count()), 2 + subdirs as u32 + extra, "link count of {path:?}");
            }
            Node::Link(t) => assert_eq!(&vol.read_link(&inode).unwrap(), t, "{path}"),
        }
    }
}

/// Unmount cleanly, then the oracles: `e2fsck -fn` finds nothing and a
/// fresh read-only open sees exactly the model.
fn unmount_and_verify(vol: Volume, img: &std::path::Path, model: &BTreeMap<String, Node>) {
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(img);
    let ro = Volume::open(Arc::new(FileDevice::open(img, false).unwrap()), VolumeOptions::default()).unwrap();
    check(&ro, model);
}

#[test]
fn random_operations_match_model_and_pass_e2fsck() {
    let Some((work, empty)) = common::setup_empty() else { return };
    for (variant, opts, seed) in [
        ("default", vec![], 1u64),
        ("1k", vec!["-b", "1024"], 2),
        ("nocsum-32bit", vec!["-O", "^metadata_csum,^64bit"], 3),
        ("nojournal", vec!["-O", "^has_journal"], 4),
        // What we create on an inline_data volume must be ordinary (extent) inodes e2fsck accepts.
        ("inline_data", vec!["-O", "inline_data"], 5),
    ] {
        let img = common::make_image(work.path(), &format!("{variant}.img"), 64, &opts, &empty);
        let mut model: BTreeMap<String, Node> = BTreeMap::new();
        model.insert(String::new(), Node::Dir);
        let mut rng = Lcg(seed);
        let vol = open_rw(&img);
        let mut counter = 0;
        for step in 0..1500 {
            let dirs: Vec<String> = model.iter().filter(|(_, v)| **v == Node::Dir).map(|(k, _)| k.clone()).collect();
            let files: Vec<String> =
                model.iter().filter(|(_, v)| matches!(v, Node::File(_))).map(|(k, _)| k.clone()).collect();
            let parent = dirs[rng.below(dirs.len())].clone();
            counter += 1;
            let name = format!("n{counter}-{}", "x".repeat(rng.below(40)));
            let child = if parent.is_empty() { name.clone() } else { format!("{parent}/{name}") };
            let pino = resolve(&vol, &parent);
            match rng.below(10) {
                0 | 1 => {
                    vol.create(pino, name.as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
                    model.insert(child, Node::Dir);
                }
                2 => {
                    vol.create(pino, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
                    model.insert(child, Node::File(Vec::new()));
                }
                4 if !files.is_empty() => {
                    // Write somewhere in or past the file (sparse), sometimes large.
                    let f = &files[rng.below(files.len())];
                    let Node::File(data) = model.get_mut(f).unwrap() else { unreachable!() };
                    let off = rng.below(data.len() + 70_000);
                    let len = if rng.below(8) == 0 { 300_000 } else { 1 + rng.below(9000) };
                    let bytes: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + step) as u8).collect();
                    let ino = resolve(&vol, f);
                    if std::env::var("DEBUG_EXT").is_ok() {
                        let i = vol.inode(ino).unwrap();
                        eprintln!(
                            "step {step} write ino {ino} off {off} len {len} size {} root {:?}",
                            i.size(),
                            ondisk::extent::ExtentNode::parse(&i.base.block, ondisk::Location::Unknown)
                        );
                    }
                    vol.write(ino, off as u64, &bytes).unwrap();
                    if data.len() < off + len {
                        data.resize(off + len, 0);
                    }
                    data[off..off + len].copy_from_slice(&bytes);
                }
                5 if !files.is_empty() => {
                    let f = files[rng.below(files.len())].clone();
                    let (p, n) = parent_and_name(&f);
                    vol.unlink(resolve(&vol, p), n.as_bytes()).unwrap();
                    model.remove(&f);
                }
                6 if !files.is_empty() => {
                    let f = &files[rng.below(files.len())];
                    let Node::File(data) = model.get_mut(f).unwrap() else { unreachable!() };
                    let size = rng.below(data.len() + 5000);
                    if std::env::var("DEBUG_EXT").is_ok() {
                        eprintln!("step {step} truncate {f} to {size}");
                    }
                    vol.setattr(resolve(&vol, f), &SetAttr { size: Some(size as u64), ..Default::default() }).unwrap();
                    data.resize(size, 0);
                }
                7 if !files.is_empty() => {
                    // Rename a file into a random directory (maybe over nothing).
                    let f = files[rng.below(files.len())].clone();
                    let (p, n) = parent_and_name(&f);
                    vol.rename(resolve(&vol, p), n.as_bytes(), pino, name.as_bytes(), false, false).unwrap();
                    let node = model.remove(&f).unwrap();
                    model.insert(child, node);
                }
                3 if !files.is_empty() && rng.below(2) == 0 => {
                    // Preallocate, punch a hole or zero a range (maybe past
                    // EOF, maybe keeping the size; a hole never changes it).
                    let f = &files[rng.below(files.len())];
                    let Node::File(data) = model.get_mut(f).unwrap() else { unreachable!() };
                    let off = rng.below(data.len() + 30_000);
                    let len = 1 + rng.below(40_000);
                    let mode = [fs::Falloc::Allocate, fs::Falloc::PunchHole, fs::Falloc::ZeroRange][rng.below(3)];
                    let keep = mode == fs::Falloc::PunchHole || rng.below(2) == 0;
                    vol.fallocate(resolve(&vol, f), off as u64, len as u64, mode, keep).unwrap();
                    if mode != fs::Falloc::Allocate {
                        let end = (off + len).min(data.len());
                        if off < end {
                            data[off..end].fill(0);
                        }
                    }
                    if !keep && data.len() < off + len {
                        data.resize(off + len, 0);
                    }
                }
                8 => {
                    let target = format!("target-{}", "t".repeat(rng.below(120)));
                    vol.create(pino, name.as_bytes(), CreateKind::Symlink(target.clone().into_bytes()), 0o777, 0, 0)
                        .unwrap();
                    model.insert(child, Node::Link(target.into_bytes()));
                }
                _ => {
                    // Remove an empty directory if there is one.
                    let empty_dirs: Vec<&String> = dirs
                        .iter()
                        .filter(|d| {
                            !d.is_empty() && !model.keys().any(|k| k.len() > d.len() && k.starts_with(&format!("{d}/")))
                        })
                        .collect();
                    if let Some(d) = empty_dirs.first().map(|d| (*d).clone()) {
                        let (p, n) = parent_and_name(&d);
                        vol.rmdir(resolve(&vol, p), n.as_bytes()).unwrap();
                        model.remove(&d);
                    }
                }
            }
            if step % 500 == 499 {
                vol.sync().unwrap();
            }
            if std::env::var("DEBUG_EXT").is_ok() {
                for (path, node) in model.iter() {
                    if let Node::File(data) = node {
                        let inode = vol.inode(resolve(&vol, path)).unwrap();
                        let got = vol.read(&inode, 0, data.len() + 10).unwrap();
                        if got != *data {
                            let first = got.iter().zip(data.iter()).position(|(a, b)| a != b);
                            panic!(
                                "step {step}: {path} (ino {}) differs at {first:?}, len got {} want {}",
                                inode.ino,
                                got.len(),
                                data.len()
                            );
                        }
                    }
                }
            }
        }
        check(&vol, &model);
        unmount_and_verify(vol, &img, &model);
        eprintln!("{variant}: {} entries verified", model.len());
    }
}

/// The block allocator starts from a per-group hint below which every bit is
/// set; it must still hand out blocks exactly first-fit from the goal: blocks
/// freed below the hint come back first, lowest first.
#[test]
fn freed_blocks_below_the_allocation_hint_are_reused_first() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "hint.img", 64, &[], &empty);
    let vol = open_rw(&img);
    let block_of = |ino: u32| match vol.map_block(&vol.inode(ino).unwrap(), 0, 1).unwrap() {
        fs::Mapping::Mapped { pblk, .. } => pblk,
        m => panic!("{m:?}"),
    };
    let one_block_file = |name: String| {
        let f = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
        vol.write(f.ino, 0, &[7u8; 4096]).unwrap();
        vol.writeback_file(f.ino).unwrap(); // allocated now, in creation order
        f.ino
    };
    let first: Vec<u64> = (0..30).map(|i| block_of(one_block_file(format!("f{i}")))).collect();
    let mut freed: Vec<u64> = [20usize, 3, 11].iter().map(|&i| first[i]).collect();
    for i in [20, 3, 11] {
        vol.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    vol.sync().unwrap(); // frees apply when the unlinks commit
    freed.sort();
    let again: Vec<u64> = (0..3).map(|i| block_of(one_block_file(format!("g{i}")))).collect();
    assert_eq!(again, freed, "new files take the freed blocks, lowest first");
    let next = block_of(one_block_file("h".into()));
    assert!(next > *first.iter().max().unwrap(), "then it goes on past the blocks in use");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

#[test]
fn big_directory_grows_an_htree_and_stays_consistent() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "big.img", 256, &[], &empty);
    let vol = open_rw(&img);
    let d = vol.create(ROOT_INO, b"big", CreateKind::Dir, 0o755, 0, 0).unwrap();
    for i in 0..20_000 {
        vol.create(d.ino, format!("file-with-a-longish-name-{i:06}").as_bytes(), CreateKind::File, 0o644, 0, 0)
            .unwrap();
    }
    for i in (0..20_000).step_by(3) {
        vol.unlink(d.ino, format!("file-with-a-longish-name-{i:06}").as_bytes()).unwrap();
    }
    let dir = vol.inode(d.ino).unwrap();
    assert!(dir.has_flag(ondisk::inode::flags::INDEX), "directory became hashed");
    let root_blk = match vol.map_block(&dir, 0, 1).unwrap() {
        fs::Mapping::Mapped { pblk, .. } => pblk,
        m => panic!("{m:?}"),
    };
    let root = ondisk::htree::DxNode::parse_root(&vol.meta(root_blk).unwrap(), ondisk::Location::Unknown).unwrap();
    assert_eq!(root.indirect_levels, 1, "20,000 long names need a two-level index");
    for i in 0..20_000 {
        let found = vol.lookup(&dir, format!("file-with-a-longish-name-{i:06}").as_bytes()).unwrap().is_some();
        assert_eq!(found, i % 3 != 0, "entry {i}");
    }
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

#[test]
fn xattrs_spill_to_a_block_and_come_back() {
    let Some((work, empty)) = common::setup_empty() else { return };
    for (variant, opts, n) in [("4k", vec!["-b", "4096"], 40usize), ("i128-1k", vec!["-I", "128", "-b", "1024"], 14)] {
        let img = common::make_image(work.path(), &format!("x-{variant}.img"), 32, &opts, &empty);
        let vol = open_rw(&img);
        let f = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap();
        let mut want = std::collections::BTreeMap::new();
        // More than a block holds is refused with ENOSPC, as the kernel does.
        let huge = vec![0u8; vol.block_size() as usize];
        assert!(matches!(vol.set_xattr(f.ino, b"user.huge", &huge, fs::XattrMode::Any), Err(fs::FsError::NoSpace)));
        for i in 0..n {
            let name = format!("user.attr-{i:02}");
            let value = vec![b'a' + (i % 26) as u8; 10 + i * 3];
            vol.set_xattr(f.ino, name.as_bytes(), &value, fs::XattrMode::Create)
                .unwrap_or_else(|e| panic!("{variant} attr {i}: {e:?}"));
            want.insert(name.into_bytes(), value);
        }
        assert!(matches!(vol.set_xattr(f.ino, b"user.attr-00", b"x", fs::XattrMode::Create), Err(fs::FsError::Exists)));
        assert!(matches!(vol.set_xattr(f.ino, b"user.none", b"x", fs::XattrMode::Replace), Err(fs::FsError::NoXattr)));
        vol.set_xattr(f.ino, b"user.attr-05", b"replaced", fs::XattrMode::Replace).unwrap();
        want.insert(b"user.attr-05".to_vec(), b"replaced".to_vec());
        for i in (0..n).step_by(4) {
            let name = format!("user.attr-{i:02}");
            vol.remove_xattr(f.ino, name.as_bytes()).unwrap();
            want.remove(name.as_bytes());
        }
        // An ACL goes in in the VFS form and comes back the same.
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in
            [(1u16, 6u16, u32::MAX), (2, 4, 1000), (4, 4, u32::MAX), (0x10, 4, u32::MAX), (0x20, 0, u32::MAX)]
        {
            acl.extend_from_slice(&tag.to_le_bytes());
            acl.extend_from_slice(&perm.to_le_bytes());
            acl.extend_from_slice(&id.to_le_bytes());
        }
        vol.set_xattr(f.ino, b"system.posix_acl_access", &acl, fs::XattrMode::Any).unwrap();
        want.insert(b"system.posix_acl_access".to_vec(), acl);
        let inode = vol.inode(f.ino).unwrap();
        assert_ne!(inode.file_acl(), 0, "{variant}: {n} attributes need a block");
        let got: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = vol.xattrs(&inode, true).unwrap().into_iter().collect();
        assert_eq!(got, want, "{variant}");
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean(&img);
        let ro = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap();
        let got: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
            ro.xattrs(&ro.inode(f.ino).unwrap(), true).unwrap().into_iter().collect();
        assert_eq!(got, want, "{variant} after reopen");
        // Removing everything frees the block.
        drop(ro);
        let vol = open_rw(&img);
        for name in want.keys() {
            vol.remove_xattr(f.ino, name).unwrap();
        }
        assert_eq!(vol.inode(f.ino).unwrap().file_acl(), 0);
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean(&img);
    }
}

/// Fill a small volume until operations fail with ENOSPC, keep going (frees,
/// more allocations), and check that every failed operation changed nothing:
/// the model, which only records successes, must match; e2fsck must be clean.
#[test]
fn full_volume_fails_operations_whole() {
    let Some((work, empty)) = common::setup_empty() else { return };
    for (variant, opts, seed) in
        [("1k", vec!["-b", "1024", "-N", "256"], 11u64), ("4k-nojournal", vec!["-O", "^has_journal", "-N", "128"], 12)]
    {
        let img = common::make_image(work.path(), &format!("full-{variant}.img"), 8, &opts, &empty);
        let vol = open_rw(&img);
        let mut model: BTreeMap<String, Node> = BTreeMap::new();
        model.insert(String::new(), Node::Dir);
        let mut rng = Lcg(seed);
        let (mut ok, mut nospace) = (0, 0);
        for step in 0..2500u64 {
            let dirs: Vec<String> = model.iter().filter(|(_, v)| **v == Node::Dir).map(|(k, _)| k.clone()).collect();
            let files: Vec<String> =
                model.iter().filter(|(_, v)| matches!(v, Node::File(_))).map(|(k, _)| k.clone()).collect();
            let parent = dirs[rng.below(dirs.len())].clone();
            let name = format!("n{step}-{}", "y".repeat(rng.below(60)));
            let child = if parent.is_empty() { name.clone() } else { format!("{parent}/{name}") };
            let pino = resolve(&vol, &parent);
            // Fill for the first 1500 steps, then free more than we allocate.
            let filling = step < 1500;
            let r: fs::Result<()> = match rng.below(10) {
                0 | 1 => vol.create(pino, name.as_bytes(), CreateKind::Dir, 0o755, 0, 0).map(|_| {
                    model.insert(child, Node::Dir);
                }),
                2 | 3 => vol.create(pino, name.as_bytes(), CreateKind::File, 0o644, 0, 0).map(|_| {
                    model.insert(child, Node::File(Vec::new()));
                }),
                4 => {
                    let target = vec![b't'; 61 + rng.below(400)]; // too long for i_block: needs a block
                    vol.create(pino, name.as_bytes(), CreateKind::Symlink(target.clone()), 0o777, 0, 0).map(|_| {
                        model.insert(child, Node::Link(target));
                    })
                }
                5..=7 if !files.is_empty() && (filling || rng.below(3) == 0) => {
                    let f = &files[rng.below(files.len())];
                    let Node::File(data) = model.get_mut(f).unwrap() else { unreachable!() };
                    let off = rng.below(data.len() + 20_000);
                    let max = if rng.below(4) == 0 { 400_000 } else { 20_000 };
                    let len = 1 + rng.below(max);
                    let bytes: Vec<u8> = (0..len).map(|i| (i as u64 * 7 + step) as u8).collect();
                    // A long write goes in pieces (a small journal here): on a full
                    // volume it may end short, as the kernel's does, after whole pieces.
                    vol.write(resolve(&vol, f), off as u64, &bytes).map(|n| {
                        assert!(n > 0 && n <= len, "{n} of {len}");
                        if data.len() < off + n {
                            data.resize(off + n, 0);
                        }
                        data[off..off + n].copy_from_slice(&bytes[..n]);
                    })
                }
                8 if !files.is_empty() => {
                    let f = &files[rng.below(files.len())];
                    let Node::File(data) = model.get_mut(f).unwrap() else { unreachable!() };
                    let size = rng.below(data.len() + 1);
                    vol.setattr(resolve(&vol, f), &SetAttr { size: Some(size as u64), ..Default::default() })
                        .map(|_| data.truncate(size))
                }
                _ if !files.is_empty() && (!filling || rng.below(4) == 0) => {
                    let f = files[rng.below(files.len())].clone();
                    let (p, n) = parent_and_name(&f);
                    vol.unlink(resolve(&vol, p), n.as_bytes()).map(|_| {
                        model.remove(&f);
                    })
                }
                _ => Ok(()),
            };
            match r {
                Ok(()) => ok += 1,
                Err(fs::FsError::NoSpace) => nospace += 1,
                Err(e) => panic!("{variant} step {step}: {e}"),
            }
            if step % 250 == 0 {
                check(&vol, &model);
            }
            if step % 700 == 0 {
                vol.sync().unwrap();
            }
        }
        assert!(nospace >= 50, "{variant}: the volume never filled ({nospace} ENOSPC, {ok} successes)");
        check(&vol, &model);
        // Make room for the two files below (inodes may have run out too).
        let files: Vec<String> =
            model.iter().filter(|(_, v)| !matches!(v, Node::Dir)).map(|(k, _)| k.clone()).collect();
        for f in files {
            let (p, n) = parent_and_name(&f);
            vol.unlink(resolve(&vol, p), n.as_bytes()).unwrap();
            model.remove(&f);
        }
        // Blocks freed by the running transaction are reusable at once: the
        // allocator commits and retries rather than report a full disk.
        let fill = vol.create(ROOT_INO, b"fill", CreateKind::File, 0o644, 0, 0).unwrap();
        let chunk = vec![0xabu8; 64 << 10];
        let mut filled = 0u64;
        // Until refused, or cut short (a write that finds the last blocks).
        while let Ok(n) = vol.write(fill.ino, filled, &chunk) {
            filled += n as u64;
            if n < chunk.len() {
                break;
            }
        }
        vol.unlink(ROOT_INO, b"fill").unwrap();
        let again = vol.create(ROOT_INO, b"again", CreateKind::File, 0o644, 0, 0).unwrap();
        for off in (0..filled).step_by(chunk.len()) {
            let len = (filled - off).min(chunk.len() as u64) as usize;
            let n = vol
                .write(again.ino, off, &chunk[..len])
                .unwrap_or_else(|e| panic!("{variant}: rewriting {filled} freed bytes at {off}: {e}"));
            assert_eq!(n, len, "{variant}: rewriting {filled} freed bytes at {off}");
        }
        let mut data = chunk.repeat(filled.div_ceil(chunk.len() as u64) as usize);
        data.truncate(filled as usize);
        model.insert("again".into(), Node::File(data));
        eprintln!("{variant}: {ok} operations, {nospace} ENOSPC; {filled} bytes refilled after an unlink");
        unmount_and_verify(vol, &img, &model);
    }
}

/// Deterministic bytes for the inline-data test.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt)).collect()
}

/// Inline files and directories (made by mkfs.ext4 -d and, where we may
/// mount, by the kernel) are converted to extent-mapped ones by the first
/// change that does not fit in the inode (writes that fit keep a file inline);
/// the result passes e2fsck and reads back as the model says.
#[test]
fn inline_data_inodes_convert_on_first_change() {
    use ondisk::inode::flags::{EXTENTS, INLINE_DATA};
    let Some((work, _)) = common::setup_empty() else { return };
    for (variant, opts) in [
        ("1k-csum", vec!["-O", "inline_data", "-b", "1024"]),
        ("4k-nocsum", vec!["-O", "inline_data,^metadata_csum", "-b", "4096"]),
    ] {
        let src = work.path().join(format!("inline-src-{variant}"));
        let mut model: BTreeMap<String, Node> = BTreeMap::new();
        model.insert(String::new(), Node::Dir);
        let files: [(&str, usize); 7] =
            [("e0", 0), ("f5", 5), ("f59", 59), ("f100", 100), ("ftrunc", 50), ("fup", 40), ("falloc", 30)];
        for (i, (name, len)) in files.iter().enumerate() {
            let data = pattern(*len, i as u8);
            std::fs::create_dir_all(&src).unwrap();
            std::fs::write(src.join(name), &data).unwrap();
            model.insert(name.to_string(), Node::File(data));
        }
        for (dir, names) in [
            ("dempty", &[][..]),
            ("drm", &[][..]),
            ("dsmall", &["a", "b"][..]),
            ("dgrow", &["x"][..]),
            ("dmove", &["m"][..]),
            ("dtarget", &["t"][..]),
            ("dx", &["p", "q"][..]),
        ] {
            std::fs::create_dir_all(src.join(dir)).unwrap();
            model.insert(dir.to_string(), Node::Dir);
            for (i, n) in names.iter().enumerate() {
                let data = pattern(3 + i, 100 + i as u8);
                std::fs::write(src.join(dir).join(n), &data).unwrap();
                model.insert(format!("{dir}/{n}"), Node::File(data));
            }
        }
        let img = common::make_image(work.path(), &format!("inline-{variant}.img"), 64, &opts, &src);
        // The kernel keeps directory entries in system.data too, which libext2fs never does.
        let mut kernel_model = BTreeMap::new();
        let kernel = common::with_kernel_mount(&img, |mnt| {
            std::fs::create_dir(mnt.join("kdir")).unwrap();
            kernel_model.insert("kdir".to_string(), Node::Dir);
            for i in 1..=6 {
                let data = pattern(2, i);
                std::fs::write(mnt.join(format!("kdir/name-{i}")), &data).unwrap();
                kernel_model.insert(format!("kdir/name-{i}"), Node::File(data));
            }
            let data = pattern(100, 50);
            std::fs::write(mnt.join("kfile"), &data).unwrap();
            kernel_model.insert("kfile".to_string(), Node::File(data));
        });
        model.extend(kernel_model);

        // The test means something only if these really are inline.
        let mut inline_paths: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
        inline_paths.extend(["dempty", "drm", "dsmall", "dgrow", "dmove", "dtarget", "dx"].map(String::from));
        if kernel {
            inline_paths.extend(["kdir", "kfile"].map(String::from));
            assert!(
                common::debugfs_system_data_len(&img, "/kdir").unwrap_or(0) > 0,
                "{variant}: kdir's entries reach system.data"
            );
        }
        for p in &inline_paths {
            assert_ne!(common::debugfs_flags(&img, &format!("/{p}")) & INLINE_DATA, 0, "{variant}: /{p} is inline");
        }
        assert!(
            common::debugfs_system_data_len(&img, "/f100").unwrap_or(0) > 0,
            "{variant}: f100 spills into system.data"
        );

        let vol = open_rw(&img);
        let file = |model: &mut BTreeMap<String, Node>, p: &str| -> (u32, Vec<u8>) {
            let Some(Node::File(d)) = model.get(p) else { panic!("{p}") };
            (resolve(&vol, p), d.clone())
        };
        let write = |model: &mut BTreeMap<String, Node>, p: &str, off: usize, bytes: &[u8]| {
            let (ino, mut d) = file(model, p);
            assert_eq!(vol.write(ino, off as u64, bytes).unwrap(), bytes.len());
            if d.len() < off + bytes.len() {
                d.resize(off + bytes.len(), 0);
            }
            d[off..off + bytes.len()].copy_from_slice(bytes);
            model.insert(p.to_string(), Node::File(d));
        };
        let truncate = |model: &mut BTreeMap<String, Node>, p: &str, size: usize| {
            let (ino, mut d) = file(model, p);
            vol.setattr(ino, &SetAttr { size: Some(size as u64), ..Default::default() }).unwrap();
            d.resize(size, 0);
            model.insert(p.to_string(), Node::File(d));
        };
        write(&mut model, "f5", 5, &pattern(80, 1)); // append past the inline area
        write(&mut model, "f59", 10, b"OVERWRITE"); // overwrite inside
        write(&mut model, "f100", 100, &pattern(5000, 2)); // grow over several blocks
        write(&mut model, "e0", 70_000, b"sparse"); // empty inline file, written far out
        truncate(&mut model, "ftrunc", 7);
        truncate(&mut model, "fup", 9000);
        let (ino, mut d) = file(&mut model, "falloc");
        vol.fallocate(ino, 0, 10_000, fs::Falloc::Allocate, false).unwrap();
        d.resize(10_000, 0);
        model.insert("falloc".into(), Node::File(d));

        // A directory that fills blocks (and becomes hashed), then loses entries.
        let dgrow = resolve(&vol, "dgrow");
        for i in 0..300 {
            let name = format!("entry-with-a-rather-long-name-{i:04}");
            vol.create(dgrow, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
            model.insert(format!("dgrow/{name}"), Node::File(Vec::new()));
        }
        assert!(vol.inode(dgrow).unwrap().size() > u64::from(vol.block_size()), "{variant}: dgrow needs more blocks");
        for i in (0..300).step_by(3) {
            let name = format!("entry-with-a-rather-long-name-{i:04}");
            vol.unlink(dgrow, name.as_bytes()).unwrap();
            model.remove(&format!("dgrow/{name}"));
        }
        // Remove from, rename within, exchange within.
        let dsmall = resolve(&vol, "dsmall");
        vol.unlink(dsmall, b"a").unwrap();
        model.remove("dsmall/a");
        vol.rename(dsmall, b"b", dsmall, b"b-renamed", false, false).unwrap();
        let n = model.remove("dsmall/b").unwrap();
        model.insert("dsmall/b-renamed".into(), n);
        let dx = resolve(&vol, "dx");
        vol.rename(dx, b"p", dx, b"q", false, true).unwrap();
        let (p, q) = (model.remove("dx/p").unwrap(), model.remove("dx/q").unwrap());
        model.insert("dx/p".into(), q);
        model.insert("dx/q".into(), p);
        // An inline directory moved into another inline directory: its ".." (i_block's first word) follows.
        let dtarget = resolve(&vol, "dtarget");
        vol.rename(ROOT_INO, b"dmove", dtarget, b"dmove", false, false).unwrap();
        for (k, v) in model.clone().into_iter().filter(|(k, _)| k == "dmove" || k.starts_with("dmove/")) {
            model.remove(&k);
            model.insert(format!("dtarget/{k}"), v);
        }
        let dmove = resolve(&vol, "dtarget/dmove");
        assert_eq!(
            vol.lookup(&vol.inode(dmove).unwrap(), b"..").unwrap().map(|e| e.0),
            Some(dtarget),
            "{variant}: .. of the moved dir"
        );
        // A subdirectory in an empty inline directory; an empty inline directory removed.
        vol.create(resolve(&vol, "dempty"), b"sub", CreateKind::Dir, 0o755, 0, 0).unwrap();
        model.insert("dempty/sub".into(), Node::Dir);
        vol.rmdir(ROOT_INO, b"drm").unwrap();
        model.remove("drm");
        if kernel {
            let kdir = resolve(&vol, "kdir");
            vol.unlink(kdir, b"name-6").unwrap(); // kept in system.data
            model.remove("kdir/name-6");
            vol.rename(kdir, b"name-1", kdir, b"name-1-renamed", false, false).unwrap();
            let n = model.remove("kdir/name-1").unwrap();
            model.insert("kdir/name-1-renamed".into(), n);
            vol.rename(kdir, b"name-2", kdir, b"name-3", false, false).unwrap(); // over an existing name
            let n = model.remove("kdir/name-2").unwrap();
            model.insert("kdir/name-3".into(), n);
            truncate(&mut model, "kfile", 30);
        }
        // A new file written small goes inline, as the kernel's; a new directory is an extent inode.
        let fresh = vol.create(ROOT_INO, b"fresh", CreateKind::File, 0o644, 0, 0).unwrap();
        vol.write(fresh.ino, 0, b"tiny").unwrap();
        model.insert("fresh".into(), Node::File(b"tiny".to_vec()));
        let i = vol.inode(fresh.ino).unwrap();
        assert!(i.has_flag(INLINE_DATA) && !i.has_flag(EXTENTS), "{variant}: a small new file is inline");
        let freshdir = vol.create(ROOT_INO, b"freshdir", CreateKind::Dir, 0o755, 0, 0).unwrap();
        model.insert("freshdir".into(), Node::Dir);
        let i = vol.inode(freshdir.ino).unwrap();
        assert!(i.has_flag(EXTENTS) && !i.has_flag(INLINE_DATA), "{variant}: a new directory is an extent inode");

        // Everything changed left inline data, but for writes whose result still fits in the inode (f5: 85
        // bytes, f59: overwritten inside); the untouched stays inline.
        for p in inline_paths.iter().filter(|p| model.contains_key(*p)) {
            let i = vol.inode(resolve(&vol, p)).unwrap();
            let touched = !matches!(p.as_str(), "dmove" | "f5" | "f59");
            assert_eq!(i.has_flag(INLINE_DATA), !touched, "{variant}: {p} inline flag");
        }
        check(&vol, &model);
        unmount_and_verify(vol, &img, &model);
        eprintln!("{variant}: {} entries verified (kernel-made inodes: {kernel})", model.len());
    }
}

/// Small files written on an inline_data volume with large inodes stay in
/// their inodes (the ARC workload's case, issue #8): written whole, appended
/// in pieces, overwritten inside, up to the last byte that fits; one byte more
/// converts to an extent file, and so does a truncate. e2fsck accepts the
/// result, debugfs sees the inline flag and system.data, and the kernel reads
/// back every byte.
#[test]
fn small_files_are_written_inline() {
    use ondisk::inode::flags::{EXTENTS, INLINE_DATA};
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(
        work.path(),
        "inline-write.img",
        64,
        &["-b", "4096", "-I", "2048", "-O", "inline_data"],
        &empty,
    );
    let vol = open_rw(&img);
    // What fits beside an empty system.data in a 2 KiB inode (ext4's 32-byte extra_isize): 60 in i_block + the rest.
    let cap = {
        let f = vol.create(ROOT_INO, b"probe", CreateKind::File, 0o644, 0, 0).unwrap();
        let mut n = 0;
        while vol.write(f.ino, n, b"x").is_ok() && vol.inode(f.ino).unwrap().has_flag(INLINE_DATA) {
            n += 1;
        }
        vol.unlink(ROOT_INO, b"probe").unwrap();
        n as usize
    };
    assert!((1800..2048).contains(&cap), "inline capacity of a 2 KiB inode: {cap}");
    let mut model: BTreeMap<String, Node> = BTreeMap::new();
    model.insert(String::new(), Node::Dir);
    let mut put = |name: &str, pieces: &[(u64, Vec<u8>)], inline: bool| {
        let f = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
        let mut d = Vec::new();
        for (off, bytes) in pieces {
            assert_eq!(vol.write(f.ino, *off, bytes).unwrap(), bytes.len(), "{name}");
            let end = *off as usize + bytes.len();
            if d.len() < end {
                d.resize(end, 0);
            }
            d[*off as usize..end].copy_from_slice(bytes);
        }
        let i = vol.inode(f.ino).unwrap();
        assert_eq!((i.has_flag(INLINE_DATA), i.has_flag(EXTENTS)), (inline, !inline), "{name}: inline {inline}");
        if inline {
            assert_eq!((i.base.blocks_lo, i.file_acl()), (0, 0), "{name}: no blocks");
        }
        model.insert(name.to_string(), Node::File(d));
    };
    put("status", &[(0, b"FINISHED\n".to_vec())], true);
    put("exactly60", &[(0, pattern(60, 1))], true);
    put("local", &[(0, pattern(1007, 2))], true);
    put("appended", &[(0, pattern(100, 3)), (100, pattern(900, 4)), (1000, pattern(7, 5))], true);
    put("overwritten", &[(0, pattern(1500, 6)), (30, b"INSIDE-BOTH-AREAS".to_vec())], true);
    put("gap", &[(500, pattern(10, 7))], true);
    put("full", &[(0, pattern(cap, 8))], true);
    put("over", &[(0, pattern(cap + 1, 9))], false);
    put("grown", &[(0, pattern(cap - 10, 10)), (cap as u64 - 10, pattern(11, 11))], false);
    put("proxy", &[(0, pattern(3576, 12))], false);
    // An empty file stays as created: the kernel sets the flag at the first write too.
    let e = vol.create(ROOT_INO, b"empty", CreateKind::File, 0o644, 0, 0).unwrap();
    assert!(!vol.inode(e.ino).unwrap().has_flag(INLINE_DATA));
    model.insert("empty".into(), Node::File(Vec::new()));
    // A truncate converts; the next write to the emptied file goes inline again.
    let t = resolve(&vol, "local");
    vol.setattr(t, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
    assert!(!vol.inode(t).unwrap().has_flag(INLINE_DATA));
    vol.write(t, 0, b"again").unwrap();
    assert!(vol.inode(t).unwrap().has_flag(INLINE_DATA));
    model.insert("local".into(), Node::File(b"again".to_vec()));
    check(&vol, &model);
    unmount_and_verify(vol, &img, &model);
    for (name, inline) in [("status", true), ("full", true), ("appended", true), ("over", false), ("proxy", false)] {
        assert_eq!(common::debugfs_flags(&img, &format!("/{name}")) & INLINE_DATA != 0, inline, "debugfs: {name}");
    }
    assert_eq!(common::debugfs_system_data_len(&img, "/full"), Some(cap - 60), "system.data holds all past i_block");
    common::with_kernel_mount(&img, |mnt| {
        for (name, node) in &model {
            if let Node::File(d) = node {
                assert!(std::fs::read(mnt.join(name)).unwrap() == *d, "kernel reads {name}");
            }
        }
    });
}

/// RENAME_WHITEOUT leaves a character device 0:0 at the source name, in the
/// same operation; the kernel sees both names as we left them.
#[test]
fn rename_whiteout_leaves_a_whiteout() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "whiteout.img", 16, &[], &empty);
    let vol = open_rw(&img);
    let f = vol.create(ROOT_INO, b"src", CreateKind::File, 0o644, 0, 0).unwrap();
    vol.write(f.ino, 0, b"moved").unwrap();
    vol.rename_whiteout(ROOT_INO, b"src", ROOT_INO, b"dst", false, 1000, 1000).unwrap();
    // NOREPLACE is honoured, and a failed rename leaves no whiteout behind.
    let g = vol.create(ROOT_INO, b"other", CreateKind::File, 0o644, 0, 0).unwrap();
    assert!(matches!(vol.rename_whiteout(ROOT_INO, b"other", ROOT_INO, b"dst", true, 0, 0), Err(fs::FsError::Exists)));
    assert_eq!(resolve(&vol, "other"), g.ino);
    let w = vol.inode(resolve(&vol, "src")).unwrap();
    assert_eq!((w.base.mode & 0o170000, w.base.mode & 0o7777, w.uid(), w.gid()), (0o020000, 0, 1000, 1000));
    assert_eq!(resolve(&vol, "dst"), f.ino);
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
    common::with_kernel_mount(&img, |mnt| {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let m = std::fs::symlink_metadata(mnt.join("src")).unwrap();
        assert!(m.file_type().is_char_device() && m.rdev() == 0);
        assert_eq!(std::fs::read(mnt.join("dst")).unwrap(), b"moved");
    });
}

/// Small files' data waits in memory and reaches the device sorted and merged
/// at the commit (blockdev::DataWriteback): far fewer data requests than
/// files, the data readable before and after, and the kernel reads it back.
/// With `data_writeback_bytes: 0`, one request per file, as before.
/// Each file is written in two pieces, as tar does: the second piece's
/// read-modify-write of the shared block reads it from memory (the waiting
/// block when gathered, the file's kept last block either way), so no data
/// is read from the device for it. Delayed allocation
/// off: this is the path of writes that allocate as they go.
#[test]
fn small_file_data_goes_out_merged_at_the_commit() {
    let Some((work, empty)) = common::setup_empty() else { return };
    const FILES: usize = 200;
    let mut requests = Vec::new();
    let mut reads = Vec::new();
    for gather in [64usize << 20, 0] {
        let img = common::make_image(work.path(), &format!("gather-{gather}.img"), 64, &[], &empty);
        let counted = Arc::new(blockdev::CountingDevice::new(Arc::new(FileDevice::open(&img, true).unwrap())));
        let vol = Volume::open(
            counted.clone(),
            VolumeOptions { read_only: false, data_writeback_bytes: gather, delalloc_bytes: 0, ..Default::default() },
        )
        .unwrap();
        let dir = vol.create(ROOT_INO, b"d", CreateKind::Dir, 0o755, 0, 0).unwrap();
        for i in 0..FILES {
            let f = vol.create(dir.ino, format!("f{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
            let data = pattern(3000 + i, i as u8);
            vol.write(f.ino, 0, &data[..1500]).unwrap();
            vol.write(f.ino, 1500, &data[1500..]).unwrap();
        }
        // Before the commit: read back through the volume (from memory when gathered).
        let probe = resolve(&vol, "d/f17");
        assert_eq!(vol.read(&vol.inode(probe).unwrap(), 0, 1 << 20).unwrap(), pattern(3017, 17));
        vol.sync().unwrap();
        requests.push(counted.counts().get(blockdev::IoClass::Data, true).requests);
        reads.push(counted.counts().get(blockdev::IoClass::Data, false).requests);
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean(&img);
        common::with_kernel_mount(&img, |mnt| {
            for i in [0, 17, FILES - 1] {
                assert_eq!(std::fs::read(mnt.join(format!("d/f{i}"))).unwrap(), pattern(3000 + i, i as u8), "f{i}");
            }
        });
    }
    let (gathered, direct) = (requests[0], requests[1]);
    eprintln!("data write requests for {FILES} small files: {gathered} gathered, {direct} direct");
    eprintln!("data read requests: {} gathered, {} direct", reads[0], reads[1]);
    // Direct: the first piece's block, then the second piece's two runs (the
    // block it shares, read first; the new one).
    assert_eq!(direct, 3 * FILES as u64, "without write-back: one data request per run written");
    // The shared block is the file's last one, kept in memory after the
    // first piece (`tails.rs`); the probe's first two blocks (1 KiB blocks
    // here) come from the device when nothing waits in memory.
    assert_eq!(reads, [0, 1], "data reads, gathered and direct: only the probe's when direct");
    assert!(gathered * 10 <= direct, "gathered data went out in {gathered} requests for {FILES} files");
}

/// Bytes past the end of file read as zeros once a write extends the file
/// over them, whatever the last block holds there on disk (as ext4: a block's
/// tail past EOF is never trusted). A partial block whose kept part lies
/// wholly past the old end is not read at all. The file's last block is kept
/// in memory after a write (`tails.rs`): the extending write after a remount
/// reads it from the disk, the one before from memory. (The write-time
/// allocation path: delayed allocation off.)
#[test]
fn an_extending_write_never_exposes_what_lies_past_the_old_end() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "past-eof.img", 64, &[], &empty);
    let raw: Arc<dyn blockdev::BlockDevice> = Arc::new(FileDevice::open(&img, true).unwrap());
    let counted = Arc::new(blockdev::CountingDevice::new(raw.clone()));
    let open = || {
        Volume::open(
            counted.clone(),
            VolumeOptions { read_only: false, data_writeback_bytes: 0, delalloc_bytes: 0, ..Default::default() },
        )
        .unwrap()
    };
    let vol = open();
    let f = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap();
    vol.write(f.ino, 0, &[0xAA; 100]).unwrap();
    let Mapping::Mapped { pblk, .. } = vol.map_block(&vol.inode(f.ino).unwrap(), 0, 1).unwrap() else {
        panic!("block 0 unmapped")
    };
    // Stale bytes behind the end of file, as another writer may leave them.
    let stale_from = |at: usize| {
        let mut b = vec![0u8; 4096];
        raw.read_at(pblk * 4096, &mut b, blockdev::IoClass::Data).unwrap();
        b[at..].fill(0xBB);
        raw.write_at(pblk * 4096, &b, blockdev::IoClass::Data).unwrap();
    };
    let reads = || counted.counts().get(blockdev::IoClass::Data, false).requests;
    // Kept in memory: the write reads nothing, and the stale bytes never show.
    stale_from(100);
    let before = reads();
    vol.write(f.ino, 150, b"kept").unwrap();
    assert_eq!(reads() - before, 0, "the last block is kept: nothing read");
    let mut want = vec![0xAA; 100];
    want.resize(150, 0);
    want.extend_from_slice(b"kept");
    assert!(vol.read(&vol.inode(f.ino).unwrap(), 0, 4096).unwrap() == want, "bytes 100-149 must read as zeros");
    vol.shutdown().unwrap();
    drop(vol);
    // After a remount nothing is kept: the same from the disk.
    let vol = open();
    stale_from(154);
    let before = reads();
    vol.write(f.ino, 200, b"0123456789").unwrap();
    assert_eq!(reads() - before, 1, "bytes 0-153 are kept: block 0 is read");
    want.resize(200, 0);
    want.extend_from_slice(b"0123456789");
    assert!(vol.read(&vol.inode(f.ino).unwrap(), 0, 4096).unwrap() == want, "bytes 154-199 must read as zeros");
    // Over the whole file and beyond: what block 0 keeps lies past the old end.
    stale_from(210);
    let before = reads();
    vol.write(f.ino, 0, &[0xCC; 300]).unwrap();
    assert_eq!(reads() - before, 0, "nothing before the old end is kept: no read");
    vol.setattr(f.ino, &SetAttr { size: Some(400), ..Default::default() }).unwrap();
    let mut want = vec![0xCC; 300];
    want.resize(400, 0);
    assert!(vol.read(&vol.inode(f.ino).unwrap(), 0, 4096).unwrap() == want, "bytes 300-399 must read as zeros");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
    common::with_kernel_mount(&img, |mnt| assert!(std::fs::read(mnt.join("f")).unwrap() == want));
}

/// Growing a file never brings back bytes its last block holds past the old
/// end on disk (left by a write that failed after its data landed, or by a
/// crash): truncate up and a write that starts in a later block zero them
/// first, as the kernel zeroes the end-of-file page when a file grows. Each
/// case remounts first, so the block comes from the disk (`tails.rs` would
/// serve the clean copy it kept).
#[test]
fn growing_a_file_zeroes_what_its_last_block_holds_past_the_end() {
    let Some((work, empty)) = common::setup_empty() else { return };
    for delalloc in [false, true] {
        for grow in ["truncate", "write"] {
            let img = common::make_image(work.path(), "grow.img", 64, &["-b", "4096"], &empty);
            let raw: Arc<dyn blockdev::BlockDevice> = Arc::new(FileDevice::open(&img, true).unwrap());
            let opts = VolumeOptions {
                read_only: false,
                delalloc_bytes: if delalloc { 1 << 20 } else { 0 },
                ..Default::default()
            };
            let vol = Volume::open(raw.clone(), opts.clone()).unwrap();
            let f = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap().ino;
            vol.write(f, 0, &[0xAA; 100]).unwrap();
            vol.sync().unwrap();
            let Mapping::Mapped { pblk, .. } = vol.map_block(&vol.inode(f).unwrap(), 0, 1).unwrap() else {
                panic!("block 0 unmapped after sync")
            };
            vol.shutdown().unwrap();
            drop(vol);
            let mut b = vec![0u8; 4096];
            raw.read_at(pblk * 4096, &mut b, blockdev::IoClass::Data).unwrap();
            b[100..].fill(0xBB);
            raw.write_at(pblk * 4096, &b, blockdev::IoClass::Data).unwrap();
            let vol = Volume::open(raw.clone(), opts).unwrap();
            let mut want = vec![0xAA; 100];
            if grow == "truncate" {
                vol.setattr(f, &SetAttr { size: Some(3000), ..Default::default() }).unwrap();
                want.resize(3000, 0);
            } else {
                vol.write(f, 8192, b"z").unwrap();
                want.resize(8192, 0);
                want.push(b'z');
            }
            let got = vol.read(&vol.inode(f).unwrap(), 0, 1 << 16).unwrap();
            assert!(got == want, "delalloc={delalloc}, {grow}: bytes past the old end must read as zeros");
            vol.shutdown().unwrap();
            drop(vol);
            common::e2fsck_clean(&img);
            common::with_kernel_mount(&img, |mnt| assert!(std::fs::read(mnt.join("f")).unwrap() == want));
        }
    }
}

/// A new inode alone in its inode-table block starts the block from zeros:
/// creating files in a fresh volume reads no inode-table block (as the
/// kernel's ext4), and the volume stays clean for e2fsck and the kernel.
#[test]
fn creates_in_empty_inode_table_blocks_read_nothing() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "lone-inodes.img", 64, &[], &empty);
    let counted = Arc::new(blockdev::CountingDevice::new(Arc::new(FileDevice::open(&img, true).unwrap())));
    let vol = Volume::open(counted.clone(), VolumeOptions { read_only: false, ..Default::default() }).unwrap();
    // The first file reads what every create shares (bitmaps, the root directory).
    let first = vol.create(ROOT_INO, b"first", CreateKind::File, 0o644, 0, 0).unwrap();
    vol.write(first.ino, 0, b"x").unwrap();
    vol.sync().unwrap(); // its block allocated: the block bitmap read

    let reads = || counted.counts().get(blockdev::IoClass::Metadata, false).requests;
    let before = reads();
    for i in 0..200 {
        vol.create(ROOT_INO, format!("f{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
    }
    assert_eq!(reads() - before, 0, "200 inodes fill 12 fresh inode-table blocks without reading them");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
    common::with_kernel_mount(&img, |mnt| {
        assert_eq!(std::fs::read_dir(mnt).unwrap().count(), 202, "first, 200 files, lost+found")
    });
}

/// A create trusts the lookup the kernel made just before it only while the
/// directory blocks that lookup read are unchanged (fs/src/negative.rs): here a
/// rename's own lookup finds its target absent, then the rename puts the name
/// there, and a create of that name must still see it. In a one-block and in a
/// hashed directory.
#[test]
fn a_create_never_trusts_a_stale_negative_lookup() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "neg.img", 64, &[], &empty);
    let vol = open_rw(&img);
    for (dir, files) in [("small", 3), ("hashed", 2000)] {
        let d = vol.create(ROOT_INO, dir.as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
        for i in 0..files {
            vol.create(d.ino, format!("file-{i:05}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
        }
        vol.rename(d.ino, b"file-00000", d.ino, b"target", false, false).unwrap();
        let err = vol.create(d.ino, b"target", CreateKind::File, 0o644, 0, 0).unwrap_err();
        assert!(matches!(err, fs::FsError::Exists), "{dir}: {err:?}");
        // The usual case: a lookup finds nothing, the create follows, a second create fails.
        let dir_inode = vol.inode(d.ino).unwrap();
        assert_eq!(vol.lookup(&dir_inode, b"new").unwrap(), None);
        vol.create(d.ino, b"new", CreateKind::File, 0o644, 0, 0).unwrap();
        let err = vol.create(d.ino, b"new", CreateKind::File, 0o644, 0, 0).unwrap_err();
        assert!(matches!(err, fs::FsError::Exists), "{dir}: {err:?}");
    }
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

/// Transactions that reach the size limit commit on the commit thread while
/// operations go on changing the blocks they hold (each change copies the
/// committing version first). With a small journal that happens dozens of
/// times here, in both journal modes; the volume must then read back as
/// written, pass e2fsck, and the kernel must see the same files.
#[test]
fn commits_on_the_commit_thread_keep_every_change() {
    let Some((work, empty)) = common::setup_empty() else { return };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "bg.img", 64, &["-b", "1024", "-J", "size=1"], &empty);
        let hour = std::time::Duration::from_secs(3600);
        let opts =
            VolumeOptions { read_only: false, lazy, commit_interval: hour, dirty_expire: hour, ..Default::default() };
        let vol = Volume::open(Arc::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
        let mut model = BTreeMap::new();
        let mut dirs = vec![(ROOT_INO, String::new())];
        for i in 0..4000usize {
            let (parent, ppath) = dirs[i % dirs.len()].clone();
            let path = format!("{}n{i}", if ppath.is_empty() { String::new() } else { format!("{ppath}/") });
            if i % 50 == 0 {
                let d = vol.create(parent, format!("n{i}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
                dirs.push((d.ino, path.clone()));
                model.insert(path, Node::Dir);
                continue;
            }
            let f = vol.create(parent, format!("n{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
            let data = pattern(100 + (i * 37) % 3000, i as u8);
            vol.write(f.ino, 0, &data).unwrap();
            // Rewrite an older file now and then: its blocks may be in the committing transaction.
            if i % 7 == 0 && i > 100 {
                let old = format!("n{}", i - 100);
                if let Some((k, Node::File(d))) =
                    model.iter_mut().find(|(k, _)| k.ends_with(&format!("/{old}")) || **k == old)
                {
                    let ino = resolve(&vol, k);
                    let more = pattern(500, i as u8 ^ 0x55);
                    vol.write(ino, d.len() as u64, &more).unwrap();
                    d.extend_from_slice(&more);
                }
            }
            model.insert(path, Node::File(data));
        }
        let stats = vol.write_stats().unwrap();
        eprintln!(
            "lazy={lazy}: {} commits, {} on the commit thread, {} forced checkpoints",
            stats.commits, stats.background_commits, stats.checkpoints
        );
        assert!(
            stats.background_commits >= 10,
            "lazy={lazy}: only {} of {} commits on the commit thread",
            stats.background_commits,
            stats.commits
        );
        check(&vol, &model);
        if lazy {
            vol.shutdown().unwrap();
            drop(vol);
            common::e2fsck_clean_after_replay(&img);
        } else {
            unmount_and_verify(vol, &img, &model);
        }
        common::with_kernel_mount(&img, |mnt| {
            for (path, node) in &model {
                let p = mnt.join(path);
                match node {
                    Node::File(d) => assert!(std::fs::read(&p).unwrap() == *d, "kernel: {path} differs"),
                    Node::Dir => assert!(p.is_dir(), "kernel: {path}"),
                    Node::Link(_) => unreachable!(),
                }
            }
        });
    }
}

/// A zero range that fails for want of space changes nothing: the
/// kernel keeps its cached pages of the range when fallocate fails, so bytes
/// zeroed on the device before the failure would show up only after the
/// cache lets go of them (fsstress on a full volume found such a file).
#[test]
fn a_fallocate_that_runs_out_of_space_leaves_the_data_alone() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), &format!("full-{lazy}.img"), 16, &["-b", "4096"], &empty);
        let vol = common::open_rw(&img, lazy);
        let f = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        // Written blocks 0-2, a hole 3-9, a written block 10.
        let data = vec![0xAAu8; 3 * 4096];
        vol.write(f, 0, &data).unwrap();
        vol.write(f, 10 * 4096, &[0xBB; 4096]).unwrap();
        vol.sync().unwrap();
        // Fill the volume.
        let fill = vol.create(ROOT_INO, b"fill", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        let chunk = vec![1u8; 256 << 10];
        let mut at = 0u64;
        while vol.write(fill, at, &chunk).is_ok() {
            at += chunk.len() as u64;
        }
        vol.sync().unwrap();
        // What delayed allocation's reservation left: taken the way fallocate takes blocks.
        while vol.fallocate(fill, at, 4096, fs::Falloc::Allocate, false).is_ok() {
            at += 4096;
        }
        let before = vol.read(&vol.inode(f).unwrap(), 0, 11 * 4096).unwrap();
        // Partial blocks at both ends (inside blocks 1 and 10), the hole to allocate between.
        let r = vol.fallocate(f, 4096 + 100, 9 * 4096, fs::Falloc::ZeroRange, true);
        assert!(matches!(r, Err(fs::FsError::NoSpace)), "lazy={lazy}: zero range on a full volume: {r:?}");
        let after = vol.read(&vol.inode(f).unwrap(), 0, 11 * 4096).unwrap();
        assert!(after == before, "lazy={lazy}: a failed zero range changed the file");
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean_in(&img, lazy);
    }
}
