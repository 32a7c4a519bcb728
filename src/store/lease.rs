//! A cluster node's own view of its leases: when it last renewed them, by its monotonic
//! clock. The store thread sets it after each heartbeat the database took; everything that
//! acts for a flow (a tool call, a model call) asks it first. A lease is renewed in the
//! database as "one lease from when the renewal was sent", so a node that counts one lease
//! from just before it sent the renewal stops acting no later than the database lets its
//! lease lapse — whatever pauses it (SIGSTOP, a frozen store, a long GC) — up to the
//! difference between the nodes' wall clocks, which the claim compares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct LeaseClock {
    base: Instant,
    /// Nanoseconds after `base` of the start of the last renewal the database took.
    renewed: AtomicU64,
    lease: Duration,
}

impl LeaseClock {
    /// A clock whose leases were renewed at `at`, for `lease`.
    pub(crate) fn new(lease: Duration, at: Instant) -> LeaseClock {
        let clock = LeaseClock {
            base: at,
            renewed: AtomicU64::new(0),
            lease,
        };
        clock.renewed(at);
        clock
    }

    /// The renewal sent at `at` was committed.
    pub(crate) fn renewed(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.base).as_nanos() as u64;
        self.renewed.fetch_max(ns, Ordering::AcqRel);
    }

    /// When the leases lapse, unless renewed before.
    pub fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.renewed.load(Ordering::Acquire)) + self.lease
    }

    /// Whether this node still holds its leases now.
    pub fn valid(&self) -> bool {
        Instant::now() < self.deadline()
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_counted_from_the_latest_renewal_sent() {
        let start = Instant::now() - Duration::from_secs(5);
        let clock = LeaseClock::new(Duration::from_secs(3), start);
        assert!(!clock.valid(), "renewed 5 s ago for 3 s");
        clock.renewed(start + Duration::from_secs(4));
        assert!(clock.valid());
        // A renewal that commits late does not move the deadline back.
        clock.renewed(start + Duration::from_secs(1));
        assert_eq!(clock.deadline(), start + Duration::from_secs(7));
    }
}
