//! How long a lazy mount takes to rebuild the jmap from a full journal.
//!
//!     cargo run --release -p fs --example lazymount -- [JOURNAL_MIB] [IMAGE_DIR]
//!
//! Makes a volume with a JOURNAL_MIB journal (default 1024), fills the log
//! in lazy mode (timestamps of many inodes, changed over and over, with the
//! cleaner held back so that nothing is reclaimed), unmounts, drops the page
//! cache (root), and times the read-write lazy open: the recovery scan of
//! the whole log, the jmap build and the resume. Prints seconds per GiB of
//! log scanned and the jmap's bytes per entry. Needs mkfs.ext4.

use blockdev::FileDevice;
use fs::{CleanerPolicy, CreateKind, SetAttr, Timestamp, Volume, VolumeOptions, ROOT_INO};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let journal_mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let dir = std::path::PathBuf::from(args.get(2).cloned().unwrap_or_else(|| "/var/tmp".into()));
    let img = dir.join("ext4lazy-lazymount.img");
    let size = (journal_mib * 4).max(1024) << 20;
    std::fs::File::create(&img).and_then(|f| f.set_len(size)).expect("create the image");
    let st = std::process::Command::new("mkfs.ext4")
        .args(["-F", "-q", "-b", "4096", "-J", &format!("size={journal_mib}")])
        .arg(&img)
        .status()
        .expect("run mkfs.ext4");
    assert!(st.success(), "mkfs.ext4 failed");

    // Fill the log: the cleaner never starts, and a full log would migrate
    // home, so stop at 90%.
    let snap = img.with_extension("img.jmap");
    let opts = |cleaner, snapshot: bool| VolumeOptions {
        read_only: false,
        lazy: true,
        cleaner,
        commit_interval: Duration::from_secs(3600),
        jmap_snapshot: snapshot.then(|| snap.clone()),
        ..Default::default()
    };
    let hold = CleanerPolicy { start_fill: 2.0, ..Default::default() };
    let vol = Volume::open(Arc::new(FileDevice::open(&img, true).expect("open")), opts(hold, true)).expect("mount");
    let mut inodes = Vec::new();
    for d in 0..200 {
        let dir = vol.create(ROOT_INO, format!("d{d}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).expect("mkdir");
        for f in 0..250 {
            inodes.push(
                vol.create(dir.ino, format!("f{f}").as_bytes(), CreateKind::File, 0o644, 0, 0).expect("create").ino,
            );
        }
    }
    let t0 = Instant::now();
    let mut round = 0;
    loop {
        let js = vol.journal_stats().expect("journal");
        if js.journal_used_blocks * 10 >= js.journal_blocks * 9 {
            break;
        }
        let t = Timestamp { sec: 1_700_000_000 + round, nsec: 0 };
        for &ino in &inodes {
            vol.setattr(ino, &SetAttr { mtime: Some(t), ..Default::default() }).expect("setattr");
        }
        vol.sync().expect("sync");
        round += 1;
    }
    let js = vol.journal_stats().expect("journal");
    vol.shutdown().expect("unmount");
    drop(vol);
    eprintln!(
        "filled {} of {} journal blocks in {round} rounds ({:.1} s)",
        js.journal_used_blocks,
        js.journal_blocks,
        t0.elapsed().as_secs_f64()
    );

    // Cold (nothing of the image in the page cache), first with the snapshot
    // the unmount saved, then with a scan of the whole log.
    for snapshot in [true, false] {
        let _ = std::process::Command::new("sync").status();
        let dropped = std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok();
        let t = Instant::now();
        let vol = Volume::open(
            Arc::new(FileDevice::open(&img, true).expect("open")),
            opts(CleanerPolicy::default(), snapshot),
        )
        .expect("lazy mount");
        let secs = t.elapsed().as_secs_f64();
        let js = vol.journal_stats().expect("journal");
        let how = if vol.journal().expect("journal").from_snapshot { "from the snapshot" } else { "scanning the log" };
        let gib = js.journal_used_blocks as f64 * 4096.0 / f64::from(1 << 30);
        println!(
            "lazy mount {how}: {secs:.3} s for {:.2} GiB of log ({:.2} s/GiB{}), {} jmap entries, {:.1} bytes/entry",
            gib,
            secs / gib,
            if dropped { ", cold cache" } else { ", page cache NOT dropped (not root)" },
            js.jmap_entries,
            js.jmap_bytes as f64 / js.jmap_entries.max(1) as f64
        );
        vol.shutdown().expect("unmount");
    }
    let _ = std::fs::remove_file(&img);
    let _ = std::fs::remove_file(&snap);
}
