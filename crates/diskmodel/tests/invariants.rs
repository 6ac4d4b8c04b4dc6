//! The model device's invariants: data round-trips, time never goes
//! backwards, cleaning drains the cache, a full cache makes writes wait,
//! SPTF reorders batches, bad requests are refused without damage.

use blockdev::{BlockDevice, IoClass, ReadRequest};
use diskmodel::rng::Rng;
use diskmodel::{open_model_device, open_null_device, ModelOptions};
use std::io::ErrorKind;
use std::sync::Arc;

fn virtual_opts(params: &[(&str, &str)]) -> ModelOptions {
    ModelOptions {
        speed: None,
        params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..ModelOptions::default()
    }
}

#[test]
fn read_after_write_returns_the_data_on_every_model() {
    for model in diskmodel::MODEL_NAMES {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("disk.img");
        let opts = ModelOptions { size: Some(64 << 20), ..virtual_opts(&[]) };
        let dev = open_model_device(model, &backing, &opts).unwrap();
        let mut rng = Rng::new(7);
        let mut written = Vec::new();
        for i in 0..64u64 {
            let off = rng.below((64 << 20) / 4096) * 4096;
            let data = vec![(i + 1) as u8; 4096];
            dev.write_at(off, &data, IoClass::Data).unwrap();
            written.retain(|&(o, _)| o != off);
            written.push((off, (i + 1) as u8));
        }
        dev.flush().unwrap();
        for &(off, v) in &written {
            let mut buf = vec![0u8; 4096];
            dev.read_at(off, &mut buf, IoClass::Metadata).unwrap();
            assert!(buf.iter().all(|&b| b == v), "{model}: block at {off} lost its data");
        }
        // the backing file is sparse: only what was written costs space
        let md = std::fs::metadata(&backing).unwrap();
        assert_eq!(md.len(), 64 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(md.blocks() * 512 <= 2 * 64 * 4096 + (1 << 20));
        let r = dev.report();
        assert_eq!(r.classes["data"]["write"].requests, 64);
        assert_eq!(r.classes["metadata"]["read"].requests, written.len() as u64);
    }
}

#[test]
fn an_8tb_disk_costs_only_what_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("big.img");
    let dev = open_model_device("smr-seagate", &backing, &virtual_opts(&[])).unwrap();
    assert_eq!(dev.size(), 8_001_563_222_016);
    let data = vec![0x5au8; 4096];
    dev.write_at(dev.size() - 4096, &data, IoClass::Data).unwrap();
    let mut back = vec![0u8; 4096];
    dev.read_at(dev.size() - 4096, &mut back, IoClass::Data).unwrap();
    assert_eq!(back, data);
}

#[test]
fn time_never_goes_backwards_under_concurrent_threads() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    let opts = ModelOptions {
        speed: Some(2000.0),
        trace: Some(trace.clone()),
        size: Some(1 << 30),
        params: vec![("cache_bytes".into(), "64M".into()), ("band_bytes".into(), "1M".into())],
        ..ModelOptions::default()
    };
    let dev = open_null_device("smr-seagate", &opts).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|k| {
            let dev = Arc::clone(&dev);
            std::thread::spawn(move || {
                let mut rng = Rng::new(k);
                let mut last = 0.0;
                for _ in 0..200 {
                    let off = rng.below((1 << 30) / 4096) * 4096;
                    if rng.below(2) == 0 {
                        dev.write_at(off, &[0u8; 4096], IoClass::Data).unwrap();
                    } else {
                        let mut b = [0u8; 4096];
                        dev.read_at(off, &mut b, IoClass::Data).unwrap();
                    }
                    let now = dev.now();
                    assert!(now >= last, "model time went backwards: {now} < {last}");
                    last = now;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    dev.flush_trace();
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut last_start = 0.0;
    let mut n = 0;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let arrival: f64 = f[0].parse().unwrap();
        let start: f64 = f[1].parse().unwrap();
        let end: f64 = f[2].parse().unwrap();
        assert!(arrival <= start + 1e-9 && start <= end, "{line}");
        assert!(start + 1e-9 >= last_start, "the drive started requests out of time order: {line}");
        last_start = start;
        n += 1;
    }
    assert_eq!(n, 800);
}

#[test]
fn idle_cleaning_drains_the_cache_and_wait_idle_reports_it() {
    let opts = virtual_opts(&[("cache_bytes", "64M"), ("band_bytes", "1M")]);
    let dev = open_null_device("smr-seagate", &opts).unwrap();
    let mut rng = Rng::new(1);
    for _ in 0..500 {
        let off = rng.below(dev.size() / 4096) * 4096;
        dev.write_at(off, &[1u8; 4096], IoClass::Metadata).unwrap();
    }
    let st = dev.model_state();
    assert_eq!(st.cache_used_bytes, 500 * 4096);
    let cleaning = dev.wait_idle();
    let st = dev.model_state();
    assert_eq!(st.cache_used_bytes, 0);
    assert!(!st.cleaning_pending);
    assert_eq!(st.bands_cleaned, 500);
    assert!((cleaning - st.cleaning_s).abs() < 1e-6, "all cleaning happened after the host stopped");
    assert!(cleaning > 500.0 * 0.1);
}

#[test]
fn skipping_to_idle_does_the_cleaning_a_wait_would_without_the_wait() {
    // The same writes on a real clock (speed 1, the drive's own pace), then a
    // skip, and on a virtual clock, then a wait: the same bands cleaned, the
    // same cleaning seconds, and the real clock's minutes of cleaning take no
    // real minutes.
    let params = [("cache_bytes", "64M"), ("band_bytes", "1M")];
    let real = ModelOptions { speed: Some(1.0), ..virtual_opts(&params) };
    let mut runs = Vec::new();
    for (opts, skip) in [(real, true), (virtual_opts(&params), false)] {
        let dev = open_null_device("smr-seagate", &opts).unwrap();
        let mut rng = Rng::new(7);
        for _ in 0..200 {
            let off = rng.below(dev.size() / 4096) * 4096;
            dev.write_at(off, &[1u8; 4096], IoClass::Metadata).unwrap();
        }
        let t0 = std::time::Instant::now();
        let cleaning = if skip { dev.skip_to_idle() } else { dev.wait_idle() };
        let st = dev.model_state();
        assert_eq!(st.cache_used_bytes, 0);
        assert!(!st.cleaning_pending);
        if skip {
            assert!(cleaning > 200.0 * 0.1, "each band costs at least its merge: {cleaning}");
            assert!(t0.elapsed().as_secs_f64() < cleaning / 10.0, "{:?} for {cleaning} s", t0.elapsed());
        }
        runs.push((st.bands_cleaned, cleaning));
    }
    assert_eq!(runs[0].0, runs[1].0);
    assert!((runs[0].1 - runs[1].1).abs() < 0.01 * runs[1].1, "{runs:?}");
}

#[test]
fn a_full_cache_makes_writes_wait() {
    for model in ["smr-seagate", "smr-wd"] {
        let opts = virtual_opts(&[("cache_bytes", "16M"), ("band_bytes", "1M")]);
        let dev = open_null_device(model, &opts).unwrap();
        let mut rng = Rng::new(3);
        let mut lat_before = Vec::new();
        let mut lat_after = Vec::new();
        for i in 0..8192u64 {
            let off = rng.below(dev.size() / 4096) * 4096;
            let t0 = dev.now();
            dev.write_at(off, &[0u8; 4096], IoClass::Data).unwrap();
            let lat = dev.now() - t0;
            if i < 1024 {
                lat_before.push(lat);
            } else if i >= 6144 {
                lat_after.push(lat);
            }
            let st = dev.model_state();
            assert!(st.cache_used_bytes <= st.cache_capacity_bytes);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!(
            mean(&lat_after) > 10.0 * mean(&lat_before),
            "{model}: writes on a full cache must wait for cleaning ({} vs {})",
            mean(&lat_after),
            mean(&lat_before)
        );
        assert!(dev.model_state().bands_cleaned_forced > 0 || model == "smr-wd");
    }
}

#[test]
fn a_batch_is_reordered_by_positioning_time() {
    let offsets: Vec<u64> = {
        let mut rng = Rng::new(11);
        (0..32).map(|_| rng.below(476_000_000_000 / 4096) * 4096).collect()
    };
    let one_by_one = {
        let dev = open_null_device("cmr", &virtual_opts(&[])).unwrap();
        for &o in &offsets {
            let mut b = vec![0u8; 4096];
            dev.read_at(o, &mut b, IoClass::Metadata).unwrap();
        }
        dev.now()
    };
    let batched = {
        let dev = open_null_device("cmr", &virtual_opts(&[])).unwrap();
        let mut bufs: Vec<Vec<u8>> = offsets.iter().map(|_| vec![0u8; 4096]).collect();
        let mut reqs: Vec<ReadRequest> = bufs
            .iter_mut()
            .zip(&offsets)
            .map(|(b, &o)| ReadRequest { offset: o, buf: b.as_mut_slice(), class: IoClass::Metadata })
            .collect();
        dev.read_batch(&mut reqs).unwrap();
        dev.now()
    };
    assert!(batched < 0.6 * one_by_one, "SPTF: batch {batched} s vs one by one {one_by_one} s");
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("disk.img");
    let opts = ModelOptions { size: Some(1 << 20), ..virtual_opts(&[]) };
    let dev = open_model_device("cmr", &backing, &opts).unwrap();
    dev.write_at(0, &[7u8; 4096], IoClass::Data).unwrap();
    let before = std::fs::read(&backing).unwrap();
    let e = dev.write_at(1 << 20, &[1u8; 4096], IoClass::Data).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = dev.write_at((1 << 20) - 512, &[1u8; 4096], IoClass::Data).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = dev.write_at(100, &[1u8; 512], IoClass::Data).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = dev.write_at(0, &[1u8; 100], IoClass::Data).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let mut b = [0u8; 512];
    assert_eq!(dev.read_at(u64::MAX - 511, &mut b, IoClass::Data).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(std::fs::read(&backing).unwrap(), before);
    assert_eq!(dev.report().classes["data"]["write"].requests, 1, "refused requests never reach the model");
    // a backing file of another size is refused, not truncated
    let other = ModelOptions { size: Some(2 << 20), ..virtual_opts(&[]) };
    assert!(open_model_device("cmr", &backing, &other).is_err());
    assert_eq!(std::fs::read(&backing).unwrap(), before);
    // unknown models and parameters are clear errors
    assert!(open_null_device("ssd", &virtual_opts(&[])).is_err());
    assert!(open_null_device("cmr", &virtual_opts(&[("cache_bytes", "1G")])).is_err());
    assert!(open_null_device("smr-wd", &virtual_opts(&[("cache_bytes", "lots")])).is_err());
}

/// Needs root to mount a tiny tmpfs; skipped otherwise.
#[test]
fn a_full_backing_file_system_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let backing = mnt.join("disk.img");
        let opts = ModelOptions { size: Some(64 << 20), ..virtual_opts(&[]) };
        let dev = open_model_device("cmr", &backing, &opts).unwrap();
        let mut err = None;
        let mut good = Vec::new();
        for i in 0..128u64 {
            match dev.write_at(i * 8192, &[(i + 1) as u8; 8192], IoClass::Data) {
                Ok(()) => good.push(i),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let e = err.expect("a 256 KiB file system must fill up");
        assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
        assert!(e.to_string().contains("backing file"), "{e}");
        for i in good {
            let mut b = vec![0u8; 8192];
            dev.read_at(i * 8192, &mut b, IoClass::Data).unwrap();
            assert!(b.iter().all(|&x| x == (i + 1) as u8));
        }
    });
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}
