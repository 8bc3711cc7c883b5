//! A bandwidth limit on the server's responses, as one network link between the server and
//! its clients: a benchmarking aid ([`Config::bandwidth`](crate::Config::bandwidth),
//! [`Faults::set_bandwidth`](crate::Faults::set_bandwidth)), not something kube-apiserver does.
//!
//! Every response body (lists, objects, watch streams) goes out in chunks of at most
//! [`CHUNK_BYTES`], each let through once the link has had the time to carry it: the link is a
//! token bucket of `rate` bytes per second that holds at most [`BURST`] of credit, so a long
//! response takes its size over the rate, and a link idle for a while sends its first
//! [`BURST`] worth at once. All responses share the one link, on the server's clock (tokio
//! time). The bytes limited are those on the wire: after compression.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use http_body::Frame;
use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};

/// The largest piece of a body let through at once.
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

/// The most credit an idle link keeps: what it may send at once after a pause.
pub(crate) const BURST: Duration = Duration::from_millis(5);

/// The link every response of a server goes out on.
#[derive(Debug)]
pub(crate) struct Link {
    /// Bytes per second; 0 is no limit.
    rate: AtomicU64,
    /// When the link has carried everything let through so far.
    busy_until: Mutex<Instant>,
}

impl Link {
    /// A link of `rate` bytes per second (`None`: no limit).
    pub(crate) fn new(rate: Option<u64>) -> Self {
        Link {
            rate: AtomicU64::new(rate.unwrap_or(0)),
            busy_until: Mutex::new(Instant::now()),
        }
    }

    /// Sets the rate (`None`: no limit), for the bytes let through from now on.
    pub(crate) fn set_rate(&self, rate: Option<u64>) {
        self.rate.store(rate.unwrap_or(0), Ordering::Relaxed);
    }

    /// The rate, if there is a limit.
    pub(crate) fn rate(&self) -> Option<u64> {
        Some(self.rate.load(Ordering::Relaxed)).filter(|&rate| rate > 0)
    }

    /// Books `len` bytes on the link: when they have been carried, or `None` without a limit.
    fn book(&self, len: usize) -> Option<Instant> {
        let rate = self.rate()?;
        let mut busy_until = self.busy_until.lock();
        let earliest = Instant::now()
            .checked_sub(BURST)
            .unwrap_or_else(Instant::now);
        let start = (*busy_until).max(earliest);
        *busy_until = start + Duration::from_secs_f64(len as f64 / rate as f64);
        Some(*busy_until)
    }
}

/// The response with its body sent over `link`.
pub(crate) async fn limit(State(link): State<Arc<Link>>, response: Response) -> Response {
    response.map(|body| Body::new(Limited::new(body, link)))
}

/// A body let through at its link's pace.
pub(crate) struct Limited {
    inner: Body,
    link: Arc<Link>,
    /// Data read from the inner body, not yet booked.
    pending: Bytes,
    /// A chunk booked, held until the link has carried it.
    held: Option<(Bytes, Pin<Box<Sleep>>)>,
}

impl Limited {
    pub(crate) fn new(inner: Body, link: Arc<Link>) -> Self {
        Limited {
            inner,
            link,
            pending: Bytes::new(),
            held: None,
        }
    }
}

impl http_body::Body for Limited {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        loop {
            if let Some((_, sleep)) = &mut this.held {
                ready!(sleep.as_mut().poll(cx));
                if let Some((chunk, _)) = this.held.take() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
            }
            if !this.pending.is_empty() {
                let len = this.pending.len().min(CHUNK_BYTES);
                match this.link.book(len) {
                    Some(done) => {
                        let chunk = this.pending.split_to(len);
                        this.held = Some((chunk, Box::pin(tokio::time::sleep_until(done))));
                        continue;
                    }
                    None => {
                        let data = std::mem::take(&mut this.pending);
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.pending = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                end => return Poll::Ready(end),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let mut hint = self.inner.size_hint();
        let buffered = (self.pending.len() + self.held.as_ref().map_or(0, |(c, _)| c.len())) as u64;
        hint.set_lower(hint.lower() + buffered);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// Reads `body` frame by frame: the sizes of its data frames, and how long it took on the
    /// server's clock.
    async fn read(mut body: Limited) -> (Vec<usize>, Duration) {
        let started = Instant::now();
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.expect("a frame").into_data() {
                sizes.push(data.len());
            }
        }
        (sizes, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_limited_body_takes_its_size_over_the_rate_less_the_burst() {
        let link = Arc::new(Link::new(Some(1_000_000)));
        tokio::time::advance(Duration::from_secs(1)).await;
        let body = Limited::new(Body::from(vec![7u8; 2_000_000]), link);
        let (sizes, took) = read(body).await;
        assert_eq!(sizes.iter().sum::<usize>(), 2_000_000);
        assert!(sizes.iter().all(|&len| len <= CHUNK_BYTES), "{sizes:?}");
        // 2 MB at 1 MB/s is 2 s, of which an idle link sends its 5 ms of credit at once.
        let expected = Duration::from_secs(2) - BURST;
        assert!(took >= expected, "{took:?}");
        assert!(took <= expected + Duration::from_millis(2), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn bodies_at_once_share_the_link() {
        let link = Arc::new(Link::new(Some(1_000_000)));
        let started = Instant::now();
        let one = read(Limited::new(Body::from(vec![1u8; 500_000]), link.clone()));
        let other = read(Limited::new(Body::from(vec![2u8; 500_000]), link));
        let ((_, one), (_, other)) = tokio::join!(one, other);
        // 1 MB in all at 1 MB/s: the later of the two ends after about 1 s.
        let last = one.max(other);
        assert!(last >= Duration::from_secs(1) - BURST, "{last:?}");
        assert!(
            last <= Duration::from_secs(1) + Duration::from_millis(2),
            "{last:?}"
        );
        assert!(started.elapsed() >= last);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_limit_a_body_passes_as_it_is() {
        let link = Arc::new(Link::new(None));
        let (sizes, took) = read(Limited::new(Body::from(vec![0u8; 300_000]), link.clone())).await;
        assert_eq!(sizes, vec![300_000]);
        assert_eq!(took, Duration::ZERO);
        link.set_rate(Some(100_000));
        assert_eq!(link.rate(), Some(100_000));
        let (_, took) = read(Limited::new(Body::from(vec![0u8; 100_000]), link)).await;
        assert!(took >= Duration::from_millis(990), "{took:?}");
    }
}
