//! The framing of a watch body: its chunks split into lines, without copying a line that
//! arrives whole in one chunk.

use bytes::{Bytes, BytesMut};
use memchr::memchr;

/// Splits a stream of chunks into lines (without their `\n`).
#[derive(Debug, Default)]
pub(super) struct Lines {
    /// The start of a line that has not ended yet.
    partial: BytesMut,
}

impl Lines {
    /// The lines that end in `chunk`, in order.
    pub(super) fn push(&mut self, mut chunk: Bytes, out: &mut impl Extend<Bytes>) {
        while let Some(at) = memchr(b'\n', &chunk) {
            let mut line = chunk.split_to(at + 1);
            line.truncate(at);
            if self.partial.is_empty() {
                out.extend([line]);
            } else {
                self.partial.extend_from_slice(&line);
                out.extend([self.partial.split().freeze()]);
            }
        }
        if !chunk.is_empty() {
            self.partial.extend_from_slice(&chunk);
        }
    }

    /// The last line, if the body did not end with `\n`.
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        (!self.partial.is_empty()).then(|| self.partial.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_and_whole_ones_come_out_in_order() {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        lines.push(Bytes::from_static(b"a\nb"), &mut out);
        lines.push(Bytes::from_static(b"c\n\nd"), &mut out);
        lines.push(Bytes::from_static(b"e"), &mut out);
        assert_eq!(out, [&b"a"[..], b"bc", b""]);
        assert_eq!(lines.finish().as_deref(), Some(&b"de"[..]));
        assert_eq!(lines.finish(), None);
    }
}
