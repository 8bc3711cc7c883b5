//! The list decoder: a list response's body decoded item by item as its bytes arrive, never
//! held whole.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use futures::StreamExt;
use informer_reflector::{Error, ListPage, ListSink};
use kube::client::Body;
use memchr::memchr;
use serde::de::DeserializeOwned;

use super::Decoding;
use super::response::chunks;
use super::value::ValueScan;
use crate::skip::WithoutManagedFields;

/// Decodes JSON bytes as `decoding` says: validated as UTF-8 whole first (a fast pass), then
/// decoded as text, which spares serde_json a check of every string as it goes (measured faster
/// than `from_slice`).
fn from_bytes<T: DeserializeOwned>(bytes: &[u8], decoding: Decoding) -> Result<T, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    decoding
        .decode(text, |o: WithoutManagedFields<T>| o.0)
        .map_err(|e| e.to_string())
}

/// The fields of a list's `metadata` a page keeps (k8s-openapi's `ListMeta` has `shardInfo`
/// only from v1.36 on, and the application picks the version).
#[derive(Debug, Default, serde::Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_: Option<String>,
    #[serde(rename = "shardInfo")]
    shard_info: Option<ShardInfo>,
}

/// `metadata.shardInfo`: the shard selector the server applied (KEP-5866).
#[derive(Debug, Default, serde::Deserialize)]
struct ShardInfo {
    selector: Option<String>,
}

/// Where a [`ListScanner`] is in the list object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before the list's `{`.
    Start,
    /// Before a key of the list object, or its `}`.
    Key,
    /// In a key (`start`: after its opening quote).
    InKey { start: usize },
    /// After a key, before its `:`.
    Colon,
    /// Before a value.
    Value,
    /// Skipping or taking a value that began at `start`.
    InValue { start: usize },
    /// Inside `items`, before an item, a `,` or the `]`.
    Item,
    /// In an item that began at `start`.
    InItem { start: usize },
    /// After the list's `}`.
    End,
}

/// Which key's value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Metadata,
    Items,
    Other,
}

/// Decodes a list response (`{"kind":…,"metadata":{…},"items":[…]}`) item by item as its bytes
/// arrive: [`push`](Self::push) each chunk, then [`finish`](Self::finish). Bytes are held only
/// until the value they belong to is complete.
///
/// The scanner finds where each value ends ([`ValueScan`]), and `serde_json` decodes it: the
/// item, the list's `metadata`; other keys are skipped. Anything that is not such an object is a
/// decode error.
pub(super) struct ListScanner<K> {
    buf: BytesMut,
    /// How far `buf` has been scanned.
    pos: usize,
    at: At,
    field: Field,
    /// Where the value being scanned ends.
    value: ValueScan,
    metadata: Option<ListMeta>,
    /// Items decoded so far.
    decoded: usize,
    /// The items' type (each goes to the sink as it is decoded).
    item: std::marker::PhantomData<fn() -> K>,
    decoding: Decoding,
}

fn bad(message: impl Into<String>) -> Error {
    Error::decode(format!("list response: {}", message.into()))
}

impl<K: DeserializeOwned> Default for ListScanner<K> {
    fn default() -> Self {
        Self {
            buf: BytesMut::new(),
            pos: 0,
            at: At::Start,
            field: Field::Other,
            value: ValueScan::default(),
            metadata: None,
            decoded: 0,
            item: std::marker::PhantomData,
            decoding: Decoding::default(),
        }
    }
}

impl<K: DeserializeOwned> ListScanner<K> {
    /// A scanner that decodes items as `decoding` says.
    pub(super) fn new(decoding: Decoding) -> Self {
        Self {
            decoding,
            ..Self::default()
        }
    }

    /// Takes the next chunk of the body, decoding every item it completes into `sink`.
    pub(super) fn push(&mut self, chunk: &[u8], sink: &mut ListSink<'_, K>) -> Result<(), Error>
    where
        K: Send + Sync,
    {
        self.buf.extend_from_slice(chunk);
        self.scan(sink)
    }

    /// The page, once the body has ended, with `items` (what the sink kept).
    pub(super) fn finish(self, items: Vec<Arc<K>>) -> Result<ListPage<K>, Error> {
        if self.at != At::End {
            return Err(bad("ended early"));
        }
        let metadata = self.metadata.unwrap_or_default();
        let resource_version = metadata
            .resource_version
            .filter(|rv| !rv.is_empty())
            .ok_or_else(|| Error::decode("list response without metadata.resourceVersion"))?;
        let mut page = ListPage::new(items, resource_version);
        page.continue_token = metadata.continue_.filter(|c| !c.is_empty());
        page.shard_info = metadata.shard_info.and_then(|i| i.selector);
        Ok(page)
    }

    /// Scans what is buffered, a step at a time (each step reads on from `pos` as far as it
    /// can), decoding every item it completes into `sink`.
    fn scan(&mut self, sink: &mut ListSink<'_, K>) -> Result<(), Error>
    where
        K: Send + Sync,
    {
        while self.pos < self.buf.len() {
            let b = self.buf[self.pos];
            match self.at {
                At::Start | At::Key | At::Colon | At::Value | At::Item | At::End
                    if b.is_ascii_whitespace() =>
                {
                    self.pos += 1;
                }
                At::Start => self.expect(b, b'{', At::Key, "not a JSON object")?,
                At::Key => self.before_key(b)?,
                At::InKey { start } => self.read_key(start),
                At::Colon => self.expect(b, b':', At::Value, "expected ':'")?,
                At::Value => self.begin_field_value(b)?,
                At::InValue { start } => self.finish_field_value(start)?,
                At::Item => self.before_item(b)?,
                At::InItem { start } => self.finish_item(start, sink)?,
                At::End => return Err(bad("bytes after the list object")),
            }
        }
        Ok(())
    }

    /// Where one byte must come (the list's `{`, a key's `:`): `b` is `want`, and the scan moves
    /// on to `next`; anything else is the error `otherwise`.
    fn expect(&mut self, b: u8, want: u8, next: At, otherwise: &str) -> Result<(), Error> {
        if b != want {
            return Err(bad(otherwise));
        }
        self.pos += 1;
        self.at = next;
        Ok(())
    }

    /// Before a key: its opening quote, a `,`, or the list's `}`, `b`.
    fn before_key(&mut self, b: u8) -> Result<(), Error> {
        self.pos += 1;
        match b {
            b'"' => self.at = At::InKey { start: self.pos },
            b',' => {}
            b'}' => self.at = At::End,
            _ => return Err(bad("expected a key")),
        }
        Ok(())
    }

    /// In a key that began at `start`: on to its closing quote, if it is buffered, and the
    /// field it names.
    fn read_key(&mut self, start: usize) {
        // Keys of a list are plain words: an escape in one is not one of ours.
        match memchr(b'"', &self.buf[self.pos..]) {
            Some(n) => {
                let key = &self.buf[start..self.pos + n];
                self.field = match key {
                    b"metadata" => Field::Metadata,
                    b"items" => Field::Items,
                    _ => Field::Other,
                };
                self.pos += n + 1;
                self.at = At::Colon;
            }
            None => self.pos = self.buf.len(),
        }
    }

    /// The first byte of a key's value, `b`: the `[` of `items` opens its items; any other
    /// value is scanned whole.
    fn begin_field_value(&mut self, b: u8) -> Result<(), Error> {
        if self.field == Field::Items {
            match b {
                b'[' => {
                    self.pos += 1;
                    self.at = At::Item;
                }
                // "items": null, as a server may write an empty list.
                b'n' => self.begin_value(b),
                _ => return Err(bad("items is not an array")),
            }
        } else {
            self.begin_value(b);
        }
        Ok(())
    }

    /// Starts scanning a value at `pos`, whose first byte is `b`.
    fn begin_value(&mut self, b: u8) {
        self.value = ValueScan::begin(b);
        self.at = At::InValue { start: self.pos };
    }

    /// In a key's value that began at `start`: once it has ended, the list's metadata decoded
    /// (or a null `items` accepted, or another key's value skipped).
    fn finish_field_value(&mut self, start: usize) -> Result<(), Error> {
        if let Some(end) = self.value.end(&self.buf, &mut self.pos) {
            let bytes = &self.buf[start..end];
            if self.field == Field::Metadata {
                self.metadata = Some(
                    from_bytes(bytes, Decoding::default())
                        .map_err(|e| bad(format!("metadata: {e}")))?,
                );
            } else if self.field == Field::Items && bytes != b"null" {
                return Err(bad("items is not an array"));
            }
            self.consume(end);
            self.at = At::Key;
        }
        Ok(())
    }

    /// Inside `items`: a `,`, the `]`, or an item's `{`, `b`.
    fn before_item(&mut self, b: u8) -> Result<(), Error> {
        match b {
            b',' => self.pos += 1,
            b']' => {
                self.pos += 1;
                self.consume(self.pos);
                self.at = At::Key;
            }
            b'{' => {
                self.at = At::InItem { start: self.pos };
                self.value = ValueScan::begin(b);
            }
            _ => return Err(bad("an item is not an object")),
        }
        Ok(())
    }

    /// In an item that began at `start`: once it has ended, the item decoded into `sink`.
    fn finish_item(&mut self, start: usize, sink: &mut ListSink<'_, K>) -> Result<(), Error>
    where
        K: Send + Sync,
    {
        if let Some(end) = self.value.end(&self.buf, &mut self.pos) {
            let item: K = from_bytes(&self.buf[start..end], self.decoding)
                .map_err(|e| bad(format!("item {}: {e}", self.decoded)))?;
            self.decoded += 1;
            self.consume(end);
            sink.push(Arc::new(item))?;
            self.at = At::Item;
        }
        Ok(())
    }

    /// Drops the bytes before `end` (scanned and decoded).
    fn consume(&mut self, end: usize) {
        self.buf.advance(end);
        self.pos -= end;
    }
}

/// Reads a list response's body into a page, item by item as it arrives.
pub(crate) async fn list_page<K: DeserializeOwned + Send + Sync>(
    body: Body,
    decoding: Decoding,
    sink: &mut ListSink<'_, K>,
) -> Result<ListPage<K>, Error> {
    let mut scanner = ListScanner::<K>::new(decoding);
    let mut body = std::pin::pin!(chunks(body));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Error::Transport(Box::new(e)))?;
        scanner.push(&chunk, sink)?;
        sink.ready().await;
    }
    scanner.finish(sink.take_kept())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::decode::tests::model;

    fn scan(body: &[u8], cuts: &[usize]) -> Result<ListPage<ConfigMap>, Error> {
        let mut scanner = ListScanner::<ConfigMap>::default();
        let mut sink = ListSink::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts.into_iter().chain([body.len()]) {
            scanner.push(&body[at..cut], &mut sink)?;
            at = cut;
        }
        scanner.finish(sink.take_kept())
    }

    fn text() -> impl Strategy<Value = String> {
        // Quotes, backslashes, braces and brackets inside strings, and non-ASCII.
        proptest::string::string_regex(r#"[a-z0-9"\\{}\[\],: é✓\n]{0,12}"#).expect("a regex")
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::collection::vec(
                (text(), proptest::collection::btree_map(text(), text(), 0..3)),
                0..6,
            ),
            1u32..1000,
            proptest::option::of(text()),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(items, rv, cont, metadata_last, pretty)| {
                let items: Vec<_> = items
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, data))| {
                        json!({
                            "metadata": {"name": format!("{name}-{i}"), "resourceVersion": i.to_string()},
                            "data": data,
                        })
                    })
                    .collect();
                let mut metadata = json!({ "resourceVersion": rv.to_string() });
                if let Some(c) = cont {
                    metadata["continue"] = json!(c);
                }
                let extra = json!({"nested": [1, {"a": "]}"}], "n": -1.5e3, "t": true, "z": null});
                let mut out = String::from("{\"kind\":\"ConfigMapList\",\"extra\":");
                out.push_str(&extra.to_string());
                let meta = format!(",\"metadata\":{metadata}");
                if !metadata_last {
                    out.push_str(&meta);
                }
                let items = if pretty {
                    serde_json::to_string_pretty(&items).expect("encodes")
                } else {
                    serde_json::to_string(&items).expect("encodes")
                };
                out.push_str(&format!(",\"items\": {items} "));
                if metadata_last {
                    out.push_str(&meta);
                }
                out.push_str(",\"apiVersion\":\"v1\",\"count\":7}\n");
                out.into_bytes()
            })
    }

    proptest! {
        /// Any list, cut into chunks anywhere, decodes as serde_json decodes it whole.
        #[test]
        fn a_list_cut_anywhere_decodes_as_a_whole(
            body in body(),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let (items, rv, cont) = model(&body).expect("the generated list is valid");
            let page = scan(&body, &cuts).expect("decodes");
            let got: Vec<ConfigMap> = page.items.iter().map(|i| (**i).clone()).collect();
            prop_assert_eq!(got, items);
            prop_assert_eq!(page.resource_version, rv);
            prop_assert_eq!(page.continue_token, cont);
        }

        /// A list cut short is an error, never a page of what came so far.
        #[test]
        fn a_list_cut_short_is_an_error(body in body(), end in any::<usize>()) {
            let trimmed = body.trim_ascii_end();
            let end = end % trimmed.len();
            prop_assert!(scan(&trimmed[..end], &[]).is_err());
        }

        /// Arbitrary bytes never panic, and whatever the scanner accepts, serde_json accepts
        /// too, with the same items.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(page) = scan(&bytes, &[7, 31]) {
                let (items, rv, _) = model(&bytes).expect("serde_json accepts it too");
                let got: Vec<ConfigMap> = page.items.iter().map(|i| (**i).clone()).collect();
                prop_assert_eq!(got, items);
                prop_assert_eq!(page.resource_version, rv);
            }
        }
    }

    #[test]
    fn a_list_tells_the_shard_selector_its_server_applied_and_one_without_tells_none() {
        let sharded = br#"{"metadata":{"resourceVersion":"5","shardInfo":{"selector":"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"}},"items":[]}"#;
        let page = scan(sharded, &[20, 60]).unwrap();
        assert_eq!(
            page.shard_info.as_deref(),
            Some("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')")
        );
        let plain = scan(br#"{"metadata":{"resourceVersion":"5"},"items":[]}"#, &[]).unwrap();
        assert_eq!(plain.shard_info, None);
        let empty = scan(
            br#"{"metadata":{"resourceVersion":"5","shardInfo":{}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(empty.shard_info, None);
    }

    #[test]
    fn null_items_and_an_empty_list_are_empty_pages() {
        for body in [
            &br#"{"metadata":{"resourceVersion":"5"},"items":null}"#[..],
            br#"{"metadata":{"resourceVersion":"5"},"items":[]}"#,
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"}}"#,
        ] {
            let page = scan(body, &[3]).expect("decodes");
            assert!(page.items.is_empty());
            assert_eq!(page.resource_version, "5");
        }
    }

    #[test]
    fn a_list_without_a_resource_version_or_with_a_bad_item_is_an_error() {
        assert!(scan(br#"{"items":[]}"#, &[]).is_err());
        assert!(
            scan(
                br#"{"metadata":{"resourceVersion":"5"},"items":[{"data":7}]}"#,
                &[]
            )
            .is_err()
        );
        assert!(scan(br#"{"metadata":{"resourceVersion":"5"},"items":[1]}"#, &[]).is_err());
        assert!(scan(br#"[]"#, &[]).is_err());
    }
}
