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
use std::path::{Path, PathBuf};

use blockdev::FileDevice;
use common::tools::*;
use journal::{CheckpointGoal, CommitInfo, Journal, JournalMap, Transaction};
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
    let off = rest.split_whitespace().next().unwrap().trim_start_matches("0x");
    (block.trim().parse().unwrap(), usize::from_str_radix(off, 16).unwrap())
}

/// Unmount, retrying while something briefly holds the mount (tests run in
/// parallel; udev and scanners may look at new loop devices).
fn umount(mnt: &Path) {
    for _ in 0..50 {
        let ok = std::process::Command::new("umount").arg(mnt).status().is_ok_and(|s| s.success());
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

/// Whether `dumpe2fs -h` lists needs_recovery among the image's features.
fn has_needs_recovery(img: &Path) -> bool {
    dumpe2fs_field(img, "Filesystem features").unwrap().contains("needs_recovery")
}

/// Mount `image` with the kernel (`-o opts`), read file f's mtime
/// (`stat -c %Y`) and contents, unmount.
fn kernel_view(image: &Path, mnt: &Path, opts: &str) -> (String, Vec<u8>) {
    std::fs::create_dir_all(mnt).unwrap();
    run("mount", &["-o", opts, image.to_str().unwrap(), mnt.to_str().unwrap()]);
    let got = std::panic::catch_unwind(|| {
        let m = run("stat", &["-c", "%Y", mnt.join("f").to_str().unwrap()]);
        (m.trim().to_string(), std::fs::read(mnt.join("f")).unwrap())
    });
    umount(mnt);
    got.unwrap()
}

/// A 64M volume made by `mkfs.ext4 -F -q MKFS` holding file f, and where the
/// transactions of a case go: f's inode table block, a free victim block.
struct Vol {
    dir: tempfile::TempDir,
    img: PathBuf,
    /// f's contents, as written by debugfs.
    src: PathBuf,
    sb: Superblock,
    bs: u32,
    ino: u32,
    /// The inode table block holding f's inode, the inode's offset in it,
    /// and the block as mkfs + debugfs left it.
    table_block: u64,
    off: usize,
    orig: Vec<u8>,
    /// A free block near the end of the volume, to log garbage into and revoke.
    victim: u64,
    map: JournalMap,
}

impl Vol {
    fn new(mkfs: &[&str], contents: &[u8]) -> Vol {
        let dir = tmpdir();
        let img = p(dir.path(), "img");
        let src = p(dir.path(), "src");
        std::fs::write(&src, contents).unwrap();
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
        assert!(debugfs(&img, &format!("testb {victim}")).contains("not in use"));
        let map = ImageJournal::open(&img).journal_map();
        Vol { dir, img, src, sb, bs, ino, table_block, off, orig, victim, map }
    }

    fn path(&self, name: &str) -> PathBuf {
        p(self.dir.path(), name)
    }

    fn load(&self) -> Journal<FileDevice> {
        Journal::load(FileDevice::open(&self.img, true).unwrap(), self.map.clone()).unwrap()
    }

    /// The journal features ext4 sets at mount (mkfs leaves the journal without).
    fn set_ext4_features(&self, j: &mut Journal<FileDevice>) {
        let (compat, incompat) = journal::ext4_features(self.sb.has_metadata_csum(), self.sb.is_64bit());
        j.set_features(compat, incompat).unwrap();
    }

    /// Commit T1: f's inode with `mtime`, and `garbage` bytes into the victim.
    fn commit_first(&self, j: &mut Journal<FileDevice>, mtime: u32, garbage: u8) -> CommitInfo {
        let mut t = Transaction::new(self.bs);
        t.log(self.table_block, &with_mtime(&self.sb, &self.orig, self.off, self.ino, mtime)).unwrap();
        t.log(self.victim, &vec![garbage; self.bs as usize]).unwrap();
        j.commit(&t).unwrap().unwrap()
    }

    /// Commit T2, f's inode with `mtime`, and T3, the victim revoked.
    fn commit_rest(&self, j: &mut Journal<FileDevice>, mtime: u32) -> (CommitInfo, CommitInfo) {
        let mut t = Transaction::new(self.bs);
        t.log(self.table_block, &with_mtime(&self.sb, &self.orig, self.off, self.ino, mtime)).unwrap();
        let c2 = j.commit(&t).unwrap().unwrap();
        let mut t = Transaction::new(self.bs);
        t.revoke(self.victim);
        (c2, j.commit(&t).unwrap().unwrap())
    }

    /// debugfs's logdump shows `commits` commit blocks and exactly the tags of
    /// T1 and T2 and the revoke of T3.
    fn assert_logdump(&self, commits: u32, why: &str, c1: &CommitInfo, c2: &CommitInfo, c3: &CommitInfo) {
        let d = logdump(&self.img);
        assert_eq!(d.commits, commits, "{why}");
        let jblock = |c: &CommitInfo, b: u64| c.blocks.iter().find(|l| l.block == b).unwrap().jblock;
        let mut tags = d.tags.clone();
        tags.sort();
        let mut want = vec![
            (c1.sequence, self.table_block, jblock(c1, self.table_block)),
            (c1.sequence, self.victim, jblock(c1, self.victim)),
            (c2.sequence, self.table_block, c2.blocks[0].jblock),
        ];
        want.sort();
        assert_eq!(tags, want);
        assert_eq!(d.revokes, vec![(c3.sequence, self.victim)]);
    }

    /// The victim block of `image` is still zero: its revoked copy was not replayed.
    fn assert_victim_not_replayed(&self, image: &Path) {
        let f = std::fs::File::open(image).unwrap();
        assert_eq!(read_fs_block(&f, self.bs, self.victim), vec![0u8; self.bs as usize], "revoked block replayed");
    }

    /// `e2fsck -fy` on a copy replays the journal and nothing else, after
    /// which `e2fsck -fn` finds it clean with f's mtime `mtime`.
    fn assert_e2fsck_replays(&self, mtime: u32) {
        let fsck = self.path("fsck");
        std::fs::copy(&self.img, &fsck).unwrap();
        let out = run_ok("e2fsck", &["-fy", fsck.to_str().unwrap()], &[0, 1]);
        assert!(!out.contains("Fix") && !out.contains("Clear"), "e2fsck repaired more than the journal:\n{out}");
        run("e2fsck", &["-fn", fsck.to_str().unwrap()]);
        assert_eq!(mtime_via_debugfs(&fsck, "f"), i64::from(mtime));
        self.assert_victim_not_replayed(&fsck);
        assert!(!has_needs_recovery(&fsck));
    }

    /// The kernel replays `image` at mount to f's `mtime` and contents, and
    /// leaves it clean.
    fn assert_kernel_replays(&self, image: &Path, mtime: u32) {
        let (m, data) = kernel_view(image, &self.path("mnt"), "loop");
        assert_eq!(m, mtime.to_string());
        assert_eq!(data, std::fs::read(&self.src).unwrap());
        run("e2fsck", &["-fn", image.to_str().unwrap()]);
        self.assert_victim_not_replayed(image);
    }
}

fn check(mkfs: &[&str]) {
    let v = Vol::new(mkfs, b"hello from the journal oracle\n");
    let bs = v.bs;

    // Our transactions, written into the volume's own journal.
    let mut j = v.load();
    assert!(!j.needs_recovery());
    v.set_ext4_features(&mut j);
    eprintln!("{mkfs:?}: block size {bs}, {:?} checksum, 64bit tags {}", j.layout().checksum, j.layout().is_64bit);
    let (t1_mtime, t2_mtime) = (1_000_000_000u32, 1_234_567_890u32);
    let c1 = v.commit_first(&mut j, t1_mtime, 0xAB);
    let (c2, c3) = v.commit_rest(&mut j, t2_mtime);
    drop(j);
    set_needs_recovery(&v.img, true);
    assert!(has_needs_recovery(&v.img));

    // debugfs sees our log.
    v.assert_logdump(3, "three transactions", &c1, &c2, &c3);

    // e2fsck replays it and the volume is clean.
    v.assert_e2fsck_replays(t2_mtime);

    // The kernel replays it at mount.
    let kern = v.path("kern");
    std::fs::copy(&v.img, &kern).unwrap();
    v.assert_kernel_replays(&kern, t2_mtime);

    // Our own checkpoint + empty: the journal needs nothing afterwards.
    let mut j = v.load();
    assert!(j.needs_recovery());
    let r = j.recover().unwrap();
    assert_eq!(r.transactions, 3);
    assert_eq!(j.replay_to_disk(&r).unwrap(), 1);
    // A transaction after the replay, checkpointed from the log at "unmount".
    let now = read_fs_block(&std::fs::File::open(&v.img).unwrap(), bs, v.table_block);
    let mut t = Transaction::new(bs);
    t.log(v.table_block, &with_mtime(&v.sb, &now, v.off, v.ino, t2_mtime + 1)).unwrap();
    let c4 = j.commit(&t).unwrap().unwrap();
    assert!(journal::tid_gt(c4.sequence, c3.sequence));
    j.checkpoint_from_log(CheckpointGoal::All).unwrap();
    j.empty().unwrap();
    drop(j);
    set_needs_recovery(&v.img, false);
    assert!(!has_needs_recovery(&v.img));
    assert_eq!(dumpe2fs_field(&v.img, "Journal start").as_deref(), Some("0"), "journal not empty");
    run("e2fsck", &["-fn", v.img.to_str().unwrap()]);
    assert_eq!(mtime_via_debugfs(&v.img, "f"), i64::from(t2_mtime + 1));
    v.assert_victim_not_replayed(&v.img);
    // The kernel mounts it without replay and agrees.
    let (m, data) = kernel_view(&v.img, &v.path("mnt"), "loop,ro");
    assert_eq!(m, (t2_mtime + 1).to_string());
    assert_eq!(data, std::fs::read(&v.src).unwrap());
}

/// Crash after the first transaction, resume, commit the rest; e2fsck and the
/// kernel replay the continued log.
fn check_resume(mkfs: &[&str]) {
    let v = Vol::new(mkfs, b"resumed journal\n");

    // Mount 1: one transaction, then a crash.
    let mut j = v.load();
    v.set_ext4_features(&mut j);
    let (m1, m2) = (1_100_000_000u32, 1_300_000_000u32);
    let c1 = v.commit_first(&mut j, m1, 0xCD);
    drop(j);
    set_needs_recovery(&v.img, true);

    // Mount 2 (lazy): resume, two more transactions, nothing written home.
    let mut j = v.load();
    let r = j.recover().unwrap();
    assert_eq!(r.transactions, 1);
    j.resume(&r).unwrap();
    v.set_ext4_features(&mut j);
    let (c2, c3) = v.commit_rest(&mut j, m2);
    assert_eq!((c2.sequence, c3.sequence), (c1.sequence + 2, c1.sequence + 3));
    drop(j);
    assert_eq!(read_fs_block(&std::fs::File::open(&v.img).unwrap(), v.bs, v.table_block), v.orig, "resume wrote home");

    v.assert_logdump(4, "one, the gap-closing empty one, two more", &c1, &c2, &c3);
    // e2fsck replays it.
    v.assert_e2fsck_replays(m2);
    // So does the kernel.
    v.assert_kernel_replays(&v.img, m2);
}

/// A test running `$check` on a volume made with `mkfs.ext4 $mkfs`.
macro_rules! mkfs_case {
    ($check:ident: $fn:ident, $mkfs:expr) => {
        #[test]
        fn $fn() {
            require_tools!(true);
            $check($mkfs);
        }
    };
}

mkfs_case!(check_resume: resume_default_features, &[]);
mkfs_case!(check_resume: resume_block_4k, &["-b", "4096"]);
mkfs_case!(check_resume: resume_no_csum_no_64bit, &["-O", "^metadata_csum,^64bit"]);

// 64M volumes get 1 KiB blocks from mke2fs.conf's "small" type.
mkfs_case!(check: default_features, &[]);
mkfs_case!(check: block_4k, &["-b", "4096"]);
mkfs_case!(check: block_1k, &["-b", "1024"]);
mkfs_case!(check: no_metadata_csum, &["-O", "^metadata_csum"]);
mkfs_case!(check: no_64bit, &["-O", "^64bit"]);
mkfs_case!(check: no_csum_no_64bit, &["-O", "^metadata_csum,^64bit"]);
