//! Lazy mode's mount: `Journal::resume` continues a recovered log without
//! writing anything home. Checked on an in-memory recording device:
//! - the resumed journal's jmap, live transactions, tail and head are exactly
//!   what the journal had before the "crash" (the log is the jmap's image),
//!   across formats, sequence wrap and a log that wraps the journal's end;
//! - commits after a resume are recovered again, generation after generation;
//! - crash cuts at every write of resume + two commits, after a torn
//!   transaction of every kind, recover to the state before or after each
//!   commit, never garbage and never older than the last durable commit, and
//!   the cut image resumes again.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use common::dev::{
    after_replay, apply, commit_to_model, copy_or_home, empty_journal_at, load_recover, unflushed_dropped, MemDevice,
    Op, Rng,
};
use common::{Builder, V3_32, V3_64};
use journal::{CheckpointGoal, Error, Journal, JournalMap, LogCopy, Recovery, ReplayedCopy, Transaction};
use ondisk::jbd2::*;

type J = Journal<Arc<MemDevice>>;

/// The journal starts at device block JPHYS, its second half GAP blocks
/// further; the test blocks (below BLOCKS) lie before it.
const JPHYS: u64 = 300;
const GAP: u64 = 5;

/// A device with an empty journal (s_start = 0, s_sequence = seq).
fn setup(bs: u32, jlen: u32, compat: u32, incompat: u32, seq: u32) -> (Arc<MemDevice>, JournalMap) {
    empty_journal_at(JPHYS, GAP, bs, jlen, compat, incompat, seq)
}

/// The common test contents, some starting with the jbd2 magic so that
/// escaping is exercised.
fn content(bs: u32, tag: u64, block: u64) -> Vec<u8> {
    let mut v = common::dev::content(bs, tag, block);
    if (tag + block).is_multiple_of(11) {
        v[..4].copy_from_slice(&MAGIC.to_be_bytes());
    }
    v
}

const FORMATS: [(u32, u32); 4] = [
    (0, V3_64),
    (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V2),
    (0, FEATURE_INCOMPAT_REVOKE),
    (FEATURE_COMPAT_CHECKSUM, FEATURE_INCOMPAT_REVOKE),
];

/// Static blocks the tests use.
const BLOCKS: u64 = 160;

/// What a reader sees for every test block after replay: the replayed copy,
/// else the block at home.
fn replayed_state(j: &J, r: &Recovery, dev: &MemDevice) -> Vec<Vec<u8>> {
    (0..BLOCKS).map(|b| after_replay(j, r, dev, b)).collect()
}

/// What a resumed journal serves for every test block: its newest copy via
/// the jmap, else home.
fn served_state(j: &J, dev: &MemDevice) -> Vec<Vec<u8>> {
    let bs = j.map().block_size();
    (0..BLOCKS).map(|b| copy_or_home(dev, bs, b, |buf| j.read_newest(b, buf).unwrap())).collect()
}

fn jmap_of(j: &J) -> Vec<Option<LogCopy>> {
    (0..BLOCKS).map(|b| j.newest_copy(b)).collect()
}

/// For every block in the log, the newest copies in the 16 journal blocks
/// from its own (the stretch a lazy read brings in); each must be the
/// jmap's newest copy of its block, the block's own first.
fn stretches_of(j: &J) -> Vec<Vec<(u64, u64)>> {
    (0..BLOCKS)
        .filter(|&b| j.has_copy(b))
        .map(|b| {
            let s = j.live_copies_from(b, 16).unwrap();
            assert_eq!(s.first().map(|c| c.block), Some(b));
            for c in &s {
                assert_eq!(j.newest_copy(c.block).map(|n| (n.jblock, n.escaped)), Some((c.jblock, c.escaped)));
                assert_eq!(Some(c.phys), j.map().phys(c.jblock));
            }
            s.iter().map(|c| (c.block, c.jblock)).collect()
        })
        .collect()
}

fn live_of(j: &J) -> Vec<(u32, u64, u64, u64, BTreeSet<u64>)> {
    j.live_transactions().map(|t| (t.sequence, t.start, t.end, t.blocks, j.live_blocks(t.sequence).collect())).collect()
}

/// One random transaction over blocks `0..BLOCKS` (some revokes), committed
/// after checkpointing from the log if there is no room; `model` follows the
/// newest committed contents.
fn random_commit(j: &mut J, rng: &mut Rng, round: u64, model: &mut HashMap<u64, Vec<u8>>) -> journal::CommitInfo {
    let bs = j.map().block_size();
    let mut t = Transaction::new(bs);
    for _ in 0..1 + rng.below(20) {
        let b = rng.below(BLOCKS);
        t.log(b, &content(bs, round, b)).unwrap();
    }
    if rng.below(3) == 0 {
        let b = rng.below(BLOCKS);
        if t.get(b).is_none() {
            t.revoke(b);
        }
    }
    let needed = t.journal_blocks(j.layout());
    if j.space_left() < needed {
        j.checkpoint_from_log(CheckpointGoal::Space(needed)).unwrap();
    }
    let c = j.commit(&t).unwrap().unwrap();
    commit_to_model(&t, model);
    c
}

/// Compare a state with the model on the blocks the model knows.
fn assert_model(state: &[Vec<u8>], model: &HashMap<u64, Vec<u8>>, what: &str) {
    for (b, want) in model {
        assert!(&state[*b as usize] == want, "{what}: block {b}");
    }
}

/// (a) Commit, drop, load + recover + resume: the jmap and the live log are
/// exactly as before; then commit more and recover again, for several
/// generations, through checkpoints that move the tail and a log that wraps.
#[test]
fn resume_continues_the_log() {
    for (compat, incompat) in FORMATS {
        for (bs, jlen, seq) in [(1024u32, 160u32, 5u32), (4096, 400, u32::MAX - 20)] {
            let what = format!("bs {bs} jlen {jlen} compat {compat:#x} incompat {incompat:#x}");
            let (dev, map) = setup(bs, jlen, compat, incompat, seq);
            let mut rng = Rng(u64::from(jlen) * 7 + u64::from(incompat));
            let mut model = HashMap::new();
            let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
            let mut round = 0;
            let mut wrapped = false;
            for generation in 0..5 {
                for _ in 0..12 {
                    round += 1;
                    let before = j.head();
                    let c = random_commit(&mut j, &mut rng, round, &mut model);
                    wrapped |= c.end < before;
                }
                assert_model(&served_state(&j, &dev), &model, &what);
                let (jmap, live) = (jmap_of(&j), live_of(&j));
                let stretches = stretches_of(&j);
                let (tail, head, next) = (j.tail(), j.head(), j.next_sequence());
                let stats = j.jmap_stats();
                let sb_before = j.superblock().clone();
                drop(j);

                let (mut j2, r) = load_recover(&dev, &map);
                assert!(j2.needs_recovery(), "{what}");
                assert_eq!(r.end_sequence, next, "{what}");
                assert_eq!(r.next_sequence, next.wrapping_add(1), "{what}");
                assert_eq!(r.head, head);
                assert_eq!(r.extents.len(), live.len());
                assert_model(&replayed_state(&j2, &r, &dev), &model, &what);
                j2.resume(&r).unwrap();
                assert!(!j2.needs_recovery());
                // The jmap and the live log are the image of the log.
                assert_eq!(jmap_of(&j2), jmap, "{what} generation {generation}");
                // The reverse index rebuilt at resume agrees with the one kept at commit.
                assert_eq!(stretches_of(&j2), stretches, "{what} generation {generation}");
                let mut live2 = live_of(&j2);
                let filler = live2.pop().unwrap();
                assert_eq!(live2, live, "{what}");
                // The gap-closing empty transaction takes the torn ID.
                assert_eq!(filler, (next, head, filler.2, 1, BTreeSet::new()));
                assert_eq!((j2.tail(), j2.next_sequence()), (tail, r.next_sequence));
                assert_eq!(j2.head(), filler.2);
                assert_eq!(j2.jmap_stats().entries, stats.entries);
                // s_start / s_sequence still point at the tail: nothing was checkpointed.
                assert_eq!(j2.superblock().start, sb_before.start);
                assert_eq!(j2.superblock().sequence, sb_before.sequence);
                assert_model(&served_state(&j2, &dev), &model, &what);
                let oldest = j2.oldest_live().unwrap().sequence;
                let tail_blocks = j2.tail_live_blocks(usize::MAX);
                assert_eq!(tail_blocks.len(), j2.live_count(oldest));
                assert!(tail_blocks.iter().all(|&b| j2.newest_copy(b).unwrap().sequence == oldest));
                assert!(j2.tail_live_blocks(2).len() <= 2);
                j = j2;
            }
            assert!(wrapped || jlen > 200, "{what}: the log never wrapped");
            // Lazy -> ordered: everything home from the log, empty journal.
            j.checkpoint_from_log(CheckpointGoal::All).unwrap();
            j.empty().unwrap();
            assert_eq!(j.jmap_stats().entries, 0);
            let (j3, r) = load_recover(&dev, &map);
            assert!(!r.needed && !j3.needs_recovery());
            for (b, want) in &model {
                assert_eq!(&dev.block(bs, *b), want, "{what}: block {b} home");
            }
        }
    }
}

/// The cleaner's loop on a resumed log: re-journal the tail's live blocks,
/// advance the tail, and recovery still finds every newest copy.
#[test]
fn resumed_tail_is_cleaned_by_rejournalling() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, 0, V3_32, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut model = HashMap::new();
    let mut rng = Rng(99);
    for round in 1..=6 {
        random_commit(&mut j, &mut rng, round, &mut model);
    }
    drop(j);
    let (mut j, r) = load_recover(&dev, &map);
    j.resume(&r).unwrap();
    let home: Vec<Vec<u8>> = (0..BLOCKS).map(|b| dev.block(bs, b)).collect();
    let sb_start = j.superblock().start;
    // Clean until every recovered transaction (and the filler) is passed.
    let stop = j.next_sequence();
    let mut moved = 0;
    while journal::tid_gt(stop, j.oldest_live().unwrap().sequence) {
        let blocks = j.tail_live_blocks(16);
        let mut t = Transaction::new(bs);
        let mut buf = vec![0u8; bs as usize];
        for &b in &blocks {
            assert!(j.read_newest(b, &mut buf).unwrap());
            t.log(b, &buf).unwrap();
        }
        moved += blocks.len();
        if !t.is_empty() {
            j.commit(&t).unwrap();
        }
        j.advance_tail().unwrap();
        assert_model(&served_state(&j, &dev), &model, "cleaning");
        assert!(moved < 10_000);
    }
    assert!(moved > 0);
    assert_ne!(j.superblock().start, sb_start, "the tail moved");
    // Nothing was written home.
    for b in 0..BLOCKS {
        assert_eq!(dev.block(bs, b), home[b as usize]);
    }
    let (j2, r) = load_recover(&dev, &map);
    assert_model(&replayed_state(&j2, &r, &dev), &model, "after cleaning");
    assert_eq!(r.start_sequence, j.oldest_live().unwrap().sequence);
    assert!(journal::tid_geq(r.start_sequence, stop));
}

#[test]
fn resume_checks_its_input() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, 0, FEATURE_INCOMPAT_REVOKE, 1);
    // A clean journal: nothing to continue, nothing written.
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let r = j.recover().unwrap();
    assert!(!r.needed);
    j.resume(&r).unwrap();
    assert!(dev.take_ops().is_empty());
    let mut t = Transaction::new(bs);
    t.log(3, &content(bs, 1, 3)).unwrap();
    j.commit(&t).unwrap();
    // Not after a commit (the recovery is stale).
    assert!(matches!(j.resume(&r), Err(Error::Invalid(_))));
    drop(j);
    // Not with another journal's recovery.
    let (mut j, r) = load_recover(&dev, &map);
    let (dev2, map2) = setup(bs, 256, 0, FEATURE_INCOMPAT_REVOKE, 1);
    let mut other = Journal::load(dev2, map2).unwrap();
    assert!(matches!(other.resume(&r), Err(Error::Invalid(_))));
    j.resume(&r).unwrap();
    assert!(matches!(j.resume(&r), Err(Error::Invalid(_))));
    // Nor replay a recovery over a resumed log: that would drop new commits.
    assert!(matches!(j.replay_to_disk(&r), Err(Error::Invalid(_))));
}

/// A log our commits filled up to the reserve still resumes (the one-block
/// transaction may use the reserve); a log with a single free block (written
/// by another journal writer) is refused, unchanged.
#[test]
fn resume_of_a_full_log() {
    let bs = 1024;
    let (dev, map) = setup(bs, 128, 0, FEATURE_INCOMPAT_REVOKE, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    // Fill the log exactly to the reserve with hand-sized transactions.
    let mut model = HashMap::new();
    let mut round = 0;
    loop {
        let left = j.space_left();
        if left == 0 {
            break;
        }
        assert!(left >= 2, "cannot use up the last block");
        round += 1;
        let mut t = Transaction::new(bs);
        // n copies + one descriptor + commit; never leave exactly 1 block.
        let mut n = left.saturating_sub(2).min(20);
        if left - (n + 2) == 1 {
            n -= 1;
        }
        for b in 0..n {
            t.log(b, &content(bs, round, b)).unwrap();
            model.insert(b, content(bs, round, b));
        }
        if n == 0 {
            t.revoke(1000 + left); // revoke block + commit
        }
        assert!(t.journal_blocks(j.layout()) <= left);
        j.commit(&t).unwrap();
    }
    drop(j);
    let (mut j, r) = load_recover(&dev, &map);
    j.resume(&r).unwrap();
    let fill = j.fill();
    assert_eq!(fill.used + journal::journal::RESERVED_BLOCKS - 1, fill.log_blocks);
    assert_eq!(fill.space_left, 0);
    let mut t = Transaction::new(bs);
    t.log(1, &content(bs, 99, 1)).unwrap();
    model.insert(1, content(bs, 99, 1));
    assert!(matches!(j.commit(&t), Err(Error::NoSpace { .. })));
    j.checkpoint_from_log(CheckpointGoal::Space(3)).unwrap();
    j.commit(&t).unwrap();
    drop(j);
    let (j, r) = load_recover(&dev, &map);
    assert_model(&replayed_state(&j, &r, &dev), &model, "full log resumed");

    // Two transactions over all but one block of a 63-block log.
    let mut b = Builder::with_start(bs, 64, 0, FEATURE_INCOMPAT_REVOKE, 1, 500);
    b.data(&(0..30).map(|i| (i, content(bs, 1, i))).collect::<Vec<_>>());
    b.commit();
    b.data(&(0..28).map(|i| (i, content(bs, 2, i))).collect::<Vec<_>>());
    b.commit();
    assert_eq!(b.pos, 63);
    let mj = b.finish();
    let dev = Arc::new(MemDevice::new((JPHYS as usize + 64) * bs as usize));
    dev.bytes.lock().unwrap()[JPHYS as usize * bs as usize..].copy_from_slice(&mj.bytes);
    let map = JournalMap::contiguous(JPHYS, 64, bs).unwrap();
    let (mut j, r) = load_recover(&dev, &map);
    assert_eq!(r.transactions, 2);
    assert!(matches!(j.resume(&r), Err(Error::NoSpace { needed: 1, available: 0 })));
    assert!(dev.take_ops().is_empty());
    assert!(j.needs_recovery());
    // The ordered-mode path still works.
    assert_eq!(j.replay_to_disk(&r).unwrap(), 30);
}

/// How the device was left by the crash before the resume.
#[derive(Clone, Copy, Debug)]
enum Torn {
    /// Crash between commits.
    None,
    /// The last transaction's blocks are written, its commit block is not.
    NoCommit,
    /// Same, and its first descriptor was lost too (later ones survive).
    FirstBlockLost,
    /// Its commit block is there but corrupt (fails its checksum).
    BadCommit,
    /// Its commit block is there and valid, but its first descriptor was
    /// lost: a device that reordered writes across the flush. The first new
    /// commit fills exactly one descriptor, so had it reused the torn ID at
    /// the head, a torn copy of it would run into the torn transaction's
    /// second descriptor and valid commit block (what the gap-closing commit
    /// block of resume prevents).
    CommitBehindLostBlock,
}

/// (b) Crash cuts at every write of resume + two commits.
#[test]
fn crash_cuts_while_continuing_a_recovered_log() {
    for (compat, incompat) in FORMATS {
        let checksummed = compat != 0 || incompat & (FEATURE_INCOMPAT_CSUM_V2 | FEATURE_INCOMPAT_CSUM_V3) != 0;
        for torn in [Torn::None, Torn::NoCommit, Torn::FirstBlockLost, Torn::BadCommit, Torn::CommitBehindLostBlock] {
            if matches!(torn, Torn::BadCommit) && !checksummed {
                continue;
            }
            cuts(compat, incompat, torn);
        }
    }
}

fn cuts(compat: u32, incompat: u32, torn: Torn) {
    let what = format!("compat {compat:#x} incompat {incompat:#x} {torn:?}");
    let bs = 1024;
    let (dev, map) = setup(bs, 512, compat, incompat, 70);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut model = HashMap::new();
    let mut rng = Rng(5);
    for round in 1..=6 {
        random_commit(&mut j, &mut rng, round, &mut model);
    }
    // The transaction the crash tears: large (several descriptors), over
    // blocks the new commits log too.
    let before_torn = dev.snapshot();
    dev.take_ops();
    let mut big = Transaction::new(bs);
    for b in 0..150 {
        big.log(b, &content(bs, 666, b)).unwrap();
    }
    let c = j.commit(&big).unwrap().unwrap();
    drop(j);
    let ops = dev.take_ops();
    let first_flush = ops.iter().position(|o| matches!(o, Op::Flush)).unwrap();
    let base = match torn {
        Torn::None => before_torn,
        Torn::NoCommit | Torn::FirstBlockLost => {
            let mut img = apply(&before_torn, &ops[..first_flush]);
            if matches!(torn, Torn::FirstBlockLost) {
                let at = (map.phys(c.start).unwrap() * u64::from(bs)) as usize;
                img[at..at + bs as usize].fill(0);
            }
            img
        }
        Torn::CommitBehindLostBlock => {
            let mut img = apply(&before_torn, &ops);
            let at = (map.phys(c.start).unwrap() * u64::from(bs)) as usize;
            img[at..at + bs as usize].fill(0);
            img
        }
        Torn::BadCommit => {
            let mut img = apply(&before_torn, &ops);
            // h_chksum[0]: the v2/v3 block checksum, or v1's crc32 of the transaction.
            let at = (map.phys(c.commit_block).unwrap() * u64::from(bs)) as usize;
            img[at + 0x10] ^= 0xFF;
            img
        }
    };
    let dev = Arc::new(MemDevice::from_bytes(base.clone()));
    let (mut j, r) = load_recover(&dev, &map);
    assert_eq!(r.next_sequence, c.sequence + 1, "{what}: the torn ID is skipped");
    assert_eq!(r.end_sequence, c.sequence);
    assert_eq!(r.failed_commit.is_some(), matches!(torn, Torn::BadCommit));
    if matches!(torn, Torn::CommitBehindLostBlock) {
        // The torn transaction's second descriptor and commit are intact.
        let at = c.start + journal::transaction::tags_per_descriptor(j.layout()) as u64 + 1;
        let mut buf = vec![0u8; bs as usize];
        journal::JournalReader::read_block(&j, at, &mut buf).unwrap();
        let h = Header::peek(&buf).unwrap();
        assert_eq!((h.block_type, h.sequence), (BlockType::Descriptor, c.sequence));
    }
    if !matches!(torn, Torn::None) {
        assert_eq!(r.head, c.start, "{what}");
    }
    let mut states = vec![replayed_state(&j, &r, &dev)];
    assert_model(&states[0], &model, &what);

    // Resume, then two commits smaller than the torn transaction.
    j.resume(&r).unwrap();
    let mut durable_at = vec![];
    let first: Vec<u64> = match torn {
        Torn::CommitBehindLostBlock => {
            let n = journal::transaction::tags_per_descriptor(j.layout()) as u64;
            assert!(n < 150, "the torn transaction has a second descriptor");
            (0..n).collect()
        }
        _ => vec![3, 4, 140, 141],
    };
    let mut t = Transaction::new(bs);
    for &b in &first {
        t.log(b, &content(bs, 1000, b)).unwrap();
    }
    j.commit(&t).unwrap().unwrap();
    durable_at.push(dev.ops.lock().unwrap().len());
    let mut s = states[0].clone();
    for (b, d) in t.blocks() {
        s[b as usize] = d.to_vec();
    }
    states.push(s);
    let mut t = Transaction::new(bs);
    t.log(4, &content(bs, 1001, 4)).unwrap();
    t.log(7, &content(bs, 1001, 7)).unwrap();
    t.revoke(140);
    j.commit(&t).unwrap().unwrap();
    durable_at.push(dev.ops.lock().unwrap().len());
    let mut s = states[1].clone();
    for (b, d) in t.blocks() {
        s[b as usize] = d.to_vec();
    }
    s[140] = base[140 * bs as usize..141 * bs as usize].to_vec();
    states.push(s);
    assert_eq!(served_state(&j, &dev), states[2], "{what}: served after the commits");
    drop(j);
    let ops = dev.take_ops();

    let mut prev_k = 0;
    for cut in 0..=ops.len() {
        let img = Arc::new(MemDevice::from_bytes(apply(&base, &ops[..cut])));
        let k = check_cut(&img, &map, &states, &what, cut);
        assert!(k >= prev_k, "{what} cut {cut}: went back from {prev_k} to {k}");
        let durable = durable_at.iter().filter(|&&d| d <= cut).count();
        assert!(k >= durable, "{what} cut {cut}: {durable} durable but state {k}");
        prev_k = k;
        // A disk may drop unflushed writes: keep only the last one since the
        // last flush before the cut.
        let img = Arc::new(MemDevice::from_bytes(apply(&base, &unflushed_dropped(&ops, cut))));
        let k2 = check_cut(&img, &map, &states, &what, cut);
        assert!(k2 >= durable, "{what} cut {cut} (unflushed dropped): {durable} durable but state {k2}");
    }
    assert_eq!(prev_k, 2);
}

/// Recover a cut image: it must be one of `states`; then resume it, commit
/// one more transaction and recover again: that state plus the commit.
fn check_cut(img: &Arc<MemDevice>, map: &JournalMap, states: &[Vec<Vec<u8>>], what: &str, cut: usize) -> usize {
    let bs = map.block_size();
    let (mut j, r) = load_recover(img, map);
    let got = replayed_state(&j, &r, img);
    let k = (0..states.len())
        .rev()
        .find(|&k| states[k] == got)
        .unwrap_or_else(|| panic!("{what} cut {cut}: not a committed state"));
    j.resume(&r).unwrap();
    assert_eq!(served_state(&j, img), got, "{what} cut {cut}: resumed jmap");
    let mut t = Transaction::new(bs);
    t.log(5, &content(bs, 2000, 5)).unwrap();
    t.log(141, &content(bs, 2000, 141)).unwrap();
    j.commit(&t).unwrap().unwrap();
    drop(j);
    let (j, r) = load_recover(img, map);
    let mut want = states[k].clone();
    want[5] = content(bs, 2000, 5);
    want[141] = content(bs, 2000, 141);
    assert!(replayed_state(&j, &r, img) == want, "{what} cut {cut}: state {k} + one commit after a second resume");
    k
}

/// A kernel-written log may lack REVOKE (jbd2 sets it at the first revoke):
/// on a resumed, live log REVOKE alone may be turned on, nothing else.
#[test]
fn revoke_feature_on_a_resumed_log() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, 0, FEATURE_INCOMPAT_CSUM_V3, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut t = Transaction::new(bs);
    t.log(3, &content(bs, 1, 3)).unwrap();
    j.commit(&t).unwrap();
    drop(j);
    let (mut j, r) = load_recover(&dev, &map);
    j.resume(&r).unwrap();
    let mut t = Transaction::new(bs);
    t.revoke(3);
    assert!(matches!(j.commit(&t), Err(Error::Format(_))));
    assert!(matches!(
        j.set_features(0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT),
        Err(Error::NotCheckpointed { .. })
    ));
    let (compat, incompat) = journal::ext4_features(true, false);
    j.set_features(compat, incompat).unwrap();
    j.set_features(compat, incompat).unwrap(); // nothing new: no change
    j.commit(&t).unwrap();
    drop(j);
    let (j, r) = load_recover(&dev, &map);
    assert!(j.superblock().has_incompat(FEATURE_INCOMPAT_REVOKE));
    assert_eq!(r.revoke_records, 1);
    assert!(r.copy(3).is_none());
    assert_eq!(r.transactions, 3);
}

/// A snapshot of a live log stands for the recovery scan: decoded after the
/// journal is loaded again it equals the scan (transactions, copies, head,
/// IDs) and resume takes it; a snapshot the log has moved past, or a damaged
/// one, is refused.
#[test]
fn snapshot_stands_for_the_scan_until_the_log_moves_on() {
    for &(compat, incompat) in &FORMATS {
        let bs = 1024;
        let (dev, map) = setup(bs, 256, compat, incompat, 7);
        let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
        let mut rng = Rng(3);
        let mut model = HashMap::new();
        for round in 0..12 {
            random_commit(&mut j, &mut rng, round, &mut model);
        }
        // Free some space so the tail is not at s_first, then snapshot.
        j.checkpoint_from_log(CheckpointGoal::Oldest).unwrap();
        let snap = j.snapshot();
        drop(j);
        let (j, scanned) = load_recover(&dev, &map);
        let from_snap =
            journal::snapshot::decode(&snap, j.superblock(), &j).unwrap().expect("a fresh snapshot is valid");
        assert_eq!(from_snap.blocks, scanned.blocks, "copies");
        let ext = |r: &Recovery| r.extents.iter().map(|t| (t.sequence, t.start, t.end, t.blocks)).collect::<Vec<_>>();
        assert_eq!(ext(&from_snap), ext(&scanned), "transactions");
        assert_eq!(
            (from_snap.head, from_snap.start_sequence, from_snap.end_sequence, from_snap.next_sequence),
            (scanned.head, scanned.start_sequence, scanned.end_sequence, scanned.next_sequence)
        );
        // Resume from it, commit more: the old snapshot no longer describes the log.
        let mut j = j;
        j.resume(&from_snap).unwrap();
        assert_model(&served_state(&j, &dev), &model, "served after a snapshot resume");
        random_commit(&mut j, &mut rng, 99, &mut model);
        drop(j);
        let (j, scanned) = load_recover(&dev, &map);
        let verdict = journal::snapshot::decode(&snap, j.superblock(), &j).unwrap();
        assert!(verdict.is_err(), "a snapshot the log moved past must be refused");
        assert_model(&replayed_state(&j, &scanned, &dev), &model, "after the second scan");
        // Damage: any flipped byte fails the checksum.
        let mut bad = snap.clone();
        bad[40] ^= 1;
        assert_eq!(
            journal::snapshot::decode(&bad, j.superblock(), &j).unwrap().unwrap_err(),
            journal::snapshot::Stale::Checksum
        );
    }
}

/// A snapshot's checksum only catches damage: anyone can compute it. One
/// forged with a valid checksum (a copy moved to another journal block, to
/// another transaction, a copy added or left out, a transaction shifted, a
/// revoked copy brought back) is refused because it is not what the log
/// says; the scan then serves the right contents.
#[test]
fn a_forged_snapshot_with_a_valid_checksum_is_refused() {
    use journal::snapshot::{decode, encode, Stale};
    for &(compat, incompat) in &FORMATS {
        let bs = 1024;
        let (dev, map) = setup(bs, 256, compat, incompat, 7);
        let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
        let mut rng = Rng(5);
        let mut model = HashMap::new();
        for round in 0..12 {
            random_commit(&mut j, &mut rng, round, &mut model);
        }
        // A revoke of a block logged before, so there is a revoked copy to bring back.
        let mut t = Transaction::new(bs);
        t.log(BLOCKS + 1, &content(bs, 50, BLOCKS + 1)).unwrap();
        j.commit(&t).unwrap();
        let mut t = Transaction::new(bs);
        t.revoke(BLOCKS + 1);
        t.log(2, &content(bs, 51, 2)).unwrap();
        j.commit(&t).unwrap();
        model.insert(2, content(bs, 51, 2));
        let snap = j.snapshot();
        drop(j);
        let (j, scanned) = load_recover(&dev, &map);
        let good = decode(&snap, j.superblock(), &j).unwrap().expect("the real snapshot is valid");
        assert_eq!(good.revoke_records, scanned.revoke_records, "verification rebuilds the revoke table");
        let forge = |f: &dyn Fn(&mut Recovery)| {
            let mut r = good.clone();
            f(&mut r);
            let entries: Vec<_> = r.blocks.iter().map(|(&b, &c)| (b, c)).collect();
            encode(j.superblock(), r.head, r.end_sequence, r.next_sequence, &r.extents, &entries)
        };
        let some = *good.blocks.keys().next().unwrap();
        let (other_jblock, other_seq) = good
            .blocks
            .values()
            .find(|c| c.jblock != good.blocks[&some].jblock)
            .map(|c| (c.jblock, c.sequence))
            .unwrap();
        let forgeries: Vec<(&str, Vec<u8>)> = vec![
            ("wrong journal block", forge(&|r| r.blocks.get_mut(&some).unwrap().jblock = other_jblock)),
            ("wrong sequence", forge(&|r| r.blocks.get_mut(&some).unwrap().sequence = other_seq.wrapping_add(1))),
            (
                "escape flag",
                forge(&|r| {
                    let c = r.blocks.get_mut(&some).unwrap();
                    c.escaped = !c.escaped;
                }),
            ),
            (
                "home block moved",
                forge(&|r| {
                    let c = r.blocks.remove(&some).unwrap();
                    r.blocks.insert(BLOCKS + 40, c);
                }),
            ),
            (
                "a copy left out",
                forge(&|r| {
                    r.blocks.remove(&some);
                }),
            ),
            (
                "a revoked copy brought back",
                forge(&|r| {
                    let c = ReplayedCopy {
                        jblock: scanned.extents[scanned.extents.len() - 2].start + 1,
                        escaped: false,
                        sequence: scanned.extents[scanned.extents.len() - 2].sequence,
                    };
                    r.blocks.insert(BLOCKS + 1, c);
                }),
            ),
            ("a copy outside the log", forge(&|r| r.blocks.get_mut(&some).unwrap().jblock = 100_000)),
            ("transaction shifted", forge(&|r| r.extents[0].start += 1)),
            (
                "a transaction left out",
                forge(&|r| {
                    r.extents.pop();
                }),
            ),
            ("head", forge(&|r| r.head = u64::from(r.superblock.first) + 1)),
            ("commit time", forge(&|r| r.extents.last_mut().unwrap().commit_sec += 1)),
        ];
        for (what, bytes) in forgeries {
            match decode(&bytes, j.superblock(), &j).unwrap() {
                Err(Stale::Mismatch(why)) => assert!(!why.is_empty(), "{what}"),
                other => panic!("{what}: a forged snapshot gave {:?}", other.map(|r| r.blocks.len())),
            }
        }
        // What the mount then serves is the scan's, the model.
        assert_model(&replayed_state(&j, &scanned, &dev), &model, "after refusing forgeries");
    }
}
