//! Request bodies that are never whole in memory: a part of up to 5 GiB is produced in chunks of
//! at most [`BODY_CHUNK`] bytes as the request sends them, and produced again from the start when
//! the request is retried.
//!
//! The write engine's parts are assembled from the spill file, the base object and zeros; holding
//! a part in one buffer would make memory proportional to the part size (a 48 TiB file has
//! 5 GiB parts). A [`BodySource`] says how long the body is and reads any range of it; a store
//! that can stream (S3) sends it chunk by chunk, and the local stores, which keep the bytes
//! anyway, gather it with [`gather`].

use std::fmt::Debug;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use super::{Result, StoreError};

/// The most bytes one chunk of a streamed body holds.
pub const BODY_CHUNK: u64 = 1 << 20;

/// A body of known length whose bytes are read on demand, any number of times.
#[async_trait]
pub trait BodySource: Send + Sync + Debug {
    fn len(&self) -> u64;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `range` of the body (inside `0..len()`, at most [`BODY_CHUNK`] long), exactly.
    async fn read(&self, range: Range<u64>) -> Result<Bytes>;
}

/// A body already in memory.
#[derive(Debug)]
pub struct InMemory(pub Bytes);

#[async_trait]
impl BodySource for InMemory {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        Ok(self.0.slice(range.start as usize..range.end as usize))
    }
}

/// The whole body in one buffer: for stores that keep the bytes in memory or on local disk.
pub async fn gather(source: &dyn BodySource) -> Result<Bytes> {
    let len = source.len();
    let mut out = BytesMut::with_capacity(usize::try_from(len).unwrap_or(usize::MAX));
    let mut offset = 0;
    while offset < len {
        let end = (offset + BODY_CHUNK).min(len);
        out.extend_from_slice(&source.read(offset..end).await?);
        offset = end;
    }
    Ok(out.freeze())
}

/// Where a streamed body's producer leaves the error that cut it short: the request then fails
/// with this (a local read error, say) rather than with the transport's view of a broken body.
pub type ProducerError = Arc<Mutex<Option<StoreError>>>;

/// An HTTP body that sends `source` chunk by chunk. A task reads ahead by one chunk, so at most
/// two chunks of the body are in memory at once; it stops when the request drops the body.
pub fn streamed(source: Arc<dyn BodySource>) -> (ChunkedBody, ProducerError) {
    let len = source.len();
    let failure: ProducerError = Arc::default();
    let (tx, rx) = mpsc::channel(1);
    let failed = Arc::clone(&failure);
    tokio::spawn(async move {
        let mut offset = 0;
        while offset < len {
            let end = (offset + BODY_CHUNK).min(len);
            match source.read(offset..end).await {
                Ok(chunk) if chunk.len() as u64 == end - offset => {
                    if tx.send(Ok(chunk)).await.is_err() {
                        return; // the request is gone (sent, failed or cancelled)
                    }
                }
                Ok(chunk) => {
                    let short = StoreError::Truncated {
                        op: "read part body",
                        key: String::new(),
                        got: offset + chunk.len() as u64,
                        expected: len,
                    };
                    let _ = tx.send(Err(short.to_string())).await;
                    return;
                }
                Err(e) => {
                    let message = e.to_string();
                    *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    let _ = tx.send(Err(message)).await;
                    return;
                }
            }
            offset = end;
        }
    });
    (ChunkedBody { rx, remaining: len }, failure)
}

/// The receiving end of [`streamed`], as an `http_body::Body` with an exact length.
#[derive(Debug)]
pub struct ChunkedBody {
    rx: mpsc::Receiver<std::result::Result<Bytes, String>>,
    remaining: u64,
}

impl Body for ChunkedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.remaining = self.remaining.saturating_sub(chunk.len() as u64);
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Poll::Ready(Some(Err(message))) => Poll::Ready(Some(Err(message.into()))),
            Poll::Ready(None) => Poll::Ready(Some(Err("the part body ended early".into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Counting {
        len: u64,
        largest_read: Mutex<u64>,
    }

    #[async_trait]
    impl BodySource for Counting {
        fn len(&self) -> u64 {
            self.len
        }

        async fn read(&self, range: Range<u64>) -> Result<Bytes> {
            let n = range.end - range.start;
            let mut largest = self.largest_read.lock().unwrap();
            *largest = (*largest).max(n);
            Ok(Bytes::from(
                range.map(|o| (o % 251) as u8).collect::<Vec<u8>>(),
            ))
        }
    }

    #[tokio::test]
    async fn a_streamed_body_sends_every_byte_in_bounded_chunks() {
        let len = 5 * BODY_CHUNK + 17;
        let source = Arc::new(Counting {
            len,
            largest_read: Mutex::new(0),
        });
        let (body, failure) = streamed(source.clone());
        assert_eq!(body.size_hint().exact(), Some(len));
        let collected = http_body_util::BodyExt::collect(body)
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(collected.len() as u64, len);
        assert!(
            collected
                .iter()
                .enumerate()
                .all(|(o, b)| *b == (o % 251) as u8)
        );
        assert_eq!(*source.largest_read.lock().unwrap(), BODY_CHUNK);
        assert!(failure.lock().unwrap().is_none());
        assert_eq!(gather(source.as_ref()).await.expect("gather"), collected);
    }

    #[derive(Debug)]
    struct Failing;

    #[async_trait]
    impl BodySource for Failing {
        fn len(&self) -> u64 {
            3 * BODY_CHUNK
        }

        async fn read(&self, range: Range<u64>) -> Result<Bytes> {
            if range.start >= BODY_CHUNK {
                return Err(StoreError::Io {
                    op: "spill read",
                    key: "k".into(),
                    source: std::io::Error::other("disk gone"),
                });
            }
            Ok(Bytes::from(vec![0; (range.end - range.start) as usize]))
        }
    }

    #[tokio::test]
    async fn a_failing_producer_breaks_the_body_and_keeps_its_error() {
        let (body, failure) = streamed(Arc::new(Failing));
        assert!(http_body_util::BodyExt::collect(body).await.is_err());
        let kept = failure
            .lock()
            .unwrap()
            .take()
            .expect("the producer's error");
        assert!(kept.to_string().contains("disk gone"), "{kept}");
    }
}
