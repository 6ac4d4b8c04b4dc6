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

use crate::{BlockDevice, IoClass, ReadRequest, WriteRequest};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Data writes of at least this many bytes are long enough to go at once.
const DIRECT_BYTES: usize = 1 << 20;
/// The longest request a write-out makes.
const MAX_RUN_BYTES: usize = 4 << 20;

/// Waiting blocks by block number, shared with whoever handed them over
/// (`BlockDevice::write_blocks_at`), so that taking them copies nothing.
type Blocks = BTreeMap<u64, Arc<[u8]>>;

pub struct DataWriteback<D: BlockDevice + 'static> {
    shared: Arc<Shared<D>>,
    flusher: Option<std::thread::JoinHandle<()>>,
}

struct Shared<D> {
    inner: D,
    unit: u64,
    limit_bytes: usize,
    /// A flusher thread writes batches out in the background.
    background: bool,
    state: Mutex<State>,
    /// Signalled when a batch goes to the flusher, when it is done with one, and at shutdown.
    changed: Condvar,
    /// Bumped whenever blocks leave memory (written out, or replaced by a
    /// write that went through): a read that overlapped such a change reads
    /// the device again, so it never misses data that was in neither place.
    departures: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Blocks waiting, newer than any in `flushing`.
    pending: Blocks,
    /// The batch the flusher is writing (empty when it is idle).
    flushing: Arc<Blocks>,
    busy: bool,
    /// The flusher's last batch failed: writers write out themselves (and
    /// see the error) until a flush succeeds, rather than retry on every write.
    failed: bool,
    /// Flushes waiting for the flusher: no new batch starts meanwhile.
    flushes_waiting: usize,
    stop: bool,
}

impl State {
    fn waiting(&self) -> usize {
        self.pending.len() + self.flushing.len()
    }
}

impl<D: BlockDevice + 'static> DataWriteback<D> {
    /// Waiting data is kept in `unit`-byte blocks (the file system's block
    /// size) and written out, by the writer that passes the limit, once more
    /// than `limit_bytes` wait.
    pub fn new(inner: D, unit: u32, limit_bytes: usize) -> Self {
        Self::build(inner, unit, limit_bytes, false)
    }

    /// As [`DataWriteback::new`], with a flusher thread, as the kernel's: once
    /// half of `limit_bytes` wait, it writes them out while writers go on;
    /// only a writer that finds `limit_bytes` waiting waits for it. After a
    /// failed write-out the blocks wait again: the next flush writes them or
    /// reports the error.
    pub fn with_flusher(inner: D, unit: u32, limit_bytes: usize) -> Self {
        Self::build(inner, unit, limit_bytes, true)
    }

    fn build(inner: D, unit: u32, limit_bytes: usize, background: bool) -> Self {
        debug_assert!(unit.is_power_of_two() && unit >= inner.sector_size());
        let shared = Arc::new(Shared {
            inner,
            unit: u64::from(unit),
            limit_bytes: limit_bytes.max(unit as usize),
            background,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            departures: AtomicU64::new(0),
        });
        let flusher = if background {
            let s = shared.clone();
            // Without a thread, writers write out themselves, as `new`.
            std::thread::Builder::new().name("ext4lazy-flush".into()).spawn(move || s.flusher()).ok()
        } else {
            None
        };
        let mut wb = DataWriteback { shared, flusher };
        if wb.flusher.is_none() {
            if let Some(s) = Arc::get_mut(&mut wb.shared) {
                s.background = false;
            }
        }
        wb
    }

    /// Blocks waiting to be written (those being written included).
    pub fn blocks_waiting(&self) -> usize {
        self.shared.lock().waiting()
    }

    /// Write `pieces` back to back from `offset` (one buffer, or a gathered
    /// write); `owned`: the same bytes as whole blocks the caller shares,
    /// which wait here as they are.
    fn write_pieces(
        &self,
        offset: u64,
        pieces: &[&[u8]],
        owned: Option<&[Arc<[u8]>]>,
        class: IoClass,
    ) -> io::Result<()> {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        crate::check_request(self.size(), self.sector_size(), offset, len)?;
        let s = &self.shared;
        let through = || {
            if let [one] = pieces {
                s.inner.write_at(offset, one, class)
            } else {
                s.inner.write_gathered_at(offset, pieces, class)
            }
        };
        let mut g = s.lock();
        if s.buffers(offset, len, class) && pieces.iter().all(|p| (p.len() as u64).is_multiple_of(s.unit)) {
            let first = offset / s.unit;
            match owned {
                Some(blocks) => g.pending.extend((first..).zip(blocks.iter().cloned())),
                None => {
                    let chunks = pieces.iter().flat_map(|p| p.chunks_exact(s.unit as usize));
                    g.pending.extend((first..).zip(chunks.map(Arc::from)));
                }
            }
            return s.after_buffering(g);
        }
        // A write that goes through: it is newer than whatever waits for the
        // blocks it covers whole; a block it covers only in part must reach
        // the device first, so that this write lands on top of it.
        let end_byte = offset + len as u64;
        let (lo, end) = (offset / s.unit, end_byte.div_ceil(s.unit));
        if g.flushing.range(lo..end).next().is_some() {
            // Older data of these blocks is being written: it must land first.
            g = s.idle(g);
        }
        let overlapping: Vec<u64> = g.pending.range(lo..end).map(|(&b, _)| b).collect();
        if overlapping.is_empty() {
            drop(g);
            return through();
        }
        if overlapping.iter().any(|&b| b * s.unit < offset || (b + 1) * s.unit > end_byte) {
            // The waiting blocks reach the device before this write lands on them.
            g = s.idle(g);
            s.write_out(&mut g)?;
            return through();
        }
        for b in overlapping {
            g.pending.remove(&b);
        }
        // Still under the lock, and only then count the departure: a read
        // that finds the blocks gone from `pending` without having seen the
        // count move must find this write on the device, not what it replaced.
        let written = through();
        s.departures.fetch_add(1, Ordering::Release);
        written
    }
}

impl<D: BlockDevice + 'static> Drop for DataWriteback<D> {
    fn drop(&mut self) {
        if let Some(t) = self.flusher.take() {
            self.shared.lock().stop = true;
            self.shared.changed.notify_all();
            let _ = t.join();
        }
    }
}

impl<D: BlockDevice> Shared<D> {
    /// The waiting blocks (a panic elsewhere leaves them usable: every change
    /// to the map is complete before anything can fail).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until the flusher has no batch.
    fn idle<'a>(&self, mut g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        while g.busy {
            g = self.wait(g);
        }
        g
    }

    fn buffers(&self, offset: u64, len: usize, class: IoClass) -> bool {
        class == IoClass::Data
            && len < DIRECT_BYTES
            && offset.is_multiple_of(self.unit)
            && (len as u64).is_multiple_of(self.unit)
    }

    /// Write `blocks` in block order, adjacent blocks as one request. On a
    /// failure, returns the first block of the run that failed with the error:
    /// that block and all after it were not written.
    fn write_blocks(&self, blocks: &Blocks) -> Result<(), (u64, io::Error)> {
        let max_blocks = (MAX_RUN_BYTES as u64 / self.unit).max(1) as usize;
        let mut run: Vec<&[u8]> = Vec::new();
        let mut run_start = 0u64;
        for (&blk, data) in blocks.iter() {
            let joins = blk == run_start + run.len() as u64 && run.len() < max_blocks;
            if !run.is_empty() && !joins {
                self.inner.write_gathered_at(run_start * self.unit, &run, IoClass::Data).map_err(|e| (run_start, e))?;
                run.clear();
            }
            if run.is_empty() {
                run_start = blk;
            }
            run.push(data);
        }
        if !run.is_empty() {
            self.inner.write_gathered_at(run_start * self.unit, &run, IoClass::Data).map_err(|e| (run_start, e))?;
        }
        Ok(())
    }

    /// Write every waiting block now (the flusher idle). Blocks leave the map
    /// only once written: after a failure, those from the failed run on stay
    /// for the next try.
    fn write_out(&self, st: &mut State) -> io::Result<()> {
        debug_assert!(!st.busy);
        let result = match self.write_blocks(&st.pending) {
            Ok(()) => {
                st.pending.clear();
                Ok(())
            }
            Err((from, e)) => {
                st.pending = st.pending.split_off(&from);
                Err(e)
            }
        };
        self.departures.fetch_add(1, Ordering::Release);
        result
    }

    /// The flusher thread: write each batch handed over, without the lock.
    fn flusher(&self) {
        let mut g = self.lock();
        loop {
            while !g.busy && !g.stop {
                g = self.wait(g);
            }
            if !g.busy {
                return; // stopped, nothing handed over
            }
            let batch = g.flushing.clone();
            drop(g);
            let first = batch.first_key_value().map_or(0, |(&b, _)| b);
            // A device that panics fails the batch like one that returns an
            // error: `busy` must clear, or every flush would wait forever.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.write_blocks(&batch)))
                .unwrap_or_else(|_| Err((first, io::Error::other("the device panicked in a write-out"))));
            let span = batch.last_key_value().map(|(&last, _)| (first * self.unit, (last + 1 - first) * self.unit));
            drop(batch);
            g = self.lock();
            let mut batch = Arc::try_unwrap(std::mem::take(&mut g.flushing)).unwrap_or_else(|a| (*a).clone());
            if let Err((from, _)) = &result {
                // Unwritten blocks wait again, unless a newer version already
                // does; the next flush writes them or reports the error.
                for (blk, data) in batch.split_off(from) {
                    g.pending.entry(blk).or_insert(data);
                }
                g.failed = true;
            }
            g.busy = false;
            self.departures.fetch_add(1, Ordering::Release);
            self.changed.notify_all();
            drop(g);
            drop(batch); // freeing thousands of blocks: not under the lock
            if let (Ok(()), Some((offset, len))) = (result, span) {
                // The kernel's flusher would now write these pages to the
                // medium: start that, so the next commit's flush waits less.
                self.inner.start_writeback(offset, len);
            }
            g = self.lock();
        }
    }

    /// Read with `read` from the device without the lock (reads stay
    /// concurrent), then lay the waiting blocks over what came back; if
    /// blocks left memory meanwhile, read the device again.
    fn read_consistent(
        &self,
        requests: &mut [ReadRequest<'_>],
        read: impl Fn(&mut [ReadRequest<'_>]) -> io::Result<()>,
    ) -> io::Result<()> {
        // Reads that waiting blocks cover whole need no device (a partial
        // write's read-modify-write of the block it wrote a moment ago).
        {
            let st = self.lock();
            if requests.iter().all(|r| self.covers(&st, r.offset, r.buf.len())) {
                for r in requests.iter_mut() {
                    self.overlay(&st, r.offset, r.buf);
                }
                return Ok(());
            }
        }
        loop {
            let seen = self.departures.load(Ordering::Acquire);
            read(requests)?;
            let st = self.lock();
            if self.departures.load(Ordering::Acquire) != seen {
                continue;
            }
            for r in requests.iter_mut() {
                self.overlay(&st, r.offset, r.buf);
            }
            return Ok(());
        }
    }

    /// Whether waiting blocks hold every byte of `[offset, offset + len)`.
    fn covers(&self, st: &State, offset: u64, len: usize) -> bool {
        if st.waiting() == 0 || len == 0 {
            return false;
        }
        let (first, end) = (offset / self.unit, (offset + len as u64).div_ceil(self.unit));
        if st.flushing.is_empty() {
            return st.pending.range(first..end).count() as u64 == end - first;
        }
        (first..end).all(|b| st.pending.contains_key(&b) || st.flushing.contains_key(&b))
    }

    /// Lay the waiting blocks that overlap `[offset, offset + buf.len())` over
    /// `buf`: those being written, then the newer ones still waiting.
    fn overlay(&self, st: &State, offset: u64, buf: &mut [u8]) {
        if buf.is_empty() {
            return;
        }
        let end = offset + buf.len() as u64;
        for blocks in [&*st.flushing, &st.pending] {
            for (&blk, data) in blocks.range(offset / self.unit..end.div_ceil(self.unit)) {
                let (b_lo, b_hi) = (blk * self.unit, (blk + 1) * self.unit);
                let (lo, hi) = (b_lo.max(offset), b_hi.min(end));
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&data[(lo - b_lo) as usize..(hi - b_lo) as usize]);
            }
        }
    }

    /// A buffered write made `pending` grow: start or make a write-out if it is due.
    fn after_buffering<'a>(&self, mut g: MutexGuard<'a, State>) -> io::Result<()> {
        let bytes = |st: &State| st.waiting() * self.unit as usize;
        if !self.background || g.failed {
            if bytes(&g) > self.limit_bytes {
                g = self.idle(g);
                self.write_out(&mut g)?;
            }
            return Ok(());
        }
        if bytes(&g) > self.limit_bytes {
            // Too much in memory: wait for the batch being written.
            g = self.idle(g);
        }
        if !g.busy && g.flushes_waiting == 0 && g.pending.len() * self.unit as usize > self.limit_bytes / 2 {
            g.flushing = Arc::new(std::mem::take(&mut g.pending));
            g.busy = true;
            self.changed.notify_all();
        }
        Ok(())
    }
}

impl<D: BlockDevice + 'static> BlockDevice for DataWriteback<D> {
    fn size(&self) -> u64 {
        self.shared.inner.size()
    }

    fn sector_size(&self) -> u32 {
        self.shared.inner.sector_size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        let s = &self.shared;
        s.read_consistent(&mut [ReadRequest { offset, buf, class }], |r| {
            s.inner.read_at(r[0].offset, r[0].buf, r[0].class)
        })
    }

    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        let s = &self.shared;
        s.read_consistent(requests, |r| s.inner.read_batch(r))
    }

    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        self.write_pieces(offset, &[buf], None, class)
    }

    fn write_gathered_at(&self, offset: u64, bufs: &[&[u8]], class: IoClass) -> io::Result<()> {
        self.write_pieces(offset, bufs, None, class)
    }

    fn write_blocks_at(&self, offset: u64, blocks: &[Arc<[u8]>], class: IoClass) -> io::Result<()> {
        let bufs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
        let whole = blocks.iter().all(|b| b.len() as u64 == self.shared.unit);
        self.write_pieces(offset, &bufs, whole.then_some(blocks), class)
    }

    /// Whole, to the device below, when no request is data this layer would
    /// keep and none touches a block waiting here or being written out (the
    /// usual case: home writes of metadata); else one by one, each as
    /// `write_gathered_at` orders it against the waiting data.
    fn write_batch(&self, requests: &[WriteRequest<'_>]) -> io::Result<()> {
        let s = &self.shared;
        for r in requests {
            crate::check_request(self.size(), self.sector_size(), r.offset, r.len())?;
        }
        let g = s.lock();
        let clear = requests.iter().all(|r| {
            let (lo, end) = (r.offset / s.unit, (r.offset + r.len() as u64).div_ceil(s.unit));
            !s.buffers(r.offset, r.len(), r.class)
                && g.pending.range(lo..end).next().is_none()
                && g.flushing.range(lo..end).next().is_none()
        });
        drop(g);
        if clear {
            return s.inner.write_batch(requests);
        }
        for r in requests {
            self.write_pieces(r.offset, &r.bufs, None, r.class)?;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let s = &self.shared;
        let mut g = s.lock();
        g.flushes_waiting += 1;
        g = s.idle(g);
        g.flushes_waiting -= 1;
        let written = s.write_out(&mut g);
        g.failed = written.is_err();
        written?;
        drop(g);
        s.inner.flush()
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
    fn a_write_batch_lands_on_top_of_waiting_data_and_passes_others_through() {
        let (below, wb) = stack(64);
        wb.write_at(5 * BS as u64, &block(1), IoClass::Data).unwrap();
        assert_eq!(wb.blocks_waiting(), 1);
        // Block 5 became metadata (freed, reused) while its old data waits:
        // the batch's copy is newer and must be what stays.
        let (m5, m9) = (block(7), block(8));
        let batch = [
            WriteRequest { offset: 5 * BS as u64, bufs: vec![&m5], class: IoClass::Metadata },
            WriteRequest { offset: 9 * BS as u64, bufs: vec![&m9], class: IoClass::Metadata },
        ];
        wb.write_batch(&batch).unwrap();
        wb.flush().unwrap();
        let mut one = block(0);
        below.read_at(5 * BS as u64, &mut one, IoClass::Metadata).unwrap();
        assert_eq!(one[0], 7, "the batch's write is the newest");
        below.read_at(9 * BS as u64, &mut one, IoClass::Metadata).unwrap();
        assert_eq!(one[0], 8);
        // Nothing waits under a batch: it goes through as it is.
        let (m20, m21) = (block(3), block(4));
        let clear = [
            WriteRequest { offset: 21 * BS as u64, bufs: vec![&m21], class: IoClass::Metadata },
            WriteRequest { offset: 20 * BS as u64, bufs: vec![&m20], class: IoClass::Journal },
        ];
        wb.write_batch(&clear).unwrap();
        assert_eq!(below.counts().get(IoClass::Metadata, true).requests, 3);
        assert_eq!(below.counts().get(IoClass::Journal, true).requests, 1);
        let mut two = vec![0u8; 2 * BS];
        wb.read_at(20 * BS as u64, &mut two, IoClass::Metadata).unwrap();
        assert_eq!((two[0], two[BS]), (3, 4));
        // Small data in a batch waits here, as a single write would.
        let d = block(9);
        wb.write_batch(&[WriteRequest { offset: 30 * BS as u64, bufs: vec![&d], class: IoClass::Data }]).unwrap();
        assert_eq!(wb.blocks_waiting(), 1);
    }

    #[test]
    fn a_gathered_write_waits_block_by_block_like_one_buffer() {
        let (below, wb) = stack(64);
        let two = vec![2u8; 2 * BS];
        wb.write_gathered_at(10 * BS as u64, &[&block(1), &two, &block(3)], IoClass::Data).unwrap();
        assert_eq!((wb.blocks_waiting(), below.counts().get(IoClass::Data, true).requests), (4, 0));
        let mut buf = vec![0u8; 4 * BS];
        wb.read_at(10 * BS as u64, &mut buf, IoClass::Data).unwrap();
        assert_eq!([buf[0], buf[BS], buf[3 * BS - 1], buf[3 * BS]], [1, 2, 2, 3]);
        // Pieces that split a block cannot wait per block: they go through, together.
        wb.write_gathered_at(20 * BS as u64, &[&[4u8; 100], &vec![5u8; BS - 100]], IoClass::Data).unwrap();
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 1);
        wb.flush().unwrap();
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 2, "blocks 10-13 in one request");
        below.read_at(20 * BS as u64, &mut buf[..BS], IoClass::Data).unwrap();
        assert_eq!((buf[99], buf[100]), (4, 5));
    }

    #[test]
    fn shared_blocks_wait_as_they_are_and_go_out_at_flush() {
        let (below, wb) = stack(64);
        let blocks: Vec<Arc<[u8]>> = [6u8, 7].iter().map(|&f| Arc::from(block(f))).collect();
        wb.write_blocks_at(30 * BS as u64, &blocks, IoClass::Data).unwrap();
        assert_eq!(Arc::strong_count(&blocks[0]), 2, "kept by reference, not copied");
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 0);
        let mut buf = vec![0u8; 2 * BS];
        wb.read_at(30 * BS as u64, &mut buf, IoClass::Data).unwrap();
        assert_eq!((buf[0], buf[BS]), (6, 7));
        wb.flush().unwrap();
        assert_eq!(Arc::strong_count(&blocks[0]), 1, "let go once written");
        below.read_at(30 * BS as u64, &mut buf, IoClass::Data).unwrap();
        assert_eq!((buf[0], buf[BS]), (6, 7));
        // Blocks of another size than the unit are written through, as bytes.
        let small: [Arc<[u8]>; 1] = [Arc::from(&[8u8; 512][..])];
        wb.write_blocks_at(40 * BS as u64, &small, IoClass::Data).unwrap();
        assert_eq!(below.counts().get(IoClass::Data, true).requests, 2);
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
        assert_eq!(
            below.counts().get(IoClass::Data, true).requests,
            65,
            "65 scattered blocks exceed the 64-block limit"
        );
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
        for background in [false, true] {
            readers_see_blocks_only_move_forward(background);
        }
    }

    fn readers_see_blocks_only_move_forward(background: bool) {
        // One writer rewrites 8 blocks with rising values (gathered, written
        // through as metadata, written out by flushes and by the limit, or by
        // the flusher); readers must see each block's value never decrease.
        let (_below, wb) = stack(64);
        let wb = Arc::new(if background {
            DataWriteback::with_flusher(wb, BS as u32, 4 * BS)
        } else {
            DataWriteback::new(wb, BS as u32, 4 * BS)
        });
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
                let class = if (v as u64 + b).is_multiple_of(5) { IoClass::Metadata } else { IoClass::Data };
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
        wb.flush().unwrap();
        let mut buf = vec![0u8; 8 * BS];
        wb.read_at(0, &mut buf, IoClass::Data).unwrap();
        assert!(buf.chunks(BS).all(|b| b[0] == 250), "the last values win");
    }

    /// Poll `f` for up to 10 s.
    fn eventually(what: &str, f: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !f() {
            assert!(start.elapsed() < std::time::Duration::from_secs(10), "timed out waiting: {what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A RAM device that records the write-back hints it gets and, while its
    /// gate is closed, holds every write until it opens.
    struct Probe {
        inner: Arc<dyn BlockDevice>,
        hints: Mutex<Vec<(u64, u64)>>,
        open: Mutex<bool>,
        opened: std::sync::Condvar,
        /// Writes that have arrived (held or not).
        arrived: AtomicU64,
        /// Writes panic (a broken driver).
        panics: std::sync::atomic::AtomicBool,
    }

    impl Probe {
        fn new(inner: Arc<dyn BlockDevice>, open: bool) -> Arc<Probe> {
            Arc::new(Probe {
                inner,
                hints: Mutex::new(Vec::new()),
                open: Mutex::new(open),
                opened: Default::default(),
                arrived: AtomicU64::new(0),
                panics: Default::default(),
            })
        }

        fn open_gate(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    impl BlockDevice for Probe {
        fn size(&self) -> u64 {
            self.inner.size()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
            self.inner.read_at(offset, buf, class)
        }
        fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
            self.arrived.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            drop(open);
            assert!(!self.panics.load(Ordering::SeqCst), "the probe's write panics, as asked");
            self.inner.write_at(offset, buf, class)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn start_writeback(&self, offset: u64, len: u64) {
            self.hints.lock().unwrap().push((offset, len));
        }
    }

    #[test]
    fn the_flusher_writes_out_half_the_limit_without_a_flush() {
        let hinted = Probe::new(ram(256), true);
        let counted = Arc::new(CountingDevice::new(hinted.clone()));
        let wb = DataWriteback::with_flusher(counted.clone(), BS as u32, 8 * BS);
        for (b, fill) in [(30u64, 3u8), (10, 1), (11, 2), (40, 4)] {
            wb.write_at(b * BS as u64, &block(fill), IoClass::Data).unwrap();
        }
        assert_eq!(counted.counts().get(IoClass::Data, true).requests, 0, "4 blocks are half the limit, not more");
        wb.write_at(50 * BS as u64, &block(5), IoClass::Data).unwrap();
        eventually("the flusher's write-out", || wb.blocks_waiting() == 0);
        let c = counted.counts();
        assert_eq!(
            (c.get(IoClass::Data, true).requests, c.get(IoClass::Data, true).bytes),
            (4, 5 * BS as u64),
            "sorted, 10-11 merged"
        );
        assert_eq!(c.flushes, 0, "write-out is not a flush");
        let mut got = block(0);
        counted.read_at(11 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 2);
        eventually("the hint", || !hinted.hints.lock().unwrap().is_empty());
        assert_eq!(
            *hinted.hints.lock().unwrap(),
            vec![(10 * BS as u64, 41 * BS as u64)],
            "the batch's span, blocks 10-50, may go to the medium"
        );
    }

    #[test]
    fn a_write_through_waits_for_older_data_the_flusher_is_writing() {
        let dev = ram(64);
        let gate = Probe::new(dev.clone(), false);
        let wb = Arc::new(DataWriteback::with_flusher(gate.clone(), BS as u32, 2 * BS));
        wb.write_at(5 * BS as u64, &block(1), IoClass::Data).unwrap();
        wb.write_at(6 * BS as u64, &block(1), IoClass::Data).unwrap();
        eventually("the flusher to reach the device", || gate.arrived.load(Ordering::SeqCst) == 1);
        // Block 5 is freed and reused as metadata while its old data is on its way.
        let writer = {
            let wb = wb.clone();
            std::thread::spawn(move || wb.write_at(5 * BS as u64, &block(7), IoClass::Metadata).unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(gate.arrived.load(Ordering::SeqCst), 1, "the newer write must not reach the device first");
        let mut got = block(0);
        wb.read_at(5 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 1, "being written, still readable");
        gate.open_gate();
        writer.join().unwrap();
        dev.read_at(5 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 7, "the newer block landed last");
        dev.read_at(6 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 1);
    }

    #[test]
    fn a_failed_batch_never_overwrites_a_newer_waiting_block() {
        let faulty = Arc::new(FaultDevice::new(ram(64)));
        let gate = Probe::new(faulty.clone(), false);
        // Room for the batch of three and one newer block, so the writer need not wait for the flusher.
        let wb = DataWriteback::with_flusher(gate.clone(), BS as u32, 4 * BS);
        for b in [5u64, 6, 7] {
            wb.write_at(b * BS as u64, &block(1), IoClass::Data).unwrap();
        }
        eventually("the flusher to reach the device", || gate.arrived.load(Ordering::SeqCst) == 1);
        // Block 5 is written again while its old version is on its way; then the batch fails.
        wb.write_at(5 * BS as u64, &block(2), IoClass::Data).unwrap();
        faulty.fail_after(0);
        gate.open_gate();
        assert!(wb.flush().is_err());
        faulty.fail_after(u64::MAX);
        wb.flush().unwrap();
        let mut got = block(0);
        faulty.read_at(5 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 2, "the failed batch's old copy of block 5 must not replace the newer one");
        faulty.read_at(6 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 1, "the failed batch's other block waited and went at the flush");
    }

    #[test]
    fn a_device_that_panics_in_the_flusher_does_not_hang_flushes() {
        let probe = Probe::new(ram(64), true);
        probe.panics.store(true, Ordering::SeqCst);
        let wb = Arc::new(DataWriteback::with_flusher(probe.clone(), BS as u32, 2 * BS));
        wb.write_at(5 * BS as u64, &block(1), IoClass::Data).unwrap();
        wb.write_at(9 * BS as u64, &block(1), IoClass::Data).unwrap();
        eventually("the flusher's attempt", || probe.arrived.load(Ordering::SeqCst) >= 1);
        probe.panics.store(false, Ordering::SeqCst);
        let (tx, rx) = std::sync::mpsc::channel();
        let flusher = {
            let wb = wb.clone();
            std::thread::spawn(move || tx.send(wb.flush().is_ok()).unwrap())
        };
        let flushed =
            rx.recv_timeout(std::time::Duration::from_secs(10)).expect("flush must not wait forever on a dead batch");
        assert!(flushed, "the blocks waited again and the flush wrote them");
        flusher.join().unwrap();
        assert_eq!(wb.blocks_waiting(), 0);
    }

    #[test]
    fn a_failed_background_write_out_waits_for_the_next_flush() {
        let faulty = Arc::new(FaultDevice::new(ram(64)));
        let wb = DataWriteback::with_flusher(faulty.clone(), BS as u32, 4 * BS);
        faulty.fail_after(0);
        for b in [3u64, 9, 12] {
            wb.write_at(b * BS as u64, &block(b as u8), IoClass::Data).unwrap();
        }
        // The flusher tried and failed; flush tries again and fails too.
        assert!(wb.flush().is_err());
        assert_eq!(wb.blocks_waiting(), 3, "nothing was written, nothing is lost");
        let mut got = block(0);
        wb.read_at(9 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 9);
        faulty.fail_after(u64::MAX);
        wb.flush().unwrap();
        assert_eq!(wb.blocks_waiting(), 0);
        faulty.read_at(12 * BS as u64, &mut got, IoClass::Data).unwrap();
        assert_eq!(got[0], 12);
    }
}
