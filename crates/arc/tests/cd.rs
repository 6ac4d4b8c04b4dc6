//! Generator invariants and the scanner against the manifest, on a plain directory and on a
//! dbfs-sqlite database read directly (no root, no FUSE).

use arc_cd::gen::{generate, job_files, manifest};
use arc_cd::job::{Job, SUFFIXES};
use arc_cd::layout::{Layout, STATE_DIRS};
use arc_cd::scan::{scan, PosixDir};
use std::path::Path;

const SEED: u64 = 11;

fn files_under(root: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, e.metadata().unwrap().len()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn layouts_hold_eleven_files_per_job_where_arc_keeps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let jobs = 150;
    for layout in Layout::ALL {
        let root = tmp.path().join(layout.name());
        let m = generate(&root, layout, jobs, SEED, 3, false).unwrap();
        let files = files_under(&root);
        assert_eq!(files.len() as u64, jobs * 11, "{layout}");
        assert_eq!(m.files, jobs * 11);
        assert_eq!(files.iter().map(|f| f.1).sum::<u64>(), m.bytes, "{layout}: bytes on disk = manifest");
        let status: Vec<_> = files.iter().filter(|f| f.0.ends_with(".status")).collect();
        assert_eq!(status.len() as u64, jobs);
        match layout {
            Layout::Flat => assert!(files.iter().all(|f| !f.0.contains('/') && f.0.starts_with("job."))),
            Layout::Arc6 => {
                assert!(status.iter().all(|f| STATE_DIRS.iter().any(|d| f.0.starts_with(&format!("{d}/job.")))));
                assert_eq!(files.iter().filter(|f| !f.0.contains('/')).count() as u64, jobs * 10);
            }
            Layout::Arc7 => {
                assert!(status
                    .iter()
                    .all(|f| STATE_DIRS.iter().any(|d| f.0.starts_with(&format!("{d}/"))) && !f.0.contains("job.")));
                let under_jobs = files.iter().filter(|f| f.0.starts_with("jobs/")).count() as u64;
                assert_eq!(under_jobs, jobs * 10);
                // jobs/abc/def/ghi/jkl/local: four ID levels below jobs/.
                assert!(files.iter().filter(|f| f.0.starts_with("jobs/")).all(|f| f.0.matches('/').count() == 5));
            }
        }
        // Each status file sits in the directory of its state.
        for i in 0..jobs {
            let j = Job::new(SEED, i, layout);
            let p = root.join(layout.status_path(j.state_dir, &j.id));
            assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{}\n", j.state));
        }
    }
}

#[test]
fn a_smaller_directory_is_a_subset_of_a_larger_one() {
    let tmp = tempfile::tempdir().unwrap();
    for layout in Layout::ALL {
        let small = tmp.path().join(format!("{layout}-small"));
        let large = tmp.path().join(format!("{layout}-large"));
        generate(&small, layout, 40, SEED, 1, false).unwrap();
        generate(&large, layout, 100, SEED, 2, false).unwrap();
        let s = files_under(&small);
        assert_eq!(s.len(), 440);
        for (rel, _) in &s {
            assert_eq!(
                std::fs::read(small.join(rel)).unwrap(),
                std::fs::read(large.join(rel)).unwrap(),
                "{layout}: {rel}"
            );
        }
    }
}

#[test]
fn scan_finds_what_the_manifest_says() {
    let tmp = tempfile::tempdir().unwrap();
    for layout in Layout::ALL {
        let root = tmp.path().join(layout.name());
        let m = generate(&root, layout, 200, SEED, 2, false).unwrap();
        let r = scan(&mut PosixDir::new(&root), layout).unwrap();
        assert_eq!((r.listed, r.jobs, r.skipped), (200, 200, 0), "{layout}");
        assert_eq!(r.states, m.states);
        assert_eq!(r.digest, m.digest, "{layout}: every parsed value as written");
        assert_eq!(r.per_second.iter().sum::<u64>(), 200);
        // local, status, grami, description, diag per job (no .failed files).
        assert_eq!(r.files_read, 200 * 5);
        // A job whose .local is gone is skipped, as GMJobsInfo does; a changed file changes the digest.
        let j = Job::new(SEED, 7, layout);
        std::fs::remove_file(root.join(layout.file_path(&j.id, "local"))).unwrap();
        let k = Job::new(SEED, 8, layout);
        std::fs::write(root.join(layout.file_path(&k.id, "diag")), "exitcode=3\n").unwrap();
        let r = scan(&mut PosixDir::new(&root), layout).unwrap();
        assert_eq!((r.jobs, r.skipped), (199, 1));
        assert_ne!(r.digest, m.digest.wrapping_sub(j.expected().hash()));
    }
}

#[test]
fn failed_files_turn_finished_jobs_into_failed_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cd");
    generate(&root, Layout::Flat, 60, SEED, 1, false).unwrap();
    let j = (0..60).map(|i| Job::new(SEED, i, Layout::Flat)).find(|j| j.state == "FINISHED").unwrap();
    std::fs::write(
        root.join(Layout::Flat.file_path(&j.id, "failed")),
        "Job failed: User requested to cancel the job\n",
    )
    .unwrap();
    let r = scan(&mut PosixDir::new(&root), Layout::Flat).unwrap();
    assert_eq!(r.states.get("KILLED"), Some(&1));
}

#[test]
fn direct_sqlite_scan_matches_the_manifest() {
    use dbfs::store::{Store, StoreOptions, ROOT, S_IFDIR, S_IFREG};
    let tmp = tempfile::tempdir().unwrap();
    for layout in Layout::ALL {
        let db = tmp.path().join(format!("{layout}.db"));
        let mut s = Store::open(&db, &StoreOptions::default()).unwrap();
        let jobs = 120;
        // Build the control directory "cd/" in the database through the store's own operations.
        let mut dirs = std::collections::HashMap::new();
        let mut mkdirs = |s: &mut Store, path: &str| -> u64 {
            let mut cur = ROOT;
            let mut sofar = String::new();
            for comp in path.split('/').filter(|c| !c.is_empty()) {
                sofar.push('/');
                sofar.push_str(comp);
                cur = *dirs.entry(sofar.clone()).or_insert_with(|| match s.lookup(cur, comp.as_bytes()) {
                    Ok(a) => a.ino,
                    Err(_) => s.create(cur, comp.as_bytes(), S_IFDIR | 0o755, 0, 0, None).unwrap().ino,
                });
            }
            cur
        };
        for i in 0..jobs {
            let j = Job::new(SEED, i, layout);
            for (rel, data) in job_files(&j, layout) {
                let full = format!("cd/{rel}");
                let (dir, name) = full.rsplit_once('/').unwrap();
                let d = mkdirs(&mut s, dir);
                let f = s.create(d, name.as_bytes(), S_IFREG | 0o644, 0, 0, None).unwrap();
                s.write(f.ino, 0, &data).unwrap();
            }
        }
        if layout != Layout::Flat {
            for d in STATE_DIRS {
                mkdirs(&mut s, &format!("cd/{d}"));
            }
        }
        s.close().unwrap();
        let m = manifest(layout, jobs, SEED).unwrap();
        let store = Store::open(&db, &StoreOptions::default()).unwrap();
        let r = scan(&mut arc_cd::sqlite::SqliteDir::new(store, "/cd"), layout).unwrap();
        assert_eq!((r.jobs, r.skipped), (jobs, 0), "{layout}");
        assert_eq!(r.digest, m.digest, "{layout}");
        assert_eq!(SUFFIXES.len(), 11);
    }
}
