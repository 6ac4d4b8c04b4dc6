//! Recovery of journals written by the Linux kernel, checked against e2fsck.
//!
//! Each case makes a volume with mkfs.ext4, mounts it through a loop device,
//! changes files and directories (with syncs, so transactions commit, and
//! deletions, so metadata blocks are revoked), and copies the image while it
//! is still mounted: the copy's journal needs recovery. The oracle is
//! `e2fsck -y -E journal_only` on a second copy (`-f` would add a full check whose repairs, e.g. free counts, are not replay) (e2fsprogs' recovery.c,
//! shared with the kernel): every static block we replay must equal that
//! block of the e2fsck-replayed image; our transaction and tag counts must
//! match `debugfs -R 'logdump -a'`. Needs root and e2fsprogs; skips otherwise.
//!
//! The `resume_*` cases continue such a kernel-written log with
//! `Journal::resume` (lazy mode's mount: nothing written home) and two more
//! transactions (re-logged blocks, new blocks, a revoke); e2fsck's replay of
//! the extended log must give exactly the newest copies, and logdump must
//! agree with our recovery of it.

mod common;

use std::collections::HashMap;
use std::path::Path;

use blockdev::FileDevice;
use common::tools::*;
use journal::{recover, CheckpointGoal, Journal, Transaction};

struct Case {
    name: &'static str,
    mkfs: &'static [&'static str],
    size: &'static str,
    mount: &'static str,
    rounds: u32,
    want_wrap: bool,
}

/// One round of changes: files, directories, symlinks, a data file, and the
/// removal of the previous round's tree (which revokes its directory blocks).
fn workload_round(mnt: &Path, r: u32) -> String {
    let m = mnt.display();
    format!(
        "set -e; mkdir -p {m}/r{r}/sub; \
         for i in $(seq 1 60); do echo \"file {r} $i\" > {m}/r{r}/f$i; done; \
         for i in $(seq 1 20); do mkdir {m}/r{r}/sub/d$i; ln -s f$i {m}/r{r}/s$i; done; \
         dd if=/dev/urandom of={m}/r{r}/big bs=64k count=2 status=none; sync; \
         if [ {r} -gt 1 ]; then rm -rf {m}/r$(({r}-1)); sync; fi; touch {m}/r{r}/last; sync"
    )
}

/// Whether the live log of a journal copy runs past the end of the journal
/// and continues at its start.
fn log_wraps(img: &Path) -> bool {
    let r = recover(&ImageJournal::open(img)).unwrap();
    r.needed && r.head <= u64::from(r.superblock.start)
}

/// Make a volume, change it while mounted, and return a copy taken while
/// mounted (with `case.want_wrap`, the first copy whose log wraps).
/// Copy an image the kernel has mounted. The kernel may be writing its
/// superblock or the journal's at that moment (checkpointing, on a loaded
/// machine), and a torn copy is unreadable to debugfs: copy again, a few
/// times, until the journal inode can be read from the copy. On a loaded
/// machine (CI on two cores) five tries were once all torn: twenty, spaced
/// further apart.
fn copy_live_image(img: &Path, copy: &Path) {
    for attempt in 1..=20 {
        run("cp", &["--sparse=always", img.to_str().unwrap(), copy.to_str().unwrap()]);
        let stat = debugfs(copy, "stat <8>");
        if stat.contains("EXTENTS:") || stat.contains("BLOCKS:") {
            return;
        }
        eprintln!("copy {attempt} of the live image is torn (debugfs cannot read the journal inode); copying again");
        std::thread::sleep(std::time::Duration::from_millis(100 * attempt));
    }
    panic!("twenty copies of the live image {} were all torn", img.display());
}

fn make_dirty_image(dir: &Path, case: &Case) -> std::path::PathBuf {
    let img = p(dir, "img");
    let mnt = p(dir, "mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut args = vec!["-F", "-q"];
    args.extend_from_slice(case.mkfs);
    args.push(img.to_str().unwrap());
    args.push(case.size);
    run("mkfs.ext4", &args);
    // noinit_itable: no background zeroing of inode tables, whose group
    // descriptor updates can tear every copy of the live image.
    let opts = if case.mount.is_empty() {
        "loop,noinit_itable".to_string()
    } else {
        format!("loop,noinit_itable,{}", case.mount)
    };
    run("mount", &["-o", &opts, img.to_str().unwrap(), mnt.to_str().unwrap()]);
    let copy = p(dir, "dirty");
    let result = std::panic::catch_unwind(|| {
        for r in 1..=case.rounds {
            sh(&workload_round(&mnt, r));
            if case.want_wrap || r == case.rounds {
                copy_live_image(&img, &copy);
                if !case.want_wrap || log_wraps(&copy) {
                    return true;
                }
            }
        }
        false
    });
    run("umount", &[mnt.to_str().unwrap()]);
    match result {
        Err(e) => std::panic::resume_unwind(e),
        Ok(found) => assert!(found, "{}: no copy with a wrapped log in {} rounds", case.name, case.rounds),
    }
    copy
}

/// A copy of `dirty` (as `dir/fixed`) whose journal `e2fsck -y -E journal_only`
/// replayed, opened, and e2fsck's output.
fn e2fsck_replayed_copy(dir: &Path, dirty: &Path) -> (std::fs::File, String) {
    let fixed = p(dir, "fixed");
    std::fs::copy(dirty, &fixed).unwrap();
    let out = run_ok("e2fsck", &["-y", "-E", "journal_only", fixed.to_str().unwrap()], &[0, 1]);
    (std::fs::File::open(&fixed).unwrap(), out)
}

fn check_case(case: &Case) {
    let dir = tmpdir();
    let dirty = make_dirty_image(dir.path(), case);
    let features = dumpe2fs_field(&dirty, "Filesystem features").unwrap();
    assert!(features.contains("needs_recovery"), "{}: copy does not need recovery: {features}", case.name);

    let jr = ImageJournal::open(&dirty);
    let r = recover(&jr).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    assert!(r.needed, "{}: journal s_start is 0", case.name);
    assert!(r.transactions > 0);
    assert!(r.bad_data_blocks.is_empty() && r.failed_commit.is_none());

    // The oracle: e2fsck replays a second copy.
    let (fixed_file, _) = e2fsck_replayed_copy(dir.path(), &dirty);
    let bs = jr.bs;
    // The primary superblock (byte 1024) is rewritten by e2fsck after replay.
    let sb_block = 1024 / u64::from(bs);
    let mut buf = vec![0u8; bs as usize];
    let mut mismatched = Vec::new();
    for &block in r.blocks.keys() {
        assert!(r.read_replayed(&jr, block, &mut buf).unwrap());
        if block != sb_block && buf != read_fs_block(&fixed_file, bs, block) {
            mismatched.push(block);
        }
    }
    assert!(mismatched.is_empty(), "{}: replayed blocks differ from e2fsck's: {mismatched:?}", case.name);

    // Against debugfs logdump (which walks the same log without checksums).
    let d = logdump(&dirty);
    assert_eq!(d.commits, r.transactions, "{}: transactions", case.name);
    assert_eq!(d.tags.len() as u64, r.replayed_tags + r.revoke_hits, "{}: tags", case.name);
    assert_eq!(d.revokes.len() as u64, r.revoke_records, "{}: revoke records", case.name);
    let mut newest: HashMap<u64, (u32, u64)> = HashMap::new();
    for &(seq, fs, j) in &d.tags {
        newest.insert(fs, (seq, j));
    }
    for (fs, (seq, j)) in &newest {
        if !r.revoked.is_revoked(*fs, *seq) {
            assert_eq!(r.copy(*fs).map(|c| c.jblock), Some(*j), "{}: block {fs}", case.name);
        }
    }
    let wrapped = r.head <= u64::from(r.superblock.start);
    assert!(wrapped || !case.want_wrap);
    eprintln!(
        "{}: {} transactions ({}..{}), {} tags, {} static blocks, {} revoke records, {} revoke hits, {:?} checksum, 64bit {}, async {}, wrapped {}",
        case.name,
        r.transactions,
        r.start_sequence,
        r.end_sequence,
        r.replayed_tags,
        r.blocks.len(),
        r.revoke_records,
        r.revoke_hits,
        r.layout.checksum,
        r.layout.is_64bit,
        r.superblock.has_incompat(ondisk::jbd2::FEATURE_INCOMPAT_ASYNC_COMMIT),
        wrapped,
    );
}

/// Continue the kernel's log with `resume`, commit two transactions, and
/// check e2fsck's replay of the result against the newest copies.
fn check_resume(case: &Case) {
    let dir = tmpdir();
    let dirty = make_dirty_image(dir.path(), case);
    let jr = ImageJournal::open(&dirty);
    let bs = jr.bs;
    let before = std::fs::File::open(&dirty).unwrap();
    let mut j = Journal::load(FileDevice::open(&dirty, true).unwrap(), jr.journal_map()).unwrap();
    assert!(j.needs_recovery());
    let r = j.recover().unwrap();
    assert!(r.transactions > 0);
    j.resume(&r).unwrap();
    assert_eq!(j.next_sequence(), r.next_sequence);
    // What ext4 turns on at mount: on a live log only REVOKE may be missing.
    let features = dumpe2fs_field(&dirty, "Filesystem features").unwrap();
    let (compat, incompat) = journal::ext4_features(features.contains("metadata_csum"), features.contains("64bit"));
    j.set_features(compat, incompat).unwrap();
    assert_eq!(j.superblock().start, r.superblock.start, "{}: tail unchanged", case.name);

    // Expected contents of every block the log or we touch: the recovered
    // newest copies, then ours.
    let sb_block = 1024 / u64::from(bs);
    let mut want: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut buf = vec![0u8; bs as usize];
    for (&b, c) in &r.blocks {
        assert_eq!(
            j.newest_copy(b).map(|n| (n.jblock, n.escaped, n.sequence)),
            Some((c.jblock, c.escaped, c.sequence)),
            "{}: jmap entry of block {b}",
            case.name
        );
        assert!(r.read_replayed(&jr, b, &mut buf).unwrap());
        want.insert(b, buf.clone());
    }
    let blocks_count = {
        let f = dumpe2fs_field(&dirty, "Block count").unwrap();
        f.parse::<u64>().unwrap()
    };
    // Re-logged metadata keeps its contents (e2fsck must still find a valid
    // volume after the replay); blocks near the end of the volume (free) get
    // patterns: newest-wins, escape and revoke are checked on those.
    let relog: Vec<u64> = r.blocks.keys().copied().filter(|&b| b > sb_block).take(3).collect();
    assert_eq!(relog.len(), 3);
    let (new1, new2, new3) = (blocks_count - 10, blocks_count - 11, blocks_count - 12);
    let pattern = |tag: u8, b: u64| -> Vec<u8> {
        let mut v: Vec<u8> = (0..bs as usize).map(|i| (i as u8) ^ tag ^ (b as u8)).collect();
        if tag == 2 {
            v[..4].copy_from_slice(&ondisk::jbd2::MAGIC.to_be_bytes()); // escaped
        }
        v
    };
    let mut t1 = Transaction::new(bs);
    for &b in &relog {
        t1.log(b, &want[&b]).unwrap();
    }
    for b in [new1, new2, new3] {
        t1.log(b, &pattern(1, b)).unwrap();
    }
    let mut t2 = Transaction::new(bs);
    t2.log(relog[0], &want[&relog[0]].clone()).unwrap();
    t2.log(new1, &pattern(2, new1)).unwrap();
    t2.revoke(new2);
    for t in [&t1, &t2] {
        let need = t.journal_blocks(j.layout());
        if j.space_left() < need {
            // The kernel's log was full: migrate its oldest blocks home first.
            j.checkpoint_from_log(CheckpointGoal::Space(need)).unwrap();
        }
        j.commit(t).unwrap().unwrap();
        for (b, d) in t.blocks() {
            want.insert(b, d.to_vec());
        }
        for b in t.revoked() {
            want.insert(b, read_fs_block(&before, bs, b));
        }
    }
    let newest: HashMap<u64, Option<(u64, bool, u32)>> =
        want.keys().map(|&b| (b, j.newest_copy(b).map(|c| (c.jblock, c.escaped, c.sequence)))).collect();
    assert_eq!(newest[&new2], None, "revoked");
    drop(j);

    // Our own recovery of the extended log finds the resumed jmap.
    let jr2 = ImageJournal::open(&dirty);
    let r2 = recover(&jr2).unwrap();
    // The gap-closing commit block took end_sequence; ours the next two.
    assert_eq!(r2.end_sequence, r.next_sequence.wrapping_add(2));
    assert_eq!(r2.start_sequence == r.start_sequence, r2.superblock.start == r.superblock.start);
    for (b, n) in &newest {
        assert_eq!(r2.copy(*b).map(|c| (c.jblock, c.escaped, c.sequence)), *n, "{}: recovered block {b}", case.name);
    }
    // debugfs walks the same log.
    let d = logdump(&dirty);
    assert_eq!(d.commits, r2.transactions, "{}: transactions", case.name);
    assert_eq!(d.tags.len() as u64, r2.replayed_tags + r2.revoke_hits);
    assert_eq!(d.revokes.len() as u64, r2.revoke_records);
    // e2fsck's replay gives exactly the newest copies.
    let (fixed_file, out) = e2fsck_replayed_copy(dir.path(), &dirty);
    assert!(!out.contains("Clear") && !out.contains("Fix"), "{}: e2fsck: {out}", case.name);
    let bad: Vec<u64> = want
        .iter()
        .filter(|(b, d)| **b != sb_block && read_fs_block(&fixed_file, bs, **b) != **d)
        .map(|(b, _)| *b)
        .collect();
    assert!(bad.is_empty(), "{}: e2fsck replayed other contents for {bad:?}", case.name);
    eprintln!(
        "{}: resumed {} transactions ({} blocks in the jmap), extended to {}",
        case.name,
        r.transactions,
        r.blocks.len(),
        r2.transactions
    );
}

/// A test that runs `$check` (`check_case` or `check_resume`) on a [`Case`]
/// named after the test; `want_wrap` is false unless given.
macro_rules! case_test {
    ($check:ident: $fn:ident, $mkfs:expr, $size:expr, $mount:expr, $rounds:expr) => {
        case_test!($check: $fn, $mkfs, $size, $mount, $rounds, false);
    };
    ($check:ident: $fn:ident, $mkfs:expr, $size:expr, $mount:expr, $rounds:expr, $wrap:expr) => {
        #[test]
        fn $fn() {
            require_tools!(true);
            $check(&Case {
                name: stringify!($fn),
                mkfs: $mkfs,
                size: $size,
                mount: $mount,
                rounds: $rounds,
                want_wrap: $wrap,
            });
        }
    };
}

macro_rules! resume_case {
    ($($case:tt)*) => { case_test!(check_resume: $($case)*); };
}

resume_case!(resume_default_features, &[], "256M", "", 3, false);
resume_case!(resume_block_4k_no_csum_no_64bit, &["-b", "4096", "-O", "^metadata_csum,^64bit"], "256M", "", 3, false);
resume_case!(resume_csum_v1, &["-O", "^metadata_csum"], "256M", "journal_checksum", 3, false);
resume_case!(resume_wrapped_small_journal, &["-J", "size=1"], "256M", "", 60, true);

macro_rules! kernel_case {
    ($($case:tt)*) => { case_test!(check_case: $($case)*); };
}

// 256M volumes get 1 KiB blocks from mke2fs.conf's "small" type.
kernel_case!(default_features, &[], "256M", "", 4);
kernel_case!(block_4k, &["-b", "4096"], "256M", "", 4);
kernel_case!(no_metadata_csum, &["-O", "^metadata_csum"], "256M", "", 4);
kernel_case!(no_64bit, &["-O", "^64bit"], "256M", "", 4);
kernel_case!(no_csum_no_64bit, &["-O", "^metadata_csum,^64bit"], "256M", "", 4);
kernel_case!(csum_v1, &["-O", "^metadata_csum"], "256M", "journal_checksum", 4);
kernel_case!(async_commit, &["-O", "^metadata_csum"], "256M", "data=writeback,journal_async_commit", 4);
// A minimal 1 MiB journal fills and wraps; copy once the live log wraps.
kernel_case!(small_journal_wraps, &["-J", "size=1"], "256M", "", 60, true);

// fast_commit volume used only with sync(1): full commits only, replayable.
kernel_case!(fast_commit_idle, &["-O", "fast_commit"], "256M", "", 4);

/// fsync on a fast_commit volume writes fast commits, which we refuse to replay.
/// Whether an fsync becomes a fast commit is the kernel's choice (it falls back
/// to a full commit when the change is not eligible), so the workload is tried
/// a few times; if the kernel never writes one, the test says so and stops.
#[test]
fn fast_commit_replay_is_refused() {
    require_tools!(true);
    for attempt in 1..=4 {
        let dir = tmpdir();
        let img = p(dir.path(), "img");
        let mnt = p(dir.path(), "mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        run("mkfs.ext4", &["-F", "-q", "-O", "fast_commit", img.to_str().unwrap(), "256M"]);
        run("mount", &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()]);
        let copy = p(dir.path(), "dirty");
        let m = mnt.display();
        let result = std::panic::catch_unwind(|| {
            sh(&format!(
                "set -e; mkdir {m}/d; sync; sleep 0.2; for i in $(seq 1 20); do echo x$i > {m}/d/f$i; sync {m}/d/f$i; done"
            ));
            run("cp", &["--sparse=always", img.to_str().unwrap(), copy.to_str().unwrap()]);
        });
        run("umount", &[mnt.to_str().unwrap()]);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
        let out = debugfs(&copy, "logdump");
        if !out.contains("tag TAIL") {
            eprintln!("attempt {attempt}: the kernel wrote only full commits; trying again");
            continue;
        }
        match recover(&ImageJournal::open(&copy)) {
            Err(journal::Error::Format(ondisk::FormatError::Unsupported { what })) => {
                assert!(what.contains("fast commit"), "{what}")
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        return;
    }
    eprintln!("SKIPPED: the kernel wrote no fast commit in 4 attempts; the refusal is covered by the synthetic tests");
}
