//! The drive's read cache: part of its DRAM split into segments, each
//! holding one stretch of recently read sectors, which the drive extends by
//! reading ahead while it has no command to serve.
//!
//! - A read that lies wholly inside a segment is a hit: no mechanical work,
//!   only the command overhead and the transfer over the interface.
//! - Any other read goes to the medium. Its sectors start a new segment
//!   (the least recently used one is reused), and when the transfer ends the
//!   drive keeps reading on from there, up to `read_ahead_bytes`, until the
//!   next command that needs the head arrives (a hit does not stop it).
//!   A segment is a circular buffer: read-ahead beyond its size overwrites
//!   its oldest sectors, so it always holds the last `segment_bytes` read.
//! - A write drops every segment it overlaps (no write caching: the models
//!   have no volatile write cache). Where the drive shares its segments
//!   with writes, the written sectors then take a segment of their own,
//!   which later reads hit.
//!
//! Read-ahead is settled lazily: the model calls [`ReadCache::settle`] with
//! the time the drive next needs the head, and the segment grows by what the
//! medium delivered until then.

use crate::mech::Mech;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Segment {
    start: u64,
    end: u64,
    /// Model time of the last use (least recently used goes first).
    used: f64,
}

/// A read-ahead in progress: the medium streams into `seg` from `from`.
#[derive(Clone, Copy, Debug)]
struct ReadAhead {
    seg: usize,
    from: u64,
    /// Model time the demand transfer ended and read-ahead began.
    since: f64,
    /// Bytes per second off the medium here.
    rate: f64,
    /// Read-ahead stops here (segment full, `read_ahead_bytes` read, or where
    /// the model says the medium no longer holds the current data).
    limit: u64,
}

/// Sizes and costs of a read cache (from [`crate::params::MechParams`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadCacheParams {
    pub segments: usize,
    pub segment_bytes: u64,
    pub read_ahead_bytes: u64,
    pub hit_overhead_s: f64,
    pub interface_rate: f64,
    /// Writes go through the read segments (and stay there for read hits).
    pub write_shares_segments: bool,
    /// Read-ahead may overwrite the requested sectors once the segment is
    /// full (a circular segment); without, it stops there.
    pub read_ahead_over_request: bool,
}

/// What the read cache has done, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadCacheStats {
    pub hits: u64,
    pub hit_bytes: u64,
    pub read_ahead_bytes: u64,
}

impl ReadCacheStats {
    /// Into a model's figures.
    pub fn report(&self, st: &mut crate::model::ModelState) {
        st.read_cache_hits = self.hits;
        st.read_cache_hit_bytes = self.hit_bytes;
        st.read_ahead_bytes = self.read_ahead_bytes;
    }
}

#[derive(Debug)]
pub struct ReadCache {
    p: ReadCacheParams,
    segs: Vec<Segment>,
    ahead: Option<ReadAhead>,
    pub stats: ReadCacheStats,
}

const SECTOR: u64 = 512;

impl ReadCache {
    pub fn new(p: ReadCacheParams) -> Self {
        ReadCache { p, segs: Vec::with_capacity(p.segments), ahead: None, stats: ReadCacheStats::default() }
    }

    pub fn enabled(&self) -> bool {
        self.p.segments > 0 && self.p.segment_bytes > 0
    }

    /// How far the read-ahead in progress has come by `t` (the segment then
    /// starts no earlier than `segment_bytes` before that).
    fn ahead_end(&self, t: f64) -> Option<(usize, u64)> {
        let a = self.ahead?;
        let got = ((t - a.since).max(0.0) * a.rate) as u64;
        let end = a.from.saturating_add(got - got % SECTOR).min(a.limit);
        Some((a.seg, end))
    }

    /// Where the cached part of a read of `len` bytes at `offset`, starting
    /// at `t`, ends: `offset` when nothing of it is cached, `offset + len`
    /// for a hit. No side effects: the scheduler asks before choosing.
    pub fn cached_until(&self, t: f64, offset: u64, len: u64) -> u64 {
        let end = offset.saturating_add(len);
        let grown = self.ahead_end(t);
        let mut pos = offset;
        loop {
            let next = self.segs.iter().enumerate().find_map(|(i, s)| {
                let (s_start, s_end) = match grown {
                    Some((seg, e)) if seg == i && e > s.end => (s.start.max(e.saturating_sub(self.p.segment_bytes)), e),
                    _ => (s.start, s.end),
                };
                (s_start <= pos && pos < s_end).then_some(s_end)
            });
            match next {
                Some(e) if pos < end => pos = e.min(end),
                _ => return pos,
            }
        }
    }

    /// Whether a read is served from the cache alone.
    pub fn would_hit(&self, t: f64, offset: u64, len: u64) -> bool {
        self.enabled() && self.cached_until(t, offset, len) >= offset.saturating_add(len)
    }

    /// Serve a read at `t`: from the cache on a hit; else the read-ahead in
    /// progress stops, `media(mech, t, from, len)` reads the part not cached
    /// (a continuation when it starts where the read-ahead stopped) and
    /// returns its completion time, and the read fills a segment that
    /// read-ahead then extends at the medium's rate, no further than
    /// `bound(end of the read)` (the model's say: where the medium stops
    /// holding current data).
    pub fn read(
        &mut self,
        t: f64,
        offset: u64,
        len: u64,
        mech: &mut Mech,
        media: impl FnOnce(&mut Mech, f64, u64, u64) -> f64,
        bound: impl FnOnce(u64) -> u64,
    ) -> f64 {
        if !self.enabled() {
            return media(mech, t, offset, len);
        }
        let end = offset + len;
        let from = self.cached_until(t, offset, len);
        if from >= end {
            self.settle(t, false, mech);
            for s in self.segs.iter_mut().filter(|s| s.start < end && offset < s.end) {
                s.used = t;
            }
            self.stats.hits += 1;
            self.stats.hit_bytes += len;
            return t + self.p.hit_overhead_s + len as f64 / self.p.interface_rate;
        }
        self.settle(t, true, mech);
        let done = media(mech, t, from, end - from);
        self.filled(done, offset, from, end, mech.rate_at(end), bound(end));
        done
    }

    /// Bring the segment being read ahead up to what the medium delivered by
    /// `t`. With `stop`, the drive now needs the head for something else:
    /// the read-ahead ends and the head is left where it stopped reading.
    pub fn settle(&mut self, t: f64, stop: bool, mech: &mut Mech) {
        let Some((seg, end)) = self.ahead_end(t) else {
            return;
        };
        let size = self.p.segment_bytes;
        let s = &mut self.segs[seg];
        if end > s.end {
            self.stats.read_ahead_bytes += end - s.end;
            s.end = end;
            s.start = s.start.max(end.saturating_sub(size));
        }
        debug_assert!(s.end - s.start <= self.p.segment_bytes, "a segment outgrew its size");
        if stop {
            if let Some(a) = self.ahead.take() {
                if end > a.from {
                    mech.set_head_after(end);
                }
                // It stopped reading on its own before this command came: the platter turned on
                // under an idle head, so reading on from there is no continuation.
                let finished_at = a.since + (a.limit - a.from) as f64 / a.rate;
                if end >= a.limit && finished_at < t {
                    mech.break_sequence();
                }
            }
        }
    }

    /// A read of `[offset, end)` whose part from `from` went to the medium
    /// ended at `done`: the segment that held `[offset, from)` grows by what
    /// was read, or the read takes a segment of its own; read-ahead then goes
    /// on from `end` at `rate` up to `limit` (the model's bound: the drive's
    /// end, or where the medium stops holding current data). Where the drive
    /// does not read ahead over requested data, it stops when the segment is
    /// full.
    fn filled(&mut self, done: f64, offset: u64, from: u64, end: u64, rate: f64, limit: u64) {
        self.ahead = None;
        let size = self.p.segment_bytes;
        let own = (from > offset).then(|| self.segs.iter().position(|s| s.start <= offset && s.end == from)).flatten();
        let i = match own {
            Some(i) => {
                let s = &mut self.segs[i];
                s.end = end;
                s.start = s.start.max(end.saturating_sub(size));
                s.used = done;
                i
            }
            None => self.take_segment(done, offset, end - offset),
        };
        let mut limit = limit.min(end.saturating_add(self.p.read_ahead_bytes));
        if !self.p.read_ahead_over_request {
            limit = limit.min(self.segs[i].start.saturating_add(size));
        }
        if rate > 0.0 {
            // limit == end: nothing to read ahead, but settle still learns when the drive stopped
            self.ahead = Some(ReadAhead { seg: i, from: end, since: done, rate, limit: limit.max(end) });
        }
    }

    /// Put the last `segment_bytes` of `[offset, offset + len)` into a
    /// segment (the least recently used one when all are taken): its index.
    fn take_segment(&mut self, t: f64, offset: u64, len: u64) -> usize {
        let keep = len.min(self.p.segment_bytes);
        let seg = Segment { start: offset + len - keep, end: offset + len, used: t };
        if self.segs.len() < self.p.segments {
            self.segs.push(seg);
            return self.segs.len() - 1;
        }
        let i = self.segs.iter().enumerate().min_by(|a, b| a.1.used.total_cmp(&b.1.used)).map_or(0, |(i, _)| i);
        if self.ahead.is_some_and(|a| a.seg == i) {
            self.ahead = None;
        }
        self.segs[i] = seg;
        i
    }

    /// A write of `[offset, offset + len)` starts at `t`: the read-ahead in
    /// progress stops (the head is needed), stale copies go, and where writes
    /// share the segments the written sectors take one.
    pub fn written(&mut self, t: f64, offset: u64, len: u64, mech: &mut Mech) {
        if !self.enabled() {
            return;
        }
        self.settle(t, true, mech);
        self.invalidate(offset, len);
        if self.p.write_shares_segments {
            self.take_segment(t, offset, len);
        }
    }

    /// Cached copies of `[offset, offset + len)` are stale: every segment
    /// overlapping it goes. Only after the read-ahead stopped (`written`).
    fn invalidate(&mut self, offset: u64, len: u64) {
        debug_assert!(self.ahead.is_none(), "a read-ahead still runs into the segments");
        let end = offset.saturating_add(len);
        self.segs.retain(|s| !(s.start < end && offset < s.end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::MechParams;

    fn cache(segments: usize) -> (ReadCache, Mech) {
        let p = ReadCacheParams {
            segments,
            segment_bytes: 1 << 20,
            read_ahead_bytes: 512 << 10,
            hit_overhead_s: 0.1e-3,
            interface_rate: 300e6,
            write_shares_segments: false,
            read_ahead_over_request: true,
        };
        (ReadCache::new(p), Mech::new(MechParams::wd5000ys()))
    }

    /// A media read through the cache, counted: (completion, bytes the medium read).
    fn read(c: &mut ReadCache, m: &mut Mech, t: f64, offset: u64, len: u64, bound: u64) -> (f64, u64) {
        let mut media = 0;
        let done = c.read(
            t,
            offset,
            len,
            m,
            |m, t, from, n| {
                media = n;
                t + m.access(t, from, n)
            },
            |_| bound,
        );
        (done, media)
    }

    #[test]
    fn read_ahead_grows_with_idle_time_up_to_its_limit() {
        let (mut c, mut m) = cache(4);
        let (done, n) = read(&mut c, &mut m, 1.0, 0, 4096, u64::MAX);
        assert_eq!(n, 4096);
        let rate = m.rate_at(4096);
        // 1 ms idle: rate x 1 ms read ahead (65 KB at the outer diameter)
        let got = (rate * 1e-3) as u64;
        assert!(c.would_hit(done + 1e-3, 4096, got - 1024));
        assert!(!c.would_hit(done + 1e-3, 4096, got + 4096));
        // much later: read_ahead_bytes at most
        assert!(c.would_hit(done + 1.0, 4096, 512 << 10));
        assert!(!c.would_hit(done + 1.0, 4096, (512 << 10) + 4096));
        let (t, n) = read(&mut c, &mut m, done + 1.0, 8192, 4096, u64::MAX);
        assert_eq!(n, 0, "a hit reads nothing from the medium");
        assert!((t - (done + 1.0) - 0.1e-3 - 4096.0 / 300e6).abs() < 1e-9);
        assert_eq!(c.stats.hits, 1);
    }

    #[test]
    fn a_miss_stops_read_ahead_and_reads_on_from_where_it_stopped() {
        let (mut c, mut m) = cache(4);
        let (done, _) = read(&mut c, &mut m, 1.0, 0, 4096, u64::MAX);
        // a read that runs past what 1 ms of read-ahead brought in: only the rest comes from the medium,
        // and with no positioning, since the head is right there
        let (t, n) = read(&mut c, &mut m, done + 1e-3, 4096, 256 << 10, u64::MAX);
        let ahead = c.stats.read_ahead_bytes;
        assert!(ahead > 40_000 && ahead < 80_000, "{ahead}");
        assert_eq!(n, (256 << 10) - ahead);
        let transfer = m.transfer_time(4096 + ahead, n);
        assert!((t - (done + 1e-3) - transfer).abs() < 1e-9, "{t} vs transfer {transfer}");
        // the first read-ahead is over: later idle time adds nothing to it
        assert_eq!(c.cached_until(done + 5.0, 4096 + ahead, 4096), 4096 + ahead + 4096);
    }

    #[test]
    fn a_read_ahead_that_finished_long_ago_gives_no_free_continuation() {
        let (mut c, mut m) = cache(4);
        let (done, _) = read(&mut c, &mut m, 1.0, 0, 4096, 16384);
        // the read-ahead filled 16 KiB within a millisecond; a second later the platter has turned on
        let t = done + 1.0;
        let (end, n) = read(&mut c, &mut m, t, 16384, 4096, 16384);
        assert_eq!(n, 4096);
        assert!(end - t > m.transfer_time(16384, 4096) + 1e-6, "it paid for positioning");
        // while it is still reading ahead, reading on from where it got to costs the transfer only
        let (mut c, mut m) = cache(4);
        let (done, _) = read(&mut c, &mut m, 1.0, 0, 4096, u64::MAX);
        let (end, n) = read(&mut c, &mut m, done + 1e-4, 4096, 64 << 10, u64::MAX);
        assert!(n > 0 && (end - done - 1e-4 - m.transfer_time(4096, n)).abs() < 1e-9);
    }

    #[test]
    fn a_partial_hit_grows_its_own_segment() {
        let (mut c, mut m) = cache(2);
        read(&mut c, &mut m, 1.0, 1 << 30, 4096, (1 << 30) + 4096); // another stream's segment
        let (done, _) = read(&mut c, &mut m, 2.0, 0, 4096, 8192);
        read(&mut c, &mut m, done + 1.0, 4096, 8192, 12288); // 4 KiB cached, 4 KiB from the medium
        assert!(c.would_hit(done + 2.0, 0, 12288), "one segment holds the whole stream");
        assert!(c.would_hit(done + 2.0, 1 << 30, 4096), "the other stream's segment stayed");
    }

    #[test]
    fn without_read_ahead_over_the_request_it_stops_when_the_segment_is_full() {
        let (mut c, mut m) = cache(4);
        c.p.read_ahead_over_request = false;
        c.p.read_ahead_bytes = 4 << 20;
        let (done, _) = read(&mut c, &mut m, 1.0, 0, 4096, u64::MAX);
        assert!(c.would_hit(done + 1.0, 0, 1 << 20), "the requested sectors and the read-ahead, a segment's worth");
        assert!(!c.would_hit(done + 1.0, 1 << 20, 4096));
        c.p.read_ahead_over_request = true;
        let (done, _) = read(&mut c, &mut m, 10.0, 64 << 20, 4096, u64::MAX);
        assert!(!c.would_hit(done + 1.0, 64 << 20, 4096), "a circular segment overwrote them");
        assert!(c.would_hit(done + 1.0, (64 << 20) + (4 << 20) + 4096 - 4096, 4096));
    }

    #[test]
    fn read_ahead_stops_at_the_models_bound() {
        let (mut c, mut m) = cache(4);
        let (done, _) = read(&mut c, &mut m, 1.0, 0, 4096, 16384);
        assert!(c.would_hit(done + 1.0, 0, 16384));
        assert!(!c.would_hit(done + 1.0, 0, 16384 + 512));
    }

    #[test]
    fn the_least_recently_used_segment_is_replaced() {
        let (mut c, mut m) = cache(2);
        read(&mut c, &mut m, 1.0, 0, 4096, 0);
        read(&mut c, &mut m, 2.0, 1 << 30, 4096, 0);
        assert_eq!(read(&mut c, &mut m, 3.0, 0, 4096, 0).1, 0); // a hit: segment 0 is the most recent now
        read(&mut c, &mut m, 4.0, 2 << 30, 4096, 0);
        assert!(c.would_hit(5.0, 0, 4096));
        assert!(!c.would_hit(5.0, 1 << 30, 4096));
        assert!(c.would_hit(5.0, 2 << 30, 4096));
    }

    #[test]
    fn a_write_drops_what_it_overlaps_even_mid_read_ahead() {
        let (mut c, mut m) = cache(4);
        read(&mut c, &mut m, 1.0, 0, 4096, 0);
        let (done, _) = read(&mut c, &mut m, 1.0, 1 << 20, 4096, u64::MAX);
        // 10 ms later the second segment's read-ahead has brought in ~500 KB: the write lands inside it
        c.written(done + 0.01, (1 << 20) + (256 << 10), 4096, &mut m);
        assert!(c.would_hit(done + 0.5, 0, 4096));
        assert!(!c.would_hit(done + 0.5, 1 << 20, 4096));
        c.written(done + 0.01, 0, 512, &mut m);
        assert!(!c.would_hit(done + 0.5, 0, 4096));
        assert!(!c.would_hit(done + 0.5, 0, 512), "written data is not kept unless writes share the segments");
    }

    #[test]
    fn shared_segments_keep_written_data_and_evict_read_data() {
        let (mut c, mut m) = cache(2);
        c.p.write_shares_segments = true;
        read(&mut c, &mut m, 1.0, 0, 4096, 0);
        read(&mut c, &mut m, 2.0, 1 << 30, 4096, 0);
        c.written(3.0, 2 << 30, 8192, &mut m);
        assert!(c.would_hit(4.0, 2 << 30, 8192), "the written sectors serve reads");
        assert!(!c.would_hit(4.0, 0, 4096), "the least recently used read segment made room");
        assert!(c.would_hit(4.0, 1 << 30, 4096));
    }

    #[test]
    fn no_segments_means_no_cache() {
        let (mut c, mut m) = cache(0);
        read(&mut c, &mut m, 1.0, 0, 4096, u64::MAX);
        assert_eq!(read(&mut c, &mut m, 2.0, 0, 4096, u64::MAX).1, 4096);
        assert!(!c.would_hit(3.0, 0, 4096));
    }
}
