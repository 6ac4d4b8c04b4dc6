//! Synthetic workloads run straight into a model (no file system): the
//! validation runs of docs/DISKMODELS.md.
//!
//! In virtual time a workload drives the [`Scheduler`] as a closed loop with
//! `qd` requests outstanding (a new request arrives when one completes), so a
//! run of hours of model time takes seconds. With a speed factor it runs `qd`
//! threads against a real-time [`crate::ModelDevice`].

use crate::queue::Scheduler;
use crate::rng::Rng;
use crate::stats::Bucket;
use crate::{build_model, open_null_device, Error, ModelOptions, ModelState, Op, Req};
use blockdev::{BlockDevice, IoClass};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One point of a throughput series.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Start of the interval, model seconds.
    pub t_s: f64,
    pub mib_s: f64,
    pub iops: f64,
    pub mean_latency_ms: f64,
    /// Persistent-cache use at the end of the interval, GiB (SMR).
    pub cache_gib: f64,
}

pub fn series_points(bucket_s: f64, buckets: &[Bucket]) -> Vec<Point> {
    buckets
        .iter()
        .map(|b| Point {
            t_s: b.t_s,
            mib_s: b.mib_s(bucket_s),
            iops: b.requests as f64 / bucket_s,
            mean_latency_ms: if b.requests > 0 { b.latency_sum_s / b.requests as f64 * 1e3 } else { 0.0 },
            cache_gib: b.cache_used_bytes as f64 / (1u64 << 30) as f64,
        })
        .collect()
}

/// Stop condition of a run.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    Bytes(u64),
    Seconds(f64),
}

#[derive(Clone, Debug)]
pub struct RandOpts {
    pub model: String,
    pub op: Op,
    pub bs: u64,
    pub stop: Stop,
    pub qd: u32,
    pub seed: u64,
    /// Random offsets are drawn from `[0, span)`; None = the whole drive.
    pub span: Option<u64>,
    pub opts: ModelOptions,
}

#[derive(Clone, Debug, Serialize)]
pub struct RandResult {
    pub model: String,
    pub op: &'static str,
    pub bs: u64,
    pub qd: u32,
    pub speed: Option<f64>,
    pub requests: u64,
    pub bytes: u64,
    /// Model seconds from the first arrival to the last completion.
    pub model_seconds: f64,
    pub iops: f64,
    pub mib_s: f64,
    pub mean_latency_ms: f64,
    pub max_latency_ms: f64,
    pub bucket_s: f64,
    pub series: Vec<Point>,
    pub state: ModelState,
}

/// Random reads or writes of `bs` bytes, closed loop with `qd` outstanding.
pub fn random_io(o: &RandOpts) -> Result<RandResult, Error> {
    if o.bs == 0 || !o.bs.is_multiple_of(512) {
        return Err(Error::BadOption { key: "bs".into(), value: o.bs.to_string() });
    }
    match o.opts.speed {
        None => random_virtual(o),
        Some(_) => random_real(o),
    }
}

fn span_blocks(o: &RandOpts, capacity: u64) -> u64 {
    (o.span.unwrap_or(capacity).min(capacity) / o.bs).max(1)
}

fn random_virtual(o: &RandOpts) -> Result<RandResult, Error> {
    let (model, qd_max) = build_model(&o.model, &o.opts.params)?;
    let capacity = model.capacity();
    let blocks = span_blocks(o, capacity);
    let mut sched = Scheduler::new(model, qd_max, o.opts.bucket_s);
    let mut rng = Rng::new(o.seed);
    let next = |rng: &mut Rng| Req { op: o.op, offset: rng.below(blocks) * o.bs, len: o.bs, class: IoClass::Data };
    let mut issued = 0u64;
    let mut outstanding = 0u32;
    let want_more = |issued: u64, t: f64| match o.stop {
        Stop::Bytes(b) => issued * o.bs < b,
        Stop::Seconds(s) => t < s,
    };
    for _ in 0..o.qd.max(1) {
        if want_more(issued, 0.0) {
            sched.submit(next(&mut rng), 0.0);
            issued += 1;
            outstanding += 1;
        }
    }
    let mut end = 0.0;
    while outstanding > 0 {
        let Some(t) = sched.next_event() else { break };
        let n = sched.advance(t);
        debug_assert!(n >= 1);
        sched.clear_done();
        outstanding -= n as u32;
        end = sched.disk_free_at();
        for _ in 0..n {
            if want_more(issued, end) {
                sched.submit(next(&mut rng), end);
                issued += 1;
                outstanding += 1;
            }
        }
    }
    let state = sched.model.state();
    Ok(result(o, None, &sched.stats, end, state))
}

fn random_real(o: &RandOpts) -> Result<RandResult, Error> {
    let dev = open_null_device(&o.model, &o.opts)?;
    let blocks = span_blocks(o, dev.size());
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = dev.now();
    let threads: Vec<_> = (0..o.qd.max(1))
        .map(|k| {
            let dev = Arc::clone(&dev);
            let issued = Arc::clone(&issued);
            let stop = Arc::clone(&stop);
            let o = o.clone();
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut rng = Rng::new(o.seed.wrapping_add(k as u64 * 0x1000_0001));
                let mut buf = vec![0u8; o.bs as usize];
                while !stop.load(Ordering::Relaxed) {
                    let n = issued.fetch_add(1, Ordering::Relaxed);
                    let more = match o.stop {
                        Stop::Bytes(b) => n * o.bs < b,
                        Stop::Seconds(s) => dev.now() - t0 < s,
                    };
                    if !more {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    let off = rng.below(blocks) * o.bs;
                    match o.op {
                        Op::Read => dev.read_at(off, &mut buf, IoClass::Data)?,
                        _ => dev.write_at(off, &buf, IoClass::Data)?,
                    }
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        match t.join() {
            Ok(r) => r?,
            Err(_) => return Err(Error::Io(std::io::Error::other("a workload thread panicked"))),
        }
    }
    let end = dev.now();
    let state = dev.model_state();
    let (bucket_s, buckets) = dev.series();
    let mut stats = crate::stats::Stats::new(bucket_s);
    stats.buckets = buckets;
    let r = dev.report();
    let mut res = result(o, o.opts.speed, &stats, end, state);
    let tot = &r.classes["data"][if o.op == Op::Read { "read" } else { "write" }];
    fill_totals(&mut res, tot.requests, tot.bytes, tot.mean_latency_s, tot.max_latency_s);
    Ok(res)
}

fn fill_totals(r: &mut RandResult, requests: u64, bytes: u64, mean_lat: f64, max_lat: f64) {
    r.requests = requests;
    r.bytes = bytes;
    r.iops = if r.model_seconds > 0.0 { requests as f64 / r.model_seconds } else { 0.0 };
    r.mib_s = if r.model_seconds > 0.0 { bytes as f64 / (1u64 << 20) as f64 / r.model_seconds } else { 0.0 };
    r.mean_latency_ms = mean_lat * 1e3;
    r.max_latency_ms = max_lat * 1e3;
}

fn result(o: &RandOpts, speed: Option<f64>, stats: &crate::stats::Stats, end: f64, state: ModelState) -> RandResult {
    let mut r = RandResult {
        model: o.model.clone(),
        op: o.op.name(),
        bs: o.bs,
        qd: o.qd,
        speed,
        requests: 0,
        bytes: 0,
        model_seconds: end,
        iops: 0.0,
        mib_s: 0.0,
        mean_latency_ms: 0.0,
        max_latency_ms: 0.0,
        bucket_s: stats.bucket_s,
        // a last bucket the run only partly covered would show a false drop
        series: series_points(stats.bucket_s, &stats.buckets)
            .into_iter()
            .filter(|p| p.t_s + stats.bucket_s <= end + 1e-9)
            .collect(),
        state,
    };
    let (mut n, mut b, mut lat, mut max) = (0, 0, 0.0, 0.0f64);
    for t in stats.totals.values() {
        n += t.requests;
        b += t.bytes;
        lat += t.latency_sum_s;
        max = max.max(t.latency_max_s);
    }
    if n > 0 {
        fill_totals(&mut r, n, b, lat / n as f64, max);
    }
    r
}

/// One row of the sequential-bandwidth validation.
#[derive(Clone, Debug, Serialize)]
pub struct SeqRow {
    pub model: String,
    pub op: &'static str,
    pub where_: &'static str,
    pub offset: u64,
    pub bytes: u64,
    pub req_bytes: u64,
    pub mib_s: f64,
}

/// Sequential bandwidth at the outer and the inner diameter (virtual time).
/// Submit one request at time `t`, let the disk serve it alone, and return
/// when it is free again (requests issued one after another, queue depth 1).
fn one_request(sched: &mut Scheduler, t: f64, req: Req) -> f64 {
    sched.submit(req, t);
    sched.advance(t);
    sched.clear_done();
    sched.disk_free_at()
}

pub fn sequential_bandwidth(
    model: &str,
    op: Op,
    bytes: u64,
    req: u64,
    params: &[(String, String)],
) -> Result<Vec<SeqRow>, Error> {
    let mut rows = Vec::new();
    for where_ in ["outer", "inner"] {
        let (m, qd) = build_model(model, params)?;
        let cap = m.capacity();
        let start = if where_ == "outer" { 0 } else { (cap - bytes) / 4096 * 4096 };
        let mut sched = Scheduler::new(m, qd, 1.0);
        let mut t = 0.0;
        let mut off = start;
        while off < start + bytes {
            t = one_request(&mut sched, t, Req { op, offset: off, len: req, class: IoClass::Data });
            off += req;
        }
        rows.push(SeqRow {
            model: model.to_string(),
            op: op.name(),
            where_,
            offset: start,
            bytes,
            req_bytes: req,
            mib_s: bytes as f64 / (1u64 << 20) as f64 / t,
        });
    }
    Ok(rows)
}

/// One row of the streaming-threshold validation.
#[derive(Clone, Debug, Serialize)]
pub struct StreamRow {
    pub case: String,
    /// Size of each sequential write (issued as `req_bytes` requests).
    pub write_bytes: u64,
    pub req_bytes: u64,
    pub writes: u64,
    pub cached_mib: f64,
    pub streamed_mib: f64,
    pub cache_used_mib: f64,
    pub mib_s: f64,
}

/// The paper's Test 1 (section 4.3.1): sequential writes of a given size,
/// each at a random place (issued as back-to-back requests of `req` bytes),
/// and how much of them ends up in the persistent cache. Plus the disruption
/// case: one 4 KiB random write in the middle of a 64 MiB sequential write.
pub fn stream_test(model: &str, req: u64, params: &[(String, String)]) -> Result<Vec<StreamRow>, Error> {
    let mut rows = Vec::new();
    let mib = 1u64 << 20;
    let sizes = [mib, 2 * mib, 4 * mib, 6 * mib, 7 * mib, 8 * mib, 12 * mib, 16 * mib, 64 * mib];
    for &size in &sizes {
        let (m, qd) = build_model(model, params)?;
        let cap = m.capacity();
        let mut sched = Scheduler::new(m, qd, 1.0);
        let mut rng = Rng::new(42);
        let writes = 8u64;
        let mut t = 0.0;
        for _ in 0..writes {
            let base = rng.below((cap - size) / mib) * mib;
            let piece = req.min(size);
            let mut off = base;
            while off < base + size {
                let len = piece.min(base + size - off);
                t = one_request(&mut sched, t, Req { op: Op::Write, offset: off, len, class: IoClass::Data });
                off += len;
            }
        }
        let st = sched.model.state();
        rows.push(StreamRow {
            case: format!("{} MiB sequential", size / mib),
            write_bytes: size,
            req_bytes: req.min(size),
            writes,
            cached_mib: st.cached_bytes as f64 / mib as f64,
            streamed_mib: st.streamed_bytes as f64 / mib as f64,
            cache_used_mib: st.cache_used_bytes as f64 / mib as f64,
            mib_s: (writes * size) as f64 / mib as f64 / t,
        });
    }
    // disruption: 64 MiB in `req` pieces, one 4 KiB random write after 32 MiB
    for disrupt in [false, true] {
        let (m, qd) = build_model(model, params)?;
        let mut sched = Scheduler::new(m, qd, 1.0);
        let size = 64 * mib;
        let base = 1000 * mib;
        let mut t = 0.0;
        let mut off = base;
        while off < base + size {
            if disrupt && off == base + size / 2 {
                t = one_request(
                    &mut sched,
                    t,
                    Req { op: Op::Write, offset: 5_000_000 * mib, len: 4096, class: IoClass::Metadata },
                );
            }
            t = one_request(&mut sched, t, Req { op: Op::Write, offset: off, len: req, class: IoClass::Data });
            off += req;
        }
        let st = sched.model.state();
        rows.push(StreamRow {
            case: if disrupt {
                "64 MiB with one 4 KiB random write in the middle".into()
            } else {
                "64 MiB undisturbed".into()
            },
            write_bytes: size,
            req_bytes: req,
            writes: 1,
            cached_mib: st.cached_bytes as f64 / mib as f64,
            streamed_mib: st.streamed_bytes as f64 / mib as f64,
            cache_used_mib: st.cache_used_bytes as f64 / mib as f64,
            mib_s: size as f64 / mib as f64 / t,
        });
    }
    Ok(rows)
}

/// One request of a measured trace, with what the real drive took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracedRequest {
    pub op: Op,
    pub offset: u64,
    pub len: u64,
    /// The drive's measured service time, seconds.
    pub measured_s: f64,
    /// Host think time from this request's completion to the next arrival, seconds.
    pub gap_s: f64,
}

/// Parse a DiskSim validation trace: one request per line, `R|W <anything>
/// LBN BLOCKS SERVICE_US GAP_US` (512-byte blocks; the drive's measured
/// service time and the host's delay before the next request).
pub fn parse_disksim_trace(text: &str) -> Result<Vec<TracedRequest>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let bad = || format!("line {}: not `R|W FLAG LBN BLOCKS SERVICE_US GAP_US`: {line:?}", i + 1);
        if f.len() != 6 {
            return Err(bad());
        }
        let op = match f[0] {
            "R" => Op::Read,
            "W" => Op::Write,
            _ => return Err(bad()),
        };
        let lbn: u64 = f[2].parse().map_err(|_| bad())?;
        let blocks: u64 = f[3].parse().map_err(|_| bad())?;
        let us = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
        let (Some(service), Some(gap)) = (us(f[4]), us(f[5])) else {
            return Err(bad());
        };
        if blocks == 0 {
            return Err(bad());
        }
        let offset = lbn.checked_mul(512).ok_or_else(bad)?;
        let len = blocks.checked_mul(512).ok_or_else(bad)?;
        out.push(TracedRequest { op, offset, len, measured_s: service * 1e-6, gap_s: gap * 1e-6 });
    }
    Ok(out)
}

/// A replayed trace: the model's service time beside the measured one.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayResult {
    pub model: String,
    pub requests: usize,
    /// Per request: `[op (0 read, 1 write), measured_ms, model_ms, hit (1 when
    /// the model's read cache served it)]`.
    pub times_ms: Vec<[f64; 4]>,
    pub state: ModelState,
}

/// Replay a measured trace one request at a time, as it was measured: each
/// request arrives its recorded think time after the previous one completed
/// (in the model's time), in virtual time.
pub fn replay(model: &str, params: &[(String, String)], trace: &[TracedRequest]) -> Result<ReplayResult, String> {
    let (m, _qd) = build_model(model, params).map_err(|e| e.to_string())?;
    let cap = m.capacity();
    let mut sched = Scheduler::new(m, 1, 1.0);
    let mut t = 0.0;
    let mut times_ms = Vec::with_capacity(trace.len());
    let mut hits = 0;
    for r in trace {
        if r.offset.saturating_add(r.len) > cap {
            return Err(format!("a traced request at byte {} lies beyond the model's capacity {cap}", r.offset));
        }
        let done = one_request(&mut sched, t, Req { op: r.op, offset: r.offset, len: r.len, class: IoClass::Data });
        let op = if r.op == Op::Write { 1.0 } else { 0.0 };
        let hits_now = sched.model.state().read_cache_hits;
        let hit = if hits_now > hits { 1.0 } else { 0.0 };
        hits = hits_now;
        times_ms.push([op, r.measured_s * 1e3, (done - t) * 1e3, hit]);
        t = done + r.gap_s;
    }
    Ok(ReplayResult { model: model.to_string(), requests: trace.len(), times_ms, state: sched.model.state() })
}
