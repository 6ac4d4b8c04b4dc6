//! Write a control directory: `jobs` jobs in a layout, and the manifest a scan is checked
//! against.

use crate::job::{Job, SUFFIXES};
use crate::layout::{arc7_job_dir, Layout, STATE_DIRS};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a generated control directory holds.
#[derive(Clone, Debug, Default)]
pub struct Manifest {
    pub jobs: u64,
    pub layout: String,
    pub seed: u64,
    pub files: u64,
    pub bytes: u64,
    pub states: BTreeMap<String, u64>,
    /// Sum of the jobs' expected [`crate::job::Summary`] hashes (see [`crate::scan::ScanReport`]).
    pub digest: u64,
}

impl Manifest {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "jobs": self.jobs,
            "layout": self.layout,
            "seed": self.seed,
            "files": self.files,
            "bytes": self.bytes,
            "states": self.states,
            "digest": format!("{:016x}", self.digest),
        })
    }
}

/// The manifest of jobs 0..jobs without writing anything.
pub fn manifest(layout: Layout, jobs: u64, seed: u64) -> Result<Manifest> {
    let mut m = Manifest { jobs, layout: layout.name().into(), seed, ..Default::default() };
    let mut ids = HashSet::new();
    for i in 0..jobs {
        let j = Job::new(seed, i, layout);
        if !ids.insert(j.id.clone()) {
            bail!("job ID {} repeats (seed {seed}): choose another seed", j.id);
        }
        for sfx in SUFFIXES {
            m.files += 1;
            m.bytes += j.file(sfx).len() as u64;
        }
        *m.states.entry(j.state.to_string()).or_insert(0) += 1;
        m.digest = m.digest.wrapping_add(j.expected().hash());
    }
    Ok(m)
}

/// Paths and contents of one job's files, in the order they are written.
pub fn job_files(job: &Job, layout: Layout) -> Vec<(String, Vec<u8>)> {
    SUFFIXES
        .iter()
        .map(|sfx| {
            let path = if *sfx == "status" {
                layout.status_path(job.state_dir, &job.id)
            } else {
                layout.file_path(&job.id, sfx)
            };
            (path, job.file(sfx))
        })
        .collect()
}

fn write_job(root: &Path, job: &Job, layout: Layout) -> Result<()> {
    if layout == Layout::Arc7 {
        let d = root.join(arc7_job_dir(&job.id));
        std::fs::create_dir_all(&d).with_context(|| format!("mkdir {}", d.display()))?;
    }
    for (rel, data) in job_files(job, layout) {
        let p = root.join(&rel);
        let mut f = std::fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
        if !data.is_empty() {
            f.write_all(&data).with_context(|| format!("write {}", p.display()))?;
        }
    }
    Ok(())
}

/// Write jobs 0..jobs into `root` (created if missing) with `threads` writers; files that exist
/// are overwritten, so a directory can grow to a larger size in place. Jobs are handed out in
/// runs of 64 so that each writer's files stay together.
pub fn generate(root: &Path, layout: Layout, jobs: u64, seed: u64, threads: usize, progress: bool) -> Result<Manifest> {
    let m = manifest(layout, jobs, seed)?;
    std::fs::create_dir_all(root).with_context(|| format!("mkdir {}", root.display()))?;
    if layout != Layout::Flat {
        for d in STATE_DIRS {
            std::fs::create_dir_all(root.join(d)).with_context(|| format!("mkdir {}/{d}", root.display()))?;
        }
    }
    const RUN: u64 = 64;
    let next = AtomicU64::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let start = next.fetch_add(RUN, Ordering::Relaxed);
                if start >= jobs || failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                for i in start..(start + RUN).min(jobs) {
                    if let Err(e) = write_job(root, &Job::new(seed, i, layout), layout) {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
                let d = done.fetch_add(RUN, Ordering::Relaxed) + RUN;
                if progress && d % 10_000 < RUN {
                    eprintln!("arc-cd gen: {} of {jobs} jobs", d.min(jobs));
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    Ok(m)
}
