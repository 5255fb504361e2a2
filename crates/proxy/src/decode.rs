//! Undoing a content coding the proxy asked for on a client's behalf
//! (`mannerly_policy::encoding`): the origin's gzip or br body is decoded
//! as it streams, so the client gets the bytes of an uncompressed answer,
//! and the bytes the coding saved on the wire are counted.

use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use mannerly_policy::encoding::Coding;

use crate::body::{boxed, BoxError, ProxyBody};

/// A decoder writing into a buffer that is emptied after every input.
enum Decoder {
    Gzip(Box<flate2::write::MultiGzDecoder<Vec<u8>>>),
    Br(Box<brotli_decompressor::DecompressorWriter<Vec<u8>>>),
}

impl Decoder {
    fn new(coding: Coding) -> Decoder {
        match coding {
            Coding::Gzip => Decoder::Gzip(Box::new(flate2::write::MultiGzDecoder::new(Vec::new()))),
            Coding::Br => Decoder::Br(Box::new(brotli_decompressor::DecompressorWriter::new(
                Vec::new(),
                16 * 1024,
            ))),
        }
    }

    /// Decodes `input`; what came out of it so far.
    fn feed(&mut self, input: &[u8]) -> std::io::Result<Vec<u8>> {
        match self {
            Decoder::Gzip(d) => {
                d.write_all(input)?;
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Br(d) => {
                d.write_all(input)?;
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }

    /// The end of the input: the rest, or an error for a truncated body.
    fn finish(&mut self) -> std::io::Result<Vec<u8>> {
        match self {
            Decoder::Gzip(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Br(d) => {
                d.close()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }
}

/// Decodes a whole stored body at once.
pub(crate) fn decode_all(coding: Coding, body: &[u8]) -> std::io::Result<Bytes> {
    let mut d = Decoder::new(coding);
    let mut out = d.feed(body)?;
    out.extend(d.finish()?);
    Ok(Bytes::from(out))
}

/// A body decoded as it streams; `saved` gains decoded minus wire bytes
/// at its end.
struct Decoded {
    inner: ProxyBody,
    decoder: Decoder,
    wire: u64,
    plain: u64,
    saved: Arc<AtomicU64>,
    done: bool,
}

/// `body` decoded from `coding`, counting into `saved`.
pub(crate) fn decoded(body: ProxyBody, coding: Coding, saved: Arc<AtomicU64>) -> ProxyBody {
    boxed(Decoded {
        inner: body,
        decoder: Decoder::new(coding),
        wire: 0,
        plain: 0,
        saved,
        done: false,
    })
}

fn corrupt(e: std::io::Error) -> BoxError {
    format!("the origin's compressed body does not decode: {e}").into()
}

impl Body for Decoded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers of the coded body say nothing of the decoded one
                    };
                    this.wire += data.len() as u64;
                    let out = this.decoder.feed(&data).map_err(corrupt)?;
                    if out.is_empty() {
                        continue;
                    }
                    this.plain += out.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    let out = this.decoder.finish().map_err(corrupt)?;
                    this.plain += out.len() as u64;
                    let saved = this.plain.saturating_sub(this.wire);
                    this.saved.fetch_add(saved, Ordering::Relaxed);
                    if out.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn gzip_in_pieces_decodes_to_the_original_and_counts_the_saving() {
        let text = "a page, a page, a page. ".repeat(200);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        let gz = e.finish().unwrap();
        // In pieces, as a body arrives.
        let mut d = Decoder::new(Coding::Gzip);
        let mut pieces: Vec<u8> = gz.chunks(7).flat_map(|c| d.feed(c).unwrap()).collect();
        pieces.extend(d.finish().unwrap());
        assert_eq!(pieces, text.as_bytes());
        let saved = Arc::new(AtomicU64::new(0));
        let out = decoded(crate::body::full(gz.clone()), Coding::Gzip, saved.clone())
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(out, text.as_bytes());
        assert_eq!(
            saved.load(Ordering::Relaxed),
            (text.len() - gz.len()) as u64
        );
        assert_eq!(decode_all(Coding::Gzip, &gz).unwrap(), text.as_bytes());
        assert!(
            decode_all(Coding::Gzip, &gz[..gz.len() / 2]).is_err(),
            "truncated"
        );
        assert!(decode_all(Coding::Br, b"not brotli").is_err());
    }
}
