//! Inodes as the write path last wrote them, so that reading one back does
//! not parse and checksum its record again.
//!
//! An untar reads every inode right after writing it: the create writes it,
//! then each write(2) and each of tar's three setattrs reads and rewrites it.
//! Parsing a record (fields, checksum, a copy) was about a tenth of the
//! engine's work there. An entry is used only while its record in the
//! inode-table block is byte for byte the one it was made from, so nothing
//! has to invalidate it: a rolled-back operation, a block read again from the
//! journal or a newer write simply makes the entry miss.

use crate::intmap::IntMap;
use ondisk::inode::Inode;
use parking_lot::Mutex;

const SHARDS: usize = 16;

pub(crate) struct InodeCache {
    shards: Vec<Mutex<IntMap<u32, Inode>>>,
    per_shard: usize,
}

impl InodeCache {
    /// Room for about `capacity` inodes (at least one per shard).
    pub(crate) fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        InodeCache { shards: (0..SHARDS).map(|_| Mutex::new(IntMap::default())).collect(), per_shard }
    }

    fn shard(&self, ino: u32) -> &Mutex<IntMap<u32, Inode>> {
        &self.shards[ino as usize % SHARDS]
    }

    /// Inode `ino` if it was cached from exactly `record`.
    pub(crate) fn get(&self, ino: u32, record: &[u8]) -> Option<Inode> {
        self.shard(ino).lock().get(&ino).filter(|i| i.raw == record).cloned()
    }

    /// Remember `inode` as [`Inode::write_to`] just wrote it into `record`
    /// (in place of the entry it had: no allocation once cached).
    pub(crate) fn put_written(&self, inode: &Inode, record: &[u8]) {
        let mut s = self.shard(inode.ino).lock();
        if let Some(entry) = s.get_mut(&inode.ino) {
            if !inode.as_written_into(record, entry) {
                s.remove(&inode.ino);
            }
            return;
        }
        let Some(written) = inode.as_written(record) else { return };
        if s.len() >= self.per_shard {
            // Entries are only recent writes: dropping them all costs a parse each.
            s.clear();
        }
        s.insert(inode.ino, written);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ondisk::inode::InodeBase;

    /// A 128-byte inode (no extra fields) whose record is `fill` bytes; `put`
    /// caches it as written into such a record.
    fn put(c: &InodeCache, ino: u32, fill: u8) {
        let i = Inode { ino, base: InodeBase::default(), extra: None, raw: vec![0; 128] };
        c.put_written(&i, &[fill; 128]);
    }

    #[test]
    fn an_entry_serves_only_its_own_record() {
        let c = InodeCache::new(64);
        assert!(c.get(5, &[1; 128]).is_none());
        put(&c, 5, 1);
        assert_eq!(c.get(5, &[1; 128]).map(|i| i.ino), Some(5));
        // The block now holds something else for inode 5 (a newer write, a rollback): a miss.
        assert!(c.get(5, &[2; 128]).is_none());
        assert!(c.get(21, &[1; 128]).is_none());
        // Written again: the entry follows.
        put(&c, 5, 2);
        assert!(c.get(5, &[2; 128]).is_some() && c.get(5, &[1; 128]).is_none());
    }

    #[test]
    fn a_full_shard_starts_over() {
        let c = InodeCache::new(SHARDS * 2);
        for k in 0..3u32 {
            put(&c, 1 + k * SHARDS as u32, 7); // all in one shard
        }
        assert!(c.get(1, &[7; 128]).is_none(), "the third insert cleared the shard");
        assert!(c.get(1 + 2 * SHARDS as u32, &[7; 128]).is_some());
    }
}
