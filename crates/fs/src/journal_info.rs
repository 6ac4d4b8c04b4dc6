//! The journal's place on the device and what mounting found in it (found
//! by `journal_glue.rs`).

/// The journal's place on the device and what mounting found in it.
#[derive(Clone, Debug)]
pub struct JournalInfo {
    pub superblock: ondisk::jbd2::Superblock,
    /// Journal length in blocks (journal inode size / block size).
    pub len_blocks: u64,
    /// Contiguous runs: (first journal block, first physical block, length).
    pub runs: Vec<(u64, u64, u64)>,
    /// Recovery found committed transactions to replay.
    pub needed_recovery: bool,
    pub replayed_transactions: u32,
    pub replayed_blocks: usize,
    pub revoke_records: u64,
    /// Journal blocks held by the transactions recovery found (tail to head).
    pub used_blocks: u64,
    /// Journal block after the last transaction recovery found (== the
    /// superblock's start when it found none).
    pub head: u64,
    /// The recovery scan itself, kept for a read-write mount to use instead
    /// of scanning the whole log a second time.
    pub(crate) recovery: Option<journal::Recovery>,
    /// The scan was replaced by a valid jmap snapshot.
    pub from_snapshot: bool,
    /// Why a jmap snapshot found at mount was not used (the log was scanned).
    pub snapshot_refused: Option<String>,
}

impl JournalInfo {
    /// Physical block of journal block `jblock`.
    pub fn phys(&self, jblock: u64) -> Option<u64> {
        run_phys(&self.runs, jblock)
    }
}

pub(crate) fn run_phys(runs: &[(u64, u64, u64)], jblock: u64) -> Option<u64> {
    let i = runs.partition_point(|r| r.0 <= jblock);
    let (l, p, n) = *runs.get(i.checked_sub(1)?)?;
    (jblock < l + n).then(|| p + (jblock - l))
}

impl JournalInfo {
    pub fn is_empty(&self) -> bool {
        self.superblock.start == 0
    }
}
