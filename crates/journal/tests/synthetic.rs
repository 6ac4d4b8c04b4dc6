//! Recovery against journals written in memory with the ondisk serialisers:
//! every format variant, revoke semantics, checksum failures, wrap-around,
//! fast commits, and hostile input.

mod common;

use common::*;
use journal::{recover, Error, JournalReader};
use ondisk::jbd2::*;
use ondisk::{Corruption, FormatError};
use proptest::prelude::*;

fn replayed(j: &MemJournal, r: &journal::Recovery, block: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; j.bs as usize];
    r.read_replayed(j, block, &mut buf).unwrap().then_some(buf)
}

#[test]
fn clean_journal_needs_nothing() {
    let mut b = Builder::new(1024, 256, 0, V3_64);
    b.sb.start = 0;
    let r = recover(&b.finish()).unwrap();
    assert!(!r.needed);
    assert!(r.blocks.is_empty());
    assert_eq!(r.next_sequence, 101);
    assert_eq!(r.head, 1);
}

#[test]
fn newest_copy_wins_in_every_format() {
    let formats = [
        (0, V3_64),
        (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V3),
        (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT | FEATURE_INCOMPAT_CSUM_V2),
        (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V2),
        (0, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT),
        (0, FEATURE_INCOMPAT_REVOKE),
        (FEATURE_COMPAT_CHECKSUM, FEATURE_INCOMPAT_REVOKE),
        (FEATURE_COMPAT_CHECKSUM, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_ASYNC_COMMIT),
    ];
    for (compat, incompat) in formats {
        let mut b = Builder::new(1024, 256, compat, incompat);
        b.data(&[(10, fill(1024, 1)), (11, fill(1024, 2))]);
        b.commit();
        let j2 = b.data(&[(10, fill(1024, 3))]);
        let end = b.commit();
        let j = b.finish();
        let r = recover(&j).unwrap_or_else(|e| panic!("{compat:#x}/{incompat:#x}: {e}"));
        assert!(r.needed);
        assert_eq!(r.transactions, 2, "{incompat:#x}");
        assert_eq!(r.start_sequence, 100);
        assert_eq!(r.end_sequence, 102);
        assert_eq!(r.next_sequence, 103);
        assert_eq!(r.last_transaction, Some(101));
        assert_eq!(r.head, end + 1);
        assert_eq!(r.replayed_tags, 3);
        assert_eq!(r.copy(10).unwrap().jblock, j2[0]);
        assert_eq!(r.copy(10).unwrap().sequence, 101);
        assert_eq!(replayed(&j, &r, 10).unwrap(), fill(1024, 3));
        assert_eq!(replayed(&j, &r, 11).unwrap(), fill(1024, 2));
        assert_eq!(replayed(&j, &r, 12), None);
    }
}

#[test]
fn high_block_numbers_need_64bit() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(0x1_2345_6789, fill(1024, 9))]);
    b.commit();
    let r = recover(&b.finish()).unwrap();
    assert!(r.copy(0x1_2345_6789).is_some());
}

#[test]
fn escaped_magic_is_restored() {
    let mut data = fill(1024, 0x42);
    data[..4].copy_from_slice(&MAGIC.to_be_bytes());
    let mut b = Builder::new(1024, 64, 0, V3_64);
    let jb = b.data(&[(5, data.clone())]);
    b.commit();
    let j = b.finish();
    assert_eq!(&j.block(jb[0])[..4], &[0, 0, 0, 0]);
    let r = recover(&j).unwrap();
    assert!(r.copy(5).unwrap().escaped);
    assert_eq!(replayed(&j, &r, 5).unwrap(), data);
}

#[test]
fn revoke_cancels_same_and_older_transactions_only() {
    let mut b = Builder::new(1024, 128, 0, V3_64);
    b.data(&[(1, fill(1024, 1)), (2, fill(1024, 1)), (3, fill(1024, 1))]); // T100
    b.commit();
    b.revoke(&[1, 3]); // T101 revokes 1 and 3 ...
    b.data(&[(3, fill(1024, 2))]); // ... including its own copy of 3
    b.commit();
    b.data(&[(1, fill(1024, 3))]); // T102: a later copy of 1 survives
    b.commit();
    let j = b.finish();
    let r = recover(&j).unwrap();
    assert_eq!(r.revoke_records, 2);
    assert_eq!(r.revoke_hits, 3); // T100: 1 and 3; T101: its own 3
    assert_eq!(replayed(&j, &r, 1).unwrap(), fill(1024, 3));
    assert_eq!(replayed(&j, &r, 2).unwrap(), fill(1024, 1));
    assert_eq!(r.copy(3), None);
}

#[test]
fn uncommitted_transaction_is_ignored() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    b.data(&[(7, fill(1024, 2)), (8, fill(1024, 2))]); // no commit
    let j = b.finish();
    let r = recover(&j).unwrap();
    assert_eq!(r.transactions, 1);
    assert_eq!(r.end_sequence, 101);
    assert_eq!(replayed(&j, &r, 7).unwrap(), fill(1024, 1));
    assert_eq!(r.copy(8), None);
}

#[test]
fn sequence_jump_ends_the_log() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    b.seq += 5; // a stale transaction from another epoch
    b.data(&[(8, fill(1024, 2))]);
    b.commit();
    let r = recover(&b.finish()).unwrap();
    assert_eq!(r.transactions, 1);
    assert_eq!(r.copy(8), None);
}

#[test]
fn bad_commit_checksum_stops_replay() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    b.data(&[(7, fill(1024, 2))]);
    let c = b.commit();
    b.data(&[(9, fill(1024, 2))]);
    b.commit();
    let mut j = b.finish();
    j.block_mut(c)[200] ^= 1;
    let r = recover(&j).unwrap();
    assert_eq!(r.failed_commit, Some(101));
    assert_eq!(r.end_sequence, 101);
    assert_eq!(replayed(&j, &r, 7).unwrap(), fill(1024, 1));
    assert_eq!(r.copy(9), None);
}

#[test]
fn bad_v1_commit_checksum_stops_replay() {
    let mut b = Builder::new(1024, 64, FEATURE_COMPAT_CHECKSUM, FEATURE_INCOMPAT_REVOKE);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    let d = b.data(&[(7, fill(1024, 2))]);
    b.commit();
    let mut j = b.finish();
    j.block_mut(d[0])[5] ^= 1; // data change breaks the transaction crc32
    let r = recover(&j).unwrap();
    assert_eq!(r.failed_commit, Some(101));
    assert_eq!(replayed(&j, &r, 7).unwrap(), fill(1024, 1));
}

#[test]
fn bad_data_checksum_skips_only_that_copy() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    let d = b.data(&[(7, fill(1024, 2)), (8, fill(1024, 2))]);
    b.commit();
    let mut j = b.finish();
    j.block_mut(d[0])[9] ^= 1;
    let r = recover(&j).unwrap();
    assert_eq!(r.transactions, 2);
    assert!(r.kernel_would_fail());
    assert_eq!(r.bad_data_blocks, vec![journal::BadDataBlock { block: 7, jblock: d[0], sequence: 101 }]);
    assert_eq!(replayed(&j, &r, 7).unwrap(), fill(1024, 1)); // the older copy stays
    assert_eq!(replayed(&j, &r, 8).unwrap(), fill(1024, 2));
}

#[test]
fn bad_descriptor_checksum_is_corruption_unless_stale() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    let d = b.data(&[(7, fill(1024, 2))]);
    b.commit();
    let mut j = b.finish();
    j.block_mut(d[0] - 1)[100] ^= 1; // the descriptor
    assert!(matches!(recover(&j), Err(Error::Format(FormatError::Corrupt { .. }))));

    // Same, but the commit is older than the previous one: stale, log ends there.
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.data(&[(7, fill(1024, 1))]);
    b.commit();
    b.time = 10;
    let d = b.data(&[(7, fill(1024, 2))]);
    b.commit();
    let mut j = b.finish();
    j.block_mut(d[0] - 1)[100] ^= 1;
    let r = recover(&j).unwrap();
    assert_eq!(r.transactions, 1);
    assert_eq!(replayed(&j, &r, 7).unwrap(), fill(1024, 1));
}

#[test]
fn log_wraps_around() {
    // Log area is blocks 1..32; start near its end.
    let mut b = Builder::with_start(1024, 32, 0, V3_64, 28, 7);
    b.data(&[(1, fill(1024, 1)), (2, fill(1024, 1))]); // 28 desc, 29, 30
    b.commit(); // 31
    let d = b.data(&[(1, fill(1024, 2)), (3, fill(1024, 2))]); // wraps: 1 desc, 2, 3
    let c = b.commit(); // 4
    let j = b.finish();
    assert_eq!(d, vec![2, 3]);
    let r = recover(&j).unwrap();
    assert_eq!(r.transactions, 2);
    assert_eq!(r.head, c + 1);
    assert_eq!(r.copy(1).unwrap().jblock, 2);
    assert_eq!(replayed(&j, &r, 2).unwrap(), fill(1024, 1));
}

#[test]
fn revoke_block_with_huge_count_is_corruption() {
    let mut b = Builder::new(1024, 64, 0, FEATURE_INCOMPAT_REVOKE);
    let rb = b.revoke(&[1]);
    b.commit();
    let mut j = b.finish();
    j.block_mut(rb)[12..16].copy_from_slice(&5000u32.to_be_bytes());
    assert!(matches!(
        recover(&j),
        Err(Error::Format(FormatError::Corrupt { why: Corruption::BadField { field: "r_count", .. }, .. }))
    ));
}

#[test]
fn fast_commit_area_must_be_idle() {
    let incompat = V3_64 | FEATURE_INCOMPAT_FAST_COMMIT;
    let mk = || {
        let mut b = Builder::new(1024, 2048, 0, incompat);
        b.sb.num_fc_blocks = 16;
        b.data(&[(7, fill(1024, 1))]);
        b.commit();
        b.finish()
    };
    let j = mk();
    let r = recover(&j).unwrap();
    assert_eq!(r.superblock.log_end(), 2048 - 16);
    assert_eq!(r.transactions, 1);

    // A HEAD tag for the transaction after the last full commit: would need replay.
    let mut j2 = mk();
    let fc = j2.block_mut(2048 - 16 + 1);
    fc[0..2].copy_from_slice(&9u16.to_le_bytes());
    fc[2..4].copy_from_slice(&8u16.to_le_bytes());
    fc[8..12].copy_from_slice(&101u32.to_le_bytes());
    assert!(matches!(recover(&j2), Err(Error::Format(FormatError::Unsupported { .. }))));
    // The same for an older transaction: nothing to replay.
    j2.block_mut(2048 - 16 + 1)[8..12].copy_from_slice(&90u32.to_le_bytes());
    assert!(recover(&j2).is_ok());
}

#[test]
fn descriptors_without_commit_filling_the_log_terminate() {
    // Every log block is a descriptor of the same transaction with one tag:
    // jbd2 would walk forever; we report a loop.
    let bs = 1024u32;
    let mut b = Builder::new(bs, 64, 0, FEATURE_INCOMPAT_REVOKE);
    let mut d = vec![0u8; bs as usize];
    DescriptorBlock {
        sequence: 100,
        tags: vec![Tag {
            block: 1,
            flags: descriptor::FLAG_LAST_TAG | descriptor::FLAG_SAME_UUID,
            checksum: 0,
            uuid: None,
        }],
    }
    .write_to(&mut d, &b.layout)
    .unwrap();
    for n in 1..64 {
        b.j.block_mut(n).copy_from_slice(&d);
    }
    let j = b.finish();
    assert!(matches!(recover(&j), Err(Error::Format(FormatError::Corrupt { why: Corruption::Loop, .. }))));
}

#[test]
fn reader_geometry_is_checked() {
    let mut b = Builder::new(1024, 64, 0, V3_64);
    b.commit();
    let mut j = b.finish();
    j.bytes.truncate(1024 * 32); // superblock says 64 blocks
    assert!(recover(&j).is_err());
    assert!(j.len_blocks() == 32);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Garbage after a valid superblock: errors or results, never panics or hangs.
    #[test]
    fn hostile_log_never_panics(
        incompat in prop::sample::select(vec![V3_64, FEATURE_INCOMPAT_REVOKE, FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V2 | FEATURE_INCOMPAT_64BIT]),
        compat in prop::sample::select(vec![0u32, FEATURE_COMPAT_CHECKSUM]),
        start in 1u32..16,
        blocks in prop::collection::vec((0u8..6, any::<u32>(), prop::collection::vec(any::<u8>(), 0..64)), 15),
    ) {
        let compat = if incompat & 0x18 != 0 { 0 } else { compat };
        let mut b = Builder::with_start(1024, 16, compat, incompat, start, 100);
        for (i, (kind, x, bytes)) in blocks.iter().enumerate() {
            let blk = b.j.block_mut(i as u64 + 1);
            blk[..bytes.len()].copy_from_slice(bytes);
            if *kind > 0 {
                blk[..4].copy_from_slice(&MAGIC.to_be_bytes());
                blk[4..8].copy_from_slice(&u32::from(*kind).to_be_bytes());
                // Sequences near the expected ones so the walk goes somewhere.
                blk[8..12].copy_from_slice(&(100 + x % 4).to_be_bytes());
            }
        }
        let j = b.finish();
        if let Ok(r) = recover(&j) {
            for copy in r.blocks.values() {
                prop_assert!(copy.jblock >= 1 && copy.jblock < 16);
            }
        }
    }

    /// Random bytes as a whole journal, superblock included.
    #[test]
    fn random_journal_never_panics(bytes in prop::collection::vec(any::<u8>(), 1024 * 8)) {
        let mut j = MemJournal { bs: 1024, bytes };
        j.bytes[..4].copy_from_slice(&MAGIC.to_be_bytes());
        j.bytes[4..8].copy_from_slice(&4u32.to_be_bytes());
        let _ = recover(&j);
    }
}
