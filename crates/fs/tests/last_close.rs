//! The last close of a file frees it exactly when its last name went while
//! it was open: an unlink racing the close on another thread, an O_TMPFILE
//! file, and a file that keeps its name (which the close must leave alone,
//! without taking the write lock: `Volume::unhold`).

mod common;

use fs::{CreateKind, Volume, ROOT_INO};
use std::sync::{Arc, Barrier};

fn free_inodes(vol: &Volume) -> u64 {
    vol.statfs().ffree
}

fn races(lazy: bool) {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "race.img", 64, &["-b", "4096"], &empty);
    let vol = Arc::new(common::open_rw(&img, lazy));
    let (free_blocks, free_inos) = (vol.statfs().bfree, free_inodes(&vol));
    for round in 0..300u32 {
        let name = format!("f{round}");
        let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.write(ino, 0, &[7u8; 20_000]).unwrap();
        vol.opened(ino);
        // Unlink and last close start together, in either order by round.
        let go = Arc::new(Barrier::new(2));
        let (v, g) = (vol.clone(), go.clone());
        let closer = std::thread::spawn(move || {
            g.wait();
            v.released(ino).unwrap();
        });
        go.wait();
        if round % 2 == 0 {
            std::thread::yield_now();
        }
        vol.unlink(ROOT_INO, name.as_bytes()).unwrap();
        closer.join().unwrap();
        assert_eq!(vol.last_orphan_for_tests(), 0, "round {round}: inode {ino} left on the orphan list");
        assert!(!vol.has_handles(ino));
    }
    vol.sync().unwrap();
    assert_eq!(free_inodes(&vol), free_inos, "every raced file was freed");
    assert_eq!(vol.statfs().bfree, free_blocks, "and its blocks");

    // A file closed with its name kept stays whole.
    let kept = vol.create(ROOT_INO, b"kept", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.opened(kept);
    vol.write(kept, 0, b"still here").unwrap();
    vol.released(kept).unwrap();
    let inode = vol.inode(kept).unwrap();
    assert_eq!(vol.read(&inode, 0, 100).unwrap(), b"still here");

    // An O_TMPFILE file goes at its last close; one given a name stays.
    let tmp = vol.create_tmpfile(ROOT_INO, 0o600, 0, 0, 0).unwrap().ino;
    vol.opened(tmp);
    vol.write(tmp, 0, &[1u8; 9000]).unwrap();
    vol.released(tmp).unwrap();
    assert_eq!(vol.last_orphan_for_tests(), 0, "the closed tmpfile left the list");
    let named = vol.create_tmpfile(ROOT_INO, 0o600, 0, 0, 0).unwrap().ino;
    vol.opened(named);
    vol.link(named, ROOT_INO, b"named").unwrap();
    vol.released(named).unwrap();
    assert_eq!(vol.inode(named).unwrap().links_count(), 1);
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_in(&img, lazy);
}

#[test]
fn unlink_racing_the_last_close_frees_the_file_ordered() {
    races(false);
}

#[test]
fn unlink_racing_the_last_close_frees_the_file_lazy() {
    races(true);
}
