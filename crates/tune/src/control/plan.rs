//! Request sizing: how many bytes each request carries and how many each
//! session keeps in flight, from the share of the path each session has.

use super::counters::PoolLimits;

/// Bytes in flight over all sessions that [`request_plan`] always allows.
pub const IN_FLIGHT_FLOOR: u64 = 64 << 20;

/// The floor on a small path (RTT below a millisecond, or a Unix socket):
/// a bandwidth-delay product there is at most a megabyte or two, and
/// smaller requests let goodput counted from completed requests be
/// measured finely.
pub const SMALL_PATH_IN_FLIGHT_FLOOR: u64 = 8 << 20;

/// Smallest bytes per request [`request_plan`] chooses (libnbd's nbdcopy
/// uses this size by default).
pub const MIN_REQUEST_BYTES: u32 = 256 << 10;

/// How each of `n` sessions should carry its share of the path: the bytes
/// per request and the requests in flight per session.
///
/// All sessions together keep `max(2 x goodput x RTT, IN_FLIGHT_FLOOR)`
/// bytes in flight (twice the path's bandwidth-delay product as measured
/// so far, and never less than the floor, so the first ramp is not held
/// back while the goodput is still unknown or in slow start). Each session
/// gets `1/n` of it: requests are cut to the largest power of two not above
/// half of that (at least [`MIN_REQUEST_BYTES`], at most
/// `max_request_bytes`), plus one request of slack, at least 2 and at most
/// `max_depth`. A session then holds about `1/n` of a few hundred
/// milliseconds of data, not `depth` x the largest request: when the tuner
/// deactivates it, it finishes soon. `goodput` in bytes/s and `rtt_s` may
/// be unknown (NaN or 0).
#[must_use]
pub fn request_plan(
    goodput: f64,
    rtt_s: f64,
    n: usize,
    max_request_bytes: u32,
    max_depth: usize,
) -> (u32, usize) {
    request_plan_with_floor(goodput, rtt_s, n, max_request_bytes, max_depth, IN_FLIGHT_FLOOR)
}

/// [`request_plan`] with another floor on the bytes in flight.
#[must_use]
pub fn request_plan_with_floor(
    goodput: f64,
    rtt_s: f64,
    n: usize,
    max_request_bytes: u32,
    max_depth: usize,
    floor: u64,
) -> (u32, usize) {
    let measured = if goodput.is_finite() && rtt_s.is_finite() { 2.0 * goodput * rtt_s } else { 0.0 };
    let total = measured.max(floor as f64);
    let per = total / n.max(1) as f64;
    let max_request = max_request_bytes.max(1);
    let request_bytes = if per / 2.0 >= f64::from(max_request) {
        max_request
    } else {
        let pow2 = 1u64 << ((per / 2.0).max(1.0).log2().floor() as u32).min(31);
        (pow2.max(u64::from(MIN_REQUEST_BYTES)) as u32).min(max_request)
    };
    let depth = (per / f64::from(request_bytes)).ceil().clamp(1.0, 1e6) as usize + 1;
    (request_bytes, depth.min(max_depth.max(1)))
}

/// [`request_plan`] within what the pools accept: the request size rounded
/// down to their block size (a request that shrinks gets a deeper queue,
/// the same bytes in flight).
pub(crate) fn fit(limits: &PoolLimits, goodput: f64, rtt_s: f64, n: usize, floor: u64) -> (u32, usize) {
    let (planned, depth) =
        request_plan_with_floor(goodput, rtt_s, n, limits.max_request_bytes, limits.max_depth, floor);
    let align = limits.request_align.max(1);
    let rounded = planned - planned % align;
    if rounded == planned {
        return (planned, depth);
    }
    let bytes = if rounded == 0 { align.min(limits.max_request_bytes).max(1) } else { rounded };
    let depth = depth * planned as usize / bytes as usize + 1;
    (bytes, depth.clamp(1, limits.max_depth.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_follow_the_share_of_the_path() {
        const M: u32 = 1 << 20;
        // 1 Gbit/s, 100 ms: 2 x 12.5 MB is below the 64 MiB floor.
        let g = 125e6;
        // Few sessions: whole 4 MiB requests, as many as allowed.
        assert_eq!(request_plan(g, 0.1, 1, 4 * M, 4), (4 * M, 4));
        assert_eq!(request_plan(g, 0.1, 4, 4 * M, 16), (4 * M, 5));
        // 32 sessions: 2 MiB each -> 1 MiB requests, 3 in flight.
        assert_eq!(request_plan(g, 0.1, 32, 4 * M, 4), (M, 3));
        // 64 sessions: 1 MiB each -> 512 KiB requests, 3 in flight.
        assert_eq!(request_plan(g, 0.1, 64, 4 * M, 4), (512 << 10, 3));
        // 1024 sessions: the 256 KiB floor, 2 in flight.
        assert_eq!(request_plan(g, 0.1, 1024, 4 * M, 4), (MIN_REQUEST_BYTES, 2));
        // A long fat path: 10 Gbit/s, 200 ms, 16 sessions -> 2 x 250 MB / 16.
        assert_eq!(request_plan(1.25e9, 0.2, 16, 4 * M, 16), (4 * M, 9));
        // Nothing known yet: the floor.
        assert_eq!(request_plan(f64::NAN, 0.0, 16, 4 * M, 4), (2 * M, 3));
        // Never above the request size the user chose, nor the depth.
        assert_eq!(request_plan(g, 0.1, 64, 64 << 10, 16).0, 64 << 10);
        assert_eq!(request_plan(g, 0.1, 64, 64 << 10, 1).1, 1);
        assert_eq!(request_plan(f64::INFINITY, f64::INFINITY, 0, 0, 0), (1, 1));
    }

    #[test]
    fn fitting_keeps_the_bytes_in_flight() {
        let limits =
            PoolLimits { max_sessions: 64, max_request_bytes: 3 << 20, request_align: 3 << 20, max_depth: 8 };
        // 2 MiB planned is below the 3 MiB block: one block per request,
        // with depth scaled down.
        assert_eq!(request_plan(f64::NAN, 0.0, 16, 3 << 20, 8), (2 << 20, 3));
        assert_eq!(fit(&limits, f64::NAN, 0.0, 16, IN_FLIGHT_FLOOR), (3 << 20, 3));
        let plain = PoolLimits { request_align: 512, ..limits };
        assert_eq!(
            fit(&plain, f64::NAN, 0.0, 16, IN_FLIGHT_FLOOR),
            request_plan(f64::NAN, 0.0, 16, 3 << 20, 8)
        );
        // A small path keeps 8 MiB in flight: 1 MiB requests for 4 sessions.
        assert_eq!(fit(&plain, f64::NAN, 0.0, 4, SMALL_PATH_IN_FLIGHT_FLOOR), (1 << 20, 3));
    }

    proptest::proptest! {
        #[test]
        fn a_plan_stays_in_bounds(g in 0.0f64..1e12, rtt in 0.0f64..10.0, n in 1usize..1024, req in 1u32..=(1 << 30), depth in 1usize..64) {
            let (bytes, slots) = request_plan(g, rtt, n, req, depth);
            proptest::prop_assert!(bytes <= req && bytes >= MIN_REQUEST_BYTES.min(req));
            proptest::prop_assert!(slots >= 1 && slots <= depth);
        }

        #[test]
        fn a_fitted_plan_is_aligned(g in 0.0f64..1e12, rtt in 0.0f64..10.0, n in 1usize..1024, blocks in 1u32..2048, align_pow in 0u32..13, depth in 1usize..64) {
            let align = 1u32 << align_pow;
            let limits = PoolLimits { max_sessions: 64, max_request_bytes: blocks * align, request_align: align, max_depth: depth };
            let (bytes, slots) = fit(&limits, g, rtt, n, IN_FLIGHT_FLOOR);
            proptest::prop_assert!(bytes % align == 0 && bytes <= limits.max_request_bytes && bytes > 0);
            proptest::prop_assert!(slots >= 1 && slots <= depth);
        }
    }
}
