//! A request body read within a memory budget and a deadline, so that no peer — slow, stalled
//! or huge — can hold more than its share of the process's memory or a slot for long.
//!
//! - **Declared size first**: a `Content-Length` over the bound is refused before a byte of
//!   the body is read; a body without one may grow to the bound and no further.
//! - **A memory budget** ([`Budget::new`]'s `memory`), charged for the bytes received, never
//!   for the bytes announced: a body takes its share as its bytes arrive and keeps it until
//!   the request is answered, so a stranger who declares a megabyte and sends a byte holds a
//!   kibibyte, and a thousand of them cannot delay a vendor's event. Bodies over [`LARGE`] may
//!   hold at most half of the budget between them (a body that may grow past it, from its
//!   first byte), so a flood of big bodies (no vendor sends
//!   one: SendGrid's batches, the largest, reach 768 kB) never starves the small ones every
//!   vendor's events come in. Bodies that together outgrow the budget wait for it in the
//!   order they asked (the semaphore is fair); whatever still waits at its deadline is 503.
//! - **One deadline** for waiting for the budget and reading the body: a request still waiting
//!   for the budget at its deadline is answered 503 (the vendor retries), one whose body has
//!   not arrived by then 408, and its connection closes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header::CONTENT_LENGTH, HeaderMap, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Bodies over this size share at most half of the memory budget.
pub const LARGE: usize = 1024 * 1024;

/// The budget is counted in KiB (a semaphore's permits are counted in `u32`).
const UNIT: usize = 1024;

/// The memory budget and the deadline of every body one server reads.
#[derive(Debug, Clone)]
pub struct Budget {
    all: Arc<Semaphore>,
    large: Arc<Semaphore>,
    max_body: usize,
    deadline: Duration,
}

/// A body read whole, and the share of the budget it holds until dropped.
#[derive(Debug)]
pub struct Held {
    pub bytes: Bytes,
    _share: Share,
}

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRead {
    /// Declared or grown over the bound: 413.
    TooLarge,
    /// The budget stayed spent until the deadline: 503, the peer retries.
    Busy,
    /// Not all there by the deadline: 408.
    TooSlow,
    /// The peer broke off or framed it wrongly: 400.
    Broken,
}

impl NotRead {
    pub fn status(self) -> StatusCode {
        match self {
            NotRead::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            NotRead::Busy => StatusCode::SERVICE_UNAVAILABLE,
            NotRead::TooSlow => StatusCode::REQUEST_TIMEOUT,
            NotRead::Broken => StatusCode::BAD_REQUEST,
        }
    }

    /// The metric label and the log's word for it.
    pub fn label(self) -> &'static str {
        match self {
            NotRead::TooLarge => "too_large",
            NotRead::Busy => "busy",
            NotRead::TooSlow => "too_slow",
            NotRead::Broken => "broken",
        }
    }
}

impl Budget {
    /// Bodies of at most `max_body` bytes, `memory` bytes of them at once, each waited for and
    /// read within `deadline`. `memory` must hold two bodies of `max_body` (the configuration
    /// checks it), so that a large body can always be read once the others are answered.
    pub fn new(max_body: usize, memory: usize, deadline: Duration) -> Self {
        let units = memory.div_ceil(UNIT).max(1);
        Self {
            all: Arc::new(Semaphore::new(units)),
            large: Arc::new(Semaphore::new((units / 2).max(1))),
            max_body,
            deadline,
        }
    }

    /// Whether the head alone says the body is over the bound.
    pub fn declared_too_large(&self, headers: &HeaderMap) -> bool {
        declared(headers).is_some_and(|n| n > self.max_body)
    }

    /// The deadline a body is read within.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Reads `body` whole within the budget and the deadline (see the module docs): frame by
    /// frame, each charged to the budget before it is kept.
    pub async fn read(&self, headers: &HeaderMap, body: Body) -> Result<Held, NotRead> {
        use http_body_util::BodyExt as _;
        let limit = match declared(headers) {
            Some(n) if n > self.max_body => return Err(NotRead::TooLarge),
            Some(n) => n,
            None => self.max_body,
        };
        let deadline = Instant::now() + self.deadline;
        let mut share = Share::default();
        // The frames as they came (no copy, no doubling while the body grows), joined once.
        let (mut frames, mut len) = (Vec::<Bytes>::new(), 0usize);
        let mut body = body;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(NotRead::TooSlow),
                Ok(None) => break,
                Ok(Some(Err(_))) => return Err(NotRead::Broken),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers: nothing of the body
            };
            len += data.len();
            if len > limit {
                return Err(NotRead::TooLarge);
            }
            tokio::time::timeout_at(deadline, share.grow(self, len, limit > LARGE))
                .await
                .map_err(|_| NotRead::Busy)?;
            frames.push(data);
        }
        let bytes = match frames.len() {
            1 => frames.pop().expect("one frame"),
            _ => Bytes::from(frames.concat()),
        };
        Ok(Held {
            bytes,
            _share: share,
        })
    }
}

/// The part of the budget one body holds: enough for the bytes it has received.
#[derive(Debug, Default)]
struct Share {
    all: Vec<OwnedSemaphorePermit>,
    large: Vec<OwnedSemaphorePermit>,
    units: u32,
    large_units: u32,
}

impl Share {
    /// Grows to hold `len` bytes, and as much of the large bodies' half for a `large` one —
    /// a body that may grow past [`LARGE`] (declared so, or declaring nothing), from its first
    /// byte, so that the big bodies' first megabytes never take the small ones' half.
    async fn grow(&mut self, budget: &Budget, len: usize, large: bool) {
        let units = u32::try_from(len.div_ceil(UNIT).max(1)).unwrap_or(u32::MAX);
        if large && units > self.large_units {
            self.large
                .push(acquire(&budget.large, units - self.large_units).await);
            self.large_units = units;
        }
        if units > self.units {
            self.all
                .push(acquire(&budget.all, units - self.units).await);
            self.units = units;
        }
    }
}

async fn acquire(s: &Arc<Semaphore>, units: u32) -> OwnedSemaphorePermit {
    s.clone()
        .acquire_many_owned(units)
        .await
        .expect("the budget's semaphores are never closed")
}

/// The `Content-Length` the peer declared, if it declared one that is a number.
fn declared(headers: &HeaderMap) -> Option<usize> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(len: Option<usize>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(n) = len {
            h.insert(CONTENT_LENGTH, n.into());
        }
        h
    }

    #[tokio::test]
    async fn a_body_declared_over_the_bound_is_refused_unread() {
        let b = Budget::new(100, 1000, Duration::from_secs(1));
        assert!(b.declared_too_large(&head(Some(101))));
        assert!(!b.declared_too_large(&head(Some(100))));
        let got = b.read(&head(Some(101)), Body::from("x")).await;
        assert_eq!(got.unwrap_err(), NotRead::TooLarge);
    }

    #[tokio::test]
    async fn a_body_without_a_length_stops_at_the_bound() {
        let b = Budget::new(10, 1000, Duration::from_secs(1));
        let got = b.read(&head(None), Body::from(vec![b'x'; 11])).await;
        assert_eq!(got.unwrap_err(), NotRead::TooLarge);
        let got = b.read(&head(None), Body::from(vec![b'x'; 10])).await;
        assert_eq!(got.unwrap().bytes.len(), 10);
    }

    /// Large bodies hold at most half the budget: with it spent on them, a small body is still
    /// read at once, and another large one waits until its deadline (503).
    #[tokio::test(start_paused = true)]
    async fn large_bodies_never_take_the_small_ones_share() {
        let mb = 1024 * 1024;
        let b = Budget::new(4 * mb, 16 * mb, Duration::from_secs(10));
        let (big, small) = (head(Some(4 * mb)), head(Some(2048)));
        let first = b.read(&big, Body::from(vec![0u8; 4 * mb])).await.unwrap();
        let second = b.read(&big, Body::from(vec![0u8; 4 * mb])).await.unwrap();
        let third = b.read(&big, Body::from(vec![0u8; 4 * mb])).await;
        assert_eq!(third.unwrap_err(), NotRead::Busy);
        let read = b.read(&small, Body::from(vec![0u8; 2048])).await;
        assert_eq!(read.unwrap().bytes.len(), 2048);
        drop((first, second));
        let again = b.read(&big, Body::from(vec![0u8; 4 * mb])).await;
        assert!(
            again.is_ok(),
            "a share is given back when its request is answered"
        );
    }

    /// The budget is charged for bytes received: bodies that announce the bound and send a
    /// byte hold a unit each, so a body that sends its bytes is read at once beside them.
    #[tokio::test(start_paused = true)]
    async fn announced_bytes_cost_nothing_until_they_arrive() {
        let kib = 1024;
        let b = Budget::new(64 * kib, 128 * kib, Duration::from_secs(10));
        let mut stalled = Vec::new();
        for _ in 0..100 {
            use futures::StreamExt as _;
            let one_byte =
                futures::stream::once(async { Ok::<_, std::io::Error>(Bytes::from_static(b"x")) })
                    .chain(futures::stream::pending());
            let body = Body::from_stream(one_byte);
            let b = b.clone();
            stalled.push(tokio::spawn(async move {
                b.read(&head(Some(64 * kib)), body).await
            }));
        }
        for _ in 0..10 {
            tokio::task::yield_now().await; // every stalled body has its byte charged
        }
        let real = tokio::time::timeout(
            Duration::from_millis(1),
            b.read(&head(Some(20 * kib)), Body::from(vec![0u8; 20 * kib])),
        )
        .await
        .expect("a real body waited behind announced ones");
        assert_eq!(real.unwrap().bytes.len(), 20 * kib);
        for s in stalled {
            s.abort();
        }
    }

    /// A body that never arrives whole is cut at the deadline (and the test ends, red, rather
    /// than hang when it is not).
    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_cut_at_its_deadline() {
        let b = Budget::new(100, 1000, Duration::from_secs(10));
        let stalled =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let got = tokio::time::timeout(Duration::from_secs(60), b.read(&head(Some(50)), stalled))
            .await
            .expect("a stalled body was waited for past its deadline");
        assert_eq!(got.unwrap_err(), NotRead::TooSlow);
    }
}
