//! `ext4lazy emu ...`: run workloads straight into a model, serve a model as
//! an image file, and read its figures.

use crate::params::parse_size;
use crate::workload::{self, RandOpts, Stop};
use crate::{describe_model, open_model_device, ModelOptions, Op};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).ok_or_else(|| format!("`{s}` is not a size (e.g. 4096, 4K, 30M, 25G)"))
}

fn param_arg(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))
}

fn speed_arg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive speed factor")),
    }
}

/// A random-I/O workload straight into a model (no file system, no data).
#[derive(Args, Debug, Clone)]
pub struct RandArgs {
    /// cmr, smr-seagate or smr-wd
    #[arg(long)]
    pub model: String,
    /// Request size (e.g. 4K)
    #[arg(long, value_parser = size_arg, default_value = "4K")]
    pub bs: u64,
    /// Stop after this many bytes
    #[arg(long, value_parser = size_arg, conflicts_with = "seconds", required_unless_present = "seconds")]
    pub bytes: Option<u64>,
    /// Stop after this many model seconds
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Real time scaled by this factor (1 = the real drive); without it the
    /// run uses virtual time and takes only CPU time
    #[arg(long, value_parser = speed_arg)]
    pub speed: Option<f64>,
    /// Requests outstanding at once (closed loop)
    #[arg(long, default_value_t = 1)]
    pub qd: u32,
    /// Seed of the offset generator
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Draw offsets from [0, SPAN) instead of the whole drive
    #[arg(long, value_parser = size_arg)]
    pub span: Option<u64>,
    /// Width of a series point, model seconds
    #[arg(long, default_value_t = 10.0)]
    pub bucket: f64,
    /// Override a model parameter, NAME=VALUE (repeatable; see `emu params`)
    #[arg(long = "param", value_parser = param_arg)]
    pub params: Vec<(String, String)>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON result to this file
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum EmuCommand {
    /// Random writes straight into a model; prints throughput over model time
    /// (`--json`: {"model": ..., "series": [{"t_s", "mib_s", ...}], ...})
    Randwrite(RandArgs),
    /// Random reads straight into a model (IOPS at a queue depth)
    Randread(RandArgs),
    /// Sequential bandwidth at the outer and the inner diameter
    Seqbw {
        #[arg(long, default_value = "cmr")]
        model: String,
        /// read or write
        #[arg(long, default_value = "read")]
        op: String,
        #[arg(long, value_parser = size_arg, default_value = "256M")]
        bytes: u64,
        /// Request size
        #[arg(long, value_parser = size_arg, default_value = "1M")]
        req: u64,
        #[arg(long = "param", value_parser = param_arg)]
        params: Vec<(String, String)>,
        #[arg(long)]
        json: bool,
    },
    /// The streaming-threshold test (paper section 4.3.1): how much of a
    /// sequential write of each size lands in the persistent cache
    StreamTest {
        #[arg(long, default_value = "smr-seagate")]
        model: String,
        /// Size of the host requests a sequential write is issued as
        #[arg(long, value_parser = size_arg, default_value = "512K")]
        req: u64,
        #[arg(long = "param", value_parser = param_arg)]
        params: Vec<(String, String)>,
        #[arg(long)]
        json: bool,
    },
    /// Replay a measured trace (DiskSim validation format) one request at a
    /// time in virtual time, and print each request's measured and modelled
    /// service time as JSON (docs/DISKMODELS.md, validation of the read cache)
    Replay {
        #[arg(long, default_value = "cmr")]
        model: String,
        #[arg(long = "param", value_parser = param_arg)]
        params: Vec<(String, String)>,
        /// The trace: `R|W FLAG LBN BLOCKS SERVICE_US GAP_US` per line
        trace: PathBuf,
    },
    /// Serve a model as DIR/disk.img (FUSE); returns once it is served.
    /// Stop it with `fusermount3 -u DIR`.
    Serve {
        #[arg(long)]
        model: String,
        /// Exported size (a partition at the start of the drive); defaults to
        /// the backing file's size
        #[arg(long, value_parser = size_arg)]
        size: Option<u64>,
        /// Sparse file holding the data (created if missing)
        #[arg(long)]
        backing: PathBuf,
        #[arg(long, value_parser = speed_arg, default_value_t = 1.0)]
        speed: f64,
        #[arg(long = "param", value_parser = param_arg)]
        params: Vec<(String, String)>,
        /// Write a CSV trace of every request to this file
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Width of a series point, model seconds
        #[arg(long, default_value_t = 1.0)]
        bucket: f64,
        /// Server log (stderr of the background process)
        #[arg(long)]
        log: Option<PathBuf>,
        /// Do not use the kernel's metadata flag (tracefs) to classify requests
        #[arg(long)]
        no_meta_flags: bool,
        /// Serve in the foreground (the background process runs with it)
        #[arg(long, hide = true)]
        foreground: bool,
        dir: PathBuf,
    },
    /// Wait until a served model has finished cleaning; prints the cleaning
    /// seconds (model time, after the host stopped) on the last line
    WaitIdle {
        dir: PathBuf,
        /// Give up after this many real seconds
        #[arg(long)]
        timeout: Option<f64>,
        /// Do not wait in real time: the drive's background work happens at
        /// once, in model time (the cleaning seconds are the same). Only once
        /// the host has finished with the drive.
        #[arg(long)]
        skip: bool,
    },
    /// Totals so far of a served model, by class and direction
    Report {
        #[arg(long)]
        json: bool,
        dir: PathBuf,
    },
    /// The request classes the image server would give a volume: its
    /// journal and static-metadata byte ranges, as JSON (for tools that
    /// classify a block trace the same way, e.g. `ext4lazy bench`)
    Layout { image: PathBuf },
    /// List a model's parameters with their values and sources
    Params {
        #[arg(long)]
        model: String,
        #[arg(long = "param", value_parser = param_arg)]
        params: Vec<(String, String)>,
        /// As a Markdown table
        #[arg(long)]
        markdown: bool,
    },
}

pub fn run(cmd: EmuCommand) -> Result<()> {
    match cmd {
        EmuCommand::Randwrite(a) => random(a, Op::Write),
        EmuCommand::Randread(a) => random(a, Op::Read),
        EmuCommand::Seqbw { model, op, bytes, req, params, json } => {
            let op = match op.as_str() {
                "read" => Op::Read,
                "write" => Op::Write,
                _ => bail!("--op must be read or write"),
            };
            if req == 0 || req % 512 != 0 || bytes < req {
                bail!("--req must be a non-zero multiple of 512 and at most --bytes");
            }
            let rows = workload::sequential_bandwidth(&model, op, bytes, req, &params)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for r in rows {
                    println!("{} {} {}: {:.1} MiB/s", r.model, r.op, r.where_, r.mib_s);
                }
            }
            Ok(())
        }
        EmuCommand::StreamTest { model, req, params, json } => {
            if req == 0 || req % 4096 != 0 {
                bail!("--req must be a non-zero multiple of 4096");
            }
            let rows = workload::stream_test(&model, req, &params)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!("| case | request size | cached MiB | streamed MiB | MiB/s |");
                println!("|---|---|---|---|---|");
                for r in rows {
                    println!(
                        "| {} x{} | {} KiB | {:.2} | {:.2} | {:.1} |",
                        r.case,
                        r.writes,
                        r.req_bytes >> 10,
                        r.cached_mib,
                        r.streamed_mib,
                        r.mib_s
                    );
                }
            }
            Ok(())
        }
        EmuCommand::Serve {
            model,
            size,
            backing,
            speed,
            params,
            trace,
            bucket,
            log,
            no_meta_flags,
            foreground,
            dir,
        } => {
            if foreground {
                serve_here(&model, size, &backing, speed, params, trace, bucket, !no_meta_flags, &dir)
            } else {
                serve_background(log.as_deref(), &dir)
            }
        }
        EmuCommand::Replay { model, params, trace } => {
            let text = std::fs::read_to_string(&trace).with_context(|| format!("reading {}", trace.display()))?;
            let reqs = workload::parse_disksim_trace(&text).map_err(|e| anyhow!("{}: {e}", trace.display()))?;
            let res = workload::replay(&model, &params, &reqs).map_err(|e| anyhow!(e))?;
            println!("{}", serde_json::to_string(&res)?);
            Ok(())
        }
        EmuCommand::WaitIdle { dir, timeout, skip } => wait_idle(&dir, timeout, skip),
        EmuCommand::Report { json, dir } => report(&dir, json),
        EmuCommand::Layout { image } => layout_json(&image),
        EmuCommand::Params { model, params, markdown } => {
            let infos = describe_model(&model, &params)?;
            if markdown {
                println!("| parameter | {model} | source |");
                println!("|---|---|---|");
                for i in infos {
                    println!("| `{}` | {} | {} |", i.name, i.value, i.doc.replace('|', "\\|"));
                }
            } else {
                for i in infos {
                    println!("{} = {}\n    {}", i.name, i.value, i.doc);
                }
            }
            Ok(())
        }
    }
}

fn random(a: RandArgs, op: Op) -> Result<()> {
    let stop = match (a.bytes, a.seconds) {
        (Some(b), None) => Stop::Bytes(b),
        (None, Some(s)) if s > 0.0 && s.is_finite() => Stop::Seconds(s),
        _ => bail!("give exactly one of --bytes N or --seconds T (T > 0)"),
    };
    if !(a.bucket > 0.0 && a.bucket.is_finite()) {
        bail!("--bucket must be positive");
    }
    let o = RandOpts {
        model: a.model.clone(),
        op,
        bs: a.bs,
        stop,
        qd: a.qd.max(1),
        seed: a.seed,
        span: a.span,
        opts: ModelOptions { speed: a.speed, params: a.params.clone(), bucket_s: a.bucket, ..ModelOptions::default() },
    };
    let r = workload::random_io(&o)?;
    let text = serde_json::to_string(&r)?;
    if let Some(p) = &a.out {
        std::fs::write(p, format!("{text}\n")).with_context(|| format!("cannot write {}", p.display()))?;
    }
    if a.json {
        println!("{text}");
    } else {
        println!(
            "{} {} bs={} qd={}: {} requests in {:.1} model s: {:.1} IOPS, {:.2} MiB/s, mean latency {:.2} ms, max {:.1} ms",
            r.model, r.op, r.bs, r.qd, r.requests, r.model_seconds, r.iops, r.mib_s, r.mean_latency_ms, r.max_latency_ms
        );
        if r.state.cache_capacity_bytes > 0 {
            println!(
                "cache {:.2} of {:.2} GiB, {} bands cleaned",
                r.state.cache_used_bytes as f64 / (1u64 << 30) as f64,
                r.state.cache_capacity_bytes as f64 / (1u64 << 30) as f64,
                r.state.bands_cleaned
            );
        }
    }
    Ok(())
}

const READY: &str = "EXT4LAZY-EMU-READY";

#[allow(clippy::too_many_arguments)]
fn serve_here(
    model: &str,
    size: Option<u64>,
    backing: &Path,
    speed: f64,
    params: Vec<(String, String)>,
    trace: Option<PathBuf>,
    bucket: f64,
    meta_flags: bool,
    dir: &Path,
) -> Result<()> {
    let result = (|| -> Result<()> {
        if !dir.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        let opts =
            ModelOptions { speed: Some(speed), params, trace, bucket_s: bucket, size, ..ModelOptions::default() };
        let dev = open_model_device(model, backing, &opts)?;
        crate::serve::serve_foreground(dev, dir, meta_flags, || {
            println!("{READY}");
            let _ = std::io::stdout().flush();
            // let go of the caller's pipe: the parent returns on EOF too
            if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                use std::os::unix::io::AsRawFd;
                // SAFETY: dup2 onto stdout with a valid descriptor.
                unsafe { libc::dup2(null.as_raw_fd(), 1) };
            }
        })
        .with_context(|| format!("cannot serve on {}", dir.display()))?;
        Ok(())
    })();
    if let Err(e) = &result {
        println!("ERROR: {e:#}");
        let _ = std::io::stdout().flush();
    }
    result
}

/// Re-run this very command line with `--foreground` in a new process group,
/// and return once it says the image is served.
fn serve_background(log: Option<&Path>, dir: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the current executable")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let stderr = match log {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open log {}", p.display()))?,
        ),
        None => Stdio::null(),
    };
    let mut child = Command::new(exe)
        .args(args)
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .context("cannot start the image server")?;
    let out = child.stdout.take().ok_or_else(|| anyhow!("no pipe to the image server"))?;
    let mut last = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap_or_default();
        if line == READY {
            if !dir.join("disk.img").exists() {
                bail!("the image server said ready but {} is missing", dir.join("disk.img").display());
            }
            return Ok(());
        }
        last = line;
    }
    let status = child.wait().context("image server")?;
    let msg = last.strip_prefix("ERROR: ").unwrap_or(&last).to_string();
    if msg.is_empty() {
        bail!("the image server exited ({status}) before serving {}", dir.display())
    }
    bail!("{msg}")
}

fn read_stats(dir: &Path) -> Result<serde_json::Value> {
    let p = dir.join("stats.json");
    let text = std::fs::read_to_string(&p)
        .with_context(|| format!("cannot read {} (is `emu serve` running on {}?)", p.display(), dir.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", p.display()))
}

fn wait_idle(dir: &Path, timeout: Option<f64>, skip: bool) -> Result<()> {
    let t0 = Instant::now();
    if skip {
        // The server skips to idle while it opens the file.
        let p = dir.join("skip-idle");
        std::fs::File::open(&p).with_context(|| format!("cannot open {} (is `emu serve` running?)", p.display()))?;
    }
    loop {
        let v = read_stats(dir)?;
        let st = &v["state"];
        let now = v["now_s"].as_f64().unwrap_or(0.0);
        let pending = st["cleaning_pending"].as_bool().unwrap_or(false);
        let busy_until = st["busy_until_s"].as_f64().unwrap_or(0.0);
        if !pending && busy_until <= now {
            let cleaning = st["cleaning_after_last_host_s"].as_f64().unwrap_or(0.0);
            println!(
                "model {}: idle; {} bands cleaned in all, cache {} bytes used",
                v["model"].as_str().unwrap_or("?"),
                st["bands_cleaned"].as_u64().unwrap_or(0),
                st["cache_used_bytes"].as_u64().unwrap_or(0)
            );
            println!("cleaning seconds after the last host request:");
            println!("{cleaning:.3}");
            return Ok(());
        }
        if let Some(limit) = timeout {
            if t0.elapsed().as_secs_f64() > limit {
                bail!("still cleaning after {limit} s");
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn layout_json(image: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(image).with_context(|| format!("cannot open {}", image.display()))?;
    let l = crate::layout::Layout::probe(|off, buf| f.read_exact_at(buf, off).is_ok());
    let v = serde_json::json!({
        "image": image.display().to_string(),
        "description": l.describe(),
        "journal": l.journal_ranges(),
        "metadata": l.metadata_ranges(),
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn report(dir: &Path, json: bool) -> Result<()> {
    let v = read_stats(dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "model {} at {:.1} model s (speed {})",
        v["model"].as_str().unwrap_or("?"),
        v["now_s"].as_f64().unwrap_or(0.0),
        v["speed"]
    );
    println!("| class | dir | requests | MiB | mean latency ms |");
    println!("|---|---|---|---|---|");
    if let Some(classes) = v["classes"].as_object() {
        for (c, dirs) in classes {
            if let Some(dirs) = dirs.as_object() {
                for (d, t) in dirs {
                    println!(
                        "| {c} | {d} | {} | {:.2} | {:.3} |",
                        t["requests"],
                        t["mib"].as_f64().unwrap_or(0.0),
                        t["mean_latency_s"].as_f64().unwrap_or(0.0) * 1e3
                    );
                }
            }
        }
    }
    let st = &v["state"];
    if st["cache_capacity_bytes"].as_u64().unwrap_or(0) > 0 {
        println!(
            "cache {} / {} bytes, {} bands cleaned ({:.1} s), cleaning pending: {}",
            st["cache_used_bytes"],
            st["cache_capacity_bytes"],
            st["bands_cleaned"],
            st["cleaning_s"].as_f64().unwrap_or(0.0),
            st["cleaning_pending"]
        );
    }
    Ok(())
}
