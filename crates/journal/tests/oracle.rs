//! The writer checked by the real tools: transactions written with
//! `Journal::commit` into the journal of a volume made by mkfs.ext4 change a
//! file's inode (mtime, with a correct inode checksum); the ext4 superblock
//! gets needs_recovery. Then
//! - `debugfs -R 'logdump -a'` shows our transactions, tags and revokes;
//! - `e2fsck -fy` replays them, then `e2fsck -fn` finds a clean volume and
//!   debugfs shows the new mtime; a revoked block is not replayed;
//! - the kernel, mounting another copy, replays them (`stat -c %Y`), and the
//!   unmounted result is clean;
//! - our own checkpoint + empty leave a journal that needs nothing: with the
//!   flag cleared, `dumpe2fs -h` shows no needs_recovery and `e2fsck -fn` is clean.
//!
//! The `resume_*` cases crash after the first transaction, continue the log
//! with `Journal::resume` (lazy mode's mount) and commit the rest: logdump
//! shows the gap-closing empty transaction, and e2fsck and the kernel replay
//! the continued log to the newest mtime.
//!
//! Needs root (loop mount) and e2fsprogs; skips otherwise.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use blockdev::FileDevice;
use common::tools::*;
use journal::{CheckpointGoal, Journal, JournalMap, Transaction};
use ondisk::inode::Inode;
use ondisk::superblock::{feature, Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

fn read_sb(img: &Path) -> Superblock {
    let f = std::fs::File::open(img).unwrap();
    let mut b = vec![0u8; SUPERBLOCK_SIZE];
    f.read_exact_at(&mut b, SUPERBLOCK_OFFSET).unwrap();
    Superblock::parse(&b).unwrap()
}

/// Set or clear the ext4 superblock's needs_recovery (incompat RECOVER),
/// recomputing its checksum.
fn set_needs_recovery(img: &Path, on: bool) {
    let mut sb = read_sb(img);
    if on {
        sb.f.feature_incompat |= feature::incompat::RECOVER;
    } else {
        sb.f.feature_incompat &= !feature::incompat::RECOVER;
    }
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&sb.to_bytes(), SUPERBLOCK_OFFSET).unwrap();
    f.sync_all().unwrap();
}

/// "Inode 12 is part of block group 0\n\tlocated at block 1060, offset 0x0b00"
fn inode_location(img: &Path, ino: u32) -> (u64, usize) {
    let out = debugfs(img, &format!("imap <{ino}>"));
    let rest = out.split("located at block ").nth(1).expect("imap output");
    let (block, rest) = rest.split_once(", offset ").unwrap();
    let off = rest
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("0x");
    (
        block.trim().parse().unwrap(),
        usize::from_str_radix(off, 16).unwrap(),
    )
}

/// Unmount, retrying while something briefly holds the mount (tests run in
/// parallel; udev and scanners may look at new loop devices).
fn umount(mnt: &Path) {
    for _ in 0..50 {
        let ok = std::process::Command::new("umount")
            .arg(mnt)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    run("umount", &[mnt.to_str().unwrap()]);
}

/// "Inode: 12   Type: regular ..." from `debugfs -R 'stat NAME'`.
fn ino_of(img: &Path, name: &str) -> u32 {
    let out = debugfs(img, &format!("stat {name}"));
    let rest = out.split("Inode:").nth(1).expect("debugfs stat output");
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

fn mtime_via_debugfs(img: &Path, name: &str) -> i64 {
    let ino = ino_of(img, name);
    let sb = read_sb(img);
    let (block, off) = inode_location(img, ino);
    let f = std::fs::File::open(img).unwrap();
    let bs = sb.block_size();
    let b = read_fs_block(&f, bs, block);
    let isz = usize::from(sb.inode_size());
    let inode = Inode::parse(&sb, ino, &b[off..off + isz]).unwrap();
    i64::from(inode.base.mtime as i32)
}

/// A copy of the inode table block holding `ino` with its mtime set to `mtime`.
fn with_mtime(sb: &Superblock, table_block: &[u8], off: usize, ino: u32, mtime: u32) -> Vec<u8> {
    let isz = usize::from(sb.inode_size());
    let mut inode = Inode::parse(sb, ino, &table_block[off..off + isz]).unwrap();
    inode.base.mtime = mtime;
    if let Some(e) = inode.extra.as_mut() {
        e.mtime_extra = 0;
    }
    let mut out = table_block.to_vec();
    out[off..off + isz].copy_from_slice(&inode.to_bytes(sb));
    // The result must parse with a valid checksum.
    Inode::parse(sb, ino, &out[off..off + isz]).unwrap();
    out
}

fn check(mkfs: &[&str]) {
    let dir = tmpdir();
    let img = p(dir.path(), "img");
    let src = p(dir.path(), "src");
    std::fs::write(&src, b"hello from the journal oracle\n").unwrap();
    let mut args = vec!["-F", "-q"];
    args.extend_from_slice(mkfs);
    args.extend_from_slice(&[img.to_str().unwrap(), "64M"]);
    run("mkfs.ext4", &args);
    debugfs_write(&img, &format!("write {} f\n", src.display()));
    let ino = ino_of(&img, "f");
    let sb = read_sb(&img);
    let bs = sb.block_size();
    let (table_block, off) = inode_location(&img, ino);
    let orig = read_fs_block(&std::fs::File::open(&img).unwrap(), bs, table_block);
    // A free block near the end of the volume, to log garbage into and revoke.
    let victim = sb.blocks_count() - 5;
    assert!(debugfs(&img, &format!("testb {victim}")).contains("not in use"));

    // Our transactions, written into the volume's own journal.
    let ij = ImageJournal::open(&img);
    let runs: Vec<(u64, u64, u64)> = ij.map.iter().map(|(l, (p, n))| (*l, *p, *n)).collect();
    let map = JournalMap::new(runs, ij.len, bs).unwrap();
    let dev = FileDevice::open(&img, true).unwrap();
    let mut j = Journal::load(dev, map.clone()).unwrap();
    assert!(!j.needs_recovery());
    // What ext4 does at mount: mkfs leaves the journal without features.
    let (compat, incompat) = journal::ext4_features(sb.has_metadata_csum(), sb.is_64bit());
    j.set_features(compat, incompat).unwrap();
    eprintln!(
        "{mkfs:?}: block size {bs}, {:?} checksum, 64bit tags {}",
        j.layout().checksum,
        j.layout().is_64bit
    );
    let (t1_mtime, t2_mtime) = (1_000_000_000u32, 1_234_567_890u32);
    let mut t = Transaction::new(bs);
    t.log(table_block, &with_mtime(&sb, &orig, off, ino, t1_mtime))
        .unwrap();
    t.log(victim, &vec![0xAB; bs as usize]).unwrap();
    let c1 = j.commit(&t).unwrap().unwrap();
    let mut t = Transaction::new(bs);
    t.log(table_block, &with_mtime(&sb, &orig, off, ino, t2_mtime))
        .unwrap();
    let c2 = j.commit(&t).unwrap().unwrap();
    let mut t = Transaction::new(bs);
    t.revoke(victim);
    let c3 = j.commit(&t).unwrap().unwrap();
    drop(j);
    set_needs_recovery(&img, true);
    assert!(dumpe2fs_field(&img, "Filesystem features")
        .unwrap()
        .contains("needs_recovery"));

    // debugfs sees our log.
    let d = logdump(&img);
    assert_eq!(d.commits, 3);
    let mut tags = d.tags.clone();
    tags.sort();
    let mut want = vec![
        (
            c1.sequence,
            table_block,
            c1.blocks
                .iter()
                .find(|l| l.block == table_block)
                .unwrap()
                .jblock,
        ),
        (
            c1.sequence,
            victim,
            c1.blocks.iter().find(|l| l.block == victim).unwrap().jblock,
        ),
        (c2.sequence, table_block, c2.blocks[0].jblock),
    ];
    want.sort();
    assert_eq!(tags, want);
    assert_eq!(d.revokes, vec![(c3.sequence, victim)]);

    // e2fsck replays it and the volume is clean.
    let fsck = p(dir.path(), "fsck");
    std::fs::copy(&img, &fsck).unwrap();
    let out = run_ok("e2fsck", &["-fy", fsck.to_str().unwrap()], &[0, 1]);
    assert!(
        !out.contains("Fix") && !out.contains("Clear"),
        "e2fsck repaired more than the journal:\n{out}"
    );
    run("e2fsck", &["-fn", fsck.to_str().unwrap()]);
    assert_eq!(mtime_via_debugfs(&fsck, "f"), i64::from(t2_mtime));
    let fsck_file = std::fs::File::open(&fsck).unwrap();
    assert_eq!(
        read_fs_block(&fsck_file, bs, victim),
        vec![0u8; bs as usize],
        "revoked block replayed"
    );
    assert!(!dumpe2fs_field(&fsck, "Filesystem features")
        .unwrap()
        .contains("needs_recovery"));

    // The kernel replays it at mount.
    let kern = p(dir.path(), "kern");
    let mnt = p(dir.path(), "mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::copy(&img, &kern).unwrap();
    run(
        "mount",
        &["-o", "loop", kern.to_str().unwrap(), mnt.to_str().unwrap()],
    );
    let got = std::panic::catch_unwind(|| {
        let m = run("stat", &["-c", "%Y", mnt.join("f").to_str().unwrap()]);
        let data = std::fs::read(mnt.join("f")).unwrap();
        (m.trim().to_string(), data)
    });
    umount(&mnt);
    let (m, data) = got.unwrap();
    assert_eq!(m, t2_mtime.to_string());
    assert_eq!(data, std::fs::read(&src).unwrap());
    run("e2fsck", &["-fn", kern.to_str().unwrap()]);
    let kern_file = std::fs::File::open(&kern).unwrap();
    assert_eq!(
        read_fs_block(&kern_file, bs, victim),
        vec![0u8; bs as usize]
    );

    // Our own checkpoint + empty: the journal needs nothing afterwards.
    let mut j = Journal::load(FileDevice::open(&img, true).unwrap(), map).unwrap();
    assert!(j.needs_recovery());
    let r = j.recover().unwrap();
    assert_eq!(r.transactions, 3);
    assert_eq!(j.replay_to_disk(&r).unwrap(), 1);
    // A transaction after the replay, checkpointed from the log at "unmount".
    let now = read_fs_block(&std::fs::File::open(&img).unwrap(), bs, table_block);
    let mut t = Transaction::new(bs);
    t.log(table_block, &with_mtime(&sb, &now, off, ino, t2_mtime + 1))
        .unwrap();
    let c4 = j.commit(&t).unwrap().unwrap();
    assert!(journal::tid_gt(c4.sequence, c3.sequence));
    j.checkpoint_from_log(CheckpointGoal::All).unwrap();
    j.empty().unwrap();
    drop(j);
    set_needs_recovery(&img, false);
    assert!(!dumpe2fs_field(&img, "Filesystem features")
        .unwrap()
        .contains("needs_recovery"));
    assert_eq!(
        dumpe2fs_field(&img, "Journal start").as_deref(),
        Some("0"),
        "journal not empty"
    );
    run("e2fsck", &["-fn", img.to_str().unwrap()]);
    assert_eq!(mtime_via_debugfs(&img, "f"), i64::from(t2_mtime + 1));
    let img_file = std::fs::File::open(&img).unwrap();
    assert_eq!(read_fs_block(&img_file, bs, victim), vec![0u8; bs as usize]);
    // The kernel mounts it without replay and agrees.
    run(
        "mount",
        &[
            "-o",
            "loop,ro",
            img.to_str().unwrap(),
            mnt.to_str().unwrap(),
        ],
    );
    let m =
        std::panic::catch_unwind(|| run("stat", &["-c", "%Y", mnt.join("f").to_str().unwrap()]));
    umount(&mnt);
    assert_eq!(m.unwrap().trim(), (t2_mtime + 1).to_string());
}

/// Crash after the first transaction, resume, commit the rest; e2fsck and the
/// kernel replay the continued log.
fn check_resume(mkfs: &[&str]) {
    let dir = tmpdir();
    let img = p(dir.path(), "img");
    let src = p(dir.path(), "src");
    std::fs::write(&src, b"resumed journal\n").unwrap();
    let mut args = vec!["-F", "-q"];
    args.extend_from_slice(mkfs);
    args.extend_from_slice(&[img.to_str().unwrap(), "64M"]);
    run("mkfs.ext4", &args);
    debugfs_write(&img, &format!("write {} f\n", src.display()));
    let ino = ino_of(&img, "f");
    let sb = read_sb(&img);
    let bs = sb.block_size();
    let (table_block, off) = inode_location(&img, ino);
    let orig = read_fs_block(&std::fs::File::open(&img).unwrap(), bs, table_block);
    let victim = sb.blocks_count() - 5;
    let ij = ImageJournal::open(&img);
    let runs: Vec<(u64, u64, u64)> = ij.map.iter().map(|(l, (p, n))| (*l, *p, *n)).collect();
    let map = JournalMap::new(runs, ij.len, bs).unwrap();
    let (compat, incompat) = journal::ext4_features(sb.has_metadata_csum(), sb.is_64bit());

    // Mount 1: one transaction, then a crash.
    let mut j = Journal::load(FileDevice::open(&img, true).unwrap(), map.clone()).unwrap();
    j.set_features(compat, incompat).unwrap();
    let (m1, m2) = (1_100_000_000u32, 1_300_000_000u32);
    let mut t = Transaction::new(bs);
    t.log(table_block, &with_mtime(&sb, &orig, off, ino, m1))
        .unwrap();
    t.log(victim, &vec![0xCD; bs as usize]).unwrap();
    let c1 = j.commit(&t).unwrap().unwrap();
    drop(j);
    set_needs_recovery(&img, true);

    // Mount 2 (lazy): resume, two more transactions, nothing written home.
    let mut j = Journal::load(FileDevice::open(&img, true).unwrap(), map).unwrap();
    let r = j.recover().unwrap();
    assert_eq!(r.transactions, 1);
    j.resume(&r).unwrap();
    j.set_features(compat, incompat).unwrap();
    let mut t = Transaction::new(bs);
    t.log(table_block, &with_mtime(&sb, &orig, off, ino, m2))
        .unwrap();
    let c2 = j.commit(&t).unwrap().unwrap();
    let mut t = Transaction::new(bs);
    t.revoke(victim);
    let c3 = j.commit(&t).unwrap().unwrap();
    assert_eq!(
        (c2.sequence, c3.sequence),
        (c1.sequence + 2, c1.sequence + 3)
    );
    drop(j);
    assert_eq!(
        read_fs_block(&std::fs::File::open(&img).unwrap(), bs, table_block),
        orig,
        "resume wrote home"
    );

    let d = logdump(&img);
    assert_eq!(d.commits, 4, "one, the gap-closing empty one, two more");
    let mut tags = d.tags.clone();
    tags.sort();
    let mut want = vec![
        (
            c1.sequence,
            table_block,
            c1.blocks
                .iter()
                .find(|l| l.block == table_block)
                .unwrap()
                .jblock,
        ),
        (
            c1.sequence,
            victim,
            c1.blocks.iter().find(|l| l.block == victim).unwrap().jblock,
        ),
        (c2.sequence, table_block, c2.blocks[0].jblock),
    ];
    want.sort();
    assert_eq!(tags, want);
    assert_eq!(d.revokes, vec![(c3.sequence, victim)]);

    // e2fsck replays it.
    let fsck = p(dir.path(), "fsck");
    std::fs::copy(&img, &fsck).unwrap();
    let out = run_ok("e2fsck", &["-fy", fsck.to_str().unwrap()], &[0, 1]);
    assert!(
        !out.contains("Fix") && !out.contains("Clear"),
        "e2fsck repaired more than the journal:\n{out}"
    );
    run("e2fsck", &["-fn", fsck.to_str().unwrap()]);
    assert_eq!(mtime_via_debugfs(&fsck, "f"), i64::from(m2));
    let fsck_file = std::fs::File::open(&fsck).unwrap();
    assert_eq!(
        read_fs_block(&fsck_file, bs, victim),
        vec![0u8; bs as usize],
        "revoked block replayed"
    );

    // So does the kernel.
    let mnt = p(dir.path(), "mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    run(
        "mount",
        &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()],
    );
    let got = std::panic::catch_unwind(|| {
        let m = run("stat", &["-c", "%Y", mnt.join("f").to_str().unwrap()]);
        (m.trim().to_string(), std::fs::read(mnt.join("f")).unwrap())
    });
    umount(&mnt);
    let (m, data) = got.unwrap();
    assert_eq!(m, m2.to_string());
    assert_eq!(data, std::fs::read(&src).unwrap());
    run("e2fsck", &["-fn", img.to_str().unwrap()]);
    let img_file = std::fs::File::open(&img).unwrap();
    assert_eq!(read_fs_block(&img_file, bs, victim), vec![0u8; bs as usize]);
}

macro_rules! resume_case {
    ($fn:ident, $mkfs:expr) => {
        #[test]
        fn $fn() {
            require_tools!(true);
            check_resume($mkfs);
        }
    };
}

resume_case!(resume_default_features, &[]);
resume_case!(resume_block_4k, &["-b", "4096"]);
resume_case!(resume_no_csum_no_64bit, &["-O", "^metadata_csum,^64bit"]);

macro_rules! oracle_case {
    ($fn:ident, $mkfs:expr) => {
        #[test]
        fn $fn() {
            require_tools!(true);
            check($mkfs);
        }
    };
}

// 64M volumes get 1 KiB blocks from mke2fs.conf's "small" type.
oracle_case!(default_features, &[]);
oracle_case!(block_4k, &["-b", "4096"]);
oracle_case!(block_1k, &["-b", "1024"]);
oracle_case!(no_metadata_csum, &["-O", "^metadata_csum"]);
oracle_case!(no_64bit, &["-O", "^64bit"]);
oracle_case!(no_csum_no_64bit, &["-O", "^metadata_csum,^64bit"]);
