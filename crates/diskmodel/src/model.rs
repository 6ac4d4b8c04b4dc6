//! What every disk model offers the scheduler: a service time per request,
//! background work while idle, and its own figures.
//!
//! Model time is in seconds (f64) from the moment the model was created. The
//! scheduler calls the model in non-decreasing time order; models only decide
//! *when* a request completes — the data itself lives in the backing file.

use blockdev::IoClass;
use serde::Serialize;

/// Direction of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    /// A cache flush / barrier: no data, command overhead only.
    Flush,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
        }
    }
}

/// One request as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Req {
    pub op: Op,
    pub offset: u64,
    pub len: u64,
    pub class: IoClass,
}

/// Figures a model keeps about its internal state (SMR models fill the cache
/// and cleaning fields; the CMR leaves them zero; the read cache's are
/// every model's).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ModelState {
    pub model: &'static str,
    pub cache_used_bytes: u64,
    pub cache_capacity_bytes: u64,
    pub cache_live_fragments: u64,
    pub dirty_bands: u64,
    pub bands_cleaned: u64,
    pub bands_cleaned_idle: u64,
    pub bands_cleaned_forced: u64,
    pub bands_cleaned_continuous: u64,
    /// Model seconds spent cleaning, all causes.
    pub cleaning_s: f64,
    /// Model seconds of cleaning done after the last host request completed.
    pub cleaning_after_last_host_s: f64,
    /// Model time of the last host request's completion.
    pub last_host_done_s: f64,
    /// Model time until which cleaning already started keeps the drive busy.
    pub busy_until_s: f64,
    pub streamed_bytes: u64,
    /// Reads served from the drive's read cache alone, and their bytes.
    pub read_cache_hits: u64,
    pub read_cache_hit_bytes: u64,
    /// Bytes the drive read ahead into its read cache.
    pub read_ahead_bytes: u64,
    pub cached_bytes: u64,
    /// true while the cache holds data that cleaning has still to move home.
    pub cleaning_pending: bool,
}

/// A disk model. Called with the scheduler's lock held, in non-decreasing
/// time order.
pub trait Model: Send {
    /// Short name (`cmr`, `smr-seagate`, `smr-wd`).
    fn name(&self) -> &'static str;

    /// Capacity of the modelled drive in bytes.
    fn capacity(&self) -> u64;

    /// Estimated positioning time if `req` were started at `t` (for SPTF).
    fn positioning_estimate(&self, t: f64, req: &Req) -> f64;

    /// Serve `req`, which the drive picks up at `t` (the drive is otherwise
    /// idle from the host's view). Returns the completion time (>= `t`); it
    /// includes any background work the request has to wait for.
    fn serve(&mut self, t: f64, req: &Req) -> f64;

    /// No host request between the last call and `t`: do the background work
    /// (idle cleaning) that fits. Work started before `t` may end after it.
    fn idle_until(&mut self, t: f64);

    /// The model's figures.
    fn state(&self) -> ModelState;

    /// Requests queued longer than this are served next (SPTF aging).
    fn queue_age_limit(&self) -> f64 {
        f64::INFINITY
    }
}
