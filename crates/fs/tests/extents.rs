//! Extent trees at the sizes real files reach.
//!
//! A fragmented file (every other block written, in random order) grows its
//! extent tree through every depth the block size allows: with 1 KiB blocks
//! a leaf holds 84 extents and the root 4, so 10,000 extents need depth 2 and
//! 100,000 depth 3. The file is then punched, preallocated and written into,
//! truncated and rewritten, and finally emptied, which must shrink the tree
//! back to the inode. After every phase the volume is unmounted and checked
//! by the oracles: `e2fsck -fn` is clean and the kernel's ext4 reads the same
//! bytes as the model; ext4lazy reads them too before each unmount.
//!
//! The million-extent file (1 KiB blocks, both journal modes) takes minutes:
//! `cargo test --release -p fs --test extents -- --ignored`.

mod common;

use blockdev::FileDevice;
use fs::{CreateKind, Falloc, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::io::{Read, Seek};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// What the file should hold: per logical block, the generation of the
/// write that last filled it (0: reads as zeros), and its size in bytes.
struct Model {
    bs: u64,
    gens: Vec<u32>,
    size: u64,
}

impl Model {
    /// The bytes of block `lblk` as written by generation `gen`: every word
    /// names the block and the generation, so a misplaced block shows.
    fn block(&self, lblk: u64, gen: u32, out: &mut [u8]) {
        if gen == 0 {
            out.fill(0);
            return;
        }
        let word = (lblk << 24 | u64::from(gen)).to_le_bytes();
        for c in out.chunks_mut(8) {
            c.copy_from_slice(&word[..c.len()]);
        }
    }

    fn set(&mut self, lblk: u64, gen: u32) {
        let i = lblk as usize;
        if self.gens.len() <= i {
            self.gens.resize(i + 1, 0);
        }
        self.gens[i] = gen;
        self.size = self.size.max((lblk + 1) * self.bs);
    }

    fn zero(&mut self, from: u64, to: u64) {
        let hi = (to as usize).min(self.gens.len());
        if (from as usize) < hi {
            self.gens[from as usize..hi].fill(0);
        }
    }

    fn truncate(&mut self, size: u64) {
        self.gens.truncate(size.div_ceil(self.bs) as usize);
        self.size = size;
    }

    /// The byte ranges SEEK_DATA finds: the runs of written blocks.
    fn data_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (b, &g) in self.gens.iter().enumerate() {
            let (lo, hi) = (b as u64 * self.bs, ((b as u64 + 1) * self.bs).min(self.size));
            if g == 0 || lo >= hi {
                continue;
            }
            match out.last_mut() {
                Some(r) if r.1 == lo => r.1 = hi,
                _ => out.push((lo, hi)),
            }
        }
        out
    }

    /// Check `read(offset, len)` against the model over the whole size.
    fn verify(&self, what: &str, mut read: impl FnMut(u64, &mut [u8])) {
        let bs = self.bs as usize;
        let chunk = 256 * bs;
        let mut got = vec![0u8; chunk];
        let mut want = vec![0u8; bs];
        let mut off = 0u64;
        while off < self.size {
            let n = chunk.min((self.size - off) as usize);
            read(off, &mut got[..n]);
            for (k, b) in got[..n].chunks(bs).enumerate() {
                let lblk = off / self.bs + k as u64;
                self.block(lblk, self.gens.get(lblk as usize).copied().unwrap_or(0), &mut want);
                assert!(
                    b == &want[..b.len()],
                    "{what}: block {lblk} differs (generation {})",
                    self.gens.get(lblk as usize).copied().unwrap_or(0)
                );
            }
            off += n as u64;
        }
    }
}

struct Case<'a> {
    img: &'a Path,
    lazy: bool,
}

impl Case<'_> {
    fn open(&self) -> Volume {
        let dev = Arc::new(FileDevice::open(self.img, true).unwrap());
        Volume::open(dev, VolumeOptions { read_only: false, lazy: self.lazy, ..Default::default() }).unwrap()
    }

    fn ino(&self, vol: &Volume) -> u32 {
        vol.lookup(&vol.inode(ROOT_INO).unwrap(), b"frag").unwrap().expect("frag exists").0
    }

    /// ext4lazy reads the model back; unmount; e2fsck and the kernel agree.
    fn check(&self, vol: Volume, model: &Model, phase: &str) -> (u16, usize) {
        let ino = self.ino(&vol);
        // Delayed data read back from memory first, then written back: the
        // tree is built at write-back.
        let inode = vol.inode(ino).unwrap();
        model.verify(&format!("{phase}: ext4lazy before write-back"), |off, buf| {
            buf.copy_from_slice(&vol.read(&inode, off, buf.len()).unwrap());
        });
        vol.sync().unwrap();
        let inode = vol.inode(ino).unwrap();
        assert_eq!(inode.size(), model.size, "{phase}: size");
        let shape = vol.extent_tree_shape(&inode).unwrap();
        model.verify(&format!("{phase}: ext4lazy"), |off, buf| {
            let data = vol.read(&inode, off, buf.len()).unwrap();
            assert_eq!(data.len(), buf.len(), "{phase}: short read at {off}");
            buf.copy_from_slice(&data);
        });
        let seek = |at, data| vol.seek(&inode, at, if data { fs::Seek::Data } else { fs::Seek::Hole }).unwrap();
        assert!(
            common::seek_map(model.size, seek) == model.data_ranges(),
            "{phase}: ext4lazy's SEEK_DATA/SEEK_HOLE map"
        );
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean_in(self.img, self.lazy);
        let mounted = common::with_kernel_mount(self.img, |mnt| {
            let mut f = std::fs::File::open(mnt.join("frag")).unwrap();
            assert_eq!(f.metadata().unwrap().len(), model.size, "{phase}: kernel's size");
            let fd = f.as_raw_fd();
            let seek = |at: u64, data: bool| {
                // SAFETY: lseek on a descriptor this closure's owner keeps open.
                let r = unsafe { libc::lseek(fd, at as i64, if data { libc::SEEK_DATA } else { libc::SEEK_HOLE }) };
                (r >= 0).then_some(r as u64)
            };
            // Before the reads: the kernel counts cached pages of unwritten extents as data.
            assert!(
                common::seek_map(model.size, seek) == model.data_ranges(),
                "{phase}: the kernel's SEEK_DATA/SEEK_HOLE map"
            );
            f.rewind().unwrap();
            model.verify(&format!("{phase}: kernel"), |_, buf| f.read_exact(buf).unwrap());
        });
        assert!(mounted, "the kernel must be able to mount the image");
        eprintln!("{phase}: depth {} with {} extents", shape.0, shape.1);
        shape
    }
}

/// Write `blocks` (each with generation `gen`) in the order given.
fn write_blocks(vol: &Volume, ino: u32, model: &mut Model, blocks: &[u64], gen: u32) {
    let mut buf = vec![0u8; model.bs as usize];
    for &b in blocks {
        model.block(b, gen, &mut buf);
        vol.write(ino, b * model.bs, &buf).unwrap();
        model.set(b, gen);
    }
}

/// The whole life of one fragmented file of `n` extents.
fn fragmented_file(n: u64, bs: u64, lazy: bool, seed: u64, min_depth: u16) {
    let Some((work, empty)) = common::setup_empty() else { return };
    let data_mb = (n * bs * 3) >> 20;
    let size_mb = (data_mb + 64).max(128);
    let img = common::make_image(work.path(), "frag.img", size_mb, &["-b", &bs.to_string()], &empty);
    let case = Case { img: &img, lazy };
    let mut rng = Rng(seed | 1);
    let mut model = Model { bs, gens: Vec::new(), size: 0 };
    let tag = format!("{n} extents, {bs}-byte blocks, {}", if lazy { "lazy" } else { "ordered" });

    // 1. Every other block, in random order: n extents, the tree at its deepest.
    let vol = case.open();
    let ino = vol.create(ROOT_INO, b"frag", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let mut blocks: Vec<u64> = (0..n).map(|i| 2 * i).collect();
    rng.shuffle(&mut blocks);
    write_blocks(&vol, ino, &mut model, &blocks, 1);
    let (depth, extents) = case.check(vol, &model, &format!("{tag}: written"));
    assert_eq!(extents as u64, n, "{tag}: one extent per block written");
    assert!(depth >= min_depth, "{tag}: depth {depth}, expected at least {min_depth}");

    // 2. Punch holes, preallocate ranges and write into some of their blocks.
    let vol = case.open();
    let ino = case.ino(&vol);
    let span = 2 * n;
    for _ in 0..200 {
        let lo = rng.below(span);
        let len = 1 + rng.below(span / 100 + 1);
        vol.fallocate(ino, lo * bs, len * bs, Falloc::PunchHole, true).unwrap();
        model.zero(lo, lo + len);
    }
    let mut into_prealloc = Vec::new();
    for _ in 0..20 {
        let lo = rng.below(span);
        let len = 1 + rng.below(span / 200 + 2);
        vol.fallocate(ino, lo * bs, len * bs, Falloc::Allocate, true).unwrap();
        into_prealloc.extend((lo..lo + len).filter(|b| b % 3 == 0 && *b < span));
    }
    rng.shuffle(&mut into_prealloc);
    write_blocks(&vol, ino, &mut model, &into_prealloc, 2);
    case.check(vol, &model, &format!("{tag}: punched and preallocated"));

    // 3. Truncate to 70%, then rewrite random blocks (odd ones join their neighbours).
    let vol = case.open();
    let ino = case.ino(&vol);
    let cut = span * 7 / 10 * bs - bs / 2;
    vol.setattr(ino, &SetAttr { size: Some(cut), ..Default::default() }).unwrap();
    model.truncate(cut);
    let mut again: Vec<u64> = (0..n / 4).map(|_| rng.below(span)).collect();
    again.sort_unstable();
    again.dedup();
    rng.shuffle(&mut again);
    write_blocks(&vol, ino, &mut model, &again, 3);
    case.check(vol, &model, &format!("{tag}: truncated and rewritten"));

    // 4. Empty it: the tree shrinks back into the inode, and every block is free again.
    let vol = case.open();
    let ino = case.ino(&vol);
    vol.setattr(ino, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
    assert_eq!(vol.inode(ino).unwrap().blocks_512(&vol.sb), 0, "{tag}: blocks left after truncation to 0");
    model.truncate(0);
    let (depth, extents) = case.check(vol, &model, &format!("{tag}: emptied"));
    assert_eq!((depth, extents), (0, 0), "{tag}: an empty file's tree is an empty root");
}

#[test]
fn ten_thousand_extents_1k_blocks_ordered() {
    fragmented_file(10_000, 1024, false, 1, 2);
}

#[test]
fn ten_thousand_extents_4k_blocks_lazy() {
    fragmented_file(10_000, 4096, true, 2, 2);
}

#[test]
fn hundred_thousand_extents_1k_blocks_depth_3_lazy() {
    fragmented_file(100_000, 1024, true, 3, 3);
}

#[test]
fn hundred_thousand_extents_4k_blocks_ordered() {
    fragmented_file(100_000, 4096, false, 4, 2);
}

#[test]
#[ignore = "minutes: run with --ignored (docs/TESTING.md)"]
fn million_extents() {
    fragmented_file(1_000_000, 1024, false, 5, 3);
    fragmented_file(1_000_000, 1024, true, 6, 3);
}
