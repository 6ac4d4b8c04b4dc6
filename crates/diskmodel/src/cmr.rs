//! Conventional (CMR) disk: mechanics and a read cache. Every request the
//! read cache does not serve costs command overhead + seek + rotational
//! latency + zoned transfer; writes go in place. There is no volatile write
//! cache (a write completes when it is on the medium), so flushes cost only
//! the command overhead.

use crate::mech::Mech;
use crate::model::{Model, ModelState, Op, Req};
use crate::params::MechParams;
use crate::rcache::ReadCache;

pub struct Cmr {
    mech: Mech,
    rcache: ReadCache,
    last_t: f64,
}

impl Cmr {
    pub fn new(p: MechParams) -> Self {
        Cmr { rcache: ReadCache::new(p.read_cache()), mech: Mech::new(p), last_t: 0.0 }
    }
}

impl Model for Cmr {
    fn name(&self) -> &'static str {
        "cmr"
    }

    fn capacity(&self) -> u64 {
        self.mech.p.capacity_bytes
    }

    fn positioning_estimate(&self, t: f64, req: &Req) -> f64 {
        match req.op {
            Op::Flush => 0.0,
            Op::Read if self.rcache.would_hit(t, req.offset, req.len) => 0.0,
            _ => self.mech.positioning_time(t, req.offset),
        }
    }

    fn serve(&mut self, t: f64, req: &Req) -> f64 {
        debug_assert!(t >= self.last_t, "model time went backwards: {t} < {}", self.last_t);
        self.last_t = t;
        let capacity = self.mech.p.capacity_bytes;
        let end = match req.op {
            Op::Flush => t + self.mech.p.cmd_overhead_s,
            Op::Read => self.rcache.read(
                t,
                req.offset,
                req.len,
                &mut self.mech,
                |m, t, from, len| t + m.access(t, from, len),
                |_| capacity,
            ),
            Op::Write => {
                self.rcache.written(t, req.offset, req.len, &mut self.mech);
                t + self.mech.access(t, req.offset, req.len)
            }
        };
        self.last_t = end;
        end
    }

    fn idle_until(&mut self, t: f64) {
        debug_assert!(t + 1e-9 >= self.last_t, "idle time went backwards: {t} < {}", self.last_t);
        self.last_t = self.last_t.max(t);
    }

    fn queue_age_limit(&self) -> f64 {
        self.mech.p.sptf_age_limit_s
    }

    fn state(&self) -> ModelState {
        let mut st = ModelState { model: "cmr", ..ModelState::default() };
        self.rcache.stats.report(&mut st);
        st
    }
}
