//! Recovery of journals written by hand with debugfs's journal commands
//! (`jo` open, `jw` write a transaction, `jw -r` revoke, `jw -c` leave it
//! uncommitted, `jc` close), checked against `e2fsck -y -E journal_only`.
//! Needs e2fsprogs (no root); skips otherwise.

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::tools::*;
use journal::{recover, Recovery};

const BS: u32 = 1024;

/// A fresh 64 MiB volume with 1 KiB blocks and a data file of `n` blocks whose
/// block i is filled with byte `seed + i` (block i goes to the i-th `-b` block).
struct Vol {
    _dir: tempfile::TempDir,
    img: PathBuf,
    data: PathBuf,
}

fn volume(mkfs: &[&str]) -> Vol {
    let dir = tmpdir();
    let img = p(dir.path(), "img");
    let mut args = vec!["-F", "-q", "-b", "1024"];
    args.extend_from_slice(mkfs);
    args.push(img.to_str().unwrap());
    args.push("64M");
    run("mkfs.ext4", &args);
    let data = p(dir.path(), "data");
    let mut bytes = Vec::new();
    for i in 0..8u8 {
        bytes.extend(std::iter::repeat_n(0x10 + i, BS as usize));
    }
    std::fs::write(&data, bytes).unwrap();
    Vol { _dir: dir, img, data }
}

impl Vol {
    fn journal(&self, commands: &[String]) {
        let mut script = String::new();
        for c in commands {
            script.push_str(&c.replace("DATA", self.data.to_str().unwrap()));
            script.push('\n');
        }
        debugfs_write(&self.img, &script);
    }

    fn recover(&self) -> (ImageJournal, Recovery) {
        let j = ImageJournal::open(&self.img);
        let r = recover(&j).unwrap();
        (j, r)
    }

    /// Replay with e2fsck on a copy; return it.
    fn e2fsck_copy(&self) -> File {
        let fixed = self.img.with_extension("fixed");
        std::fs::copy(&self.img, &fixed).unwrap();
        run_ok("e2fsck", &["-y", "-E", "journal_only", fixed.to_str().unwrap()], &[0, 1]);
        File::open(fixed).unwrap()
    }

    /// Every block we replay equals e2fsck's; every block in `untouched` is
    /// unchanged by e2fsck's replay (and not in our result).
    fn check_against_e2fsck(&self, j: &ImageJournal, r: &Recovery, untouched: &[u64]) {
        let before = File::open(&self.img).unwrap();
        let fixed = self.e2fsck_copy();
        let mut buf = vec![0u8; BS as usize];
        for &b in r.blocks.keys() {
            r.read_replayed(j, b, &mut buf).unwrap();
            assert_eq!(buf, read_fs_block(&fixed, BS, b), "block {b}");
        }
        for &b in untouched {
            assert!(r.copy(b).is_none(), "block {b} should not be replayed");
            assert_eq!(read_fs_block(&before, BS, b), read_fs_block(&fixed, BS, b), "block {b} changed");
        }
    }

    /// Flip one byte of journal block `jblock` in the image.
    fn corrupt_journal(&self, j: &ImageJournal, jblock: u64, offset: u64) {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&self.img).unwrap();
        let at = j.phys(jblock).unwrap() * u64::from(BS) + offset;
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x20], at).unwrap();
    }
}

fn cmds(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn fill(v: u8) -> Vec<u8> {
    vec![v; BS as usize]
}

fn replayed(j: &ImageJournal, r: &Recovery, b: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BS as usize];
    assert!(r.read_replayed(j, b, &mut buf).unwrap(), "no copy of {b}");
    buf
}

#[test]
fn revoke_cancels_earlier_copies_but_not_later_ones() {
    require_tools!(false);
    for open in ["jo -c", "jo -c -v 2", "jo"] {
        let v = volume(&[]);
        v.journal(&cmds(&[
            open,
            "jw -b 20000,20001,20002 DATA", // T1
            "jw -r 20000,20001",            // T2 revokes two of them
            "jw -b 20001 DATA",             // T3 logs 20001 again (byte 0x10)
            "jc",
        ]));
        let (j, r) = v.recover();
        assert_eq!(r.transactions, 3, "{open}");
        assert_eq!(r.revoke_records, 2);
        assert_eq!(r.revoke_hits, 2);
        assert_eq!(r.revoked.get(20000), Some(r.start_sequence + 1));
        assert_eq!(replayed(&j, &r, 20001), fill(0x10));
        assert_eq!(r.copy(20001).unwrap().sequence, r.start_sequence + 2);
        assert_eq!(replayed(&j, &r, 20002), fill(0x12));
        v.check_against_e2fsck(&j, &r, &[20000]);
    }
}

#[test]
fn checksum_versions_are_detected() {
    require_tools!(false);
    use ondisk::jbd2::Checksum;
    for (open, want) in [("jo -c", Checksum::V3), ("jo -c -v 2", Checksum::V2), ("jo", Checksum::None)] {
        let v = volume(&[]);
        v.journal(&cmds(&[open, "jw -b 20000 DATA", "jc"]));
        let (_, r) = v.recover();
        assert_eq!(r.layout.checksum, want, "{open}");
    }
    let v = volume(&["-O", "^64bit"]);
    v.journal(&cmds(&["jo -c", "jw -b 20000 DATA", "jc"]));
    let (_, r) = v.recover();
    assert!(!r.layout.is_64bit);
}

#[test]
fn uncommitted_transaction_is_not_replayed() {
    require_tools!(false);
    let v = volume(&[]);
    v.journal(&cmds(&["jo -c", "jw -b 20000 DATA", "jw -b 20000,20001 -c DATA", "jc"]));
    let (j, r) = v.recover();
    assert_eq!(r.transactions, 1);
    assert_eq!(replayed(&j, &r, 20000), fill(0x10));
    v.check_against_e2fsck(&j, &r, &[20001]);
}

#[test]
fn escaped_block_round_trips() {
    require_tools!(false);
    let v = volume(&[]);
    let mut data = fill(0x33);
    data[..4].copy_from_slice(&ondisk::jbd2::MAGIC.to_be_bytes());
    std::fs::write(&v.data, &data).unwrap();
    v.journal(&cmds(&["jo -c", "jw -b 20005 DATA", "jc"]));
    let (j, r) = v.recover();
    assert!(r.copy(20005).unwrap().escaped);
    assert_eq!(replayed(&j, &r, 20005), data);
    v.check_against_e2fsck(&j, &r, &[]);
}

#[test]
fn bad_data_checksum_skips_that_copy_like_e2fsck() {
    require_tools!(false);
    let v = volume(&[]);
    v.journal(&cmds(&["jo -c", "jw -b 20000,20001 DATA", "jw -b 20000,20002 DATA", "jc"]));
    let (j, r) = v.recover();
    let bad = r.copy(20000).unwrap().jblock;
    v.corrupt_journal(&j, bad, 100);
    let (j, r) = v.recover();
    assert_eq!(r.transactions, 2);
    assert_eq!(r.bad_data_blocks.len(), 1);
    assert_eq!(r.bad_data_blocks[0].jblock, bad);
    assert_eq!(replayed(&j, &r, 20000), fill(0x10)); // T1's copy survives
    assert_eq!(replayed(&j, &r, 20002), fill(0x11));
    v.check_against_e2fsck(&j, &r, &[]);
}

#[test]
fn bad_commit_checksum_ends_the_log_like_e2fsck() {
    require_tools!(false);
    let v = volume(&[]);
    v.journal(&cmds(&["jo -c", "jw -b 20000 DATA", "jw -b 20000,20001 DATA", "jc"]));
    let (j, r) = v.recover();
    assert_eq!(r.transactions, 2);
    let commit2 = r.head - 1;
    v.corrupt_journal(&j, commit2, 600);
    let (j, r) = v.recover();
    assert_eq!(r.transactions, 1);
    assert_eq!(r.failed_commit, Some(r.start_sequence + 1));
    assert_eq!(replayed(&j, &r, 20000), fill(0x10));
    v.check_against_e2fsck(&j, &r, &[20001]);
}

#[test]
fn logdump_agrees_on_counts() {
    require_tools!(false);
    let v = volume(&[]);
    let mut list = vec!["jo -c".to_string()];
    for t in 0..30u64 {
        list.push(format!("jw -b {},{} DATA", 20000 + t % 7, 21000 + t));
        if t % 5 == 4 {
            list.push(format!("jw -r {}", 20000 + t % 7));
        }
    }
    list.push("jc".into());
    v.journal(&list);
    let (j, r) = v.recover();
    let d = logdump(Path::new(&v.img));
    assert_eq!(d.commits, r.transactions);
    assert_eq!(d.tags.len() as u64, r.replayed_tags + r.revoke_hits);
    assert_eq!(d.revokes.len() as u64, r.revoke_records);
    v.check_against_e2fsck(&j, &r, &[]);
}
