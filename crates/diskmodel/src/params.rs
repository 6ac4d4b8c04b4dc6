//! Every number a model uses, with the source of its value.
//!
//! Each model has one params struct; every field is overridable by name
//! (`--param name=value` on the command line, `param.name=value` in mount
//! options). Sizes accept binary suffixes (`30M`, `25G`), times are seconds,
//! rates are bytes per second. Doc comments say where each default comes from:
//! REFERENCE.md section 2, the ext4-lazy paper (FAST'17), or "[calibrated]"
//! with the reason for the value chosen.

use serde::Serialize;
use std::fmt;

/// Why an override was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamError {
    /// No parameter of that name in this model.
    Unknown(String),
    /// The value does not parse as the parameter's type.
    BadValue { name: String, value: String },
    /// The parameter set is inconsistent (e.g. inner rate above outer rate).
    Invalid(String),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::Unknown(n) => write!(f, "unknown model parameter `{n}`"),
            ParamError::BadValue { name, value } => {
                write!(f, "bad value `{value}` for model parameter `{name}`")
            }
            ParamError::Invalid(m) => write!(f, "invalid model parameters: {m}"),
        }
    }
}

impl std::error::Error for ParamError {}

/// One parameter as shown by `ext4lazy emu params` and in the docs.
#[derive(Debug, Clone, Serialize)]
pub struct ParamInfo {
    pub name: &'static str,
    pub value: String,
    pub doc: String,
}

/// A value a parameter can hold.
pub trait ParamValue: Sized {
    fn parse_value(s: &str) -> Option<Self>;
    fn show(&self) -> String;
}

/// Parse a byte count: plain digits or with a binary suffix K, M, G, T
/// (optionally followed by `i`/`iB`/`B`), e.g. `4096`, `30M`, `25GiB`, `1.5G`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let lower = s.to_ascii_lowercase();
    let stripped = lower.trim_end_matches('b').trim_end_matches('i');
    let (num, mult) = match stripped.chars().last()? {
        'k' => (&stripped[..stripped.len() - 1], 1u64 << 10),
        'm' => (&stripped[..stripped.len() - 1], 1 << 20),
        'g' => (&stripped[..stripped.len() - 1], 1 << 30),
        't' => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    if let Ok(v) = num.parse::<u64>() {
        return v.checked_mul(mult);
    }
    let v: f64 = num.parse().ok()?;
    if !(v.is_finite() && v >= 0.0) {
        return None;
    }
    let bytes = v * mult as f64;
    if bytes > u64::MAX as f64 {
        return None;
    }
    Some(bytes.round() as u64)
}

impl ParamValue for u64 {
    fn parse_value(s: &str) -> Option<Self> {
        parse_size(s)
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ParamValue for u32 {
    fn parse_value(s: &str) -> Option<Self> {
        parse_size(s).and_then(|v| u32::try_from(v).ok())
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ParamValue for f64 {
    fn parse_value(s: &str) -> Option<Self> {
        s.trim().parse::<f64>().ok().filter(|v| v.is_finite())
    }
    fn show(&self) -> String {
        format!("{self}")
    }
}

impl ParamValue for bool {
    fn parse_value(s: &str) -> Option<Self> {
        match s.trim() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" => Some(false),
            _ => None,
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// Define a params struct whose fields can be set by name and listed with
/// their documentation.
macro_rules! params_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[doc = $doc:expr])+ pub $field:ident : $ty:ty = $default:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, serde::Serialize)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        impl $name {
            /// Set one parameter by name; `Ok(false)` if no field has that name.
            pub fn set(&mut self, key: &str, value: &str) -> Result<bool, $crate::params::ParamError> {
                match key {
                    $( stringify!($field) => {
                        self.$field = <$ty as $crate::params::ParamValue>::parse_value(value).ok_or_else(|| {
                            $crate::params::ParamError::BadValue { name: key.to_string(), value: value.to_string() }
                        })?;
                        Ok(true)
                    } )*
                    _ => Ok(false),
                }
            }

            /// Every parameter with its current value and documentation.
            pub fn describe(&self) -> Vec<$crate::params::ParamInfo> {
                vec![ $( $crate::params::ParamInfo {
                    name: stringify!($field),
                    value: <$ty as $crate::params::ParamValue>::show(&self.$field),
                    doc: [$($doc),+].iter().map(|l: &&str| l.trim()).collect::<Vec<_>>().join(" "),
                }, )* ]
            }
        }
    };
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

params_struct! {
    /// The mechanics shared by every model: capacity, rotation, zoned transfer
    /// rate, seek curve, command overhead and the command queue.
    /// Defaults are the WD5000YS (CMR) of REFERENCE.md section 2.
    pub struct MechParams {
        /// Capacity of the whole drive in bytes (an exported image may be a
        /// smaller partition at its start). WD5000YS: 976,773,168 sectors
        /// (REFERENCE.md section 2).
        pub capacity_bytes: u64 = 976_773_168 * 512,
        /// Spindle speed. WD5000YS: 7200 rpm, 8.33 ms per revolution
        /// (REFERENCE.md section 2).
        pub rpm: f64 = 7200.0,
        /// Media transfer rate at the outer diameter, bytes/s. WD5000YS:
        /// ~65 MB/s (REFERENCE.md section 2).
        pub outer_rate: f64 = 65e6,
        /// Media transfer rate at the inner diameter, bytes/s. WD5000YS:
        /// ~31 MB/s (REFERENCE.md section 2).
        pub inner_rate: f64 = 31e6,
        /// Number of recording zones (constant rate inside a zone, equal radial
        /// width each). [calibrated] 16: typical of drives of that era; only
        /// the step size of the rate curve depends on it.
        pub zones: u32 = 16,
        /// Cylinders per surface; a move of less than one cylinder costs no
        /// seek. [calibrated] 100,000: order of magnitude of ~160 GB/platter
        /// drives; it only decides what counts as "same track".
        pub cylinders: u64 = 100_000,
        /// Seek curve t(x) = seek_t2t_s + seek_sqrt_s*sqrt(x) + seek_lin_s*x,
        /// x = distance / full stroke. Track-to-track 0.8 ms (REFERENCE.md
        /// section 2: fit of typical figures, average 8.9, full 21 ms).
        pub seek_t2t_s: f64 = 0.8e-3,
        /// Square-root term of the seek curve: 6.83 ms (REFERENCE.md section 2).
        pub seek_sqrt_s: f64 = 6.83e-3,
        /// Linear term of the seek curve: 13.37 ms (REFERENCE.md section 2).
        pub seek_lin_s: f64 = 13.37e-3,
        /// Per-command controller overhead. REFERENCE.md section 2 gives
        /// 0.1-0.35 ms; [calibrated] 0.2 ms, the middle.
        pub cmd_overhead_s: f64 = 0.2e-3,
        /// Native command queue depth: how many queued requests the drive
        /// reorders (shortest positioning time first). NCQ: 32
        /// (REFERENCE.md section 2).
        pub queue_depth: u32 = 32,
        /// A queued request that has waited this long is served next,
        /// whatever its positioning time (firmware aging, so SPTF cannot
        /// starve a far request). [calibrated] 0.5 s: keeps the worst latency
        /// of 4 KiB random reads at depth 32 near half a second while costing
        /// little throughput.
        pub sptf_age_limit_s: f64 = 0.5,
        /// A request that starts exactly where the previous transfer ended
        /// costs transfer time only (read look-ahead and write-back merging in
        /// the drive's DRAM hide the command overhead and rotational miss).
        /// [calibrated] on: without it, back-to-back sequential requests would
        /// each miss a revolution, which real drives with a 16 MB cache do not.
        pub seq_continuation: bool = true,
        /// Segments of the drive's read cache (0 = no read cache). Drives
        /// segment their cache adaptively (Seagate's SAS product manuals);
        /// DIXtrac measured 3-10 segments on the 0.5-2 MB caches of 1990s
        /// drives (DiskSim 4.0 validation specs: IBM 18ES 7, Seagate
        /// Barracuda 3, Quantum Atlas 10K 10) and WD's own DiskSim spec of a
        /// 4 TB drive has 32 of 1.5 MiB. [calibrated] 16 for a 16 MB cache,
        /// between the two.
        pub read_cache_segments: u32 = 16,
        /// DRAM that serves as read cache, split evenly between the segments.
        /// WD5000YS: 16 MB buffer (REFERENCE.md section 2); not all of it is
        /// cache (Seagate's Cheetah 15K.7 manual: about 13,000 KB of 16 MB),
        /// so [calibrated] 13 MiB.
        pub read_cache_bytes: u64 = 13 * MIB,
        /// How far the drive reads on after a read from the medium while no
        /// command needs the head; a segment is a circular buffer, so it keeps
        /// the last segment's worth. DIXtrac measured read-ahead that goes on
        /// until the segment is full (maximum read-ahead = segment size) on
        /// the IBM 18ES and the Barracuda (DiskSim 4.0 validation specs);
        /// here one segment, 13 MiB / 16.
        pub read_ahead_bytes: u64 = 13 * MIB / 16,
        /// Command overhead of a read served from the read cache. 0.082 ms:
        /// DIXtrac's measured read-hit overhead of the 7200 rpm IBM 18ES and
        /// Seagate Barracuda (DiskSim 4.0 validation specs).
        pub cache_hit_overhead_s: f64 = 0.082e-3,
        /// Interface transfer rate of cache hits, bytes/s. WD5000YS: SATA
        /// 3 Gb/s, 300 MB/s after 8b/10b coding.
        pub interface_rate: f64 = 300e6,
        /// Writes pass through the read cache's segments, and the written
        /// sectors stay there for read hits (Seagate's SAS product manuals:
        /// write data uses the same buffer space and segmentation; DIXtrac's
        /// Barracuda spec allows read hits on write data). [calibrated] the
        /// same for the WD drives.
        pub write_shares_segments: bool = true,
        /// Read-ahead goes on once the segment is full, overwriting its
        /// oldest sectors, the requested ones included (a circular segment;
        /// DIXtrac measured it on the Barracuda, not on the IBM 18ES: DiskSim
        /// 4.0 validation specs, "Read-ahead over requested"). [calibrated] on:
        /// nothing is published for the modelled drives.
        pub read_ahead_over_request: bool = true,
    }
}

params_struct! {
    /// Parameters of the drive-managed SMR translation layer (persistent cache,
    /// bands, cleaning). Defaults are the Seagate ST8000AS0002; see
    /// [`SmrParams::wd`] for the WD40NMZW preset.
    pub struct SmrParams {
        /// Band size. ST8000AS0002: ~30 MiB average, >260,000 bands (paper
        /// section 2.1). All bands have this size here.
        pub band_bytes: u64 = 30 * MIB,
        /// Persistent cache capacity. ST8000AS0002: ~25 GiB (paper section 2.1;
        /// REFERENCE.md: measured cliffs at 17-30 GiB depending on write size).
        pub cache_bytes: u64 = 25 * GIB,
        /// Where the persistent cache sits, as a fraction of the stroke
        /// (0 = outer diameter). [calibrated] 0.0: outer diameter; it changes
        /// only the seek distance to the cache.
        pub cache_position: f64 = 0.0,
        /// true: the cache space of an entry comes back only when the log's
        /// tail passes it (a strict circular log). false: the space of cleaned
        /// fragments is reusable at once. The ST8000AS0002's cache is written
        /// as a log (paper section 2.1), but [calibrated] false: with strict
        /// tail-only reclamation, 4 KiB random writes over the whole drive on a
        /// full cache would run at ~0.3 IOPS for days (each clean frees one
        /// tail entry; the other ~25 fragments of the band are holes far from
        /// the tail), far below the ~7 IOPS measured (REFERENCE.md), so the
        /// drive must reuse holes. Victims still follow log order (see
        /// `greedy_victim`).
        pub cache_is_log: bool = false,
        /// Per-command cost of appending a write to the cache log (command
        /// handling and STL map update), on top of the media transfer.
        /// [calibrated] 0.12 ms: gives ~27 MiB/s of 4 KiB random writes before
        /// the cliff, an order of magnitude above the CMR as in the paper's
        /// Fig 1 (no absolute figure is given in REFERENCE.md).
        pub cache_write_overhead_s: f64 = 0.12e-3,
        /// true: static mapping — cleaning writes the merged band to scratch
        /// space, then home (read + 2 writes of a band; paper section 2.1,
        /// ST8000AS0002). false: dynamic mapping — read + 1 write (WD40NMZW).
        pub static_mapping: bool = true,
        /// Cost of merging one cached fragment into its band during cleaning
        /// (reading it from the cache and patching the band image).
        /// [calibrated] 0.1 s: with ~25 fragments per band (25 GiB of 4 KiB
        /// writes over 260,000 bands) a clean takes ~3 s and random writes on a
        /// full cache run at ~8 IOPS, the single-digit IOPS REFERENCE.md
        /// reports (~7); a band with a few fragments cleans in 1-2 s and one
        /// with ~440 in 45 s, the range the paper gives (section 2.1).
        pub merge_per_fragment_s: f64 = 0.1,
        /// Cleaning starts after the host has been idle this long.
        /// REFERENCE.md: "[calibrate idle delay, start with 1 s]".
        pub idle_delay_s: f64 = 1.0,
        /// Victim choice: false = the band of the oldest cache entry (frees
        /// the log tail; ST8000AS0002), true = the band with the most cached
        /// fragments (greedy; WD40NMZW preset). [calibrated] log order is
        /// forced by a circular log; greedy suits a pool.
        pub greedy_victim: bool = false,
        /// Continuous cleaning: seconds of cleaning the drive owes per second
        /// of host writes into the cache, paid by cleaning whole bands inline
        /// ("cleans constantly in small amounts", paper section 2.1). 0 = none
        /// (ST8000AS0002 cleans when idle or when full).
        pub continuous_clean_ratio: f64 = 0.0,
        /// Sequential-write streaming threshold: a write, or a run of
        /// contiguous writes, of at least this many bytes goes straight to its
        /// band, bypassing the cache. 8 MiB (paper section 1 and 4.3; REFERENCE.md).
        pub stream_threshold_bytes: u64 = 8 * MIB,
        /// How far ahead of the current run's end a write may start and still
        /// count as continuing it (the host may issue the pieces of one large
        /// write slightly out of order, e.g. through FUSE and the loop device).
        /// [calibrated] 1 MiB: covers a few concurrent 128-512 KiB pieces. A
        /// write elsewhere breaks the stream (paper section 4.3).
        pub stream_window_bytes: u64 = MIB,
        /// true: once a run reaches the threshold, its earlier pieces (which
        /// were held in the drive's 128 MB DRAM) are streamed too and leave the
        /// cache. [calibrated] on: the paper observes that >= 8 MiB sequential
        /// writes bypass the cache whatever the host's request size.
        pub stream_retroactive: bool = true,
        /// After another write interrupts a streaming run, this many bytes of
        /// the run go to the cache before streaming resumes. The paper (section
        /// 4.3.1) saw a single 4 KiB random write in the middle of a sequential
        /// write move the head to the cache, and "soon" back to streaming.
        /// [calibrated] 1 MiB stands for "soon".
        pub stream_resume_bytes: u64 = MIB,
        /// How many distinct sequential runs the stream detector tracks at once.
        /// [calibrated] 2: the current run plus the one a random write started.
        pub stream_runs: u32 = 2,
    }
}

impl SmrParams {
    /// ST8000AS0002 (the defaults).
    pub fn seagate() -> Self {
        SmrParams::default()
    }

    /// WD40NMZW: dynamic mapping, continuous cleaning (paper section 2.1 and
    /// 4.3, Fig 1 and 13d). Its band and cache sizes are not published:
    /// [calibrated] 15 MiB bands and a 10 GiB cache pool, so that under 4 KiB
    /// random writes it is slower than the Seagate before its cache fills and
    /// faster after (Fig 1).
    pub fn wd() -> Self {
        SmrParams {
            band_bytes: 15 * MIB,
            cache_bytes: 10 * GIB,
            cache_position: 0.0,
            cache_is_log: false,
            cache_write_overhead_s: 0.25e-3,
            static_mapping: false,
            merge_per_fragment_s: 0.02,
            idle_delay_s: 0.5,
            greedy_victim: true,
            continuous_clean_ratio: 0.5,
            stream_threshold_bytes: 8 * MIB,
            stream_window_bytes: MIB,
            stream_retroactive: true,
            stream_resume_bytes: MIB,
            stream_runs: 2,
        }
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        if self.band_bytes == 0 || !self.band_bytes.is_multiple_of(4096) {
            return Err(ParamError::Invalid("band_bytes must be a non-zero multiple of 4096".into()));
        }
        if self.cache_bytes < self.band_bytes {
            return Err(ParamError::Invalid("cache_bytes must hold at least one band".into()));
        }
        if self.stream_runs == 0 {
            return Err(ParamError::Invalid("stream_runs must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&self.cache_position) {
            return Err(ParamError::Invalid("cache_position must be within 0..=1".into()));
        }
        for (n, v) in [
            ("cache_write_overhead_s", self.cache_write_overhead_s),
            ("merge_per_fragment_s", self.merge_per_fragment_s),
            ("idle_delay_s", self.idle_delay_s),
            ("continuous_clean_ratio", self.continuous_clean_ratio),
        ] {
            if v < 0.0 {
                return Err(ParamError::Invalid(format!("{n} must not be negative")));
            }
        }
        Ok(())
    }
}

impl MechParams {
    /// The read cache these parameters describe.
    pub fn read_cache(&self) -> crate::rcache::ReadCacheParams {
        let segments = self.read_cache_segments as usize;
        crate::rcache::ReadCacheParams {
            segments,
            segment_bytes: if segments == 0 { 0 } else { self.read_cache_bytes / segments as u64 / 512 * 512 },
            read_ahead_bytes: self.read_ahead_bytes,
            hit_overhead_s: self.cache_hit_overhead_s,
            interface_rate: self.interface_rate,
            write_shares_segments: self.write_shares_segments,
            read_ahead_over_request: self.read_ahead_over_request,
        }
    }

    /// WD5000YS (the defaults).
    pub fn wd5000ys() -> Self {
        MechParams::default()
    }

    /// ST8000AS0002: 8,001,563,222,016 B, 5900 rpm, ~190 MB/s outer and about
    /// half at the inner diameter (REFERENCE.md section 2). Its seek curve is
    /// not published: [calibrated] the WD5000YS curve (3.5" drives of the
    /// same class).
    ///
    /// Read cache: half of its 128 MB of DRAM in 32 segments of 2 MiB
    /// (`describe_model` gives the sources).
    pub fn st8000as0002() -> Self {
        MechParams {
            capacity_bytes: 8_001_563_222_016,
            rpm: 5900.0,
            outer_rate: 190e6,
            inner_rate: 95e6,
            zones: 16,
            cylinders: 400_000,
            read_cache_segments: 32,
            read_cache_bytes: 64 * MIB,
            read_ahead_bytes: 2 * MIB,
            cache_hit_overhead_s: 0.162e-3,
            interface_rate: 600e6,
            ..MechParams::default()
        }
    }

    /// WD40NMZW (2.5", 4 TB, 5400 rpm, USB). Capacity 4,000,753,475,584 B is
    /// the usual 4 TB drive size (7,814,037,168 sectors); [calibrated]
    /// 130 MB/s outer, 65 MB/s inner and a 2.5" seek curve 1.5x slower than
    /// the 3.5" one (no published figures). Its cache is not published
    /// either: [calibrated] the WD5000YS's read cache, with the read-hit
    /// overhead of WD's DiskSim spec of a 4 TB drive and the rate of a USB
    /// 3.0 bridge (`describe_model` gives the sources).
    pub fn wd40nmzw() -> Self {
        MechParams {
            capacity_bytes: 7_814_037_168 * 512,
            rpm: 5400.0,
            outer_rate: 130e6,
            inner_rate: 65e6,
            zones: 16,
            cylinders: 400_000,
            seek_t2t_s: 1.2e-3,
            seek_sqrt_s: 10.2e-3,
            seek_lin_s: 20.0e-3,
            cache_hit_overhead_s: 0.162e-3,
            interface_rate: 400e6,
            ..MechParams::default()
        }
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        if self.capacity_bytes < (1 << 20) || !self.capacity_bytes.is_multiple_of(512) {
            return Err(ParamError::Invalid("capacity_bytes must be >= 1 MiB and a multiple of 512".into()));
        }
        if self.rpm <= 0.0 {
            return Err(ParamError::Invalid("rpm must be positive".into()));
        }
        if !(self.inner_rate > 0.0 && self.outer_rate >= self.inner_rate) {
            return Err(ParamError::Invalid("need 0 < inner_rate <= outer_rate".into()));
        }
        if self.zones == 0 || self.zones > 1024 {
            return Err(ParamError::Invalid("zones must be within 1..=1024".into()));
        }
        if self.cylinders == 0 {
            return Err(ParamError::Invalid("cylinders must be positive".into()));
        }
        if self.queue_depth == 0 {
            return Err(ParamError::Invalid("queue_depth must be at least 1".into()));
        }
        if self.seek_t2t_s < 0.0 || self.seek_sqrt_s < 0.0 || self.seek_lin_s < 0.0 || self.cmd_overhead_s < 0.0 {
            return Err(ParamError::Invalid("seek and overhead times must not be negative".into()));
        }
        if self.read_cache_segments > 0 {
            if self.read_cache_bytes / u64::from(self.read_cache_segments) < 4096 {
                return Err(ParamError::Invalid("read_cache_bytes must give each segment at least 4 KiB".into()));
            }
            if self.read_ahead_bytes > self.capacity_bytes {
                return Err(ParamError::Invalid("read_ahead_bytes must not exceed the capacity".into()));
            }
            if self.cache_hit_overhead_s < 0.0 || self.interface_rate <= 0.0 {
                return Err(ParamError::Invalid(
                    "cache_hit_overhead_s must not be negative and interface_rate must be positive".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("30M"), Some(30 << 20));
        assert_eq!(parse_size("25GiB"), Some(25 << 30));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1"), None);
    }

    #[test]
    fn set_by_name() {
        let mut p = SmrParams::seagate();
        assert_eq!(p.set("cache_bytes", "1G"), Ok(true));
        assert_eq!(p.cache_bytes, 1 << 30);
        assert_eq!(p.set("nope", "1"), Ok(false));
        assert!(p.set("idle_delay_s", "abc").is_err());
        assert!(p.describe().iter().all(|i| !i.doc.is_empty()));
    }
}
