//! Disk models for ext4lazy: a conventional disk (`cmr`, WD5000YS-like) and
//! two drive-managed SMR disks (`smr-seagate`, ST8000AS0002-like, static
//! mapping and idle cleaning; `smr-wd`, WD40NMZW-like, dynamic mapping and
//! continuous cleaning), all on one mechanical core.
//!
//! Storage and time are separate: data lives in a sparse backing file at its
//! logical address; the model only decides when each request completes. Time
//! is real time scaled by `speed`, or virtual time for tests and offline runs.
//!
//! Used two ways: in-process as a [`blockdev::BlockDevice`]
//! ([`open_model_device`]) and exported as an image file by a FUSE server
//! ([`serve`], `ext4lazy emu serve`). See docs/DISKMODELS.md.

pub mod cli;
pub mod clock;
pub mod cmr;
pub mod device;
pub mod layout;
pub mod mech;
pub mod model;
pub mod params;
pub mod pcache;
pub mod queue;
pub mod rcache;
pub mod report;
pub mod rng;
pub mod serve;
pub mod smr;
pub mod stats;
pub mod trace;
pub mod tracefs;
pub mod workload;

pub use device::ModelDevice;
pub use model::{Model, ModelState, Op, Req};
pub use params::{MechParams, ParamError, SmrParams};
pub use report::Report;

use blockdev::FileDevice;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The model names accepted everywhere.
pub const MODEL_NAMES: [&str; 3] = ["cmr", "smr-seagate", "smr-wd"];

/// Errors of building or opening a model.
#[derive(Debug)]
pub enum Error {
    UnknownModel(String),
    Param(ParamError),
    /// A mount/CLI option this crate does not know.
    UnknownOption(String),
    BadOption {
        key: String,
        value: String,
    },
    Io(io::Error),
    /// The backing file exists with another size than asked for.
    BackingSize {
        path: PathBuf,
        actual: u64,
        wanted: u64,
    },
    /// The exported size is larger than the modelled drive or misaligned.
    BadSize {
        size: u64,
        capacity: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownModel(m) => write!(f, "unknown disk model `{m}` (known: {})", MODEL_NAMES.join(", ")),
            Error::Param(e) => write!(f, "{e}"),
            Error::UnknownOption(k) => write!(f, "unknown disk model option `{k}`"),
            Error::BadOption { key, value } => write!(f, "bad value `{value}` for disk model option `{key}`"),
            Error::Io(e) => write!(f, "{e}"),
            Error::BackingSize { path, actual, wanted } => write!(
                f,
                "backing file {} is {actual} bytes but {wanted} were asked for (remove it or give its size)",
                path.display()
            ),
            Error::BadSize { size, capacity } => write!(
                f,
                "device size {size} must be a non-zero multiple of 4096 and at most the drive's capacity {capacity}"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<ParamError> for Error {
    fn from(e: ParamError) -> Self {
        Error::Param(e)
    }
}

/// How to run a model.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// Real time scaled by this factor (1 = the real drive); None = virtual
    /// time (no sleeping; for tests and offline runs).
    pub speed: Option<f64>,
    /// Parameter overrides, `(name, value)`, applied in order.
    pub params: Vec<(String, String)>,
    /// Write a CSV trace of every request here.
    pub trace: Option<PathBuf>,
    /// Width of the time-series buckets, model seconds.
    pub bucket_s: f64,
    /// fsync the backing file on every flush (off: the backing file's
    /// durability does not matter to the model's timing).
    pub sync_backing: bool,
    /// Exported size; None = the backing file's size (or the whole drive for
    /// a new backing file).
    pub size: Option<u64>,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            speed: Some(1.0),
            params: Vec::new(),
            trace: None,
            bucket_s: 1.0,
            sync_backing: false,
            size: None,
        }
    }
}

impl ModelOptions {
    /// Apply one option as given in `ext4lazy mount -o device=MODEL,...`:
    /// `speed=S` (`speed=virtual` for virtual time), `trace=FILE`,
    /// `bucket=SECONDS`, `sync_backing=BOOL`, `param.NAME=VALUE`.
    /// Returns `Ok(false)` for a key this crate does not own.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, Error> {
        let bad = || Error::BadOption { key: key.to_string(), value: value.to_string() };
        match key {
            "speed" => {
                if value == "virtual" {
                    self.speed = None;
                } else {
                    let s: f64 = value.parse().map_err(|_| bad())?;
                    if !(s.is_finite() && s > 0.0) {
                        return Err(bad());
                    }
                    self.speed = Some(s);
                }
            }
            "trace" => self.trace = Some(PathBuf::from(value)),
            "bucket" => {
                let b: f64 = value.parse().map_err(|_| bad())?;
                if !(b.is_finite() && b > 0.0) {
                    return Err(bad());
                }
                self.bucket_s = b;
            }
            "sync_backing" => self.sync_backing = <bool as params::ParamValue>::parse_value(value).ok_or_else(bad)?,
            _ => match key.strip_prefix("param.") {
                Some(name) => self.params.push((name.to_string(), value.to_string())),
                None => return Ok(false),
            },
        }
        Ok(true)
    }
}

/// A model's preset parameters with `overrides` applied (unknown names are errors).
fn preset_params(name: &str, overrides: &[(String, String)]) -> Result<(MechParams, Option<SmrParams>), Error> {
    let (mut mech, mut smr) = match name {
        "cmr" => (MechParams::wd5000ys(), None),
        "smr-seagate" => (MechParams::st8000as0002(), Some(SmrParams::seagate())),
        "smr-wd" => (MechParams::wd40nmzw(), Some(SmrParams::wd())),
        _ => return Err(Error::UnknownModel(name.to_string())),
    };
    for (k, v) in overrides {
        let mut known = mech.set(k, v)?;
        if let Some(s) = smr.as_mut() {
            known |= s.set(k, v)?;
        }
        if !known {
            return Err(Error::Param(ParamError::Unknown(k.clone())));
        }
    }
    Ok((mech, smr))
}

/// Build a model by name with parameter overrides. Returns the model and its
/// queue depth.
pub fn build_model(name: &str, overrides: &[(String, String)]) -> Result<(Box<dyn Model>, u32), Error> {
    let (mech, smr) = preset_params(name, overrides)?;
    mech.validate()?;
    let qd = mech.queue_depth;
    let model: Box<dyn Model> = match (name, smr) {
        ("smr-seagate", Some(s)) => {
            s.validate()?;
            Box::new(smr::Smr::seagate(mech, s))
        }
        ("smr-wd", Some(s)) => {
            s.validate()?;
            Box::new(smr::Smr::wd(mech, s))
        }
        _ => Box::new(cmr::Cmr::new(mech)),
    };
    Ok((model, qd))
}

/// The parameters of a model (with overrides applied), for `emu params` and the docs.
pub fn describe_model(name: &str, overrides: &[(String, String)]) -> Result<Vec<params::ParamInfo>, Error> {
    let (mech, smr) = preset_params(name, overrides)?;
    let mut out = mech.describe();
    if let Some(s) = smr {
        out.extend(s.describe());
    }
    for i in out.iter_mut() {
        if let Some(src) = preset_source(name, i.name) {
            i.doc = src.to_string();
        }
    }
    Ok(out)
}

/// Sources of the values a preset changes from the struct defaults (whose doc
/// comments describe the WD5000YS mechanics and the ST8000AS0002 STL).
fn preset_source(model: &str, field: &str) -> Option<&'static str> {
    let seek = "[calibrated] the WD5000YS seek curve (REFERENCE.md section 2); no curve is published for this drive.";
    let wd_seek = "[calibrated] 1.5x the WD5000YS seek curve: a 2.5\" drive seeks slower; nothing published.";
    Some(match (model, field) {
        ("smr-seagate", "capacity_bytes") => "ST8000AS0002: 8,001,563,222,016 B (REFERENCE.md section 2).",
        ("smr-seagate", "rpm") => "ST8000AS0002: 5900 rpm (REFERENCE.md section 2).",
        ("smr-seagate", "outer_rate") => "ST8000AS0002: ~180-190 MB/s at the outer diameter (REFERENCE.md section 2).",
        ("smr-seagate", "inner_rate") => "ST8000AS0002: about half the outer rate at the inner diameter (REFERENCE.md section 2).",
        ("smr-seagate" | "smr-wd", "cylinders") => {
            "[calibrated] 400,000: denser tracks of a 4-8 TB drive; it only decides what counts as the same track."
        }
        ("smr-seagate", "seek_t2t_s" | "seek_sqrt_s" | "seek_lin_s") => seek,
        ("smr-wd", "seek_t2t_s" | "seek_sqrt_s" | "seek_lin_s") => wd_seek,
        ("smr-wd", "capacity_bytes") => "[calibrated] 7,814,037,168 sectors, the usual size of a 4 TB drive (WD40NMZW: 4 TB, paper Table 1).",
        ("smr-wd", "rpm") => "[calibrated] 5400 rpm, usual for 2.5\" portable drives such as the WD40NMZW (paper Table 1: 2.5\").",
        ("smr-wd", "outer_rate") => "[calibrated] 130 MB/s: typical 2.5\" 1 TB/platter drive; nothing published.",
        ("smr-wd", "inner_rate") => "[calibrated] half the outer rate, as for the Seagate (REFERENCE.md section 2).",
        ("smr-wd", "band_bytes") => "[calibrated] 15 MiB: not published for the WD40NMZW; smaller bands suit its cheaper cleaning.",
        ("smr-wd", "cache_bytes") => {
            "[calibrated] 10 GiB: not published; the paper (section 2.1) infers from Fig 1 that cache sizes differ between drives. Chosen so the WD cliff comes after the Seagate's, as in Fig 1."
        }
        ("smr-wd", "cache_is_log") => "Dynamic mapping (paper section 2.1, WD40NMZW): the cache is a pool, space returns as soon as a band is cleaned.",
        ("smr-wd", "cache_write_overhead_s") => {
            "[calibrated] 0.25 ms: a slower 2.5\" USB drive; with continuous cleaning it gives ~9 MiB/s of 4 KiB random writes before the cliff, a third of the Seagate's (Fig 1: lower before)."
        }
        ("smr-wd", "static_mapping") => "WD40NMZW: dynamic mapping, cleaning = read band + write band elsewhere (paper section 2.1 and 4.3.2).",
        ("smr-wd", "merge_per_fragment_s") => {
            "[calibrated] 0.02 s: with dynamic mapping the merge happens in memory on the way to the new band; gives ~25 IOPS on a full cache, above the Seagate's ~8 (Fig 1: higher after)."
        }
        ("smr-wd", "idle_delay_s") => "[calibrated] 0.5 s: a drive that cleans all the time also starts idle cleaning sooner; nothing published.",
        ("smr-wd", "greedy_victim") => "[calibrated] greedy (most fragments first): a pool allows any victim, and greedy frees the most space per clean.",
        ("smr-wd", "continuous_clean_ratio") => {
            "[calibrated] 0.5 s of cleaning per second of cache writes: the paper (section 2.1, 4.3.2) says WD drives clean constantly in small amounts; the ratio sets how much lower than the Seagate it runs before the cliff."
        }
        ("smr-seagate", "read_cache_segments") => {
            "[calibrated] 32: WD's DiskSim spec of a 4 TB SATA drive has 32 segments of 1.5 MiB; adaptive segmentation (Seagate's SAS manuals) makes the count a choice of the firmware."
        }
        ("smr-seagate", "read_cache_bytes") => {
            "ST8000AS0002: 128 MB of DRAM (Seagate's Archive HDD data sheet); part of it holds the translation layer's state and write data, so [calibrated] half (Seagate's Constellation ES.1 manual: about 30,000 KB of 64 MB usable as cache)."
        }
        ("smr-seagate", "read_ahead_bytes") => {
            "One segment (2 MiB): read-ahead until the segment is full, as DIXtrac measured on the IBM 18ES and the Barracuda (DiskSim 4.0 validation specs)."
        }
        ("smr-seagate" | "smr-wd", "cache_hit_overhead_s") => {
            "0.162 ms: the read-hit overhead of WD's DiskSim spec of a 4 TB SATA drive, the nearest in time to this drive."
        }
        ("smr-seagate", "interface_rate") => "ST8000AS0002: SATA 6 Gb/s, 600 MB/s after 8b/10b coding.",
        ("smr-wd", "read_cache_segments" | "read_cache_bytes" | "read_ahead_bytes") => {
            "[calibrated] as the WD5000YS: the WD40NMZW's cache is not published (hdparm reports it as unknown on its sibling WD50NDZW)."
        }
        ("smr-wd", "interface_rate") => "[calibrated] 400 MB/s: the drive's USB 3.0 bridge (5 Gb/s signalling); nothing published.",
        ("smr-wd", "stream_threshold_bytes" | "stream_window_bytes" | "stream_retroactive" | "stream_resume_bytes" | "stream_runs") => {
            "[calibrated] as for the ST8000AS0002 (paper section 4.3.1 measured only the Seagate)."
        }
        _ => return None,
    })
}

/// A model device without backing storage (data discarded, reads return
/// zeros): for pure timing runs such as `emu randwrite`.
pub fn open_null_device(model: &str, opts: &ModelOptions) -> Result<Arc<ModelDevice>, Error> {
    let (m, qd) = build_model(model, &opts.params)?;
    let cap = m.capacity();
    let size = opts.size.unwrap_or(cap);
    if size == 0 || !size.is_multiple_of(4096) || size > cap {
        return Err(Error::BadSize { size, capacity: cap });
    }
    finish(m, qd, None, size, opts)
}

/// Open (or create, sparse) `backing` and put the model in front of it.
/// The lead's mount path calls this for `-o device=MODEL[,speed=S,...]`; keep
/// the returned `Arc<ModelDevice>` to read [`ModelDevice::report`] later, and
/// hand a clone to the file system as `Arc<dyn BlockDevice>`.
pub fn open_model_device(model: &str, backing: &Path, opts: &ModelOptions) -> Result<Arc<ModelDevice>, Error> {
    let (m, qd) = build_model(model, &opts.params)?;
    let cap = m.capacity();
    let existing = std::fs::metadata(backing).ok().map(|md| md.len());
    let size = match (existing, opts.size) {
        (Some(actual), Some(wanted)) if actual != wanted && actual != 0 => {
            return Err(Error::BackingSize { path: backing.to_path_buf(), actual, wanted })
        }
        (_, Some(wanted)) => wanted,
        (Some(actual), None) if actual > 0 => actual,
        _ => cap,
    };
    if size == 0 || !size.is_multiple_of(4096) || size > cap {
        return Err(Error::BadSize { size, capacity: cap });
    }
    if existing.unwrap_or(0) != size {
        let f =
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(backing).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot create backing file {}: {e}", backing.display()))
            })?;
        f.set_len(size)?;
    }
    let dev = FileDevice::open(backing, true)?;
    finish(m, qd, Some(dev), size, opts)
}

fn finish(
    m: Box<dyn Model>,
    qd: u32,
    backing: Option<FileDevice>,
    size: u64,
    opts: &ModelOptions,
) -> Result<Arc<ModelDevice>, Error> {
    let sched = queue::Scheduler::new(m, qd, opts.bucket_s);
    let clock = match opts.speed {
        Some(s) => clock::Clock::real(s),
        None => clock::Clock::virtual_time(),
    };
    let dev = ModelDevice::new(sched, clock, backing, size, opts.sync_backing);
    if let Some(t) = &opts.trace {
        dev.set_trace(t)?;
    }
    Ok(Arc::new(dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_options_are_parsed_and_foreign_keys_left_alone() {
        let mut o = ModelOptions::default();
        assert!(o.set("speed", "10").unwrap());
        assert_eq!(o.speed, Some(10.0));
        assert!(o.set("speed", "virtual").unwrap());
        assert_eq!(o.speed, None);
        assert!(o.set("param.cache_bytes", "4G").unwrap());
        assert_eq!(o.params, vec![("cache_bytes".to_string(), "4G".to_string())]);
        assert!(!o.set("journal", "lazy").unwrap());
        assert!(o.set("speed", "0").is_err());
        assert!(o.set("speed", "fast").is_err());
        assert!(build_model("smr-seagate", &o.params).is_ok());
        assert!(matches!(build_model("cmr", &o.params), Err(Error::Param(ParamError::Unknown(_)))));
    }
}
