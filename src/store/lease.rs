//! A cluster node's own view of its leases: when it last renewed them, by its monotonic
//! clock. The store thread sets it after each heartbeat the database took; everything that
//! acts for a flow (a tool call, a model call) and the flow's record ask it first. A lease
//! is renewed in the database as "one lease from when the renewal was sent", so a node that
//! counts one lease from just before it sent the renewal stops acting no later than the
//! database lets its lease lapse — whatever pauses it (SIGSTOP, a frozen store, a starved
//! heartbeat) — up to the difference between the nodes' wall clocks, which the claim
//! compares.
//!
//! A lapse is a one-way door for the flows running at the time: it ends the clock's epoch,
//! and a flow licensed in an earlier epoch never acts again, even once the leases are
//! renewed (another node may have taken its run meanwhile). Flows claimed afterwards get
//! the new epoch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct LeaseClock {
    base: Instant,
    /// Nanoseconds after `base` of the start of the last renewal the database took.
    renewed: AtomicU64,
    lease: Duration,
    /// Bumped once per lapse.
    epoch: AtomicU64,
    /// The current lapse has been counted (cleared by a renewal that ends it).
    lapsed: AtomicBool,
}

impl LeaseClock {
    /// A clock whose leases were renewed at `at`, for `lease`.
    pub(crate) fn new(lease: Duration, at: Instant) -> LeaseClock {
        LeaseClock {
            base: at,
            renewed: AtomicU64::new(0),
            lease,
            epoch: AtomicU64::new(0),
            lapsed: AtomicBool::new(false),
        }
    }

    /// The renewal sent at `at` was committed. One sent after the leases had lapsed ends
    /// the epoch even if no one noticed the lapse before.
    pub(crate) fn renewed(&self, at: Instant) {
        if at >= self.deadline() {
            self.lapse();
        }
        let ns = at.saturating_duration_since(self.base).as_nanos() as u64;
        self.renewed.fetch_max(ns, Ordering::AcqRel);
        if Instant::now() < self.deadline() {
            self.lapsed.store(false, Ordering::Release);
        }
    }

    /// When the leases lapse, unless renewed before.
    pub fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.renewed.load(Ordering::Acquire)) + self.lease
    }

    /// Whether this node holds its leases now.
    pub fn holds(&self) -> bool {
        if Instant::now() < self.deadline() {
            return true;
        }
        self.lapse();
        false
    }

    /// The current epoch (see the module's note).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Count a lapse once: the first to see it ends the epoch.
    fn lapse(&self) {
        if !self.lapsed.swap(true, Ordering::AcqRel) {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether something licensed in `epoch` may act now.
    pub fn licenses(&self, epoch: u64) -> bool {
        self.holds() && self.epoch() == epoch
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
        assert!(!clock.holds(), "renewed 5 s ago for 3 s");
        clock.renewed(start + Duration::from_secs(4));
        assert!(clock.holds());
        // A renewal that commits late does not move the deadline back.
        clock.renewed(start + Duration::from_secs(1));
        assert_eq!(clock.deadline(), start + Duration::from_secs(7));
    }

    #[test]
    fn a_lapse_ends_the_licences_of_its_time_even_once_renewed() {
        let start = Instant::now() - Duration::from_secs(5);
        let clock = LeaseClock::new(Duration::from_secs(6), start);
        let before = clock.epoch();
        assert!(clock.licenses(before));
        // Paused past the lease, then renewed before anyone looked: still a lapse.
        clock.renewed(start + Duration::from_secs(7));
        assert!(clock.holds());
        assert!(
            !clock.licenses(before),
            "a flow of the old epoch never acts again"
        );
        assert!(clock.licenses(clock.epoch()), "a flow claimed since may");
    }
}
