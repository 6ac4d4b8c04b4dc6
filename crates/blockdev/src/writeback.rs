//! Data write-back: small file-data writes wait in memory and reach the
//! device sorted and merged into long runs, at the next flush or when too
//! many wait.
//!
//! Why: a metadata-heavy workload writes each small file's data as its own
//! request, scattered over the disk. The kernel's ext4 gathers them (delayed
//! allocation and the page cache write them back in block order); without
//! that, a conventional disk pays a seek per file and a drive-managed SMR disk
//! fills its persistent cache with them and cleans for minutes afterwards.
//!
//! Ordering: nothing here is durable before [`BlockDevice::flush`], which
//! writes every waiting block first. The journal flushes before it writes a
//! commit block, so data still reaches the disk before the metadata that
//! points at it commits (ordered mode). Every other write passes straight
//! through and replaces what waits for the blocks it covers; reads see the
//! waiting blocks.

use crate::{BlockDevice, IoClass, ReadRequest};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Data writes of at least this many bytes are long enough to go at once.
const DIRECT_BYTES: usize = 1 << 20;
/// The longest request a write-out makes.
const MAX_RUN_BYTES: usize = 4 << 20;

pub struct DataWriteback<D> {
    inner: D,
    unit: u64,
    limit_bytes: usize,
    pending: Mutex<BTreeMap<u64, Box<[u8]>>>,
    /// Bumped whenever blocks leave `pending` (written out, or replaced by a
    /// write that went through): a read that overlapped such a change reads
    /// the device again, so it never misses data that was in neither place.
    departures: AtomicU64,
}

impl<D: BlockDevice> DataWriteback<D> {
    /// Waiting data is kept in `unit`-byte blocks (the file system's block
    /// size) and written out once more than `limit_bytes` wait.
    pub fn new(inner: D, unit: u32, limit_bytes: usize) -> Self {
        debug_assert!(unit.is_power_of_two() && unit >= inner.sector_size());
        DataWriteback { inner, unit: u64::from(unit), limit_bytes: limit_bytes.max(unit as usize), pending: Mutex::new(BTreeMap::new()), departures: AtomicU64::new(0) }
    }

    /// Blocks waiting to be written.
    pub fn blocks_waiting(&self) -> usize {
        self.lock().len()
    }

    /// The waiting blocks (a panic elsewhere leaves them usable: every change
    /// to the map is complete before anything can fail).
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Box<[u8]>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn buffers(&self, offset: u64, len: usize, class: IoClass) -> bool {
        class == IoClass::Data && len < DIRECT_BYTES && offset % self.unit == 0 && len as u64 % self.unit == 0
    }

    /// Write every waiting block, in block order, adjacent blocks as one
    /// request. Blocks leave the map only once written: after a failure,
    /// those from the failed run on stay for the next try.
    fn write_out(&self, pending: &mut BTreeMap<u64, Box<[u8]>>) -> io::Result<()> {
        let max_blocks = (MAX_RUN_BYTES as u64 / self.unit).max(1) as usize;
        let mut run: Vec<&[u8]> = Vec::new();
        let mut run_start = 0u64;
        let mut failed_at = None;
        for (&blk, data) in pending.iter() {
            let joins = blk == run_start + run.len() as u64 && run.len() < max_blocks;
            if !run.is_empty() && !joins {
                if let Err(e) = self.inner.write_gathered_at(run_start * self.unit, &run, IoClass::Data) {
                    failed_at = Some((run_start, e));
                    break;
                }
                run.clear();
            }
            if run.is_empty() {
                run_start = blk;
            }
            run.push(data);
        }
        if failed_at.is_none() && !run.is_empty() {
            if let Err(e) = self.inner.write_gathered_at(run_start * self.unit, &run, IoClass::Data) {
                failed_at = Some((run_start, e));
            }
        }
        drop(run);
        let result = match failed_at {
            None => {
                pending.clear();
                Ok(())
            }
            Some((from, e)) => {
                *pending = pending.split_off(&from);
                Err(e)
            }
        };
        self.departures.fetch_add(1, Ordering::Release);
        result
    }

    /// Read with `read` from the device without the lock (reads stay
    /// concurrent), then lay the waiting blocks over what came back; if
    /// blocks left `pending` meanwhile, read the device again.
    fn read_consistent(&self, requests: &mut [ReadRequest<'_>], read: impl Fn(&mut [ReadRequest<'_>]) -> io::Result<()>) -> io::Result<()> {
        // Reads that waiting blocks cover whole need no device (a partial
        // write's read-modify-write of the block it wrote a moment ago).
        {
            let pending = self.lock();
            if requests.iter().all(|r| self.covers(&pending, r.offset, r.buf.len())) {
                for r in requests.iter_mut() {
                    self.overlay(&pending, r.offset, r.buf);
                }
                return Ok(());
            }
        }
        loop {
            let seen = self.departures.load(Ordering::Acquire);
            read(requests)?;
            let pending = self.lock();
            if self.departures.load(Ordering::Acquire) != seen {
                continue;
            }
            for r in requests.iter_mut() {
                self.overlay(&pending, r.offset, r.buf);
            }
            return Ok(());
        }
    }

    /// Whether waiting blocks hold every byte of `[offset, offset + len)`.
    fn covers(&self, pending: &BTreeMap<u64, Box<[u8]>>, offset: u64, len: usize) -> bool {
        if pending.is_empty() || len == 0 {
            return false;
        }
        let (first, end) = (offset / self.unit, (offset + len as u64).div_ceil(self.unit));
        pending.range(first..end).count() as u64 == end - first
    }

    /// Lay the waiting blocks that overlap `[offset, offset + buf.len())` over `buf`.
    fn overlay(&self, pending: &BTreeMap<u64, Box<[u8]>>, offset: u64, buf: &mut [u8]) {
        if pending.is_empty() || buf.is_empty() {
            return;
        }
        let end = offset + buf.len() as u64;
        for (&blk, data) in pending.range(offset / self.unit..end.div_ceil(self.unit)) {
            let (b_lo, b_hi) = (blk * self.unit, (blk + 1) * self.unit);
            let (lo, hi) = (b_lo.max(offset), b_hi.min(end));
            buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(&data[(lo - b_lo) as usize..(hi - b_lo) as usize]);
        }
    }
}

impl<D: BlockDevice> BlockDevice for DataWriteback<D> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn sector_size(&self) -> u32 {
        self.inner.sector_size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        self.read_consistent(&mut [ReadRequest { offset, buf, class }], |r| self.inner.read_at(r[0].offset, r[0].buf, r[0].class))
    }

    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        self.read_consistent(requests, |r| self.inner.read_batch(r))
    }

    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        crate::check_request(self.size(), self.sector_size(), offset, buf.len())?;
        let mut pending = self.lock();
        if self.buffers(offset, buf.len(), class) {
            let first = offset / self.unit;
            for (i, chunk) in buf.chunks_exact(self.unit as usize).enumerate() {
                pending.insert(first + i as u64, chunk.into());
            }
            if pending.len() * self.unit as usize > self.limit_bytes {
                self.write_out(&mut pending)?;
            }
            return Ok(());
        }
        // A write that goes through: it is newer than whatever waits for the
        // blocks it covers whole; a block it covers only in part must reach
        // the device first, so that this write lands on top of it.
        let end = offset + buf.len() as u64;
        let overlapping: Vec<u64> = pending.range(offset / self.unit..end.div_ceil(self.unit)).map(|(&b, _)| b).collect();
        if overlapping.is_empty() {
            drop(pending);
            return self.inner.write_at(offset, buf, class);
        }
        if overlapping.iter().any(|&b| b * self.unit < offset || (b + 1) * self.unit > end) {
            // The waiting blocks reach the device before this write lands on them.
            self.write_out(&mut pending)?;
            return self.inner.write_at(offset, buf, class);
        }
        for b in overlapping {
            pending.remove(&b);
        }
        // Still under the lock, and only then count the departure: a read
        // that finds the blocks gone from `pending` without having seen the
        // count move must find this write on the device, not what it replaced.
        let written = self.inner.write_at(offset, buf, class);
        self.departures.fetch_add(1, Ordering::Release);
        written
    }

    fn flush(&self) -> io::Result<()> {
        let mut pending = self.lock();
        self.write_out(&mut pending)?;
        drop(pending);
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CountingDevice, FaultDevice};
    use std::sync::Arc;

    /// A device in memory.
    struct Ram(Mutex<Vec<u8>>);

    impl BlockDevice for Ram {
        fn size(&self) -> u64 {
            self.0.lock().unwrap().len() as u64
        }
        fn read_at(&self, offset: u64, buf: &mut [u8], _class: IoClass) -> io::Result<()> {
            crate::check_request(self.size(), 512, offset, buf.len())?;
            buf.copy_from_slice(&self.0.lock().unwrap()[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, offset: u64, buf: &[u8], _class: IoClass) -> io::Result<()> {
            crate::check_request(self.size(), 512, offset, buf.len())?;
            self.0.lock().unwrap()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn ram(blocks: usize) -> Arc<dyn BlockDevice> {
        Arc::new(Ram(Mutex::new(vec![0u8; blocks * BS])))
    }

    const BS: usize = 4096;

    /// A RAM device with counts of the requests that reach it.
    fn stack(blocks: usize) -> (Arc<CountingDevice>, DataWriteback<Arc<CountingDevice>>) {
        let counted = Arc::new(CountingDevice::new(ram(blocks)));
        let wb = DataWriteback::new(counted.clone(), BS as u32, 64 * BS);
        (counted, wb)
    }

    fn block(fill: u8) -> Vec<u8> {
        vec![fill; BS]
    }

    #[test]
    fn small_data_writes_wait_and_go_out_sorted_and_merged_at_flush() {
        let (below, wb) = stack(256);
        // Blocks 12, 10, 11 and 40, in that order: two runs once sorted.
        for (b, fill) in [(12u64, 3u8), (10, 1), (11, 2), (40, 9)] {
            wb.write_at(b * BS as u64, &block(fill), IoClass::Data).unwrap();
        }
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 0, "nothing reaches the device before a flush");
        // Reads see the waiting data.
        let mut buf = vec![0u8; 3 * BS];
        wb.read_at(10 * BS as u64, &mut buf, IoClass::Data).unwrap();
        assert_eq!((buf[0], buf[BS], buf[2 * BS]), (1, 2, 3));
        wb.flush().unwrap();
        let c = below.counts().get(IoClass::Data, true);
        assert_eq!((c.requests, c.bytes), (2, 4 * BS as u64), "one request for 10-12, one for 40");
        assert_eq!(below.counts().flushes, 1);
        let mut one = block(0);
        below.read_at(40 * BS as u64, &mut one, IoClass::Data).unwrap();
        assert_eq!(one[0], 9);
        assert_eq!(wb.blocks_waiting(), 0);
    }

    #[test]
    fn reads_of_waiting_blocks_need_no_device() {
        let (below, wb) = stack(64);
        wb.write_at(20 * BS as u64, &block(5), IoClass::Data).unwrap();
        wb.write_at(21 * BS as u64, &block(6), IoClass::Data).unwrap();
        below.write_at(22 * BS as u64, &block(8), IoClass::Data).unwrap();
        let mut buf = vec![0u8; 2 * BS];
        wb.read_at(20 * BS as u64 + 100, &mut buf[..BS + 8], IoClass::Data).unwrap();
        assert_eq!((buf[0], buf[BS - 101], buf[BS - 100]), (5, 5, 6));
        assert_eq!(below.counts().get(IoClass::Data, false).requests, 0, "blocks 20-21 wait whole");
        // Half waiting, half on the device: one device read, both halves right.
        wb.read_at(21 * BS as u64, &mut buf, IoClass::Data).unwrap();
        assert_eq!((buf[0], buf[BS]), (6, 8));
        assert_eq!(below.counts().get(IoClass::Data, false).requests, 1);
    }

    #[test]
    fn a_later_write_through_wins_over_waiting_data() {
        let (below, wb) = stack(64);
        wb.write_at(5 * BS as u64, &block(1), IoClass::Data).unwrap();
        // Metadata over the same block (it was freed and reused): goes at once.
        wb.write_at(5 * BS as u64, &block(7), IoClass::Metadata).unwrap();
        wb.flush().unwrap();
        let mut got = block(0);
        below.read_at(5 * BS as u64, &mut got, IoClass::Metadata).unwrap();
        assert_eq!(got[0], 7, "the stale data must not be written over the newer block");
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 0);
    }

    #[test]
    fn a_partial_write_through_lands_on_top_of_waiting_data() {
        let (below, wb) = stack(64);
        wb.write_at(8 * BS as u64, &block(1), IoClass::Data).unwrap();
        // One 512-byte sector inside block 8, written through (not block aligned).
        wb.write_at(8 * BS as u64 + 512, &[6u8; 512], IoClass::Metadata).unwrap();
        let mut got = block(0);
        wb.read_at(8 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!((got[0], got[512], got[1024]), (1, 6, 1));
        below.read_at(8 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!((got[0], got[512]), (1, 6), "the waiting block went first");
    }

    #[test]
    fn too_much_waiting_data_is_written_out_without_a_flush() {
        let (below, wb) = stack(256);
        for b in 0..65u64 {
            wb.write_at(b * 2 * BS as u64, &block(b as u8), IoClass::Data).unwrap();
        }
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 65, "65 scattered blocks exceed the 64-block limit");
        assert_eq!(below.counts().flushes, 0);
        assert_eq!(wb.blocks_waiting(), 0);
    }

    #[test]
    fn long_writes_and_other_classes_go_straight_through() {
        let (below, wb) = stack(1024);
        wb.write_at(0, &vec![2u8; DIRECT_BYTES], IoClass::Data).unwrap();
        wb.write_at(600 * BS as u64, &block(3), IoClass::Journal).unwrap();
        let counts = below.counts();
        assert_eq!(counts.get(IoClass::Data, true).requests, 1);
        assert_eq!(counts.get(IoClass::Journal, true).requests, 1);
        assert_eq!(wb.blocks_waiting(), 0);
    }

    #[test]
    fn a_failed_write_out_keeps_the_data_for_the_next_try() {
        let faulty = Arc::new(FaultDevice::new(ram(64)));
        let wb = DataWriteback::new(faulty.clone(), BS as u32, 64 * BS);
        wb.write_at(3 * BS as u64, &block(4), IoClass::Data).unwrap();
        faulty.fail_after(0);
        assert!(wb.flush().is_err());
        assert_eq!(wb.blocks_waiting(), 1);
        let mut got = block(0);
        wb.read_at(3 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 4, "still readable after the failure");
        // Two runs, the second fails: the first leaves, the second waits.
        let faulty = Arc::new(FaultDevice::new(ram(64)));
        let wb = DataWriteback::new(faulty.clone(), BS as u32, 64 * BS);
        wb.write_at(3 * BS as u64, &block(4), IoClass::Data).unwrap();
        wb.write_at(9 * BS as u64, &block(5), IoClass::Data).unwrap();
        faulty.fail_after(1);
        assert!(wb.flush().is_err());
        assert_eq!(wb.blocks_waiting(), 1);
        wb.read_at(9 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 5);
    }

    #[test]
    fn concurrent_readers_never_see_a_block_go_back_in_time() {
        // One writer rewrites 8 blocks with rising values (gathered, written
        // through as metadata, written out by flushes and by the limit);
        // readers must see each block's value never decrease.
        let (_below, wb) = stack(64);
        let wb = Arc::new(DataWriteback::new(wb, BS as u32, 4 * BS));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (wb, stop) = (wb.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut last = [0u8; 8];
                    let mut buf = vec![0u8; 8 * BS];
                    while !stop.load(Ordering::Relaxed) {
                        wb.read_at(0, &mut buf, IoClass::Data).unwrap();
                        for (b, seen) in last.iter_mut().enumerate() {
                            let v = buf[b * BS];
                            assert!(v >= *seen, "block {b} went from {} back to {v}", *seen);
                            *seen = v;
                        }
                    }
                })
            })
            .collect();
        for v in 1..=250u8 {
            for b in 0..8u64 {
                let class = if (v as u64 + b) % 5 == 0 { IoClass::Metadata } else { IoClass::Data };
                wb.write_at(b * BS as u64, &block(v), class).unwrap();
            }
            if v % 7 == 0 {
                wb.flush().unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }
}
