//! The write side (journal, transaction, commit, checkpoint, revoke) checked
//! by the read side: transactions written with `Journal::commit` on an
//! in-memory device, then `recover` run over what is on the "disk" after a
//! simulated crash. Every format variant, revokes, escaping, multi-descriptor
//! transactions, wrap-around, a full log, sequences across `empty`, replay to
//! disk, crash cuts at every write, and where the writes go.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use blockdev::IoClass;
use common::dev::{
    after_replay, apply, commit_to_model, content, empty_journal_at, load_recover, unflushed_dropped, MemDevice, Op,
    Rng,
};
use common::{V3_32, V3_64};
use journal::{CheckpointGoal, Error, Journal, JournalMap, Transaction};
use ondisk::jbd2::*;

/// Journal blocks live at device block JPHYS (second half after a gap, so
/// the map has two runs); static blocks used by the tests are below 64.
const JPHYS: u64 = 100;
const GAP: u64 = 7;

/// A device with an empty journal (s_start = 0, s_sequence = seq).
fn setup(bs: u32, jlen: u32, compat: u32, incompat: u32, seq: u32) -> (Arc<MemDevice>, JournalMap) {
    empty_journal_at(JPHYS, GAP, bs, jlen, compat, incompat, seq)
}

fn magic_block(bs: u32) -> Vec<u8> {
    let mut v = vec![0xEEu8; bs as usize];
    v[..4].copy_from_slice(&MAGIC.to_be_bytes());
    v
}

const FORMATS: [(u32, u32); 7] = [
    (0, V3_64),
    (0, V3_32),
    (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT | FEATURE_INCOMPAT_CSUM_V2),
    (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V2),
    (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT),
    (0, FEATURE_INCOMPAT_REVOKE),
    (FEATURE_COMPAT_CHECKSUM, FEATURE_INCOMPAT_REVOKE),
];

#[test]
fn round_trip_in_every_format() {
    for bs in [1024u32, 4096] {
        for (compat, incompat) in FORMATS {
            let what = format!("bs {bs} compat {compat:#x} incompat {incompat:#x}");
            let (dev, map) = setup(bs, 1024, compat, incompat, 41);
            let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
            assert!(!j.needs_recovery());
            assert_eq!(j.next_sequence(), 42);

            let mut t1 = Transaction::new(bs);
            t1.log(10, &content(bs, 1, 10)).unwrap();
            t1.log(11, &content(bs, 1, 11)).unwrap();
            t1.log(12, &magic_block(bs)).unwrap();
            let c1 = j.commit(&t1).unwrap().unwrap();
            assert_eq!(c1.sequence, 42);
            assert!(c1.blocks.iter().any(|l| l.block == 12 && l.escaped));
            let mut t2 = Transaction::new(bs);
            t2.log(10, &content(bs, 2, 10)).unwrap();
            t2.log(13, &content(bs, 2, 13)).unwrap();
            let c2 = j.commit(&t2).unwrap().unwrap();
            let mut t3 = Transaction::new(bs);
            t3.revoke(11);
            t3.log(14, &content(bs, 3, 14)).unwrap();
            // More tags than one descriptor holds.
            for b in 1000..1200 {
                t3.log(b, &content(bs, 3, b)).unwrap();
            }
            let c3 = j.commit(&t3).unwrap().unwrap();
            assert_eq!(c3.start, c2.end);
            assert_eq!(j.head(), c3.end);
            assert_eq!(j.superblock().start, 1, "{what}");

            let (j2, r) = load_recover(&dev, &map);
            assert!(j2.needs_recovery());
            assert_eq!(r.transactions, 3, "{what}");
            assert_eq!(r.start_sequence, 42);
            assert_eq!(r.next_sequence, 46);
            assert_eq!(r.head, c3.end);
            assert!(r.bad_data_blocks.is_empty() && r.failed_commit.is_none());
            assert_eq!(r.revoke_records, 1);
            assert_eq!(after_replay(&j2, &r, &dev, 10), content(bs, 2, 10), "{what}");
            assert!(r.copy(11).is_none(), "{what}: revoked block replayed");
            assert_eq!(after_replay(&j2, &r, &dev, 12), magic_block(bs), "{what}");
            assert_eq!(after_replay(&j2, &r, &dev, 13), content(bs, 2, 13));
            for b in (1000..1200).chain([14]) {
                assert_eq!(after_replay(&j2, &r, &dev, b), content(bs, 3, b), "{what} block {b}");
            }
            // Where each copy landed is what recovery finds.
            for l in c2.blocks.iter().chain(&c3.blocks) {
                assert_eq!(r.copy(l.block).unwrap().jblock, l.jblock);
            }
        }
    }
}

#[test]
fn unsupported_and_invalid_requests_are_refused() {
    // No revoke feature: revoke records refused, nothing written.
    let (dev, map) = setup(1024, 256, 0, FEATURE_INCOMPAT_64BIT | FEATURE_INCOMPAT_CSUM_V3, 1);
    let mut j = Journal::load(dev.clone(), map).unwrap();
    let mut t = Transaction::new(1024);
    t.revoke(5);
    assert!(matches!(j.commit(&t), Err(Error::Format(ondisk::FormatError::Unsupported { .. }))));
    assert!(dev.take_ops().is_empty());
    // 32-bit tags cannot name block 2^32.
    let (dev, map) = setup(1024, 256, 0, FEATURE_INCOMPAT_REVOKE, 1);
    let mut j = Journal::load(dev, map).unwrap();
    let mut t = Transaction::new(1024);
    t.log(1 << 32, &[0; 1024]).unwrap();
    assert!(matches!(j.commit(&t), Err(Error::Invalid(_))));
    assert!(matches!(j.commit(&Transaction::new(4096)), Ok(None)));
    let mut t = Transaction::new(4096);
    t.log(1, &[0; 4096]).unwrap();
    assert!(matches!(j.commit(&t), Err(Error::Invalid(_))));
    // Bad runs.
    assert!(JournalMap::new(vec![(0, 10, 5), (6, 20, 5)], 11, 1024).is_err());
    assert!(JournalMap::new(vec![(0, 10, 5), (5, 12, 5)], 10, 1024).is_err());
    assert!(JournalMap::new(vec![(0, 10, 5)], 6, 1024).is_err());
}

/// Many transactions through a small log, checkpointing when it is full, so
/// the log wraps many times; after every commit a crash must give back the
/// newest committed contents of every block (replayed or already home).
fn wraps(incompat: u32, fc_blocks: u32) {
    let bs = 1024;
    let (dev, map) = setup(bs, 300, 0, incompat, 7);
    if fc_blocks > 0 {
        let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
        let mut sb = j.superblock().clone();
        sb.feature_incompat |= FEATURE_INCOMPAT_FAST_COMMIT;
        sb.num_fc_blocks = fc_blocks;
        let mut block = vec![0u8; bs as usize];
        sb.write_to(&mut block).unwrap();
        dev.put_block(bs, map.phys(0).unwrap(), &block);
        j = Journal::load(dev.clone(), map.clone()).unwrap();
        assert_eq!(j.log_area().1, u64::from(300 - fc_blocks));
    }
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let log_end = j.log_area().1;
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut wrapped = 0;
    let mut rng = Rng(12345);
    for round in 1..=120u64 {
        let mut t = Transaction::new(bs);
        for _ in 0..1 + rng.below(25) {
            let b = rng.below(60);
            t.log(b, &content(bs, round, b)).unwrap();
        }
        if rng.below(4) == 0 {
            let b = rng.below(60);
            if t.get(b).is_none() {
                t.revoke(b);
            }
        }
        let needed = t.journal_blocks(j.layout());
        assert!(needed <= j.max_transaction_blocks());
        if j.space_left() < needed {
            assert!(j.needs_checkpoint());
            let s = j.checkpoint_from_log(CheckpointGoal::Space(needed)).unwrap();
            assert!(s.transactions_freed > 0);
        }
        let before = j.head();
        let c = j.commit(&t).unwrap().unwrap();
        if c.end < before {
            wrapped += 1;
        }
        assert!(c.blocks.iter().all(|l| l.jblock < log_end));
        commit_to_model(&t, &mut model);
        if round % 7 == 0 {
            let (j2, r) = load_recover(&dev, &map);
            assert!(r.bad_data_blocks.is_empty());
            assert_eq!(r.last_transaction, Some(c.sequence));
            assert_eq!(r.head, c.end);
            for (b, want) in &model {
                assert_eq!(&after_replay(&j2, &r, &dev, *b), want, "round {round} block {b}");
            }
            for b in t.revoked() {
                assert!(r.copy(b).is_none());
            }
        }
    }
    assert!(wrapped >= 3, "log wrapped only {wrapped} times");
    // Everything home, then empty: nothing left to replay, contents home.
    j.checkpoint_from_log(CheckpointGoal::All).unwrap();
    j.empty().unwrap();
    let (j2, r) = load_recover(&dev, &map);
    assert!(!r.needed && !j2.needs_recovery());
    for (b, want) in &model {
        assert_eq!(&dev.block(bs, *b), want);
    }
}

#[test]
fn wrap_around_with_checkpoints() {
    wraps(V3_64, 0);
    wraps(FEATURE_INCOMPAT_REVOKE, 0);
}

/// Transactions larger than a commit's staging buffer (4 MiB) go to the log
/// in several writes, one of them split where the log wraps: each must
/// replay whole, with escaped copies and revokes, in every checksum kind.
#[test]
fn large_transactions_stream_through_the_wrap() {
    let bs = 4096;
    for (compat, incompat) in [(0, V3_64), (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V2), FORMATS[6]] {
        let (dev, map) = common::dev::empty_journal_at(3000, GAP, bs, 2500, compat, incompat, 5);
        let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
        let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut wrapped = 0;
        for round in 1..=4u64 {
            let mut t = Transaction::new(bs);
            // 1,500 distinct blocks below 2,900 (7 is prime to 2,900): 6 MiB.
            for i in 0..1500u64 {
                let b = (i * 7 + round * 13) % 2900;
                let data = if i % 300 == 0 { magic_block(bs) } else { content(bs, round, b) };
                t.log(b, &data).unwrap();
            }
            let revoked = 2950 + round;
            t.revoke(revoked);
            let needed = t.journal_blocks(j.layout());
            if j.space_left() < needed {
                j.checkpoint_from_log(CheckpointGoal::Space(needed)).unwrap();
            }
            let before = j.head();
            let c = j.commit(&t).unwrap().unwrap();
            wrapped += usize::from(c.end < before);
            commit_to_model(&t, &mut model);
            let (j2, r) = load_recover(&dev, &map);
            assert!(r.bad_data_blocks.is_empty(), "round {round}");
            assert_eq!(r.last_transaction, Some(c.sequence));
            for (b, want) in &model {
                assert!(
                    &after_replay(&j2, &r, &dev, *b) == want,
                    "round {round} block {b} ({compat:#x}, {incompat:#x})"
                );
            }
            assert!(r.copy(revoked).is_none());
        }
        assert!(wrapped >= 1, "the log never wrapped");
    }
}

#[test]
fn fast_commit_area_is_never_used() {
    wraps(V3_64, 40);
}

#[test]
fn full_log_refuses_until_checkpointed() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, 0, V3_32, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut committed = 0;
    let err = loop {
        let mut t = Transaction::new(bs);
        for b in 0..30 {
            t.log(b, &content(bs, committed, b)).unwrap();
        }
        match j.commit(&t) {
            Ok(_) => committed += 1,
            Err(e) => break e,
        }
        assert!(committed < 100);
    };
    assert!(matches!(err, Error::NoSpace { needed: 32, .. }), "{err}");
    assert!(committed >= 6);
    let fill = j.fill();
    assert_eq!(fill.live_transactions, committed as usize);
    assert!(fill.used + fill.space_left + journal::journal::RESERVED_BLOCKS == fill.log_blocks);
    assert!(j.needs_checkpoint());
    // A failed commit writes nothing and changes nothing.
    let head = j.head();
    let mut t = Transaction::new(bs);
    t.log(50, &content(bs, 99, 50)).unwrap();
    for b in 0..30 {
        t.log(b, &content(bs, 99, b)).unwrap();
    }
    assert!(j.commit(&t).is_err());
    assert_eq!(j.head(), head);
    // Every transaction logged blocks 0..30: only the newest holds live
    // copies, so checkpointing the oldest writes nothing and frees all the
    // others at once (jbd2 too moves a re-logged buffer to the newest
    // transaction's checkpoint list).
    let newest = j.live_transactions().last().unwrap().clone();
    let s = j.checkpoint_from_log(CheckpointGoal::Oldest).unwrap();
    assert_eq!(s.transactions_freed, committed as usize - 1);
    assert_eq!(s.written, 0);
    assert_eq!(j.oldest_live(), Some(&newest));
    assert_eq!(j.live_count(newest.sequence), 30);
    assert_eq!(j.superblock().sequence, newest.sequence);
    assert_eq!(u64::from(j.superblock().start), newest.start);
    assert_eq!(j.tail(), newest.start);
    j.commit(&t).unwrap().unwrap();
    let (j2, r) = load_recover(&dev, &map);
    assert_eq!(r.transactions, 2);
    assert_eq!(after_replay(&j2, &r, &dev, 50), content(bs, 99, 50));
    // The new transaction superseded all of it; then everything goes home.
    let s = j.checkpoint_from_log(CheckpointGoal::Oldest).unwrap();
    assert_eq!((s.written, s.transactions_freed), (0, 1));
    let s = j.checkpoint_from_log(CheckpointGoal::All).unwrap();
    assert_eq!((s.written, s.transactions_freed), (31, 1));
    assert!(j.oldest_live().is_none());
    assert_eq!(j.superblock().sequence, j.next_sequence());
    assert_eq!(u64::from(j.superblock().start), j.head());
    assert_eq!(j.tail(), j.head());
    assert_eq!(j.jmap_stats().entries, 0);
    for b in 0..30 {
        assert_eq!(dev.block(bs, b), content(bs, 99, b));
    }
}

#[test]
fn caller_supplied_checkpoint_and_writeback() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, 0, V3_32, 1);
    let mut j = Journal::load(dev.clone(), map).unwrap();
    let mut t = Transaction::new(bs);
    t.log(3, &content(bs, 1, 3)).unwrap();
    t.log(4, &content(bs, 1, 4)).unwrap();
    t.log(5, &content(bs, 1, 5)).unwrap();
    j.commit(&t).unwrap();
    // The fs layer's writeback wrote block 3 itself.
    dev.put_block(bs, 3, &content(bs, 1, 3));
    j.written_home([3]);
    // Block 5 was freed: the cache declines it.
    let mut asked = Vec::new();
    let s = j
        .checkpoint(CheckpointGoal::All, |b, buf| {
            asked.push(b);
            if b == 5 {
                return Ok(false);
            }
            buf.copy_from_slice(&content(bs, 1, b));
            Ok(true)
        })
        .unwrap();
    assert_eq!(asked, vec![4, 5]);
    assert_eq!((s.written, s.skipped, s.transactions_freed), (1, 1, 1));
    assert_eq!(dev.block(bs, 4), content(bs, 1, 4));
    assert_eq!(dev.block(bs, 5), vec![0; bs as usize]);
    assert!(j.oldest_live().is_none());
    // An I/O error from the cache fails the checkpoint, nothing is freed.
    let mut t = Transaction::new(bs);
    t.log(6, &content(bs, 2, 6)).unwrap();
    j.commit(&t).unwrap();
    let e = j.checkpoint(CheckpointGoal::All, |_, _| Err(std::io::Error::other("boom")));
    assert!(matches!(e, Err(Error::HomeIo { block: 6, .. })));
    assert_eq!(j.fill().live_transactions, 1);
}

#[test]
fn checkpoint_writes_each_run_of_neighbours_as_one_request() {
    // 598 live blocks in six transactions (more than one chunk of the
    // checkpoint's gathering): 0..300 and 302..600, with 450 declined by
    // the cache. Home writes must be one request per run of consecutive
    // blocks, in block order, and leave every block's newest copy home.
    let bs = 1024;
    let blocks: Vec<u64> = (0..600).filter(|b| !(300..302).contains(b)).collect();
    let newest = |b: u64| content(bs, (blocks.iter().position(|&x| x == b).unwrap() / 100) as u64 + 1, b);
    for from_log in [false, true] {
        // Static blocks below the journal, which starts at device block 1000.
        let (dev, map) = empty_journal_at(1000, GAP, bs, 1024, 0, V3_64, 1);
        let mut j = Journal::load(dev.clone(), map).unwrap();
        for (round, part) in blocks.chunks(100).enumerate() {
            let mut t = Transaction::new(bs);
            for &b in part {
                t.log(b, &content(bs, round as u64 + 1, b)).unwrap();
            }
            j.commit(&t).unwrap();
        }
        dev.take_ops();
        let s = if from_log {
            j.checkpoint_from_log(CheckpointGoal::All).unwrap()
        } else {
            j.checkpoint(CheckpointGoal::All, |b, buf| {
                buf.copy_from_slice(&newest(b));
                Ok(b != 450)
            })
            .unwrap()
        };
        let homes: Vec<(u64, u64)> = dev
            .take_ops()
            .iter()
            .filter_map(|o| match o {
                Op::Write { offset, data, class: IoClass::Metadata } => {
                    Some((offset / u64::from(bs), data.len() as u64 / u64::from(bs)))
                }
                _ => None,
            })
            .collect();
        // Gathered in chunks of 256 blocks in block order: 0..256 | 256..300,
        // 302..514 | 514..600.
        let want: Vec<(u64, u64)> = if from_log {
            vec![(0, 256), (256, 44), (302, 212), (514, 86)]
        } else {
            vec![(0, 256), (256, 44), (302, 148), (451, 63), (514, 86)]
        };
        assert_eq!(homes, want, "from the log: {from_log}");
        assert_eq!(s.written, if from_log { 598 } else { 597 });
        assert_eq!(s.skipped, 598 - s.written);
        assert_eq!(s.transactions_freed, 6);
        for &b in &blocks {
            if from_log || b != 450 {
                assert_eq!(dev.block(bs, b), newest(b), "block {b}");
            }
        }
    }
}

#[test]
fn sequence_keeps_increasing_across_empty_and_remount() {
    let bs = 4096;
    let (dev, map) = setup(bs, 1024, 0, V3_64, u32::MAX - 2);
    let mut last = None;
    for mount in 0..4 {
        let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
        assert!(!j.needs_recovery());
        for i in 0..3 {
            let mut t = Transaction::new(bs);
            t.log(20 + i, &content(bs, mount * 10 + i, 20 + i)).unwrap();
            let c = j.commit(&t).unwrap().unwrap();
            if let Some(prev) = last {
                assert!(journal::tid_gt(c.sequence, prev), "{} after {prev}", c.sequence);
            }
            last = Some(c.sequence);
        }
        j.checkpoint_from_log(CheckpointGoal::All).unwrap();
        j.empty().unwrap();
        let sb = j.superblock();
        assert_eq!(sb.start, 0);
        assert!(journal::tid_gt(sb.sequence, last.unwrap()));
        for i in 0..3 {
            assert_eq!(dev.block(bs, 20 + i), content(bs, mount * 10 + i, 20 + i));
        }
    }
}

#[test]
fn replay_to_disk_writes_home_and_empties() {
    let bs = 1024;
    let (dev, map) = setup(bs, 512, 0, V3_64, 500);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut t = Transaction::new(bs);
    t.log(8, &magic_block(bs)).unwrap();
    t.log(9, &content(bs, 1, 9)).unwrap();
    j.commit(&t).unwrap();
    let mut t = Transaction::new(bs);
    t.revoke(9);
    let c = j.commit(&t).unwrap().unwrap();
    drop(j);

    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    assert!(j.needs_recovery());
    assert!(matches!(j.commit(&t), Err(Error::NeedsRecovery)));
    let r = j.recover().unwrap();
    assert_eq!(r.transactions, 2);
    dev.take_ops();
    assert_eq!(j.replay_to_disk(&r).unwrap(), 1);
    let ops = dev.take_ops();
    let homes: Vec<u64> = ops
        .iter()
        .filter_map(|o| match o {
            Op::Write { offset, class: IoClass::Metadata, .. } => Some(offset / u64::from(bs)),
            _ => None,
        })
        .collect();
    assert_eq!(homes, vec![8]);
    assert_eq!(dev.block(bs, 8), magic_block(bs));
    assert_eq!(dev.block(bs, 9), vec![0; bs as usize]);
    assert_eq!(j.superblock().start, 0);
    assert!(!j.needs_recovery());
    assert_eq!(j.next_sequence(), r.next_sequence);
    assert!(journal::tid_gt(j.next_sequence(), c.sequence));
    // The next transaction is found on its own by the next recovery.
    let mut t = Transaction::new(bs);
    t.log(10, &content(bs, 5, 10)).unwrap();
    let c2 = j.commit(&t).unwrap().unwrap();
    assert_eq!(c2.sequence, r.next_sequence);
    let (_, r2) = load_recover(&dev, &map);
    assert_eq!(r2.transactions, 1);
    assert_eq!(r2.blocks.keys().copied().collect::<Vec<_>>(), vec![10]);
}

/// Cut the write stream at every point (a crash loses everything after the
/// cut): recovery must give exactly the first k transactions for some k, k
/// never decreases with the cut, and every transaction whose final flush is
/// inside the cut is replayed.
#[test]
fn crash_at_every_write_is_all_or_nothing() {
    for (compat, incompat) in FORMATS {
        let bs = 1024;
        let (dev, map) = setup(bs, 256, compat, incompat, 9);
        let base = dev.snapshot();
        let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
        let mut states: Vec<HashMap<u64, Vec<u8>>> = vec![HashMap::new()];
        let mut durable_at = Vec::new();
        for round in 1..=12u64 {
            let mut t = Transaction::new(bs);
            for b in 0..(round % 5 + 1) {
                t.log(b * 3 + round % 2, &content(bs, round, b)).unwrap();
            }
            if round % 4 == 0 {
                t.revoke(0);
            }
            if j.space_left() < t.journal_blocks(j.layout()) {
                j.checkpoint_from_log(CheckpointGoal::Oldest).unwrap();
            }
            j.commit(&t).unwrap();
            durable_at.push(dev.ops.lock().unwrap().len());
            let mut s = states.last().unwrap().clone();
            commit_to_model(&t, &mut s);
            states.push(s);
        }
        let ops = dev.take_ops();
        // A disk may lose or reorder writes not yet flushed: keep only the
        // last write since the last flush before the cut. Still a committed state.
        for cut in 0..=ops.len() {
            let img = Arc::new(MemDevice::from_bytes(apply(&base, &unflushed_dropped(&ops, cut))));
            let (j2, r) = load_recover(&img, &map);
            assert!(
                states.iter().any(|st| st.iter().all(|(b, d)| &after_replay(&j2, &r, &img, *b) == d)
                    && (0..64).all(|b| st.contains_key(&b) || !r.blocks.contains_key(&b))),
                "{incompat:#x} cut {cut} with unflushed writes dropped: not a committed state"
            );
        }
        let mut prev_k = 0;
        for cut in 0..=ops.len() {
            let img = Arc::new(MemDevice::from_bytes(apply(&base, &ops[..cut])));
            let (j2, r) = load_recover(&img, &map);
            // The state after replay is one of the committed states.
            let k = (0..states.len())
                .rev()
                .find(|&k| {
                    states[k].iter().all(|(b, d)| &after_replay(&j2, &r, &img, *b) == d)
                        && (0..64).all(|b| states[k].contains_key(&b) || !r.blocks.contains_key(&b))
                })
                .unwrap_or_else(|| panic!("{incompat:#x} cut {cut}: not a committed state"));
            assert!(k >= prev_k, "cut {cut}: went back from {prev_k} to {k}");
            let durable = durable_at.iter().filter(|&&d| d <= cut).count();
            assert!(k >= durable, "cut {cut}: {durable} durable but state {k}");
            prev_k = k;
        }
        assert_eq!(prev_k, 12);
    }
}

/// Every journal write lands inside the journal's runs; home writes only in
/// checkpoint/replay, as class Metadata, to blocks that were logged.
#[test]
fn writes_stay_inside_the_journal() {
    let bs = 1024;
    let jlen = 300u64;
    let (dev, map) = setup(bs, jlen as u32, 0, V3_32, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut logged = std::collections::HashSet::new();
    for round in 0..60u64 {
        let mut t = Transaction::new(bs);
        for b in 0..(round % 9 + 1) {
            let blk = (b * 7 + round) % 64;
            t.log(blk, &content(bs, round, blk)).unwrap();
            logged.insert(blk);
        }
        if j.needs_checkpoint() {
            j.checkpoint_from_log(CheckpointGoal::Space(j.max_transaction_blocks())).unwrap();
        }
        j.commit(&t).unwrap();
    }
    j.checkpoint_from_log(CheckpointGoal::All).unwrap();
    j.empty().unwrap();
    let in_journal = |b: u64| (0..jlen).any(|jb| map.phys(jb) == Some(b));
    let (mut jw, mut mw) = (0, 0);
    for op in dev.take_ops() {
        let Op::Write { offset, data, class } = op else {
            continue;
        };
        let first = offset / u64::from(bs);
        let n = data.len() as u64 / u64::from(bs);
        assert_eq!(offset % u64::from(bs), 0);
        for b in first..first + n {
            match class {
                IoClass::Journal => {
                    assert!(in_journal(b), "journal write outside the runs at device block {b}");
                    jw += 1;
                }
                IoClass::Metadata => {
                    assert!(logged.contains(&b) && !in_journal(b), "home write to {b}");
                    mw += 1;
                }
                IoClass::Data => panic!("data write from the journal"),
            }
        }
    }
    assert!(jw > 0 && mw > 0);
    // The gap between the two runs was never touched.
    for b in JPHYS + jlen / 2..JPHYS + jlen / 2 + GAP {
        assert_eq!(dev.block(bs, b), vec![0; bs as usize]);
    }
}

#[test]
fn running_transaction_from_many_threads() {
    let bs = 1024;
    let (dev, map) = setup(bs, 1024, 0, V3_64, 1);
    let running = Arc::new(journal::Running::new(bs));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let running = running.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    running.log(t * 100 + i, &content(bs, t, i)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let txn = running.take();
    assert_eq!(txn.len(), 200);
    j.commit(&txn).unwrap();
    let (j2, r) = load_recover(&dev, &map);
    assert_eq!(r.blocks.len(), 200);
    assert_eq!(after_replay(&j2, &r, &dev, 302), content(bs, 3, 2));
}

#[test]
fn features_are_set_as_ext4_does_only_on_an_empty_log() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, FEATURE_COMPAT_CHECKSUM, 0, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut t = Transaction::new(bs);
    t.revoke(3);
    assert!(j.commit(&t).is_err());
    let (compat, incompat) = journal::ext4_features(true, true);
    j.set_features(compat, incompat).unwrap();
    let sb = j.superblock();
    assert_eq!(sb.feature_compat, 0, "csum v3 replaces v1");
    assert_eq!(sb.feature_incompat, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT | FEATURE_INCOMPAT_CSUM_V3);
    assert_eq!(j.layout().checksum, Checksum::V3);
    t.log(4, &content(bs, 1, 4)).unwrap();
    j.commit(&t).unwrap();
    // Not while transactions are live.
    assert!(matches!(j.set_features(0, FEATURE_INCOMPAT_ASYNC_COMMIT), Err(Error::NotCheckpointed { .. })));
    let (j2, r) = load_recover(&dev, &map);
    assert_eq!(j2.layout().checksum, Checksum::V3);
    assert_eq!(r.transactions, 1);
    assert_eq!(r.revoke_records, 1);
}

#[test]
fn oldest_checkpoint_frees_only_what_is_home() {
    let bs = 1024;
    let (dev, map) = setup(bs, 256, 0, V3_32, 1);
    let mut j = Journal::load(dev.clone(), map.clone()).unwrap();
    let mut seqs = Vec::new();
    for round in 0..3u64 {
        let mut t = Transaction::new(bs);
        t.log(round, &content(bs, round, round)).unwrap();
        t.log(10, &content(bs, round, 10)).unwrap();
        seqs.push(j.commit(&t).unwrap().unwrap());
    }
    // Block 10's newest copy is in round 2's transaction: the oldest one
    // only has block 0 left to write home.
    assert_eq!(j.live_count(seqs[0].sequence), 1);
    let s = j.checkpoint_from_log(CheckpointGoal::Oldest).unwrap();
    assert_eq!((s.written, s.transactions_freed), (1, 1));
    assert_eq!(dev.block(bs, 10), vec![0; bs as usize]);
    assert_eq!(dev.block(bs, 0), content(bs, 0, 0));
    let live: Vec<(u32, BTreeSet<u64>)> =
        j.live_transactions().map(|t| (t.sequence, j.live_blocks(t.sequence).collect())).collect();
    assert_eq!(live, vec![(seqs[1].sequence, [1].into()), (seqs[2].sequence, [2, 10].into())]);
    assert_eq!(j.tail_live_blocks(1).len(), 1);
    assert_eq!(j.tail_live_blocks(9), vec![1]);
    assert_eq!(j.tail(), seqs[1].start);
    assert_eq!(j.superblock().sequence, seqs[1].sequence);
    // A crash now replays transactions 2 and 3 only.
    let (j2, r) = load_recover(&dev, &map);
    assert_eq!(r.start_sequence, seqs[1].sequence);
    assert_eq!(r.transactions, 2);
    assert_eq!(after_replay(&j2, &r, &dev, 10), content(bs, 2, 10));
    // The fs layer's own writeback of block 1 frees transaction 2 at the next advance.
    dev.put_block(bs, 1, &content(bs, 1, 1));
    j.written_home([1]);
    assert_eq!(j.advance_tail().unwrap(), 1);
    assert_eq!(j.tail(), seqs[2].start);
    assert_eq!(j.newest_copy(10).map(|c| c.sequence), Some(seqs[2].sequence));
}
