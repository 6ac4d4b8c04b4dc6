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

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::tools::*;
use journal::recover;

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
fn make_dirty_image(dir: &Path, case: &Case) -> std::path::PathBuf {
    let img = p(dir, "img");
    let mnt = p(dir, "mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut args = vec!["-F", "-q"];
    args.extend_from_slice(case.mkfs);
    args.push(img.to_str().unwrap());
    args.push(case.size);
    run("mkfs.ext4", &args);
    let opts = if case.mount.is_empty() {
        "loop".to_string()
    } else {
        format!("loop,{}", case.mount)
    };
    run(
        "mount",
        &["-o", &opts, img.to_str().unwrap(), mnt.to_str().unwrap()],
    );
    let copy = p(dir, "dirty");
    let result = std::panic::catch_unwind(|| {
        for r in 1..=case.rounds {
            sh(&workload_round(&mnt, r));
            if case.want_wrap || r == case.rounds {
                run(
                    "cp",
                    &[
                        "--sparse=always",
                        img.to_str().unwrap(),
                        copy.to_str().unwrap(),
                    ],
                );
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
        Ok(found) => assert!(
            found,
            "{}: no copy with a wrapped log in {} rounds",
            case.name, case.rounds
        ),
    }
    copy
}

fn check_case(case: &Case) {
    let dir = tmpdir();
    let dirty = make_dirty_image(dir.path(), case);
    let features = dumpe2fs_field(&dirty, "Filesystem features").unwrap();
    assert!(
        features.contains("needs_recovery"),
        "{}: copy does not need recovery: {features}",
        case.name
    );

    let jr = ImageJournal::open(&dirty);
    let r = recover(&jr).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    assert!(r.needed, "{}: journal s_start is 0", case.name);
    assert!(r.transactions > 0);
    assert!(r.bad_data_blocks.is_empty() && r.failed_commit.is_none());

    // The oracle: e2fsck replays a second copy.
    let fixed = p(dir.path(), "fixed");
    std::fs::copy(&dirty, &fixed).unwrap();
    run_ok(
        "e2fsck",
        &["-y", "-E", "journal_only", fixed.to_str().unwrap()],
        &[0, 1],
    );
    let fixed_file = std::fs::File::open(&fixed).unwrap();
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
    assert!(
        mismatched.is_empty(),
        "{}: replayed blocks differ from e2fsck's: {mismatched:?}",
        case.name
    );

    // Against debugfs logdump (which walks the same log without checksums).
    let d = logdump(&dirty);
    assert_eq!(d.commits, r.transactions, "{}: transactions", case.name);
    assert_eq!(
        d.tags.len() as u64,
        r.replayed_tags + r.revoke_hits,
        "{}: tags",
        case.name
    );
    assert_eq!(
        d.revokes.len() as u64,
        r.revoke_records,
        "{}: revoke records",
        case.name
    );
    let mut newest: HashMap<u64, (u32, u64)> = HashMap::new();
    for &(seq, fs, j) in &d.tags {
        newest.insert(fs, (seq, j));
    }
    for (fs, (seq, j)) in &newest {
        if !r.revoked.is_revoked(*fs, *seq) {
            assert_eq!(
                r.copy(*fs).map(|c| c.jblock),
                Some(*j),
                "{}: block {fs}",
                case.name
            );
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

macro_rules! kernel_case {
    ($fn:ident, $mkfs:expr, $size:expr, $mount:expr, $rounds:expr) => {
        kernel_case!($fn, $mkfs, $size, $mount, $rounds, false);
    };
    ($fn:ident, $mkfs:expr, $size:expr, $mount:expr, $rounds:expr, $wrap:expr) => {
        #[test]
        fn $fn() {
            require_tools!(true);
            check_case(&Case {
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

// 256M volumes get 1 KiB blocks from mke2fs.conf's "small" type.
kernel_case!(default_features, &[], "256M", "", 4);
kernel_case!(block_4k, &["-b", "4096"], "256M", "", 4);
kernel_case!(no_metadata_csum, &["-O", "^metadata_csum"], "256M", "", 4);
kernel_case!(no_64bit, &["-O", "^64bit"], "256M", "", 4);
kernel_case!(
    no_csum_no_64bit,
    &["-O", "^metadata_csum,^64bit"],
    "256M",
    "",
    4
);
kernel_case!(
    csum_v1,
    &["-O", "^metadata_csum"],
    "256M",
    "journal_checksum",
    4
);
kernel_case!(
    async_commit,
    &["-O", "^metadata_csum"],
    "256M",
    "data=writeback,journal_async_commit",
    4
);
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
