//! The rows a pass holds: claimed and not yet written (or given up as taken over), by claim.
//! What the heartbeat extends, and what the claimer counts against its room.
//!
//! Invariant: a row is counted from [`Held::hold`] (its claim) until [`Held::forget`] (its
//! result written, or given up) — the only place the count goes down — so unsent, in-flight
//! and answered-but-unwritten rows all count, and the count bounds what a crash can leave
//! `sending`.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;
use uuid::Uuid;

#[derive(Default)]
pub(super) struct Held {
    /// Member ids by the claim they are held under.
    rows: Mutex<HashMap<Uuid, HashSet<i64>>>,
    /// How many rows `rows` has.
    count: AtomicUsize,
    /// Signalled when rows are forgotten: a waiting claimer looks again.
    room: Notify,
    /// A claimer waits for room: the flusher writes early once that would make enough
    /// ([`Held::makes_room`]; otherwise answered rows waiting for `FLUSH_INTERVAL_MS` would
    /// stall the next claim).
    wanted: AtomicBool,
}

impl Held {
    /// Rows newly claimed under `claim_id`.
    pub(super) fn hold(&self, claim_id: Uuid, members: impl IntoIterator<Item = i64>) {
        let members: HashSet<i64> = members.into_iter().collect();
        let n = members.len();
        self.rows.lock().expect("lock").insert(claim_id, members);
        self.count.fetch_add(n, Ordering::SeqCst);
    }

    /// Rows written (or given up): no longer extended, no longer counted against the room.
    pub(super) fn forget(&self, claim_id: Uuid, members: &[i64]) {
        let mut gone = 0;
        {
            let mut rows = self.rows.lock().expect("lock");
            if let Some(set) = rows.get_mut(&claim_id) {
                for m in members {
                    gone += set.remove(m) as usize;
                }
                if set.is_empty() {
                    rows.remove(&claim_id);
                }
            }
        }
        // (Nothing forgotten: subtracting 0 and one spurious look by the claimer are harmless.)
        self.count.fetch_sub(gone, Ordering::SeqCst);
        self.room.notify_one();
    }

    /// How many rows are held.
    pub(super) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Every row held, with the claim it is held by (what the heartbeat extends).
    pub(super) fn rows(&self) -> Vec<(i64, Uuid)> {
        self.rows
            .lock()
            .expect("lock")
            .iter()
            .flat_map(|(c, set)| set.iter().map(move |m| (*m, *c)))
            .collect()
    }

    /// Waits until fewer than `low_water()` rows are held. Written rows make room, and so may
    /// what `wider()` waits for (a larger share raising the mark: it is asked before each look,
    /// so a change between the look and the wait is not missed). Meanwhile the flusher is told
    /// to write early.
    pub(super) async fn wait_for_room<W: Future<Output = ()>>(
        &self,
        low_water: impl Fn() -> usize,
        mut wider: impl FnMut() -> W,
    ) {
        loop {
            let wider = wider();
            if self.count() < low_water() {
                break;
            }
            self.wanted.store(true, Ordering::SeqCst);
            tokio::select! {
                _ = self.room.notified() => {}
                _ = wider => {}
            }
        }
        self.wanted.store(false, Ordering::SeqCst);
    }

    /// Whether writing `unwritten` answered rows now would let a waiting claimer claim below
    /// `low_water`. (With none unwritten this holds only if the claimer already has room;
    /// writing nothing is a no-op.)
    pub(super) fn makes_room(&self, unwritten: usize, low_water: usize) -> bool {
        self.wanted.load(Ordering::SeqCst) && self.count().saturating_sub(unwritten) < low_water
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_count_from_their_claim_until_they_are_forgotten_once() {
        let held = Held::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        held.hold(a, [1, 2, 3]);
        held.hold(b, [4]);
        assert_eq!(held.count(), 4);
        held.forget(a, &[1, 2, 9]);
        held.forget(a, &[1]);
        assert_eq!(held.count(), 2, "only rows held are forgotten, each once");
        let mut rows = held.rows();
        rows.sort();
        assert_eq!(rows, vec![(3, a), (4, b)]);
        held.forget(a, &[3]);
        held.forget(b, &[4]);
        assert_eq!((held.count(), held.rows()), (0, vec![]));
    }

    #[tokio::test]
    async fn a_claimer_waits_for_room_and_the_flusher_writes_early_for_it() {
        let held = std::sync::Arc::new(Held::default());
        let claim = Uuid::new_v4();
        held.hold(claim, 0..10);
        assert!(!held.makes_room(10, 5), "nobody waits: no early write");
        let waiter = {
            let held = held.clone();
            tokio::spawn(async move {
                held.wait_for_room(|| 5, std::future::pending::<()>).await;
            })
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while !held.makes_room(6, 5) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the waiting claimer asks for an early write");
        assert!(!held.makes_room(5, 5), "5 held are not below 5");
        held.forget(claim, &[0, 1, 2, 3, 4]);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "5 held: still no room below 5");
        held.forget(claim, &[5]);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("room made wakes the claimer")
            .unwrap();
        assert!(!held.makes_room(0, 5), "nobody waits any more");
    }
}
