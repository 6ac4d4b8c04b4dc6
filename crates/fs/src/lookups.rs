//! The kernel's lookup counts: how many times each inode number was handed
//! to the kernel in an entry (LOOKUP, CREATE, MKDIR, MKNOD, SYMLINK, LINK,
//! TMPFILE, READDIRPLUS) minus what FORGET gave back.
//!
//! While the count is above zero the kernel may send any request (OPEN,
//! GETATTR, SETATTR, ...) on that number without looking it up again, even
//! after its last name is gone and the inode is freed on disk. So the inode
//! allocator does not hand such a number out again: a request meant for the
//! old file must never land on a new one. Freed on disk is fine; reuse waits
//! for the FORGET.
//!
//! Kept on read-write volumes only (nothing is allocated otherwise). One
//! entry per inode the kernel caches (~16 bytes in the table); sharded by
//! inode number so the request threads rarely meet on a lock.

use crate::intmap::IntMap;
use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

const SHARDS: usize = 16;

pub(crate) struct Lookups {
    shards: Box<[Mutex<IntMap<u32, u64>>]>,
    /// The freed-but-held numbers and the release count, under one lock so
    /// that a reader sees a number leave the list and its release together.
    freed: Mutex<Freed>,
    /// Signalled at each release.
    released: Condvar,
    /// When a last name last went while the kernel still held the number
    /// (its FORGET, or the RELEASE of its handle, still to come).
    last_held_unlink: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Freed {
    /// Numbers freed on disk while held: free in the bitmaps, yet not to be
    /// handed out, so statfs must not count them free. Few (unlinked files
    /// the kernel still caches); an entry goes with its last FORGET.
    held: IntMap<u32, ()>,
    /// Inode numbers that became usable again (a freed number's last
    /// lookup forgotten, or an inode freed while nobody held it), counted.
    releases: u64,
}

/// How long a create on a volume whose only free inodes the kernel still
/// holds waits for a FORGET at least. A FORGET already queued arrives in
/// microseconds; a number held longer (a process whose working directory
/// was removed) costs each such create this much while held.
const FORGET_WAIT: Duration = Duration::from_millis(250);

/// ... and for how long after a held number lost its last name the wait
/// may stretch. The kernel queues a FORGET before unlink returns, but on a
/// loaded machine the thread that reads it may not run for hundreds of
/// milliseconds (a FORGET delayed 400 ms made a create fail with ENOSPC
/// where the kernel's ext4 succeeded).
const FORGET_GRACE: Duration = Duration::from_secs(3);

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            shards: (0..SHARDS).map(|_| Mutex::new(IntMap::default())).collect(),
            freed: Mutex::new(Freed::default()),
            released: Condvar::new(),
            last_held_unlink: Mutex::new(None),
        }
    }
}

impl Lookups {
    fn shard(&self, ino: u32) -> &Mutex<IntMap<u32, u64>> {
        &self.shards[ino as usize % SHARDS]
    }

    pub(crate) fn add(&self, ino: u32, n: u64) {
        let mut m = self.shard(ino).lock();
        let c = m.entry(ino).or_insert(0);
        *c = c.saturating_add(n);
    }

    /// Take `n` off; a FORGET of more than we counted (or of a number we
    /// never handed out) just drops the entry. A held freed number leaves
    /// the freed list and is counted released in one step, before its shard
    /// lock is let go (`Volume::atomic` relies on it).
    pub(crate) fn sub(&self, ino: u32, n: u64) {
        let mut m = self.shard(ino).lock();
        if let Some(c) = m.get_mut(&ino) {
            if *c > n {
                *c -= n;
            } else {
                m.remove(&ino);
                let mut freed = self.freed.lock();
                if freed.held.remove(&ino).is_some() {
                    self.count_release(&mut freed);
                }
            }
        }
    }

    /// Inode `ino` was freed on disk: if the kernel still holds it, it stays
    /// unusable until forgotten.
    pub(crate) fn freed(&self, ino: u32) {
        // Under the shard lock, so that a FORGET cannot come between the
        // test and the insert and leave the number listed but not held.
        let shard = self.shard(ino).lock();
        if shard.contains_key(&ino) {
            self.freed.lock().held.insert(ino, ());
            drop(shard);
            self.unlinked_while_held();
        } else {
            drop(shard);
            self.release();
        }
    }

    fn release(&self) {
        self.count_release(&mut self.freed.lock());
    }

    /// One more number usable again (`freed` is the locked state).
    fn count_release(&self, freed: &mut Freed) {
        freed.releases += 1;
        self.released.notify_all();
    }

    /// How many numbers became usable again so far (see [`Self::wait_release`]).
    pub(crate) fn releases(&self) -> u64 {
        self.freed.lock().releases
    }

    /// The numbers freed on disk while held (some may be in use again if the
    /// operation that freed one was undone: the caller checks the bitmap),
    /// and the release count, read together.
    pub(crate) fn freed_held(&self) -> (Vec<u32>, u64) {
        let freed = self.freed.lock();
        (freed.held.keys().copied().collect(), freed.releases)
    }

    /// A last name went while something the kernel holds keeps the inode
    /// or its number: a FORGET or RELEASE will follow, probably soon.
    pub(crate) fn unlinked_while_held(&self) {
        *self.last_held_unlink.lock() = Some(Instant::now());
    }

    /// Wait for a number to become usable after `seen` releases (read
    /// under the write lock before the operation that found none ran, so
    /// that none is missed). The kernel queues an unlinked file's FORGET
    /// before unlink returns, but a request thread may serve the next
    /// create before another thread has served that FORGET: wait
    /// [`FORGET_WAIT`], or up to [`FORGET_GRACE`] after the last held
    /// number lost its name.
    pub(crate) fn wait_release(&self, seen: u64) {
        let now = Instant::now();
        let recent = self.last_held_unlink.lock().map(|t| t + FORGET_GRACE);
        let deadline = recent.map_or(now + FORGET_WAIT, |r| r.max(now + FORGET_WAIT).min(now + FORGET_GRACE));
        let mut freed = self.freed.lock();
        while freed.releases == seen {
            if self.released.wait_until(&mut freed, deadline).timed_out() {
                return;
            }
        }
    }

    pub(crate) fn holds(&self, ino: u32) -> bool {
        self.shard(ino).lock().contains_key(&ino)
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// What `Volume::atomic` relies on: a number seen listed as freed-but-held
    /// after the count was read is, at any later read, either still listed or
    /// counted released. One thread runs lookup, free, FORGET over and over;
    /// another checks, as a create deciding whether to wait does.
    #[test]
    fn a_number_leaves_the_freed_list_only_counted_released() {
        let lookups = Arc::new(Lookups::default());
        let stop = Arc::new(AtomicBool::new(false));
        let cycler = {
            let (lookups, stop) = (Arc::clone(&lookups), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    lookups.add(7, 1);
                    lookups.freed(7);
                    lookups.sub(7, 1);
                }
            })
        };
        let (mut checked, t) = (0u64, Instant::now());
        while t.elapsed() < Duration::from_millis(300) {
            let seen = lookups.releases();
            if !lookups.freed_held().0.contains(&7) {
                continue;
            }
            let (listed, releases) = lookups.freed_held();
            assert!(listed.contains(&7) || releases != seen, "gone from the list, yet no release counted");
            checked += 1;
        }
        stop.store(true, Ordering::Relaxed);
        cycler.join().unwrap();
        assert!(checked > 100, "only {checked} checks");
    }
}
