//! Model time: real elapsed time scaled by `speed`, or virtual time that only
//! moves when the model says so (unit tests and fast offline runs).

use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub enum Clock {
    /// Model seconds = real seconds since `start` x `speed`.
    Real { start: Instant, speed: f64 },
    /// Model seconds advance only through [`Clock::advance_to`].
    Virtual { now: f64 },
}

impl Clock {
    pub fn real(speed: f64) -> Self {
        Clock::Real { start: Instant::now(), speed }
    }

    pub fn virtual_time() -> Self {
        Clock::Virtual { now: 0.0 }
    }

    pub fn is_virtual(&self) -> bool {
        matches!(self, Clock::Virtual { .. })
    }

    /// The current model time in seconds.
    pub fn now(&self) -> f64 {
        match self {
            Clock::Real { start, speed } => start.elapsed().as_secs_f64() * speed,
            Clock::Virtual { now } => *now,
        }
    }

    /// Move virtual time forward to `t` (never backwards); no effect on a real clock.
    pub fn advance_to(&mut self, t: f64) {
        if let Clock::Virtual { now } = self {
            if t > *now {
                *now = t;
            }
        }
    }

    /// Jump to model time `t` (never backwards) without waiting for it: a
    /// real clock's start moves back by the real time `t` is away, so the
    /// model behaves as if that time had passed with no host request.
    pub fn skip_to(&mut self, t: f64) {
        match self {
            Clock::Real { start, speed } => {
                let ahead = t - start.elapsed().as_secs_f64() * *speed;
                if ahead > 0.0 {
                    let back = Duration::from_secs_f64((ahead / *speed).min(1e9));
                    // An Instant cannot go before the host's boot: skip what fits.
                    *start = start.checked_sub(back).unwrap_or(*start);
                }
            }
            Clock::Virtual { .. } => self.advance_to(t),
        }
    }

    /// The real instant at which model time reaches `t` (None for virtual time).
    pub fn instant_of(&self, t: f64) -> Option<Instant> {
        match self {
            Clock::Real { start, speed } => {
                let secs = (t / speed).max(0.0);
                Some(*start + Duration::from_secs_f64(secs.min(1e9)))
            }
            Clock::Virtual { .. } => None,
        }
    }

    pub fn speed(&self) -> Option<f64> {
        match self {
            Clock::Real { speed, .. } => Some(*speed),
            Clock::Virtual { .. } => None,
        }
    }
}

/// Below this, waits spin (yielding) instead of sleeping: a timer sleep
/// overshoots by ~50-100 us, which would slow a 0.14 ms cache write by half.
const SPIN: Duration = Duration::from_micros(150);

/// Sleep until `deadline` (no-op if it has passed).
pub fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN / 2);
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_moves_a_real_clock_ahead_without_waiting() {
        let mut c = Clock::real(1.0);
        let t0 = Instant::now();
        c.skip_to(3600.0);
        assert!(c.now() >= 3600.0, "now {}", c.now());
        assert!(t0.elapsed() < Duration::from_secs(1));
        // never backwards
        c.skip_to(10.0);
        assert!(c.now() >= 3600.0);
        let mut v = Clock::virtual_time();
        v.skip_to(5.0);
        assert_eq!(v.now(), 5.0);
    }

    #[test]
    fn virtual_time_never_goes_backwards() {
        let mut c = Clock::virtual_time();
        c.advance_to(2.0);
        c.advance_to(1.0);
        assert_eq!(c.now(), 2.0);
    }

    #[test]
    fn real_time_is_scaled() {
        let c = Clock::real(1000.0);
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.now() >= 20.0);
        let a = c.instant_of(1000.0).unwrap();
        let b = c.instant_of(2000.0).unwrap();
        assert!(b - a >= Duration::from_millis(999));
    }
}
