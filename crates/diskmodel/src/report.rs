//! What `emu report` prints: totals by class and direction, time, and the
//! model's own figures (cache fill, bands cleaned, cleaning time).

use crate::model::ModelState;
use crate::queue::Scheduler;
use crate::stats::Totals;
use blockdev::IoClass;
use serde::Serialize;
use std::collections::BTreeMap;

/// Totals of one class and direction, with the mean latency worked out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClassTotals {
    pub requests: u64,
    pub bytes: u64,
    pub mib: f64,
    pub mean_latency_s: f64,
    pub max_latency_s: f64,
}

impl From<&Totals> for ClassTotals {
    fn from(t: &Totals) -> Self {
        ClassTotals {
            requests: t.requests,
            bytes: t.bytes,
            mib: t.bytes as f64 / (1 << 20) as f64,
            mean_latency_s: if t.requests > 0 { t.latency_sum_s / t.requests as f64 } else { 0.0 },
            max_latency_s: t.latency_max_s,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub model: &'static str,
    /// null = virtual time.
    pub speed: Option<f64>,
    /// Model seconds since the model started.
    pub now_s: f64,
    pub size_bytes: u64,
    /// Model seconds the drive spent on host requests.
    pub busy_s: f64,
    /// class (journal, metadata, data) -> direction (read, write, flush) -> totals.
    pub classes: BTreeMap<&'static str, BTreeMap<&'static str, ClassTotals>>,
    pub state: ModelState,
}

impl Report {
    pub fn build(model: &'static str, speed: Option<f64>, now_s: f64, size_bytes: u64, s: &Scheduler) -> Report {
        let mut classes: BTreeMap<&'static str, BTreeMap<&'static str, ClassTotals>> = BTreeMap::new();
        for c in IoClass::ALL {
            let e = classes.entry(c.name()).or_default();
            for d in ["read", "write"] {
                e.insert(d, ClassTotals::default());
            }
        }
        for ((c, d), t) in &s.stats.totals {
            classes.entry(c.name()).or_default().insert(d, ClassTotals::from(t));
        }
        Report { model, speed, now_s, size_bytes, busy_s: s.stats.busy_s, classes, state: s.model.state() }
    }
}
