//! Stream windows: free blocks kept, in memory only, after the blocks a file
//! was last given, so that what it writes next continues its extent.
//!
//! Why: with delayed allocation a file's appended data gets blocks when it
//! is written back, and by then other files have taken the blocks right
//! after its end: every append became an extent of its own. Postmark left
//! 3.6 extents a file where the kernel's ext4 leaves 1.5, and on a disk each
//! extent is a seek when the file is read. The kernel keeps the same room
//! (mballoc's inode preallocation, with the request rounded up to a size
//! class). Here a file that reaches [`STREAM_MIN_BLOCKS`] gets a window up to
//! its next size class; other allocations step over it.
//!
//! A window is a placement hint with no meaning on disk: its blocks stay
//! free in the bitmaps, so a crash, a rolled-back operation or a forgotten
//! window loses nothing, and an allocation that finds no room elsewhere
//! drops every window and looks again.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Files smaller than this share space with their neighbours (the kernel's
/// `mb_stream_req`, 16 blocks): a window each would spread small files out.
pub(crate) const STREAM_MIN_BLOCKS: u64 = 16;

/// Windows kept at once; the oldest goes first beyond this. Postmark's 2,000
/// files wait thousands of transactions between two appends: with 1,024
/// windows most were gone by then (3.9 extents a file against 3.0).
const MAX_WINDOWS: usize = 65536;

/// The logical end a file that now ends at `end` (blocks) is given room up
/// to: the next power of two up to 1 MiB of 4 KiB blocks, then the next
/// multiple of 512 blocks (the kernel's size classes run the same way).
pub(crate) fn window_end(end: u64) -> u64 {
    if end <= 256 {
        end.next_power_of_two()
    } else {
        end.div_ceil(512) * 512
    }
}

#[derive(Debug, Default)]
pub(crate) struct Windows {
    /// First block -> (length, owner).
    by_start: BTreeMap<u64, (u64, u32)>,
    /// Owner -> (first block, when it was opened).
    by_ino: HashMap<u32, (u64, u64)>,
    /// (owner, when) in the order windows were opened; entries whose window
    /// has gone since are skipped when they come out.
    order: VecDeque<(u32, u64)>,
    opened: u64,
}

impl Windows {
    pub(crate) fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// If `pblk` lies in a window not owned by `owner`: the block after it.
    pub(crate) fn skip_other(&self, owner: Option<u32>, pblk: u64) -> Option<u64> {
        let (&start, &(len, ino)) = self.by_start.range(..=pblk).next_back()?;
        (pblk < start + len && Some(ino) != owner).then_some(start + len)
    }

    /// The first block of the first window after `pblk` not owned by
    /// `owner`: where a free run from `pblk` must stop.
    pub(crate) fn next_other(&self, owner: Option<u32>, pblk: u64) -> Option<u64> {
        self.by_start.range(pblk + 1..).find(|(_, &(_, ino))| Some(ino) != owner).map(|(&s, _)| s)
    }

    /// `owner` was given `[start, start + len)`: what of its window that
    /// covered is used up; a window elsewhere is dropped (the file's end
    /// moved away from it).
    pub(crate) fn used(&mut self, owner: u32, start: u64, len: u64) {
        let Some((w, when)) = self.by_ino.remove(&owner) else { return };
        let Some((wlen, _)) = self.by_start.remove(&w) else { return };
        if start == w && len < wlen {
            self.by_start.insert(w + len, (wlen - len, owner));
            self.by_ino.insert(owner, (w + len, when));
        }
    }

    /// Keep `[start, start + len)` for `owner` (its only window).
    pub(crate) fn open(&mut self, owner: u32, start: u64, len: u64) {
        self.forget(owner);
        if len == 0 {
            return;
        }
        debug_assert!(self.skip_other(None, start).is_none(), "a window over another at {start}");
        debug_assert!(self.next_other(None, start).is_none_or(|s| s >= start + len), "windows overlap at {start}");
        self.opened += 1;
        self.by_start.insert(start, (len, owner));
        self.by_ino.insert(owner, (start, self.opened));
        self.order.push_back((owner, self.opened));
        while self.by_start.len() > MAX_WINDOWS {
            let Some((old, when)) = self.order.pop_front() else { break };
            if self.by_ino.get(&old).is_some_and(|&(_, w)| w == when) {
                self.forget(old);
            }
        }
        if self.order.len() > 2 * MAX_WINDOWS {
            let by_ino = &self.by_ino;
            self.order.retain(|(i, when)| by_ino.get(i).is_some_and(|&(_, w)| w == *when));
        }
    }

    /// `owner`'s window goes (the file was deleted or truncated).
    pub(crate) fn forget(&mut self, owner: u32) {
        if let Some((w, _)) = self.by_ino.remove(&owner) {
            self.by_start.remove(&w);
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = Windows::default();
    }

    #[cfg(test)]
    fn of(&self, owner: u32) -> Option<(u64, u64)> {
        let &(w, _) = self.by_ino.get(&owner)?;
        self.by_start.get(&w).map(|&(len, _)| (w, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_as_the_kernel_does() {
        assert_eq!(window_end(16), 16);
        assert_eq!(window_end(17), 32);
        assert_eq!(window_end(147), 256);
        assert_eq!(window_end(256), 256);
        assert_eq!(window_end(257), 512);
        assert_eq!(window_end(513), 1024);
    }

    #[test]
    fn others_step_over_a_window_and_its_owner_uses_it() {
        let mut w = Windows::default();
        w.open(7, 100, 20);
        assert_eq!(w.skip_other(None, 99), None);
        assert_eq!(w.skip_other(None, 100), Some(120));
        assert_eq!(w.skip_other(None, 119), Some(120));
        assert_eq!(w.skip_other(None, 120), None);
        assert_eq!(w.skip_other(Some(7), 105), None);
        assert_eq!(w.next_other(None, 50), Some(100));
        assert_eq!(w.next_other(Some(7), 50), None);
        w.used(7, 100, 5);
        assert_eq!(w.of(7), Some((105, 15)));
        w.used(7, 105, 15);
        assert_eq!(w.of(7), None);
        assert!(w.is_empty());
    }

    #[test]
    fn a_file_placed_elsewhere_loses_its_window() {
        let mut w = Windows::default();
        w.open(7, 100, 20);
        w.used(7, 500, 3);
        assert_eq!(w.of(7), None);
        w.open(7, 100, 20);
        w.open(7, 300, 10);
        assert_eq!(w.of(7), Some((300, 10)));
        assert_eq!(w.skip_other(None, 100), None);
    }

    #[test]
    fn the_oldest_windows_go_past_the_limit() {
        let mut w = Windows::default();
        for i in 0..(MAX_WINDOWS as u32 + 10) {
            w.open(i, u64::from(i) * 100, 10);
        }
        assert_eq!(w.by_start.len(), MAX_WINDOWS);
        assert_eq!(w.of(0), None);
        assert_eq!(w.of(9), None);
        assert_eq!(w.of(10), Some((1000, 10)));
        // reopening the same owners again and again keeps `order` bounded
        for _ in 0..10 * MAX_WINDOWS {
            w.open(5000, 1_000_000, 10);
        }
        assert!(w.order.len() <= 2 * MAX_WINDOWS + 1);
    }
}
