//! Drive-managed SMR: the mechanics of [`crate::mech`] plus a shingle
//! translation layer — a persistent cache for writes that are not streamed,
//! bands that are cleaned (read band, merge the cached fragments, write the
//! band back: via scratch space with static mapping, elsewhere with dynamic
//! mapping), a stream detector, and cleaning when idle, when the cache is full
//! and (for the WD preset) continuously.
//!
//! Cleaning is not preemptible at band granularity: a host request arriving
//! while a band is being cleaned waits for that band to finish.

use crate::mech::Mech;
use crate::model::{Model, ModelState, Op, Req};
use crate::params::{MechParams, SmrParams};
use crate::pcache::PCache;
use crate::rcache::ReadCache;

/// Why a band was cleaned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CleanCause {
    Idle,
    Forced,
    Continuous,
}

/// A sequential run the stream detector follows.
#[derive(Clone, Debug)]
struct Run {
    start: u64,
    end: u64,
    bytes: u64,
    streaming: bool,
    /// Bytes still to go to the cache before streaming resumes after a disruption.
    resume_left: u64,
    /// Pieces of this run that went to the cache before it reached the threshold.
    cached: Vec<(u64, u64)>,
}

pub struct Smr {
    name: &'static str,
    mech: Mech,
    rcache: ReadCache,
    p: SmrParams,
    cache: PCache,
    /// Byte address (in the mechanics' geometry) where the cache area starts.
    cache_base: u64,
    /// Runs, most recent first.
    runs: Vec<Run>,
    last_t: f64,
    busy_until: f64,
    last_host_done: f64,
    /// Seconds of continuous cleaning owed (may go negative after a band).
    debt: f64,
    st: ModelState,
}

impl Smr {
    pub fn new(name: &'static str, mp: MechParams, p: SmrParams) -> Self {
        let mech = Mech::new(mp);
        let cache_base = mech.byte_at_position(p.cache_position);
        let cache = PCache::new(p.cache_bytes, p.cache_is_log, p.band_bytes);
        let st = ModelState { model: name, cache_capacity_bytes: p.cache_bytes, ..Default::default() };
        Smr {
            name,
            rcache: ReadCache::new(mech.p.read_cache()),
            mech,
            p,
            cache,
            cache_base,
            runs: Vec::new(),
            last_t: 0.0,
            busy_until: 0.0,
            last_host_done: 0.0,
            debt: 0.0,
            st,
        }
    }

    pub fn seagate(mp: MechParams, p: SmrParams) -> Self {
        Smr::new("smr-seagate", mp, p)
    }

    pub fn wd(mp: MechParams, p: SmrParams) -> Self {
        Smr::new("smr-wd", mp, p)
    }

    /// Where in the mechanics' geometry the cache log head is.
    fn cache_head_byte(&self) -> u64 {
        let cap = self.mech.p.capacity_bytes;
        (self.cache_base + self.cache.head_offset()).min(cap.saturating_sub(4096))
    }

    /// Cost of cleaning one band (the head is moved accordingly).
    fn clean_one(&mut self, band: u64, cause: CleanCause) -> f64 {
        let cap = self.mech.p.capacity_bytes;
        let start = (band * self.p.band_bytes).min(cap.saturating_sub(512));
        let len = self.p.band_bytes.min(cap - start);
        let frags = self.cache.clean_band(band);
        let mut d = self.mech.bulk(start, len); // read the band
        d += frags as f64 * self.p.merge_per_fragment_s;
        if self.p.static_mapping {
            let scratch = self.cache_base;
            d += self.mech.bulk(scratch, len); // write the merged band to scratch
            d += self.mech.bulk(start, len); // then home
        } else {
            d += self.mech.bulk(start, len); // to a free band nearby, remap
        }
        self.st.bands_cleaned += 1;
        match cause {
            CleanCause::Idle => self.st.bands_cleaned_idle += 1,
            CleanCause::Forced => self.st.bands_cleaned_forced += 1,
            CleanCause::Continuous => self.st.bands_cleaned_continuous += 1,
        }
        self.st.cleaning_s += d;
        d
    }

    /// The stream detector: does this write go straight to its band?
    fn stream_decision(&mut self, off: u64, len: u64) -> bool {
        let window = self.p.stream_window_bytes;
        let pos = self.runs.iter().position(|r| off >= r.start && off <= r.end.saturating_add(window));
        let idx = match pos {
            Some(i) => {
                let mut r = self.runs.remove(i);
                if i != 0 && r.streaming {
                    // another write came in between: the head went elsewhere
                    r.resume_left = self.p.stream_resume_bytes;
                }
                r.end = r.end.max(off + len);
                r.bytes += len;
                self.runs.insert(0, r);
                0
            }
            None => {
                self.runs.insert(
                    0,
                    Run {
                        start: off,
                        end: off + len,
                        bytes: len,
                        streaming: false,
                        resume_left: 0,
                        cached: Vec::new(),
                    },
                );
                self.runs.truncate(self.p.stream_runs as usize);
                0
            }
        };
        let threshold = self.p.stream_threshold_bytes;
        let retro = self.p.stream_retroactive;
        let r = &mut self.runs[idx];
        if r.streaming {
            if r.resume_left > 0 {
                r.resume_left = r.resume_left.saturating_sub(len);
                return false;
            }
            return true;
        }
        if r.bytes >= threshold {
            r.streaming = true;
            let pieces = std::mem::take(&mut r.cached);
            if retro {
                for (o, l) in pieces {
                    self.cache.invalidate(o, l);
                    self.st.streamed_bytes += l;
                    self.st.cached_bytes -= l.min(self.st.cached_bytes);
                }
            }
            return true;
        }
        if r.cached.len() < 4096 {
            r.cached.push((off, len));
        }
        false
    }

    fn write(&mut self, mut now: f64, req: &Req) -> f64 {
        if self.stream_decision(req.offset, req.len) {
            now += self.mech.access(now, req.offset, req.len);
            self.cache.invalidate(req.offset, req.len);
            self.st.streamed_bytes += req.len;
            return now;
        }
        // Make room: forced cleaning.
        while self.cache.needs_space(req.len) {
            let Some(band) = self.cache.victim(self.p.greedy_victim) else {
                break;
            };
            now += self.clean_one(band, CleanCause::Forced);
        }
        let head = self.cache_head_byte();
        let d = self.p.cache_write_overhead_s + self.mech.access(now, head, req.len);
        now += d;
        self.cache.append(req.offset, req.len);
        self.st.cached_bytes += req.len;
        if self.p.continuous_clean_ratio > 0.0 {
            self.debt += d * self.p.continuous_clean_ratio;
            while self.debt > 0.0 {
                let Some(band) = self.cache.victim(self.p.greedy_victim) else {
                    self.debt = 0.0;
                    break;
                };
                let c = self.clean_one(band, CleanCause::Continuous);
                self.debt -= c;
                now += c;
            }
        }
        now
    }

    /// A read through the drive's read cache; read-ahead stops at the first
    /// persistent-cache fragment, since the band holds stale data there.
    fn read(&mut self, now: f64, req: &Req) -> f64 {
        let (cache, cache_base, ahead) = (&self.cache, self.cache_base, self.mech.p.read_ahead_bytes);
        let capacity = self.mech.p.capacity_bytes;
        self.rcache.read(
            now,
            req.offset,
            req.len,
            &mut self.mech,
            |m, now, from, len| media_read(m, cache, cache_base, now, from, len),
            |end| cache.first_overlap(end, ahead).unwrap_or(capacity),
        )
    }
}

/// A read from the medium: the band, then a trip to the persistent cache and
/// back for each cached fragment it overlaps.
fn media_read(mech: &mut Mech, cache: &PCache, cache_base: u64, mut now: f64, offset: u64, len: u64) -> f64 {
    now += mech.access(now, offset, len);
    let frags = cache.overlapping(offset, len);
    if frags > 0 {
        let band_pos = mech.head_position();
        let cache_pos = mech.position(cache_base);
        for _ in 0..frags {
            now += mech.move_to(cache_pos) + mech.transfer_time(cache_base, 4096);
            now += mech.move_to(band_pos);
        }
    }
    now
}

impl Model for Smr {
    fn name(&self) -> &'static str {
        self.name
    }

    fn capacity(&self) -> u64 {
        self.mech.p.capacity_bytes
    }

    fn positioning_estimate(&self, t: f64, req: &Req) -> f64 {
        match req.op {
            Op::Flush => 0.0,
            Op::Read if self.rcache.would_hit(t, req.offset, req.len) => 0.0,
            Op::Read => self.mech.positioning_time(t, req.offset),
            // a write most likely goes to the cache head (or streams in place)
            Op::Write => {
                self.mech.positioning_time(t, req.offset).min(self.mech.positioning_time(t, self.cache_head_byte()))
            }
        }
    }

    fn serve(&mut self, t: f64, req: &Req) -> f64 {
        debug_assert!(t + 1e-9 >= self.last_t, "model time went backwards: {t} < {}", self.last_t);
        let start = t.max(self.busy_until).max(self.last_t);
        let end = match req.op {
            Op::Flush => start + self.mech.p.cmd_overhead_s,
            Op::Write => {
                self.rcache.written(start, req.offset, req.len, &mut self.mech);
                self.write(start, req)
            }
            Op::Read => self.read(start, req),
        };
        debug_assert!(end >= start);
        debug_assert!(self.cache.used() <= self.cache.capacity());
        self.last_t = end;
        self.last_host_done = end;
        self.busy_until = self.busy_until.max(end);
        self.st.cleaning_after_last_host_s = 0.0;
        end
    }

    fn idle_until(&mut self, t: f64) {
        loop {
            let start = self.busy_until.max(self.last_host_done + self.p.idle_delay_s).max(self.last_t);
            if start >= t || self.cache.is_empty() {
                break;
            }
            let Some(band) = self.cache.victim(self.p.greedy_victim) else {
                break;
            };
            self.rcache.settle(start, true, &mut self.mech);
            let d = self.clean_one(band, CleanCause::Idle);
            self.busy_until = start + d;
            self.last_t = start;
            self.st.cleaning_after_last_host_s += d;
            // continuous-cleaning debt is paid by idle cleaning too
            self.debt = (self.debt - d).max(0.0);
        }
        self.last_t = self.last_t.max(t);
    }

    fn queue_age_limit(&self) -> f64 {
        self.mech.p.sptf_age_limit_s
    }

    fn state(&self) -> ModelState {
        let mut s = self.st.clone();
        s.cache_used_bytes = self.cache.used();
        s.cache_live_fragments = self.cache.live_frags();
        s.dirty_bands = self.cache.dirty_bands();
        s.last_host_done_s = self.last_host_done;
        s.busy_until_s = self.busy_until;
        self.rcache.stats.report(&mut s);
        s.cleaning_pending = !self.cache.is_empty();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::IoClass;

    fn w(offset: u64, len: u64) -> Req {
        Req { op: Op::Write, offset, len, class: IoClass::Data }
    }

    fn small_seagate() -> Smr {
        let mut p = SmrParams::seagate();
        p.cache_bytes = 64 << 20;
        p.band_bytes = 1 << 20;
        Smr::seagate(MechParams::st8000as0002(), p)
    }

    #[test]
    fn random_writes_fill_the_cache_and_idle_cleaning_drains_it() {
        let mut m = small_seagate();
        let mut t = 0.0;
        for i in 0..100u64 {
            t = m.serve(t, &w(i * 7_919 * (1 << 20), 4096));
        }
        let s = m.state();
        assert_eq!(s.cache_used_bytes, 100 * 4096);
        assert!(s.cleaning_pending);
        m.idle_until(t + 0.5); // before the idle delay: nothing
        assert_eq!(m.state().bands_cleaned, 0);
        m.idle_until(t + 10_000.0);
        let s = m.state();
        assert_eq!(s.cache_used_bytes, 0);
        assert!(!s.cleaning_pending);
        assert_eq!(s.bands_cleaned_idle, 100);
        assert!(s.cleaning_after_last_host_s > 100.0 * 0.1, "each band costs at least its merge");
    }

    #[test]
    fn a_full_cache_makes_writes_wait_for_cleaning() {
        let mut m = small_seagate();
        let mut t = 0.0;
        let mut worst: f64 = 0.0;
        for i in 0..(64 * 256 + 100) as u64 {
            let t1 = m.serve(t, &w((i * 104_729 % 1_000_000) * (1 << 20), 4096));
            worst = worst.max(t1 - t);
            t = t1;
        }
        let s = m.state();
        assert!(s.bands_cleaned_forced > 0);
        assert!(worst > 0.1, "a forced clean costs at least one fragment merge");
        assert!(s.cache_used_bytes <= s.cache_capacity_bytes);
    }

    #[test]
    fn large_sequential_writes_stream_past_the_cache() {
        let mut m = small_seagate();
        let mut t = 0.0;
        t = m.serve(t, &w(0, 8 << 20));
        assert_eq!(m.state().cache_used_bytes, 0);
        // 4 MiB written in 512 KiB pieces: stays in the cache
        for i in 0..8u64 {
            t = m.serve(t, &w((100 << 20) + i * (512 << 10), 512 << 10));
        }
        assert_eq!(m.state().cache_used_bytes, 4 << 20);
        // continuing the run to 8 MiB streams it, and retroactively the first half
        for i in 8..16u64 {
            t = m.serve(t, &w((100 << 20) + i * (512 << 10), 512 << 10));
        }
        assert_eq!(m.state().cache_live_fragments, 0);
        let _ = t;
    }
}
