//! When and how long to wait before trying a model call again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Exponential backoff with full jitter, capped, for a bounded number of retries.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Whether a request that timed out is sent again. A local server goes on computing an
    /// abandoned answer, so sending it again only queues a second one behind it.
    pub retry_timeouts: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            retry_timeouts: true,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (1-based). A server's `Retry-After` wins when
    /// it asks for longer than the backoff would wait, but never beyond `max_delay`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let ceiling = exp.min(self.max_delay);
        // Jitter between half and all of the ceiling keeps retries apart without collapsing to 0.
        let jittered = ceiling / 2 + ceiling.mul_f64(jitter_fraction() / 2.0);
        match retry_after {
            Some(ra) => ra.max(jittered).min(self.max_delay),
            None => jittered,
        }
    }
}

/// A fraction in [0, 1) that varies call to call; good enough to spread retries.
fn jitter_fraction() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = nanos as u64 ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x % 1_000_000) as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let p = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            retry_timeouts: true,
        };
        let d1 = p.delay(1, None);
        assert!(
            d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100),
            "{d1:?}"
        );
        let d3 = p.delay(3, None);
        assert!(
            d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400),
            "{d3:?}"
        );
        assert!(p.delay(12, None) <= Duration::from_secs(1));
        assert_eq!(
            p.delay(1, Some(Duration::from_millis(700))),
            Duration::from_millis(700)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(90))),
            Duration::from_secs(1)
        );
    }
}
