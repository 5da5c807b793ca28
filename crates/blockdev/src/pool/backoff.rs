//! When to try opening a session again: exponential backoff with jitter,
//! within a time budget. A pure state machine: the caller passes `now` and
//! a random draw, and gets back when to try next (or to give up), so it is
//! tested in simulated time.

use std::time::{Duration, Instant};

use super::config::RetryPolicy;

/// The state of a run of failed attempts to open a session.
#[derive(Debug, Clone)]
pub(super) struct Backoff {
    min: Duration,
    max: Duration,
    budget: Duration,
    /// Failed attempts in the current run.
    failures: u32,
    /// First failure of the current run.
    since: Option<Instant>,
    /// When the next attempt is due.
    next: Option<Instant>,
}

impl Backoff {
    pub(super) fn new(p: &RetryPolicy) -> Backoff {
        Backoff {
            min: p.backoff_min.max(Duration::from_millis(1)),
            max: p.backoff_max.max(p.backoff_min),
            budget: p.retry_for,
            failures: 0,
            since: None,
            next: None,
        }
    }

    /// An attempt failed at `now`; `draw` is uniform in `[0, 1)`. Returns
    /// when to try next, or `None` once the run of failures has lasted the
    /// whole budget (the last attempt is made at the budget's end).
    pub(super) fn failed(&mut self, now: Instant, draw: f64) -> Option<Instant> {
        let since = *self.since.get_or_insert(now);
        self.failures = self.failures.saturating_add(1);
        let end = since + self.budget;
        if now >= end {
            self.next = None;
            return None;
        }
        let exp = self.min.saturating_mul(1u32 << (self.failures - 1).min(20)).min(self.max);
        let wait = exp.mul_f64(0.5 + 0.5 * draw.clamp(0.0, 1.0));
        let at = (now + wait).min(end);
        self.next = Some(at);
        Some(at)
    }

    /// A session works again: the run of failures is over.
    pub(super) fn succeeded(&mut self) {
        self.failures = 0;
        self.since = None;
        self.next = None;
    }

    /// In a run of failures: attempts are paced, one at a time.
    pub(super) fn failing(&self) -> bool {
        self.failures > 0
    }

    /// When the next attempt is due (now, if none is pending).
    pub(super) fn next_at(&self, now: Instant) -> Instant {
        self.next.unwrap_or(now)
    }

    /// How long the current run of failures has lasted.
    pub(super) fn failing_for(&self, now: Instant) -> Duration {
        self.since.map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            retry_for: Duration::from_secs(60),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn waits_double_up_to_the_cap_with_jitter() {
        let t0 = Instant::now();
        let mut b = Backoff::new(&policy());
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let at = b.failed(now, 0.999).unwrap();
            waits.push(at - now);
            now = at;
        }
        let ms: Vec<u128> = waits.iter().map(|w| w.as_millis()).collect();
        assert_eq!(ms, vec![199, 399, 799, 1599, 3198, 4997, 4997, 4997]);
        // The lowest draw waits half as long.
        let mut b = Backoff::new(&policy());
        assert_eq!(b.failed(t0, 0.0).unwrap() - t0, Duration::from_millis(100));
        assert!(b.failing());
    }

    #[test]
    fn gives_up_after_the_budget_and_tries_once_at_its_end() {
        let t0 = Instant::now();
        let mut b = Backoff::new(&policy());
        let mut now = t0;
        let mut attempts = 0;
        while let Some(at) = b.failed(now, 0.5) {
            assert!(at <= t0 + Duration::from_secs(60));
            now = at;
            attempts += 1;
        }
        assert!(now >= t0 + Duration::from_secs(60), "the last attempt is at the budget's end");
        assert!((15..30).contains(&attempts), "{attempts} attempts in 60 s");
        assert_eq!(b.failing_for(now), Duration::from_secs(60));
    }

    #[test]
    fn a_success_starts_over() {
        let t0 = Instant::now();
        let mut b = Backoff::new(&policy());
        for i in 0..5 {
            b.failed(t0 + Duration::from_secs(i), 0.5);
        }
        b.succeeded();
        assert!(!b.failing());
        assert_eq!(b.next_at(t0), t0);
        let later = t0 + Duration::from_secs(100);
        assert_eq!(b.failed(later, 0.0).unwrap() - later, Duration::from_millis(100));
    }
}
