//! A response body of whole chunks, each sent as it is: an infer response's JSON header and each
//! binary output's bytes go out without being copied into one buffer first (hyper writes the
//! chunks with vectored writes). Its exact length is known, so the response has a Content-Length.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// A body of chunks sent in order.
#[derive(Debug, Default)]
pub struct Chunks {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl Chunks {
    /// A body of `chunks`, in order (empty chunks are left out).
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Chunks {
        let chunks: VecDeque<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        let remaining = chunks.iter().map(|c| c.len() as u64).sum();
        Chunks { chunks, remaining }
    }
}

impl From<Vec<u8>> for Chunks {
    fn from(body: Vec<u8>) -> Chunks {
        Chunks::new([Bytes::from(body)])
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(this.chunks.pop_front().map(|chunk| {
            this.remaining -= chunk.len() as u64;
            Ok(Frame::data(chunk))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn chunks_come_out_in_order_with_their_exact_length() {
        let body = Chunks::new([Bytes::from_static(b"{}"), Bytes::new(), Bytes::from(vec![1, 2, 3])]);
        assert_eq!(body.size_hint().exact(), Some(5));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let bytes = runtime.block_on(body.collect()).unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{}\x01\x02\x03");
    }
}
