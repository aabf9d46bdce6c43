//! Jittered, capped exponential back-off for polling waiters.

use std::time::Duration;

use rand::RngExt;

/// Exponential back-off with "full jitter": each delay is uniform in `[base/2, base]`, where
/// `base` doubles from `min` up to `max`.
#[derive(Clone, Debug)]
pub struct Backoff {
    current: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `min` and never exceeds `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff { current: min.min(max), max }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = self.current.saturating_mul(2).min(self.max);
        let nanos = base.as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos))
    }

    /// Starts over from the smallest delay.
    pub fn reset(&mut self, min: Duration) {
        self.current = min.min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(5) && first <= Duration::from_millis(10));
        for _ in 0..20 {
            assert!(b.next_delay() <= Duration::from_millis(100));
        }
        let late = b.next_delay();
        assert!(late >= Duration::from_millis(50), "{late:?}");
    }

    #[test]
    fn huge_bounds_never_panic() {
        for (min, max) in [(Duration::MAX, Duration::MAX), (Duration::MAX / 2 + Duration::from_secs(1), Duration::MAX)]
        {
            let mut b = Backoff::new(min, max);
            for _ in 0..3 {
                assert!(b.next_delay() <= max);
            }
        }
    }
}
