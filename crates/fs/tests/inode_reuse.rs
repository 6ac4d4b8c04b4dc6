//! Inode numbers stay bound to what the kernel looked up (issue #24): a
//! number the kernel holds lookups of is not given to a new inode, even once
//! the old inode is freed on disk and even when it is the last free one; the
//! kernel's FORGET frees it for reuse. Files and directories alike.

mod common;

use fs::{CreateKind, FsError, Volume, VolumeOptions, ROOT_INO};
use std::sync::Arc;

#[test]
fn a_looked_up_number_is_not_reused_until_forgotten() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    // One group of 64 inodes, so that the allocator must come back to a freed number.
    let img = common::make_image(
        work.path(),
        "few.img",
        16,
        &["-b", "4096", "-N", "64"],
        &empty,
    );
    for kind in [CreateKind::File, CreateKind::Dir] {
        let dev = Arc::new(blockdev::FileDevice::open(&img, true).unwrap());
        let vol = Volume::open(
            dev,
            VolumeOptions {
                read_only: false,
                ..Default::default()
            },
        )
        .unwrap();
        let old = vol
            .create(ROOT_INO, b"old", kind.clone(), 0o755, 0, 0)
            .unwrap()
            .ino;
        vol.looked_up(old);
        vol.looked_up(old); // two lookups: one FORGET of one is not enough
        if kind == CreateKind::Dir {
            vol.rmdir(ROOT_INO, b"old").unwrap();
        } else {
            vol.unlink(ROOT_INO, b"old").unwrap();
        }
        assert!(vol.inode(old).unwrap().links_count() == 0, "freed on disk");
        let mut made = Vec::new();
        let full = loop {
            match vol.create(
                ROOT_INO,
                format!("new{}", made.len()).as_bytes(),
                CreateKind::File,
                0o644,
                0,
                0,
            ) {
                Ok(i) => made.push(i.ino),
                Err(e) => break e,
            }
            assert!(made.len() < 100, "the group never filled");
        };
        assert!(matches!(full, FsError::NoSpace), "{full:?}");
        assert!(
            !made.contains(&old),
            "{kind:?}: a new inode got number {old}, which the kernel holds"
        );
        vol.forgotten(old, 1);
        assert!(vol.kernel_knows(old));
        assert!(matches!(
            vol.create(ROOT_INO, b"still-held", CreateKind::File, 0o644, 0, 0),
            Err(FsError::NoSpace)
        ));
        vol.forgotten(old, 1);
        assert!(!vol.kernel_knows(old));
        let again = vol
            .create(ROOT_INO, b"after-forget", CreateKind::File, 0o644, 0, 0)
            .unwrap();
        assert_eq!(again.ino, old, "once forgotten, the number is free again");
        // Leave the image as it was for the next kind.
        for (n, _) in made.iter().enumerate() {
            vol.unlink(ROOT_INO, format!("new{n}").as_bytes()).unwrap();
        }
        vol.unlink(ROOT_INO, b"after-forget").unwrap();
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean(&img);
    }
}
