//! Fault injection for crash and error tests.
//!
//! [`FaultDevice`] wraps a device, records the stream of writes and flushes it
//! passes down, and can start failing requests after a budget. [`crash_image`]
//! turns a recorded stream into what a crash could leave on the medium: every
//! write before the last completed flush, and of the writes after it (still in
//! the drive's volatile cache) all, some, or some in another order.

use crate::{BlockDevice, IoClass, ReadRequest};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One request as the device saw it.
#[derive(Clone, Debug)]
pub enum Event {
    Write { offset: u64, data: Arc<[u8]>, class: IoClass },
    Flush,
}

pub struct FaultDevice<D> {
    inner: D,
    events: Mutex<Vec<Event>>,
    /// Bytes read, by class (in `IoClass::ALL` order).
    read_bytes: [AtomicU64; 3],
    /// Writes and flushes still allowed to succeed (u64::MAX: no limit).
    budget: AtomicU64,
}

impl<D: BlockDevice> FaultDevice<D> {
    pub fn new(inner: D) -> Self {
        FaultDevice {
            inner,
            events: Mutex::new(Vec::new()),
            read_bytes: Default::default(),
            budget: AtomicU64::new(u64::MAX),
        }
    }

    /// Bytes read so far in requests of `class`.
    pub fn read_bytes(&self, class: IoClass) -> u64 {
        self.read_bytes[class_index(class)].load(Ordering::Relaxed)
    }

    /// Every write and flush so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn event_count(&self) -> usize {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Let the next `n` writes or flushes succeed and fail every later one with EIO.
    pub fn fail_after(&self, n: u64) {
        self.budget.store(n, Ordering::SeqCst);
    }

    /// Whether a request may go through (spending one unit of the budget).
    fn admit(&self) -> io::Result<()> {
        let ok = self.budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| match b {
            u64::MAX => Some(b),
            0 => None,
            _ => Some(b - 1),
        });
        ok.map(|_| ()).map_err(|_| io::Error::from_raw_os_error(libc::EIO))
    }

    fn record(&self, e: Event) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    }
}

impl<D: BlockDevice> BlockDevice for FaultDevice<D> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn sector_size(&self) -> u32 {
        self.inner.sector_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        self.inner.read_at(offset, buf, class)?;
        self.read_bytes[class_index(class)].fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        self.inner.read_batch(requests)?;
        for r in requests.iter() {
            self.read_bytes[class_index(r.class)].fetch_add(r.buf.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        self.admit()?;
        self.inner.write_at(offset, buf, class)?;
        self.record(Event::Write { offset, data: Arc::from(buf), class });
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.admit()?;
        self.inner.flush()?;
        self.record(Event::Flush);
        Ok(())
    }
}

fn class_index(class: IoClass) -> usize {
    IoClass::ALL.iter().position(|&c| c == class).expect("every class is in ALL")
}

/// What a crash does to writes no flush has made durable.
#[derive(Clone, Copy, Debug)]
pub enum Volatile {
    /// All reached the medium, in order (a crash between requests).
    All,
    /// None did.
    None,
    /// Each reached it or not at random, and those that did in a random order.
    Shuffled { seed: u64 },
}

impl Volatile {
    /// The three policies in turn, for the `i`th crash cut of a series
    /// (Shuffled seeded with `i`): every crash suite spreads its cuts so.
    pub fn in_turn(i: usize) -> Volatile {
        match i % 3 {
            0 => Volatile::All,
            1 => Volatile::None,
            _ => Volatile::Shuffled { seed: i as u64 },
        }
    }
}

/// The index just past the last flush among `events[..cut]` (0 if none).
pub fn durable_prefix(events: &[Event], cut: usize) -> usize {
    events[..cut].iter().rposition(|e| matches!(e, Event::Flush)).map_or(0, |i| i + 1)
}

/// Apply to `image` (the device's contents before `events`) what a crash
/// after `events[..cut]` could leave.
pub fn crash_image(image: &mut [u8], events: &[Event], cut: usize, volatile: Volatile) {
    let durable = durable_prefix(events, cut);
    let mut apply = |e: &Event| {
        if let Event::Write { offset, data, .. } = e {
            image[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
    };
    events[..durable].iter().for_each(&mut apply);
    let mut pending: Vec<&Event> = events[durable..cut].iter().collect();
    match volatile {
        Volatile::All => {}
        Volatile::None => pending.clear(),
        Volatile::Shuffled { seed } => {
            let mut rng = SplitMix(seed);
            pending.retain(|_| rng.next() & 1 == 0);
            for i in (1..pending.len()).rev() {
                pending.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
        }
    }
    pending.into_iter().for_each(apply);
}

/// A tiny deterministic generator (SplitMix64): crash cases must be reproducible.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device in memory, enough to drive the wrapper.
    struct Mem(Mutex<Vec<u8>>);
    impl BlockDevice for Mem {
        fn size(&self) -> u64 {
            self.0.lock().unwrap().len() as u64
        }
        fn read_at(&self, offset: u64, buf: &mut [u8], _: IoClass) -> io::Result<()> {
            buf.copy_from_slice(&self.0.lock().unwrap()[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, offset: u64, buf: &[u8], _: IoClass) -> io::Result<()> {
            self.0.lock().unwrap()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn sector(v: u8) -> Vec<u8> {
        vec![v; 512]
    }

    #[test]
    fn records_and_rebuilds_crash_states() {
        let dev = FaultDevice::new(Mem(Mutex::new(vec![0; 4096])));
        dev.write_at(0, &sector(1), IoClass::Data).unwrap();
        dev.flush().unwrap();
        dev.write_at(512, &sector(2), IoClass::Data).unwrap();
        dev.write_at(0, &sector(3), IoClass::Data).unwrap();
        let ev = dev.events();
        assert_eq!(ev.len(), 4);
        assert_eq!(durable_prefix(&ev, 4), 2);
        let state = |cut, v| {
            let mut img = vec![0u8; 4096];
            crash_image(&mut img, &ev, cut, v);
            (img[0], img[512])
        };
        assert_eq!(state(1, Volatile::None), (0, 0), "nothing flushed yet");
        assert_eq!(state(1, Volatile::All), (1, 0));
        assert_eq!(state(4, Volatile::None), (1, 0));
        assert_eq!(state(4, Volatile::All), (3, 2));
        // Every shuffled outcome is one of the states reordering allows.
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let s = state(4, Volatile::Shuffled { seed });
            assert!([1, 3].contains(&s.0) && [0, 2].contains(&s.1), "{s:?}");
            seen.insert(s);
        }
        assert_eq!(seen.len(), 4, "all four outcomes occur");
    }

    #[test]
    fn fails_after_the_budget() {
        let dev = FaultDevice::new(Mem(Mutex::new(vec![0; 4096])));
        dev.fail_after(2);
        dev.write_at(0, &sector(1), IoClass::Data).unwrap();
        dev.flush().unwrap();
        let err = dev.write_at(0, &sector(2), IoClass::Data).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(dev.flush().is_err());
        assert_eq!(dev.event_count(), 2, "failed requests are not recorded");
        let mut b = vec![0u8; 512];
        dev.read_at(0, &mut b, IoClass::Data).unwrap();
        assert_eq!(b[0], 1, "reads still work");
    }
}
