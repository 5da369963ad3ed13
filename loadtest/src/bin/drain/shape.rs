//! The shape of a drain against a limited provider, from each delivery's arrival time (the
//! provider's clock, milliseconds): how long the start took to reach the limit, the steady rate,
//! and how long the end trailed off.

use serde::Serialize;

/// At or above this fraction of the limit a one-second window counts as "at the limit".
pub const AT_LIMIT: f64 = 0.95;

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Shape {
    /// Seconds from the first arrival until a one-second window first held ≥ 95 % of the limit,
    /// minus that one second: 0 for a fleet at full rate from its first request.
    pub start_ramp_s: f64,
    /// Arrivals per second between 10 % and 90 % of the deliveries.
    pub steady_per_s: f64,
    /// Seconds from the end of the last one-second window holding ≥ 95 % of the limit to the
    /// last arrival: 0 for a fleet at full rate to its last request.
    pub tail_s: f64,
}

/// The shape of `arrivals_ms` (any order) against `limit` per second; `None` for too few.
pub fn shape(arrivals_ms: &[u64], limit: f64) -> Option<Shape> {
    if arrivals_ms.len() < 100 || limit <= 0.0 {
        return None;
    }
    let mut t = arrivals_ms.to_vec();
    t.sort_unstable();
    let need = (AT_LIMIT * limit).ceil() as usize;
    // Windows [t[i], t[i] + 1000): the first and the last that hold `need` arrivals.
    let full = |i: usize| -> bool {
        let end = t[i] + 1000;
        t[i..].partition_point(|x| *x < end) >= need
    };
    let first_full = (0..t.len()).find(|&i| full(i));
    let last_full = (0..t.len()).rev().find(|&i| full(i));
    let (first, last) = (t[0], *t.last().expect("non-empty"));
    let (ramp, tail) = match (first_full, last_full) {
        (Some(a), Some(b)) => {
            // The window starting at t[a] holds `need`: it was "full" at t[a + need - 1].
            let reached = t[a + need - 1];
            (
                (reached.saturating_sub(first) as f64 / 1000.0 - 1.0).max(0.0),
                (last.saturating_sub(t[b] + 1000) as f64 / 1000.0).max(0.0),
            )
        }
        _ => (f64::NAN, f64::NAN),
    };
    let at = |frac: f64| t[((t.len() - 1) as f64 * frac) as usize];
    let (t10, t90) = (at(0.1), at(0.9));
    let steady = if t90 > t10 {
        (0.8 * t.len() as f64) / ((t90 - t10) as f64 / 1000.0)
    } else {
        f64::NAN
    };
    Some(Shape {
        start_ramp_s: round1(ramp),
        steady_per_s: steady.round(),
        tail_s: round1(tail),
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arrivals at `rate`/s from `from_ms` for `secs` seconds.
    fn at_rate(rate: u64, from_ms: u64, secs: u64) -> Vec<u64> {
        (0..rate * secs)
            .map(|i| from_ms + i * 1000 / rate)
            .collect()
    }

    #[test]
    fn a_fleet_at_the_limit_from_first_to_last_request_has_no_ramp_and_no_tail() {
        let s = shape(&at_rate(500, 10_000, 20), 500.0).unwrap();
        assert_eq!((s.start_ramp_s, s.tail_s), (0.0, 0.0));
        assert_eq!(s.steady_per_s, 500.0);
    }

    #[test]
    fn two_slow_seconds_at_each_end_are_a_two_second_ramp_and_tail() {
        let mut t = at_rate(100, 0, 2);
        t.extend(at_rate(500, 2_000, 20));
        t.extend(at_rate(100, 22_000, 2));
        let s = shape(&t, 500.0).unwrap();
        assert!((s.start_ramp_s - 2.0).abs() <= 0.15, "{s:?}");
        assert!((s.tail_s - 2.0).abs() <= 0.15, "{s:?}");
    }
}
