//! The checks of the `protobuf_decode` fuzz target (`fuzz/fuzz_targets/protobuf_decode.rs`
//! includes this file for [`check`]), and a stable test that replays its committed corpus
//! (`fuzz/corpus/protobuf_decode`) through them.
//!
//! The bytes go to every reader of the crate: the watch frame splitter, the watch event, the
//! envelope (read as a `Pod` and as a `serde_json::Value`), the list decoder, and a bare `v1`
//! `Pod` message. None may panic; a reader fed in pieces reads what it reads fed whole; where a
//! message reads both as a `Pod` and as a `Value`, the `Value` read as a `Pod` is that `Pod`; and
//! the generated decoder reads what the serde path reads, the same `Pod` or the same error
//! (without managed fields: the same `Pod` without them, wherever the serde path reads one).

use informer_protobuf::{
    DecodeOptions, Error, FrameDecoder, Generated, ListDecoder, MessageType, envelope, watch_event,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// Runs every check on `data`; panics at the first that fails.
pub(crate) fn check(data: &[u8]) {
    // Where the bytes are cut in two: the first byte, scaled to the length.
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) * data.len() / 256);
    // The size of the pieces a list body is pushed in: 1 to 64, from the last byte.
    let piece = data.last().map_or(1, |b| usize::from(*b % 64) + 1);

    let whole = frames(&[data]);
    assert_eq!(
        frames(&[&data[..split], &data[split..]]),
        whole,
        "frames pushed in two pieces at {split}"
    );
    for frame in whole.0 {
        if let Ok(event) = watch_event(&frame) {
            object(event.object);
        }
    }

    object(data);

    let pieces: Vec<&[u8]> = data.chunks(piece).collect();
    assert_eq!(
        list(&pieces),
        list(&[data]),
        "a list pushed in pieces of {piece}"
    );
    let pod = MessageType::for_kind("v1", "Pod").expect("in the table");
    bare(pod, data);
}

/// The frames of `chunks` pushed one by one, each drained before the next, and the error that
/// ended them, if any.
fn frames(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<Error>) {
    let mut decoder = FrameDecoder::default();
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => out.push(frame.to_vec()),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// An enveloped object, read as a `Pod` and as a `Value`.
fn object(bytes: &[u8]) {
    let Ok(opened) = envelope::open(bytes) else {
        return;
    };
    let pod = opened.decode::<Pod>();
    let generated = Generated::<Pod>::find().expect("Pod has a generated decoder");
    let read = |options| {
        generated
            .decode_envelope(&opened, options)
            .map(|p| (*p).clone())
    };
    same_as_serde(&pod, read(DecodeOptions::new()), read(lean()));
    let value = opened.decode::<Value>();
    if let (Ok(pod), Ok(value)) = (pod, value) {
        let again: Pod = serde_json::from_value(value).expect("a Value read as a Pod reads");
        assert_eq!(again, pod);
    }
}

/// A bare message of `message`, read as a `Pod` and as a `Value`.
fn bare(message: MessageType, bytes: &[u8]) {
    let pod = message.decode::<Pod>(bytes);
    let read = |options| message.decode_generated::<Pod>(bytes, options);
    same_as_serde(&pod, read(DecodeOptions::new()), read(lean()));
    let value = message.decode::<Value>(bytes);
    if let (Ok(pod), Ok(value)) = (pod, value) {
        let again: Pod = serde_json::from_value(value).expect("a Value read as a Pod reads");
        assert_eq!(again, pod);
    }
}

fn lean() -> DecodeOptions {
    DecodeOptions::new().without_managed_fields()
}

/// The generated decoder's reads, `whole` and `lean` (without managed fields), against the serde
/// path's `pod`: the same `Pod` or the same error whole; the same `Pod` without its managed
/// fields where the serde path reads one.
fn same_as_serde(pod: &Result<Pod, Error>, whole: Result<Pod, Error>, lean: Result<Pod, Error>) {
    assert_eq!(&whole, pod, "the generated decoder against the serde path");
    if let Ok(pod) = pod {
        let mut stripped = pod.clone();
        stripped.metadata.managed_fields = None;
        assert_eq!(lean, Ok(stripped), "without managed fields");
    }
}

/// What a list decoder reads from `chunks` pushed one by one: each item's bytes, and how it
/// ended (its metadata as a `Value`, or the first error).
fn list(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Result<Value, Error>) {
    let mut decoder = ListDecoder::default();
    let mut items = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        loop {
            match decoder.next_item() {
                Ok(Some((bytes, message))) => {
                    bare(message, bytes);
                    items.push(bytes.to_vec());
                }
                Ok(None) => break,
                Err(e) => return (items, Err(e)),
            }
        }
    }
    (items, decoder.finish::<Value>())
}

#[cfg(test)]
mod replay {
    /// Every file of `fuzz/corpus/protobuf_decode` goes through [`super::check`].
    #[test]
    fn every_corpus_input_passes_the_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/protobuf_decode");
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a readable corpus entry").path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            eprintln!("replaying {}", path.display());
            super::check(&bytes);
            replayed += 1;
        }
        assert!(replayed >= 5, "the corpus is missing ({replayed} files)");
    }
}
