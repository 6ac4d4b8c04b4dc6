//! A model as a [`BlockDevice`]: the bytes go to a sparse backing file at
//! their logical address, and each calling thread is held until the model
//! says its request completed.
//!
//! Concurrency: every request is queued in the shared [`Scheduler`]; the
//! threads that wait drive it (no scheduler thread). A waiting thread sleeps
//! until the next scheduling event (the drive becoming free), dispatches what
//! the drive would have started by then, and finally sleeps until its own
//! request's completion. Requests from concurrent threads and the requests of
//! one `read_batch` are in the queue together, which is how queue depth > 1
//! arises and SPTF gets something to reorder.

use crate::clock::{sleep_until, Clock};
use crate::model::{ModelState, Op, Req};
use crate::queue::Scheduler;
use crate::report::Report;
use crate::stats::Bucket;
use crate::trace::TraceSink;
use blockdev::{check_request, BlockDevice, FileDevice, IoClass, ReadRequest};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

struct Inner {
    sched: Scheduler,
    clock: Clock,
}

pub struct ModelDevice {
    model_name: &'static str,
    size: u64,
    backing: Option<FileDevice>,
    sync_backing: bool,
    inner: Mutex<Inner>,
    cv: Condvar,
}

impl ModelDevice {
    /// A device of `size` bytes over `backing` (None: data is discarded and
    /// reads return zeros — for pure timing runs).
    pub fn new(sched: Scheduler, clock: Clock, backing: Option<FileDevice>, size: u64, sync_backing: bool) -> Self {
        let model_name = sched.model.name();
        ModelDevice {
            model_name,
            size,
            backing,
            sync_backing,
            inner: Mutex::new(Inner { sched, clock }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // a panic in another thread must not wedge the device
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn model_name(&self) -> &'static str {
        self.model_name
    }

    /// Queue `reqs` together and return once all have completed in model time.
    fn run(&self, reqs: &[Req]) {
        let mut g = self.lock();
        let now = g.clock.now();
        g.sched.advance(now);
        let mut ids: Vec<u64> = reqs.iter().map(|r| g.sched.submit(*r, now)).collect();
        g.sched.advance(now);
        self.cv.notify_all();
        let mut last_end = now;
        loop {
            ids.retain(|&id| match g.sched.take_done(id) {
                Some(end) => {
                    last_end = last_end.max(end);
                    false
                }
                None => true,
            });
            if ids.is_empty() {
                break;
            }
            let next = g.sched.next_event().unwrap_or_else(|| g.clock.now());
            match g.clock.instant_of(next) {
                None => g.clock.advance_to(next),
                Some(deadline) => {
                    let timeout = deadline.saturating_duration_since(Instant::now());
                    if !timeout.is_zero() {
                        g = self.cv.wait_timeout(g, timeout).unwrap_or_else(|e| e.into_inner()).0;
                    }
                }
            }
            let t = g.clock.now();
            if g.sched.advance(t) > 0 {
                self.cv.notify_all();
            }
        }
        match g.clock.instant_of(last_end) {
            None => g.clock.advance_to(last_end),
            Some(deadline) => {
                drop(g);
                sleep_until(deadline);
            }
        }
    }

    /// Current model time (and the idle work due by then done).
    pub fn now(&self) -> f64 {
        let mut g = self.lock();
        let t = g.clock.now();
        g.sched.advance(t);
        t
    }

    /// Let `dt` model seconds of idle time pass: sleeps `dt / speed` in real
    /// time, or moves virtual time.
    pub fn idle(&self, dt: f64) {
        let mut g = self.lock();
        let target = g.clock.now() + dt.max(0.0);
        match g.clock.instant_of(target) {
            None => {
                g.clock.advance_to(target);
                g.sched.advance(target);
            }
            Some(deadline) => {
                drop(g);
                sleep_until(deadline);
                let mut g = self.lock();
                let t = g.clock.now();
                g.sched.advance(t);
            }
        }
    }

    /// The model's state now (idle work due by now is done first).
    pub fn model_state(&self) -> ModelState {
        let mut g = self.lock();
        let t = g.clock.now();
        g.sched.advance(t);
        g.sched.model.state()
    }

    /// Wait until the drive has no background work left; returns the model
    /// seconds of cleaning done since the last host request completed (the
    /// paper's "cleaning time after the run").
    pub fn wait_idle(&self) -> f64 {
        self.until_idle(false)
    }

    /// As [`ModelDevice::wait_idle`], but the drive's background work takes
    /// no real time: while no host request is outstanding the clock jumps
    /// ahead in the same steps a wait would take, so the model does the same
    /// work and reports the same cleaning seconds. For when the host has
    /// finished (an unmounted volume): a request that arrives meanwhile
    /// finds the drive as far on as the jump took it.
    pub fn skip_to_idle(&self) -> f64 {
        self.until_idle(true)
    }

    fn until_idle(&self, skip: bool) -> f64 {
        loop {
            let mut g = self.lock();
            let t = g.clock.now();
            g.sched.advance(t);
            let st = g.sched.model.state();
            if g.sched.queued() == 0 && !st.cleaning_pending && st.busy_until_s <= t {
                return st.cleaning_after_last_host_s;
            }
            let target = (t + 0.5).max(st.busy_until_s);
            if skip && !g.sched.host_outstanding() {
                g.clock.skip_to(target);
                g.sched.advance(target);
                continue;
            }
            match g.clock.instant_of(target) {
                None => {
                    g.clock.advance_to(target);
                    g.sched.advance(target);
                }
                Some(deadline) => {
                    drop(g);
                    let cap = Instant::now() + std::time::Duration::from_millis(200);
                    sleep_until(deadline.min(cap));
                }
            }
        }
    }

    /// Totals, model state and time, as `emu report` prints them.
    pub fn report(&self) -> Report {
        let mut g = self.lock();
        let t = g.clock.now();
        g.sched.advance(t);
        if let Some(tr) = g.sched.trace.as_mut() {
            tr.flush();
        }
        Report::build(self.model_name, g.clock.speed(), t, self.size, &g.sched)
    }

    /// The time series so far: bucket width (model seconds) and buckets.
    pub fn series(&self) -> (f64, Vec<Bucket>) {
        let g = self.lock();
        (g.sched.stats.bucket_s, g.sched.stats.buckets.clone())
    }

    /// Start writing a trace of every request to `path` (CSV, see [`crate::trace`]).
    pub fn set_trace(&self, path: &Path) -> io::Result<()> {
        let sink = TraceSink::create(path)?;
        self.lock().sched.trace = Some(sink);
        Ok(())
    }

    pub fn flush_trace(&self) {
        if let Some(tr) = self.lock().sched.trace.as_mut() {
            tr.flush();
        }
    }

    /// Read from the backing file without any model time (for the image
    /// server's layout probe). Out-of-range requests are refused.
    pub fn read_untimed(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        match &self.backing {
            Some(b) => b.read_at(offset, buf, IoClass::Metadata),
            None => {
                buf.fill(0);
                Ok(())
            }
        }
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        check_request(self.size, self.sector_size(), offset, len)
    }

    /// Reserve the blocks of a write first, so that a full backing file
    /// system fails the request before any byte of it is written.
    fn reserve(&self, dev: &FileDevice, offset: u64, len: usize) -> io::Result<()> {
        let fd = dev.file().as_raw_fd();
        // SAFETY: fallocate on an open descriptor with in-range arguments.
        let r = unsafe { libc::fallocate(fd, 0, offset as libc::off_t, len as libc::off_t) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
            _ => Err(io::Error::new(
                e.kind(),
                format!("backing file {}: cannot store {len} bytes at {offset}: {e}", dev.path().display()),
            )),
        }
    }
}

impl BlockDevice for ModelDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        self.check(offset, buf.len())?;
        match &self.backing {
            Some(b) => b.read_at(offset, buf, class)?,
            None => buf.fill(0),
        }
        self.run(&[Req { op: Op::Read, offset, len: buf.len() as u64, class }]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        self.check(offset, buf.len())?;
        if let Some(b) = &self.backing {
            self.reserve(b, offset, buf.len())?;
            b.write_at(offset, buf, class).map_err(|e| {
                io::Error::new(e.kind(), format!("backing file {}: write at {offset}: {e}", b.path().display()))
            })?;
        }
        self.run(&[Req { op: Op::Write, offset, len: buf.len() as u64, class }]);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.run(&[Req { op: Op::Flush, offset: 0, len: 0, class: IoClass::Metadata }]);
        if self.sync_backing {
            if let Some(b) = &self.backing {
                b.flush()?;
            }
        }
        self.flush_trace();
        Ok(())
    }

    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        for r in requests.iter() {
            self.check(r.offset, r.buf.len())?;
        }
        let mut reqs = Vec::with_capacity(requests.len());
        for r in requests.iter_mut() {
            match &self.backing {
                Some(b) => b.read_at(r.offset, r.buf, r.class)?,
                None => r.buf.fill(0),
            }
            reqs.push(Req { op: Op::Read, offset: r.offset, len: r.buf.len() as u64, class: r.class });
        }
        self.run(&reqs);
        Ok(())
    }
}
