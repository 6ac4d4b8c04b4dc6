//! Totals by class and direction, and a time series in fixed model-time
//! buckets (throughput by class, cache fill at the end of each bucket).

use crate::model::{ModelState, Op, Req};
use blockdev::IoClass;
use serde::Serialize;
use std::collections::BTreeMap;

/// Totals for one (class, direction).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Totals {
    pub requests: u64,
    pub bytes: u64,
    /// Sum of latencies (completion - arrival), model seconds.
    pub latency_sum_s: f64,
    pub latency_max_s: f64,
}

impl Totals {
    fn add(&mut self, bytes: u64, latency: f64) {
        self.requests += 1;
        self.bytes += bytes;
        self.latency_sum_s += latency;
        self.latency_max_s = self.latency_max_s.max(latency);
    }
}

/// One bucket of the time series.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Bucket {
    /// Start of the bucket, model seconds.
    pub t_s: f64,
    /// Bytes completed in the bucket: [journal, metadata, data].
    pub read_bytes: [u64; 3],
    pub write_bytes: [u64; 3],
    pub requests: u64,
    pub latency_sum_s: f64,
    /// Persistent-cache use at the last sample in the bucket (SMR only).
    pub cache_used_bytes: u64,
    pub bands_cleaned: u64,
}

impl Bucket {
    pub fn mib_s(&self, width: f64) -> f64 {
        let b: u64 = self.read_bytes.iter().chain(self.write_bytes.iter()).sum();
        b as f64 / (1 << 20) as f64 / width
    }
}

pub fn class_index(c: IoClass) -> usize {
    match c {
        IoClass::Journal => 0,
        IoClass::Metadata => 1,
        IoClass::Data => 2,
    }
}

#[derive(Clone, Debug)]
pub struct Stats {
    pub bucket_s: f64,
    pub totals: BTreeMap<(IoClass, &'static str), Totals>,
    pub buckets: Vec<Bucket>,
    /// Model seconds the drive spent serving host requests (including the
    /// background work they waited for).
    pub busy_s: f64,
    /// Cap on the number of buckets kept (older ones are merged pairwise).
    max_buckets: usize,
}

impl Stats {
    pub fn new(bucket_s: f64) -> Self {
        Stats { bucket_s, totals: BTreeMap::new(), buckets: Vec::new(), busy_s: 0.0, max_buckets: 200_000 }
    }

    fn bucket(&mut self, t: f64) -> &mut Bucket {
        let mut idx = (t.max(0.0) / self.bucket_s) as usize;
        if idx >= self.max_buckets {
            // keep memory bounded on very long runs: double the bucket width
            self.coarsen();
            idx = (t.max(0.0) / self.bucket_s) as usize;
        }
        while self.buckets.len() <= idx {
            let n = self.buckets.len();
            let prev_fill = self.buckets.last().map_or(0, |b| b.cache_used_bytes);
            self.buckets.push(Bucket {
                t_s: n as f64 * self.bucket_s,
                cache_used_bytes: prev_fill,
                ..Default::default()
            });
        }
        &mut self.buckets[idx]
    }

    fn coarsen(&mut self) {
        let old = std::mem::take(&mut self.buckets);
        self.bucket_s *= 2.0;
        for pair in old.chunks(2) {
            let mut b = pair[0].clone();
            b.t_s = self.buckets.len() as f64 * self.bucket_s;
            if let Some(c) = pair.get(1) {
                for i in 0..3 {
                    b.read_bytes[i] += c.read_bytes[i];
                    b.write_bytes[i] += c.write_bytes[i];
                }
                b.requests += c.requests;
                b.latency_sum_s += c.latency_sum_s;
                b.cache_used_bytes = c.cache_used_bytes;
                b.bands_cleaned = c.bands_cleaned;
            }
            self.buckets.push(b);
        }
    }

    /// Account a completed request.
    pub fn record(&mut self, req: &Req, arrival: f64, start: f64, end: f64) {
        let lat = end - arrival;
        self.totals.entry((req.class, req.op.name())).or_default().add(req.len, lat);
        self.busy_s += end - start;
        let b = self.bucket(end);
        let ci = class_index(req.class);
        match req.op {
            Op::Read => b.read_bytes[ci] += req.len,
            Op::Write => b.write_bytes[ci] += req.len,
            Op::Flush => {}
        }
        b.requests += 1;
        b.latency_sum_s += lat;
    }

    /// Sample the model's state at model time `t`.
    pub fn sample(&mut self, t: f64, st: &ModelState) {
        let b = self.bucket(t);
        b.cache_used_bytes = st.cache_used_bytes;
        b.bands_cleaned = st.bands_cleaned;
    }
}
