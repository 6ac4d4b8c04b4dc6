//! The mechanics of a disk: where a byte sits (radius, angle), how long the
//! arm takes to get there, how long the platter takes to bring it under the
//! head, and how fast it then transfers.
//!
//! Geometry: `zones` zones of equal radial width from the outer diameter
//! (position 0) to the inner diameter (position 1). A zone's rate falls
//! linearly from `outer_rate` to `inner_rate`; every zone has the same number
//! of tracks, so a zone's share of the capacity is proportional to its rate.
//! Inside a zone the radial position grows linearly with the byte address and
//! the angular position is the byte's offset within its track (no skew).

use crate::params::MechParams;

#[derive(Clone, Debug)]
struct Zone {
    start: u64,
    end: u64,
    rate: f64,
    track_bytes: f64,
}

/// Geometry plus the head's state (radial position, end of the last transfer).
#[derive(Clone, Debug)]
pub struct Mech {
    pub p: MechParams,
    rev_s: f64,
    zones: Vec<Zone>,
    /// Radial position of the head, 0 = outer diameter, 1 = inner.
    head_pos: f64,
    /// Byte address right after the last transfer (for sequential continuation).
    last_end: Option<u64>,
}

impl Mech {
    pub fn new(p: MechParams) -> Self {
        let rev_s = 60.0 / p.rpm;
        let nz = p.zones as usize;
        let rates: Vec<f64> = (0..nz)
            .map(|i| {
                if nz == 1 {
                    p.outer_rate
                } else {
                    p.outer_rate + (p.inner_rate - p.outer_rate) * i as f64 / (nz - 1) as f64
                }
            })
            .collect();
        let total: f64 = rates.iter().sum();
        let mut zones = Vec::with_capacity(nz);
        let mut start = 0u64;
        for (i, &rate) in rates.iter().enumerate() {
            let end = if i + 1 == nz {
                p.capacity_bytes
            } else {
                let share = (p.capacity_bytes as f64 * rate / total) as u64;
                (start + share).min(p.capacity_bytes)
            };
            zones.push(Zone { start, end, rate, track_bytes: rate * rev_s });
            start = end;
        }
        Mech { p, rev_s, zones, head_pos: 0.0, last_end: None }
    }

    pub fn rev_s(&self) -> f64 {
        self.rev_s
    }

    fn zone_index(&self, byte: u64) -> usize {
        let b = byte.min(self.p.capacity_bytes.saturating_sub(1));
        // zones are sorted by start; partition_point gives the first zone whose end > b
        self.zones.partition_point(|z| z.end <= b).min(self.zones.len() - 1)
    }

    /// Radial position of a byte, 0 = outer diameter, 1 = inner.
    pub fn position(&self, byte: u64) -> f64 {
        let i = self.zone_index(byte);
        let z = &self.zones[i];
        let span = (z.end - z.start).max(1) as f64;
        let frac = (byte.saturating_sub(z.start)) as f64 / span;
        ((i as f64 + frac.min(1.0)) / self.zones.len() as f64).clamp(0.0, 1.0)
    }

    /// Angular position of a byte as a fraction of a revolution.
    fn angle(&self, byte: u64) -> f64 {
        let z = &self.zones[self.zone_index(byte)];
        let t = (byte.saturating_sub(z.start)) as f64 / z.track_bytes;
        t - t.floor()
    }

    /// Media rate at a byte address, bytes/s.
    pub fn rate_at(&self, byte: u64) -> f64 {
        self.zones[self.zone_index(byte)].rate
    }

    /// First byte of the zone whose radial position is closest to `pos`.
    pub fn byte_at_position(&self, pos: f64) -> u64 {
        let nz = self.zones.len();
        let i = ((pos.clamp(0.0, 1.0) * nz as f64) as usize).min(nz - 1);
        self.zones[i].start
    }

    /// Seek time for a radial move of `dist` (fraction of the full stroke).
    pub fn seek_time(&self, dist: f64) -> f64 {
        let d = dist.abs().min(1.0);
        if d * self.p.cylinders as f64 <= 0.5 {
            return 0.0;
        }
        self.p.seek_t2t_s + self.p.seek_sqrt_s * d.sqrt() + self.p.seek_lin_s * d
    }

    /// Time from `t` (the drive starts working on the request) until the
    /// first byte at `byte` is under the head: overhead + seek + rotation.
    /// Zero for a sequential continuation.
    pub fn positioning_time(&self, t: f64, byte: u64) -> f64 {
        if self.p.seq_continuation && self.last_end == Some(byte) {
            return 0.0;
        }
        let seek = self.seek_time(self.position(byte) - self.head_pos);
        let ready = t + self.p.cmd_overhead_s + seek;
        let platter = (ready / self.rev_s).fract();
        let mut wait = self.angle(byte) - platter;
        if wait < 0.0 {
            wait += 1.0;
        }
        self.p.cmd_overhead_s + seek + wait * self.rev_s
    }

    /// Transfer time of `len` bytes starting at `byte` (the rate of the zone
    /// where the transfer starts).
    pub fn transfer_time(&self, byte: u64, len: u64) -> f64 {
        len as f64 / self.rate_at(byte)
    }

    /// Perform a media access at `byte` of `len` bytes starting at `t`; moves
    /// the head and returns the service time.
    pub fn access(&mut self, t: f64, byte: u64, len: u64) -> f64 {
        let d = self.positioning_time(t, byte) + self.transfer_time(byte, len);
        self.head_pos = self.position(byte.saturating_add(len).min(self.p.capacity_bytes));
        self.last_end = Some(byte.saturating_add(len));
        d
    }

    /// Move the head to a radial position without transferring (the head is
    /// left there by background work); returns the seek time plus half a
    /// revolution of average rotational latency.
    pub fn move_to(&mut self, pos: f64) -> f64 {
        let s = self.seek_time(pos - self.head_pos);
        self.head_pos = pos.clamp(0.0, 1.0);
        self.last_end = None;
        s + self.rev_s / 2.0
    }

    /// A bulk sequential transfer of `len` bytes at `byte` done by the drive
    /// itself (cleaning): seek + half a revolution + transfer. Moves the head.
    pub fn bulk(&mut self, byte: u64, len: u64) -> f64 {
        let d = self.move_to(self.position(byte)) + self.transfer_time(byte, len);
        self.head_pos = self.position(byte.saturating_add(len).min(self.p.capacity_bytes));
        self.last_end = None;
        d
    }

    /// Forget the sequential-continuation state (e.g. after the drive did
    /// other work in between).
    pub fn break_sequence(&mut self) {
        self.last_end = None;
    }

    pub fn head_position(&self) -> f64 {
        self.head_pos
    }

    /// Tell the mechanics the head now sits at the end of a transfer that ended at `end`.
    pub fn set_head_after(&mut self, end: u64) {
        self.head_pos = self.position(end.min(self.p.capacity_bytes));
        self.last_end = Some(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_curve_matches_reference_points() {
        let m = Mech::new(MechParams::wd5000ys());
        assert!((m.seek_time(1.0) - 21.0e-3).abs() < 0.01e-3);
        assert_eq!(m.seek_time(0.0), 0.0);
        assert!((m.seek_time(1.0 / 3.0) - 9.2e-3).abs() < 0.1e-3);
    }

    #[test]
    fn zones_cover_the_capacity_and_rates_fall_inward() {
        let p = MechParams::wd5000ys();
        let m = Mech::new(p.clone());
        assert_eq!(m.zones.first().map(|z| z.start), Some(0));
        assert_eq!(m.zones.last().map(|z| z.end), Some(p.capacity_bytes));
        assert!((m.rate_at(0) - 65e6).abs() < 1.0);
        assert!((m.rate_at(p.capacity_bytes - 512) - 31e6).abs() < 1.0);
        assert!(m.position(0) < 0.01 && m.position(p.capacity_bytes - 512) > 0.99);
        let mut last = -1.0;
        for i in 0..100u64 {
            let pos = m.position(p.capacity_bytes / 100 * i);
            assert!(pos >= last);
            last = pos;
        }
    }

    #[test]
    fn rotational_wait_is_below_one_revolution() {
        let m = Mech::new(MechParams::wd5000ys());
        for i in 0..1000u64 {
            let t = i as f64 * 0.000_37;
            let pt = m.positioning_time(t, i * 7_777_777 * 512);
            assert!(pt >= 0.0 && pt <= 0.2e-3 + 21e-3 + m.rev_s() + 1e-9);
        }
    }
}
