//! The clock estimator of one connection: pure (no clock reads, no I/O).
//!
//! Every frame carries the sender's clock reading when it was sent and the sender's
//! current minimum one-way delta. Each side keeps, over its last [`WINDOW`] frames, the
//! minimum of `receive time - sender's send time` (its *local minimum*; the clocks have
//! different epochs, so a delta may be negative). With the peer's minimum (the
//! *remote minimum*, read from the frames it sends):
//!
//! - `offset = (local_min - remote_min) / 2`: add it to a peer's reading to get the local
//!   clock's (`to_local`), subtract it from a local reading for the peer's (`to_remote`);
//! - `round_trip = local_min + remote_min`.
//!
//! **Bound.** With one-way delays `d_in` (peer to us) and `d_out` (us to peer), the
//! minimums are `d_in_min - skew` and `d_out_min + skew`, so the round trip is
//! `d_in_min + d_out_min` exactly and the offset is wrong by `(d_in_min - d_out_min) / 2`:
//! at most half the round trip, whatever the skew. Delays that are the same both ways give
//! the exact offset.

use std::collections::VecDeque;

use crate::time::Nanos;

/// Frames the minimums are taken over: old enough ones leave, so a changed path (a new
/// route, a slower proxy) shows within this many frames.
pub const WINDOW: usize = 1024;

/// One connection's view of its peer's clock.
#[derive(Clone, Debug, Default)]
pub struct ClockSync {
    /// `receive - send` of the last [`WINDOW`] frames, oldest first.
    deltas: VecDeque<i64>,
    /// The minimum of `deltas`.
    local_min: Option<i64>,
    /// The peer's minimum, as its latest frame said.
    remote_min: Option<i64>,
}

impl ClockSync {
    /// Takes a frame received at `received` (local clock) that the peer sent at `sent`
    /// (its clock), carrying the peer's current minimum.
    pub fn observe(&mut self, sent: Nanos, received: Nanos, peer_min: Option<i64>) {
        let delta = signed(received) - signed(sent);
        let delta = i64::try_from(delta).unwrap_or(if delta < 0 { i64::MIN } else { i64::MAX });
        if self.deltas.len() == WINDOW {
            let old = self.deltas.pop_front();
            if old == self.local_min {
                self.local_min = self.deltas.iter().copied().min();
            }
        }
        self.deltas.push_back(delta);
        self.local_min = Some(self.local_min.map_or(delta, |m| m.min(delta)));
        if peer_min.is_some() {
            self.remote_min = peer_min;
        }
    }

    /// This side's minimum, which its frames carry to the peer.
    pub fn local_min(&self) -> Option<i64> {
        self.local_min
    }

    /// Local clock minus the peer's, once both directions have been seen.
    pub fn offset(&self) -> Option<i64> {
        let (local, remote) = (self.local_min?, self.remote_min?);
        Some(
            ((i128::from(local) - i128::from(remote)) / 2).clamp(i64::MIN.into(), i64::MAX.into())
                as i64,
        )
    }

    /// The least round trip seen, once both directions have been seen.
    pub fn round_trip(&self) -> Option<Nanos> {
        let (local, remote) = (self.local_min?, self.remote_min?);
        let sum = i128::from(local) + i128::from(remote);
        Some(sum.clamp(0, i128::from(Nanos::MAX)) as Nanos)
    }

    /// A peer's reading on the local clock (saturating; unchanged before the offset is
    /// known).
    pub fn to_local(&self, remote: Nanos) -> Nanos {
        shift(remote, self.offset().unwrap_or(0))
    }

    /// A local reading on the peer's clock (saturating; unchanged before the offset is
    /// known).
    pub fn to_remote(&self, local: Nanos) -> Nanos {
        shift(local, self.offset().map_or(0, |o| o.saturating_neg()))
    }
}

fn signed(t: Nanos) -> i128 {
    i128::from(t)
}

/// `t + by`, kept within `0..=Nanos::MAX` (the far future stays the far future).
pub fn shift(t: Nanos, by: i64) -> Nanos {
    if t == Nanos::MAX {
        return t;
    }
    (signed(t) + i128::from(by)).clamp(0, i128::from(Nanos::MAX)) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

    /// Two clocks `skew` apart (peer = local + skew), exchanging frames with one-way
    /// delays `d_out` (local to peer) and `d_in` (peer to local) plus some jitter.
    fn exchange(skew: i64, d_out: Nanos, d_in: Nanos, frames: u64) -> (ClockSync, ClockSync) {
        let (mut local, mut peer) = (ClockSync::default(), ClockSync::default());
        let base = 20_000 * MS; // true time; both clocks stay positive with +-10 s skews
        for i in 0..frames {
            let t = base + i * 7 * MS;
            let jitter = (i * 7919) % 5 * MS / 2;
            // local -> peer
            let sent = t;
            let received = shift(t + d_out + jitter, skew);
            peer.observe(sent, received, local.local_min());
            // peer -> local
            let sent = shift(t, skew);
            let received = t + d_in + (i * 104_729) % 3 * MS;
            local.observe(sent, received, peer.local_min());
        }
        (local, peer)
    }

    #[test]
    fn offset_within_half_the_asymmetry_for_large_skews() {
        for skew in [
            -10_000 * MS as i64,
            -1,
            0,
            3 * MS as i64,
            10_000 * MS as i64,
        ] {
            for (d_out, d_in) in [(MS, MS), (MS / 10, 5 * MS), (20 * MS, 2 * MS)] {
                let (local, peer) = exchange(skew, d_out, d_in, 300);
                let offset = local.offset().expect("both directions seen");
                let bound = (d_out.abs_diff(d_in) / 2) as i64;
                assert!(
                    (offset + skew).abs() <= bound,
                    "skew {skew}, delays {d_out}/{d_in}: offset {offset}"
                );
                assert_eq!(local.round_trip(), Some(d_out + d_in));
                assert_eq!(peer.round_trip(), Some(d_out + d_in));
                // A time translated there and back is the same time.
                assert_eq!(peer.to_local(local.to_local(50_000 * MS)), 50_000 * MS);
            }
        }
    }

    #[test]
    fn symmetric_delays_give_the_exact_offset() {
        let (local, peer) = exchange(-7_777 * MS as i64, 2 * MS, 2 * MS, 50);
        assert_eq!(local.offset(), Some(7_777 * MS as i64));
        assert_eq!(peer.offset(), Some(-(7_777 * MS as i64)));
        assert_eq!(local.to_remote(10_000 * MS), 2_223 * MS);
    }

    #[test]
    fn old_minimums_leave_the_window() {
        let mut sync = ClockSync::default();
        sync.observe(0, MS, Some(MS as i64));
        for i in 0..WINDOW as u64 {
            sync.observe(i, i + 5 * MS, None);
        }
        assert_eq!(sync.local_min(), Some(5 * MS as i64), "the fast frame left");
        assert_eq!(sync.round_trip(), Some(6 * MS));
    }

    #[test]
    fn translation_saturates() {
        let mut sync = ClockSync::default();
        sync.observe(10 * MS, 0, Some(0)); // peer far ahead: offset negative
        assert_eq!(sync.to_local(MS), 0);
        assert_eq!(sync.to_local(Nanos::MAX), Nanos::MAX);
        assert_eq!(sync.to_remote(Nanos::MAX - 1), Nanos::MAX);
        assert_eq!(ClockSync::default().to_local(42), 42);
    }
}
