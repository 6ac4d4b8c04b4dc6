//! An in-memory block device that records every request, for the writer
//! tests: where writes go (by class), and the write/flush stream so a crash
//! can be simulated by replaying a prefix of it. Also what writer.rs and
//! resume.rs share on such a device: an empty journal to start from, the
//! "crash" (load + recover), what a reader sees after it, and a model of the
//! newest committed contents.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use blockdev::{check_request, BlockDevice, IoClass};
use journal::{Journal, JournalMap, Recovery, Transaction};

use super::Builder;

#[derive(Clone, Debug)]
pub enum Op {
    Write { offset: u64, data: Vec<u8>, class: IoClass },
    Flush,
}

pub struct MemDevice {
    pub bytes: Mutex<Vec<u8>>,
    pub ops: Mutex<Vec<Op>>,
}

impl MemDevice {
    pub fn new(size: usize) -> MemDevice {
        MemDevice { bytes: Mutex::new(vec![0; size]), ops: Mutex::new(Vec::new()) }
    }

    /// A device holding `bytes`, with no recorded history.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice { bytes: Mutex::new(bytes), ops: Mutex::new(Vec::new()) }
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }

    pub fn take_ops(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap())
    }

    pub fn block(&self, bs: u32, b: u64) -> Vec<u8> {
        let bs = bs as usize;
        self.bytes.lock().unwrap()[b as usize * bs..(b as usize + 1) * bs].to_vec()
    }

    pub fn put_block(&self, bs: u32, b: u64, data: &[u8]) {
        let bs = bs as usize;
        self.bytes.lock().unwrap()[b as usize * bs..(b as usize + 1) * bs].copy_from_slice(data);
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], _class: IoClass) -> io::Result<()> {
        check_request(self.size(), 512, offset, buf.len())?;
        let b = self.bytes.lock().unwrap();
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        check_request(self.size(), 512, offset, buf.len())?;
        self.bytes.lock().unwrap()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        self.ops.lock().unwrap().push(Op::Write { offset, data: buf.to_vec(), class });
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.ops.lock().unwrap().push(Op::Flush);
        Ok(())
    }
}

/// Apply `ops` to a copy of `base`.
pub fn apply(base: &[u8], ops: &[Op]) -> Vec<u8> {
    let mut out = base.to_vec();
    for op in ops {
        if let Op::Write { offset, data, .. } = op {
            out[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
    }
    out
}

/// The writes a disk that loses unflushed writes may hold after a crash at
/// `cut`: everything up to the last flush before the cut, and of the writes
/// since, only the last one.
pub fn unflushed_dropped(ops: &[Op], cut: usize) -> Vec<Op> {
    let last_flush = ops[..cut].iter().rposition(|o| matches!(o, Op::Flush)).map_or(0, |i| i + 1);
    let mut kept: Vec<Op> = ops[..last_flush].to_vec();
    if cut > last_flush {
        kept.push(ops[cut - 1].clone());
    }
    kept
}

/// A device with an empty journal (s_start = 0, s_sequence = seq) of `jlen`
/// blocks at device block `jphys`, its second half after `gap` unused blocks
/// (so the map has two runs and writes split as on a fragmented journal
/// inode); the device ends 8 blocks after the journal.
pub fn empty_journal_at(
    jphys: u64,
    gap: u64,
    bs: u32,
    jlen: u32,
    compat: u32,
    incompat: u32,
    seq: u32,
) -> (Arc<MemDevice>, JournalMap) {
    let jlen = u64::from(jlen);
    let half = jlen / 2;
    let map = JournalMap::new(vec![(0, jphys, half), (half, jphys + half + gap, jlen - half)], jlen, bs).unwrap();
    let dev = Arc::new(MemDevice::new(((jphys + jlen + gap + 8) * u64::from(bs)) as usize));
    let b = Builder::with_start(bs, jlen as u32, compat, incompat, 0, seq);
    let mut block = vec![0u8; bs as usize];
    b.sb.write_to(&mut block).unwrap();
    dev.put_block(bs, map.phys(0).unwrap(), &block);
    dev.take_ops();
    (dev, map)
}

/// A block of test contents: a pattern of `tag` (e.g. the round that
/// wrote it) and the block number.
pub fn content(bs: u32, tag: u64, block: u64) -> Vec<u8> {
    let mut v = vec![0u8; bs as usize];
    for (i, x) in v.iter_mut().enumerate() {
        *x = (tag as usize * 31 + block as usize * 7 + i) as u8;
    }
    v
}

/// Load a fresh journal over what `dev` holds now (as after a crash or an
/// unmount) and recover it.
pub fn load_recover(dev: &Arc<MemDevice>, map: &JournalMap) -> (Journal<Arc<MemDevice>>, Recovery) {
    let j = Journal::load(dev.clone(), map.clone()).unwrap();
    let r = j.recover().unwrap();
    (j, r)
}

/// Block `block` as a reader sees it: the copy `read` fills in if it has
/// one, else the block at home on `dev`.
pub fn copy_or_home(dev: &MemDevice, bs: u32, block: u64, read: impl FnOnce(&mut [u8]) -> bool) -> Vec<u8> {
    let mut buf = vec![0u8; bs as usize];
    if read(&mut buf) {
        buf
    } else {
        dev.block(bs, block)
    }
}

/// What the volume holds after replay: the replayed copy if any, else home.
pub fn after_replay(j: &Journal<Arc<MemDevice>>, r: &Recovery, dev: &MemDevice, block: u64) -> Vec<u8> {
    copy_or_home(dev, j.map().block_size(), block, |buf| r.read_replayed(j, block, buf).unwrap())
}

/// Follow a committed transaction in `model` (block -> newest contents):
/// logged blocks take their new contents; revoked ones are no longer
/// metadata, so whatever is home stays and the model forgets them.
pub fn commit_to_model(t: &Transaction, model: &mut HashMap<u64, Vec<u8>>) {
    for (b, d) in t.blocks() {
        model.insert(b, d.to_vec());
    }
    for b in t.revoked() {
        model.remove(&b);
    }
}

/// Pseudo-random numbers, reproducible (a 64-bit LCG).
pub struct Rng(pub u64);

impl Rng {
    /// The next number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}
