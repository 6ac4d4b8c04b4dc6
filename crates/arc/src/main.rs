//! `arc-cd`: make and scan ARC control directories (issue #8).
//!
//! ```text
//! arc-cd gen --jobs N --layout flat|arc6|arc7 [--seed S] [--threads T] [--manifest FILE] DIR
//! arc-cd manifest --jobs N --layout L [--seed S]          # what gen would write, as JSON
//! arc-cd scan --layout L [--drop-caches] [--json FILE] DIR
//! arc-cd scan --layout L --sqlite DB [--base PATH] ...    # the same scan straight from a dbfs-sqlite database
//! ```
//! `scan` prints one JSON record: jobs, layout, jobs_per_s, per_second, files and bytes read,
//! states, and a digest equal to the manifest's when every job was read back intact.

use anyhow::{Context, Result};
use arc_cd::layout::Layout;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "arc-cd", about = "ARC control-directory generator and GMJobsInfo scanner")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write a control directory.
    Gen {
        #[arg(long)]
        jobs: u64,
        #[arg(long, default_value = "flat")]
        layout: Layout,
        #[arg(long, default_value_t = 2017)]
        seed: u64,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Also write the manifest here.
        #[arg(long)]
        manifest: Option<PathBuf>,
        dir: PathBuf,
    },
    /// Print the manifest of a control directory without writing it.
    Manifest {
        #[arg(long)]
        jobs: u64,
        #[arg(long, default_value = "flat")]
        layout: Layout,
        #[arg(long, default_value_t = 2017)]
        seed: u64,
    },
    /// Scan a control directory as ARC's GMJobsInfo collect().
    Scan {
        #[arg(long, default_value = "flat")]
        layout: Layout,
        /// sync and drop the kernel's caches first (root).
        #[arg(long)]
        drop_caches: bool,
        /// Read a dbfs-sqlite database directly instead of a directory.
        #[arg(long)]
        sqlite: Option<PathBuf>,
        /// With --sqlite: the control directory's path inside the database.
        #[arg(long, default_value = "")]
        base: String,
        /// Also write the record here.
        #[arg(long)]
        json: Option<PathBuf>,
        dir: Option<PathBuf>,
    },
}

fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").context("dropping caches (needs root)")
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Gen { jobs, layout, seed, threads, manifest, dir } => {
            let m = arc_cd::gen::generate(&dir, layout, jobs, seed, threads, true)?;
            let text = serde_json::to_string_pretty(&m.to_json())?;
            if let Some(p) = manifest {
                std::fs::write(&p, format!("{text}\n")).with_context(|| format!("{}", p.display()))?;
            }
            println!("{text}");
        }
        Cmd::Manifest { jobs, layout, seed } => {
            println!("{}", serde_json::to_string_pretty(&arc_cd::gen::manifest(layout, jobs, seed)?.to_json())?);
        }
        Cmd::Scan { layout, drop_caches: drop, sqlite, base, json, dir } => {
            if drop {
                drop_caches()?;
            }
            let mut rec = match (sqlite, dir) {
                (Some(db), _) => {
                    let store = dbfs::store::Store::open(&db, &Default::default())
                        .with_context(|| format!("{}", db.display()))?;
                    let mut cd = arc_cd::sqlite::SqliteDir::new(store, &base);
                    let r = arc_cd::scan::scan(&mut cd, layout)?;
                    let mut j = r.to_json();
                    j["source"] = serde_json::json!("sqlite-direct");
                    j
                }
                (None, Some(dir)) => {
                    let mut cd = arc_cd::scan::PosixDir::new(&dir);
                    let r =
                        arc_cd::scan::scan(&mut cd, layout).with_context(|| format!("scanning {}", dir.display()))?;
                    r.to_json()
                }
                (None, None) => anyhow::bail!("scan needs a DIR or --sqlite DB"),
            };
            rec["drop_caches"] = serde_json::json!(drop);
            let text = serde_json::to_string(&rec)?;
            if let Some(p) = json {
                std::fs::write(&p, format!("{text}\n")).with_context(|| format!("{}", p.display()))?;
            }
            println!("{text}");
        }
    }
    Ok(())
}
