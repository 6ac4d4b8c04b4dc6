//! The drive's command queue: requests wait here in arrival order; whenever the
//! drive is free it takes, among the first `queue_depth` that have arrived, the
//! one with the shortest positioning time (SPTF, as NCQ does).
//!
//! The scheduler is driven lazily: [`Scheduler::advance`] is called with the
//! current model time and dispatches every request the drive would have
//! started by then. Decisions depend only on arrival times, so they do not
//! depend on when the host threads happen to call in.

use crate::model::{Model, Req};
use crate::stats::Stats;
use crate::trace::TraceSink;
use std::collections::{HashMap, VecDeque};

#[derive(Debug, Clone)]
struct Pending {
    id: u64,
    req: Req,
    arrival: f64,
}

pub struct Scheduler {
    pub model: Box<dyn Model>,
    queue_depth: usize,
    queue: VecDeque<Pending>,
    /// Model time at which the request in service completes.
    disk_free_at: f64,
    done: HashMap<u64, f64>,
    next_id: u64,
    last_arrival: f64,
    last_start: f64,
    idle_sampled: f64,
    pub stats: Stats,
    pub trace: Option<TraceSink>,
}

impl Scheduler {
    pub fn new(model: Box<dyn Model>, queue_depth: u32, bucket_s: f64) -> Self {
        Scheduler {
            model,
            queue_depth: queue_depth.max(1) as usize,
            queue: VecDeque::new(),
            disk_free_at: 0.0,
            done: HashMap::new(),
            next_id: 0,
            last_arrival: 0.0,
            last_start: 0.0,
            idle_sampled: 0.0,
            stats: Stats::new(bucket_s),
            trace: None,
        }
    }

    /// Queue a request that arrived at model time `arrival` (non-decreasing).
    pub fn submit(&mut self, req: Req, arrival: f64) -> u64 {
        debug_assert!(arrival >= self.last_arrival, "arrivals out of order: {arrival} < {}", self.last_arrival);
        let arrival = arrival.max(self.last_arrival);
        self.last_arrival = arrival;
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back(Pending { id, req, arrival });
        id
    }

    /// Completion time of request `id`, once dispatched (removes it).
    pub fn take_done(&mut self, id: u64) -> Option<f64> {
        self.done.remove(&id)
    }

    /// Forget completions nobody will ask for (closed-loop drivers).
    pub fn clear_done(&mut self) {
        self.done.clear();
    }

    /// When the scheduler has something to do next, if anything is queued.
    pub fn next_event(&self) -> Option<f64> {
        self.queue.front().map(|p| p.arrival.max(self.disk_free_at))
    }

    pub fn disk_free_at(&self) -> f64 {
        self.disk_free_at
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether a host request is queued, or done and not yet taken by the
    /// thread waiting for it.
    pub fn host_outstanding(&self) -> bool {
        !self.queue.is_empty() || !self.done.is_empty()
    }

    /// Let the model work idle up to `t`, sampling its state once per series
    /// bucket so the cache fill over idle periods shows in the series.
    fn idle_to(&mut self, t: f64) {
        let w = self.stats.bucket_s;
        let mut s = self.idle_sampled.max(self.disk_free_at);
        let mut steps = 0;
        while s + w < t && steps < 100_000 {
            s += w;
            steps += 1;
            self.model.idle_until(s);
            let st = self.model.state();
            self.stats.sample(s, &st);
        }
        self.model.idle_until(t);
        let st = self.model.state();
        self.stats.sample(t, &st);
        self.idle_sampled = self.idle_sampled.max(t);
    }

    /// Dispatch everything the drive would have started by model time `now`;
    /// with an empty queue, let the model do its idle work up to `now`.
    /// Returns how many requests were dispatched.
    pub fn advance(&mut self, now: f64) -> usize {
        let mut n = 0;
        loop {
            let Some(front) = self.queue.front() else {
                if self.disk_free_at <= now {
                    self.idle_to(now);
                }
                break;
            };
            let front_arrival = front.arrival;
            let t = self.disk_free_at.max(front_arrival);
            if t > now {
                break;
            }
            if t > self.disk_free_at {
                self.idle_to(t);
            }
            // candidates: the first queue_depth requests that have arrived by t
            let window = self.queue.iter().take(self.queue_depth).take_while(|p| p.arrival <= t);
            let mut best = 0;
            if t - front_arrival <= self.model.queue_age_limit() {
                let mut best_cost = f64::INFINITY;
                for (i, p) in window.enumerate() {
                    let c = self.model.positioning_estimate(t, &p.req);
                    if c < best_cost {
                        best_cost = c;
                        best = i;
                    }
                }
            }
            let Some(p) = self.queue.remove(best) else {
                break;
            };
            debug_assert!(t >= self.last_start, "dispatch time went backwards");
            self.last_start = t;
            let end = self.model.serve(t, &p.req);
            debug_assert!(end >= t, "a request completed before it started");
            let end = end.max(t);
            self.stats.record(&p.req, p.arrival, t, end);
            if let Some(tr) = self.trace.as_mut() {
                tr.record(&p.req, p.arrival, t, end);
            }
            let st = self.model.state();
            self.stats.sample(end, &st);
            self.done.insert(p.id, end);
            self.disk_free_at = end;
            n += 1;
        }
        n
    }
}
