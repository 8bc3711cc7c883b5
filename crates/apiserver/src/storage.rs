//! The versioned object store: current state per resource, one revision counter shared by all
//! resources (like etcd's), and a bounded history of changes from which any retained revision can
//! be reconstructed (for `Exact` lists and continue tokens) and watches can be resumed.
//!
//! Model (see the protocol notes in `docs/apiserver.md`):
//!
//! * `head` is the revision of the latest change;
//! * `floor` is the oldest revision still served: every change with a revision above `floor` is
//!   in the history, so a watch from `N >= floor` receives every change after `N`, and a list at
//!   `N >= floor` can be rebuilt. Anything older is `410 Expired`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::time::{Duration, Instant};

use crate::resource::ResourceInfo;

/// A stored object: its JSON (without `kind`/`apiVersion`, which come from the resource) and
/// that JSON pre-serialised, so that lists and watches never serialise on the hot path.
///
/// With the `protobuf` feature it also keeps its protobuf message, written the first time a
/// protobuf client lists it and then shared by every list that carries it, as kube-apiserver's
/// watch cache keeps an object's serializations (a protobuf watch event still encodes the
/// object from its JSON). A stored object is never
/// changed (a write stores a new one), so the message stays right; it lives as long as the
/// object (in the current state or the history), which bounds the memory it takes.
#[derive(Debug)]
pub(crate) struct StoredObject {
    pub(crate) value: Value,
    pub(crate) body: Bytes,
    #[cfg(feature = "protobuf")]
    pub(crate) protobuf: crate::protobuf::MessageCache,
}

/// How revisions are written as `resourceVersion` strings, and read back from requests.
///
/// Decimal, as etcd-backed servers write them; or, with
/// [`Config::opaque_resource_versions`](crate::Config::opaque_resource_versions), `x` and the
/// revision in lowercase hex (`x1f`): still one string per revision, but not a number, and
/// ordered differently as text than as revisions (`"x10"` sorts before `"x9"`), so a client
/// that parses or compares them shows. The API's contract is that a resource version is an
/// opaque string; only `""` and `"0"` mean something in a request, and keep their meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RvCodec {
    opaque: bool,
}

impl RvCodec {
    pub(crate) fn new(opaque: bool) -> Self {
        Self { opaque }
    }

    /// The string of revision `rv`.
    pub(crate) fn encode(self, rv: u64) -> String {
        if self.opaque {
            format!("x{rv:x}")
        } else {
            rv.to_string()
        }
    }

    /// The revision `s` names, if it is one this server writes.
    pub(crate) fn decode(self, s: &str) -> Option<u64> {
        if self.opaque {
            let hex = s.strip_prefix('x')?;
            // Exactly what encode writes: lowercase, no sign, no leading zero.
            let canonical = !hex.is_empty()
                && !hex.starts_with('0')
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            canonical
                .then(|| u64::from_str_radix(hex, 16).ok())
                .flatten()
        } else {
            s.parse().ok()
        }
    }
}

impl StoredObject {
    pub(crate) fn new(value: Value) -> Self {
        let body = Bytes::from(serde_json::to_vec(&value).unwrap_or_else(|_| b"{}".to_vec()));
        StoredObject {
            value,
            body,
            #[cfg(feature = "protobuf")]
            protobuf: crate::protobuf::MessageCache::default(),
        }
    }
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// How late the watch cache receives changes (see `Faults::set_cache_delay`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CacheDelay {
    /// How long after its commit a change reaches the cache.
    pub(crate) delay: Duration,
    /// What the cache had received when the delay was set: a longer delay does not take back
    /// what it already has.
    pub(crate) received_through: u64,
}

impl CacheDelay {
    /// When the cache receives `change`.
    pub(crate) fn due(&self, change: &Change) -> Instant {
        if change.rv <= self.received_through {
            change.committed
        } else {
            change.committed + self.delay
        }
    }
}

/// One committed change. For a delete, `object` is the last state stamped with the delete's
/// revision (what a DELETED watch event carries).
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) resource: usize,
    pub(crate) key: String,
    pub(crate) ty: ChangeType,
    pub(crate) object: Arc<StoredObject>,
    pub(crate) previous: Option<Arc<StoredObject>>,
    /// When it was committed (for a watch cache that receives changes late).
    pub(crate) committed: Instant,
}

pub(crate) struct ResourceState {
    pub(crate) info: Arc<ResourceInfo>,
    /// Whether the resource is served: false once unregistered (its slot stays, so that open
    /// watches and the history keep their index, until it is registered again).
    pub(crate) served: bool,
    pub(crate) objects: BTreeMap<String, Arc<StoredObject>>,
    pub(crate) tx: broadcast::Sender<Arc<Change>>,
    /// `{"kind":"Pod","apiVersion":"v1",` — prepended to a body to make it a typed object.
    pub(crate) typed_prefix: Bytes,
}

impl ResourceState {
    /// Appends `object` to `out` with `kind` and `apiVersion`.
    pub(crate) fn write_typed(&self, out: &mut Vec<u8>, object: &StoredObject) {
        write_typed(out, &self.typed_prefix, &object.body);
    }
}

/// `{"kind":..,"apiVersion":..,`: what makes a stored body a typed object of `info`.
fn typed_prefix(info: &ResourceInfo) -> Bytes {
    Bytes::from(format!(
        "{{\"kind\":{},\"apiVersion\":{},",
        Value::from(info.kind.as_str()),
        Value::from(info.api_version())
    ))
}

/// Appends `body` (a JSON object) to `out`, with `prefix` (`{"kind":..,"apiVersion":..,`)
/// in place of its opening brace.
pub(crate) fn write_typed(out: &mut Vec<u8>, prefix: &[u8], body: &[u8]) {
    if body.len() <= 2 {
        out.extend_from_slice(&prefix[..prefix.len() - 1]);
        out.push(b'}');
    } else {
        out.extend_from_slice(prefix);
        out.extend_from_slice(&body[1..]);
    }
}

pub(crate) struct Storage {
    pub(crate) head: u64,
    pub(crate) floor: u64,
    pub(crate) resources: Vec<ResourceState>,
    by_path: HashMap<(String, String, String), usize>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    watch_buffer: usize,
    rv_step: u64,
    /// How revisions are written.
    pub(crate) codec: RvCodec,
    /// Where paginated lists stopped, and how many objects came after (see
    /// [`Storage::remaining_after`]).
    page_ends: Mutex<PageEnds>,
}

/// A page's last key: resource, revision, namespace prefix (`"ns/"`, or empty for all) and
/// full key.
type PageEnd = (usize, u64, String, String);

/// How many objects follow each recorded page end. The state of a resource at a revision no
/// newer than the head never changes (a rewind, which reuses revisions, clears it), so an
/// entry stays exact for as long as that revision is served.
#[derive(Default)]
struct PageEnds {
    remaining: HashMap<PageEnd, u64>,
}

impl PageEnds {
    /// Entries kept at most: past it the map starts over (lists restart their count).
    const CAPACITY: usize = 1024;

    fn record(&mut self, end: PageEnd, remaining: u64) {
        if self.remaining.len() >= Self::CAPACITY {
            self.remaining.clear();
        }
        self.remaining.insert(end, remaining);
    }
}

impl Storage {
    pub(crate) fn new(initial_rv: u64, history_limit: usize, watch_buffer: usize) -> Self {
        Storage {
            head: initial_rv,
            floor: initial_rv,
            resources: Vec::new(),
            by_path: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            watch_buffer: watch_buffer.max(1),
            rv_step: 1,
            codec: RvCodec::default(),
            page_ends: Mutex::default(),
        }
    }

    pub(crate) fn set_rv_step(&mut self, step: u64) {
        self.rv_step = step.max(1);
    }

    /// Registers a resource type (idempotent) and returns its index. A resource unregistered
    /// before is served again in its old slot, empty, under `info`.
    pub(crate) fn register(&mut self, info: ResourceInfo) -> usize {
        let path = (
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        );
        if let Some(&i) = self.by_path.get(&path) {
            let state = &mut self.resources[i];
            if !state.served {
                state.served = true;
                state.typed_prefix = typed_prefix(&info);
                state.info = Arc::new(info);
            }
            return i;
        }
        let (tx, _) = broadcast::channel(self.watch_buffer);
        self.resources.push(ResourceState {
            typed_prefix: typed_prefix(&info),
            info: Arc::new(info),
            served: true,
            objects: BTreeMap::new(),
            tx,
        });
        let i = self.resources.len() - 1;
        self.by_path.insert(path, i);
        i
    }

    /// The index of a served resource.
    pub(crate) fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.by_path
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
            .copied()
            .filter(|&i| self.resources[i].served)
    }

    /// Stops serving resource `r`, whose objects the caller has deleted: its open watches end
    /// cleanly once they have sent what was committed before (the old channel's sender is
    /// dropped), and it is no longer found.
    pub(crate) fn retire(&mut self, r: usize) {
        let (tx, _) = broadcast::channel(self.watch_buffer);
        let state = &mut self.resources[r];
        state.served = false;
        state.objects.clear();
        state.tx = tx;
    }

    /// `Ok` while resource `r` is served; else the 404 kube-apiserver answers for a path it
    /// does not serve (a request routed just before the resource was unregistered).
    pub(crate) fn check_served(&self, r: usize) -> Result<(), crate::status::StatusError> {
        if self.resources[r].served {
            Ok(())
        } else {
            Err(crate::status::StatusError::unknown_path())
        }
    }

    pub(crate) fn resource(&self, r: usize) -> &ResourceState {
        &self.resources[r]
    }

    /// Commits a change: takes the next revision, stamps it into the object, records it in the
    /// history and sends it to the resource's watchers.
    pub(crate) fn commit(
        &mut self,
        r: usize,
        key: String,
        ty: ChangeType,
        mut value: Value,
        previous: Option<Arc<StoredObject>>,
    ) -> Arc<Change> {
        self.head += self.rv_step;
        let rv = self.head;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(self.codec.encode(rv)),
            );
        }
        let object = Arc::new(StoredObject::new(value));
        let state = &mut self.resources[r];
        match ty {
            ChangeType::Deleted => {
                state.objects.remove(&key);
            }
            ChangeType::Added | ChangeType::Modified => {
                state.objects.insert(key.clone(), object.clone());
            }
        }
        let change = Arc::new(Change {
            rv,
            resource: r,
            key,
            ty,
            object,
            previous,
            committed: Instant::now(),
        });
        // No receivers is fine: nobody is watching this resource.
        let _ = state.tx.send(change.clone());
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.floor = self.floor.max(old.rv);
            }
        }
        change
    }

    /// Drops history up to `rev` (clamped to `head`): lists at and watches from older revisions
    /// become `410 Expired`. Returns the new floor.
    pub(crate) fn compact(&mut self, rev: u64) -> u64 {
        let rev = rev.min(self.head);
        while self.history.front().is_some_and(|c| c.rv <= rev) {
            self.history.pop_front();
        }
        self.floor = self.floor.max(rev);
        self.floor
    }

    /// Forgets all history: the floor jumps to `head`.
    pub(crate) fn reset_history(&mut self) {
        self.history.clear();
        self.floor = self.head;
    }

    /// Moves `head` forward by `delta` without any change, then compacts everything
    /// (what an etcd restore with `--bump-revision --mark-compacted` looks like).
    pub(crate) fn bump_revision(&mut self, delta: u64) {
        self.head += delta;
        self.reset_history();
    }

    /// Rebuilds every resource as it was at `rev` and moves the head back to it, forgetting
    /// the changes after it (an etcd restore from an old snapshot, without a revision bump).
    /// Fails with the floor when `rev` is no longer retained.
    pub(crate) fn rewind(&mut self, rev: u64) -> Result<(), u64> {
        if rev < self.floor || rev > self.head {
            return Err(self.floor);
        }
        // A resource not served now stays empty: its objects went with it.
        for r in 0..self.resources.len() {
            if !self.resources[r].served {
                continue;
            }
            let mut objects = BTreeMap::new();
            self.visit_at(r, rev, None, None, &mut |key, obj| {
                objects.insert(key.to_owned(), obj.clone());
                true
            });
            self.resources[r].objects = objects;
        }
        while self.history.back().is_some_and(|c| c.rv > rev) {
            self.history.pop_back();
        }
        self.head = rev;
        // Revisions after `rev` will be reused for other states.
        self.page_ends.get_mut().remaining.clear();
        Ok(())
    }

    pub(crate) fn history_len(&self) -> usize {
        self.history.len()
    }

    /// The newest revision the watch cache holds at `now`: the head once it has received every
    /// change, else the revision just below the oldest change it has not received (the caller
    /// clamps it to the floor).
    pub(crate) fn delivered_revision(&self, now: Instant, cache: &CacheDelay) -> u64 {
        let mut revision = self.head;
        for change in self.history.iter().rev() {
            if cache.due(change) <= now {
                break;
            }
            revision = change.rv - 1;
        }
        revision
    }

    /// When the watch cache holds revision `rv`: when it receives the newest change at or below
    /// it. `None` when no retained change is at or below it (it has had it all along).
    pub(crate) fn delivered_at(&self, rv: u64, cache: &CacheDelay) -> Option<Instant> {
        self.history
            .iter()
            .rev()
            .find(|c| c.rv <= rv)
            .map(|c| cache.due(c))
    }

    /// The changes of resource `r` with a revision above `since`, oldest first.
    /// The caller has checked `since >= floor`.
    pub(crate) fn changes_since(&self, r: usize, since: u64) -> Vec<Arc<Change>> {
        let mut out: Vec<Arc<Change>> = self
            .history
            .iter()
            .rev()
            .take_while(|c| c.rv > since)
            .filter(|c| c.resource == r)
            .cloned()
            .collect();
        out.reverse();
        out
    }

    /// Visits the objects of resource `r` as they were at revision `at` (`floor <= at <= head`),
    /// in key order, restricted to `namespace` and to keys from `start` on (inclusive). The
    /// visitor returns `false` to stop.
    pub(crate) fn visit_at<'a>(
        &'a self,
        r: usize,
        at: u64,
        namespace: Option<&str>,
        start: Option<&str>,
        visit: &mut dyn FnMut(&'a str, &'a Arc<StoredObject>) -> bool,
    ) {
        let state = &self.resources[r];
        // Keys changed after `at`, with their state at `at` (None: absent then).
        let mut overlay: BTreeMap<&str, Option<&Arc<StoredObject>>> = BTreeMap::new();
        for change in self.history.iter().rev().take_while(|c| c.rv > at) {
            if change.resource == r {
                overlay.insert(change.key.as_str(), change.previous.as_ref());
            }
        }
        let ns_prefix = namespace
            .filter(|_| state.info.namespaced)
            .map(|ns| format!("{ns}/"));
        let start: Bound<&str> = match (start, ns_prefix.as_deref()) {
            (Some(s), Some(p)) => Bound::Included(if s >= p { s } else { p }),
            (Some(s), None) | (None, Some(s)) => Bound::Included(s),
            (None, None) => Bound::Unbounded,
        };
        let in_scope = |k: &str| ns_prefix.as_deref().is_none_or(|p| k.starts_with(p));
        let mut current = state
            .objects
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(k, v)| (k.as_str(), v))
            .peekable();
        let mut changed = overlay
            .range::<str, _>((start, Bound::Unbounded))
            .peekable();
        loop {
            let next = match (current.peek(), changed.peek()) {
                (None, None) => break,
                (Some(&(ck, cv)), None) => {
                    current.next();
                    (ck, Some(cv))
                }
                (None, Some(&(&ok, ov))) => {
                    changed.next();
                    (ok, *ov)
                }
                (Some(&(ck, cv)), Some(&(&ok, ov))) => match ck.cmp(ok) {
                    std::cmp::Ordering::Less => {
                        current.next();
                        (ck, Some(cv))
                    }
                    std::cmp::Ordering::Greater => {
                        changed.next();
                        (ok, *ov)
                    }
                    std::cmp::Ordering::Equal => {
                        current.next();
                        changed.next();
                        (ok, *ov)
                    }
                },
            };
            if !in_scope(next.0) {
                break;
            }
            if let (key, Some(obj)) = next
                && !visit(key, obj)
            {
                break;
            }
        }
    }

    /// How many objects of resource `r` at revision `at` come after `key`, within `namespace`.
    pub(crate) fn count_after(&self, r: usize, at: u64, namespace: Option<&str>, key: &str) -> u64 {
        let state = &self.resources[r];
        let prefix = namespace
            .filter(|_| state.info.namespaced)
            .map(|ns| format!("{ns}/"));
        let in_scope = |k: &str| prefix.as_deref().is_none_or(|p| k.starts_with(p));
        if at >= self.head {
            // Nothing changed since: count the current keys directly.
            return state
                .objects
                .range::<str, _>((Bound::Excluded(key), Bound::Unbounded))
                .take_while(|(k, _)| in_scope(k))
                .count() as u64;
        }
        let mut n = 0u64;
        let start = format!("{key}\u{0}");
        self.visit_at(r, at, namespace, Some(&start), &mut |_, _| {
            n += 1;
            true
        });
        n
    }

    /// How many objects of resource `r` at revision `at` come after `last`, within
    /// `namespace`, for a page of a list without selectors that returned `returned` objects
    /// and ended at `last`. `previous` is the key the page started after (its continue
    /// token's start, less the trailing NUL): when an earlier page recorded what followed it,
    /// the answer is that less `returned`, without walking the rest of the collection; so is
    /// the first page of a whole collection at the head (its size less `returned`). The answer
    /// is recorded for the next page.
    pub(crate) fn remaining_after(
        &self,
        r: usize,
        at: u64,
        namespace: Option<&str>,
        previous: Option<&str>,
        returned: u64,
        last: &str,
    ) -> u64 {
        let prefix = namespace
            .filter(|_| self.resources[r].info.namespaced)
            .map(|ns| format!("{ns}/"))
            .unwrap_or_default();
        let mut end: PageEnd = (r, at, prefix, String::new());
        let known = previous.and_then(|previous| {
            end.3.push_str(previous);
            let after = self.page_ends.lock().remaining.get(&end).copied()?;
            after.checked_sub(returned)
        });
        let remaining = known.unwrap_or_else(|| {
            let state = &self.resources[r];
            if previous.is_none() && end.2.is_empty() && at >= self.head {
                // The first page of the whole collection as it is now.
                (state.objects.len() as u64).saturating_sub(returned)
            } else {
                self.count_after(r, at, namespace, last)
            }
        });
        end.3.clear();
        end.3.push_str(last);
        self.page_ends.lock().record(end, remaining);
        remaining
    }

    pub(crate) fn get(&self, r: usize, key: &str) -> Option<&Arc<StoredObject>> {
        self.resources[r].objects.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, v: u32) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "v": v})
    }

    fn names_at(s: &Storage, at: u64) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        s.visit_at(0, at, Some("ns"), None, &mut |k, o| {
            out.push((k.to_owned(), o.value["v"].as_u64().unwrap()));
            true
        });
        out
    }

    #[test]
    fn any_retained_revision_can_be_rebuilt() {
        let mut s = Storage::new(1, 100, 16);
        s.register(ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
        s.commit(0, "ns/a".into(), ChangeType::Added, pod("a", 1), None); // 2
        s.commit(0, "ns/b".into(), ChangeType::Added, pod("b", 1), None); // 3
        let prev = s.get(0, "ns/a").cloned();
        s.commit(0, "ns/a".into(), ChangeType::Modified, pod("a", 2), prev); // 4
        let prev = s.get(0, "ns/b").cloned();
        s.commit(0, "ns/b".into(), ChangeType::Deleted, pod("b", 1), prev); // 5
        s.commit(0, "ns/c".into(), ChangeType::Added, pod("c", 1), None); // 6
        assert_eq!(names_at(&s, 1), vec![]);
        assert_eq!(
            names_at(&s, 3),
            vec![("ns/a".into(), 1), ("ns/b".into(), 1)]
        );
        assert_eq!(
            names_at(&s, 4),
            vec![("ns/a".into(), 2), ("ns/b".into(), 1)]
        );
        assert_eq!(
            names_at(&s, 6),
            vec![("ns/a".into(), 2), ("ns/c".into(), 1)]
        );
        let since: Vec<u64> = s.changes_since(0, 3).iter().map(|c| c.rv).collect();
        assert_eq!(since, [4, 5, 6]);
        assert_eq!(s.compact(4), 4);
        assert_eq!(s.floor, 4);
        assert_eq!(s.history_len(), 2);
    }

    /// A write in the model test: create-or-update (`Some`) or delete (`None`) of key `k`.
    #[derive(Clone, Debug)]
    struct Op {
        key: u8,
        value: Option<u32>,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        (0u8..6, proptest::option::weighted(0.75, 0u32..1000))
            .prop_map(|(key, value)| Op { key, value })
    }

    proptest::proptest! {
        /// Against a model that keeps a full copy of the state at every revision: the state
        /// rebuilt at any retained revision, and the changes replayed after it, are exact.
        #[test]
        fn history_reconstruction_matches_a_model(
            ops in proptest::collection::vec(op(), 1..60),
            limit in 1usize..40,
            ask in 0usize..70,
        ) {
            let mut s = Storage::new(1, limit, 16);
            s.register(ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
            let mut model: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new()];
            for op in &ops {
                let key = format!("ns/k{}", op.key);
                let mut next = model.last().unwrap().clone();
                let prev = s.get(0, &key).cloned();
                match (op.value, prev) {
                    (Some(v), prev) => {
                        let ty = if prev.is_some() { ChangeType::Modified } else { ChangeType::Added };
                        s.commit(0, key.clone(), ty, pod(&key, v), prev);
                        next.insert(key, u64::from(v));
                    }
                    (None, Some(prev)) => {
                        s.commit(0, key.clone(), ChangeType::Deleted, prev.value.clone(), Some(prev));
                        next.remove(&key);
                    }
                    (None, None) => continue,
                }
                model.push(next);
            }
            let head = s.head;
            // Revision r is model[r - 1].
            let at = (ask as u64 + 1).min(head);
            if at < s.floor {
                return Ok(());
            }
            let expected: Vec<(String, u64)> =
                model[(at - 1) as usize].iter().map(|(k, v)| (k.clone(), *v)).collect();
            proptest::prop_assert_eq!(names_at(&s, at), expected);
            // Replaying the changes after `at` onto the state at `at` gives the head state.
            let mut state: BTreeMap<String, u64> = model[(at - 1) as usize].clone();
            for change in s.changes_since(0, at) {
                match change.ty {
                    ChangeType::Deleted => { state.remove(&change.key); }
                    _ => { state.insert(change.key.clone(), change.object.value["v"].as_u64().unwrap()); }
                }
            }
            proptest::prop_assert_eq!(&state, model.last().unwrap());
            // Paging from a start key sees exactly the suffix.
            let mut suffix = Vec::new();
            s.visit_at(0, at, Some("ns"), Some("ns/k3\u{0}"), &mut |k, _| { suffix.push(k.to_owned()); true });
            let want: Vec<String> = model[(at - 1) as usize].keys().filter(|k| k.as_str() > "ns/k3").cloned().collect();
            proptest::prop_assert_eq!(suffix, want);
        }
    }

    #[test]
    fn rewinding_restores_an_old_state_and_head() {
        let mut s = Storage::new(1, 100, 16);
        s.register(ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
        s.commit(0, "ns/a".into(), ChangeType::Added, pod("a", 1), None); // 2
        let prev = s.get(0, "ns/a").cloned();
        s.commit(0, "ns/a".into(), ChangeType::Modified, pod("a", 2), prev); // 3
        s.commit(0, "ns/b".into(), ChangeType::Added, pod("b", 1), None); // 4
        s.rewind(2).unwrap();
        assert_eq!(s.head, 2);
        assert_eq!(names_at(&s, 2), vec![("ns/a".into(), 1)]);
        // The next write reuses revision 3, as a restored etcd would.
        let c = s.commit(0, "ns/c".into(), ChangeType::Added, pod("c", 1), None);
        assert_eq!(c.rv, 3);
        s.compact(3);
        assert_eq!(s.rewind(2), Err(3));
    }

    /// Pages of `limit` over namespace `ns` at `at`: each page's remaining count, from
    /// [`Storage::remaining_after`] (which reuses the previous page's), next to a full count.
    fn page_counts(s: &Storage, at: u64, limit: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let mut page: Vec<&str> = Vec::new();
            let mut more = false;
            s.visit_at(0, at, Some("ns"), start.as_deref(), &mut |k, _| {
                if page.len() == limit {
                    more = true;
                    return false;
                }
                page.push(k);
                true
            });
            if !more {
                return out;
            }
            let last = page[page.len() - 1];
            let previous = start.as_deref().and_then(|p| p.strip_suffix('\0'));
            let remaining = s.remaining_after(0, at, Some("ns"), previous, page.len() as u64, last);
            out.push((remaining, s.count_after(0, at, Some("ns"), last)));
            start = Some(format!("{last}\0"));
        }
    }

    #[test]
    fn remaining_counts_carried_from_page_to_page_are_exact() {
        let mut s = Storage::new(1, 1000, 16);
        s.register(ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
        for i in 0..20 {
            let ns = if i % 3 == 0 { "other" } else { "ns" };
            let key = format!("{ns}/p{i:02}");
            s.commit(0, key, ChangeType::Added, pod(&format!("p{i:02}"), 1), None);
        }
        let at = s.head;
        let first = page_counts(&s, at, 3);
        assert_eq!(first.len(), 4);
        assert!(first.iter().all(|(carried, counted)| carried == counted));
        assert_eq!(first[0].0, 10);
        // The first page of the whole collection, at the head: its size less the page.
        assert_eq!(s.remaining_after(0, at, None, None, 3, "ns/p04"), 17);
        assert_eq!(s.count_after(0, at, None, "ns/p04"), 17);
        // Later writes change the head, not the state at `at`.
        let prev = s.get(0, "ns/p01").cloned();
        s.commit(0, "ns/p01".into(), ChangeType::Deleted, pod("p01", 1), prev);
        s.commit(0, "ns/p99".into(), ChangeType::Added, pod("p99", 1), None);
        assert_eq!(page_counts(&s, at, 3), first);
        assert!(page_counts(&s, s.head, 3).iter().all(|(a, b)| a == b));
    }

    #[test]
    fn a_rewind_forgets_remaining_counts_of_reused_revisions() {
        let mut s = Storage::new(1, 100, 16);
        s.register(ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
        for name in ["a", "b", "c"] {
            s.commit(
                0,
                format!("ns/{name}"),
                ChangeType::Added,
                pod(name, 1),
                None,
            ); // 2, 3, 4
        }
        assert_eq!(s.remaining_after(0, 4, Some("ns"), None, 1, "ns/a"), 2);
        s.rewind(3).unwrap();
        let prev = s.get(0, "ns/b").cloned();
        s.commit(0, "ns/b".into(), ChangeType::Deleted, pod("b", 1), prev); // 4 again
        // Revision 4 is now {a}: nothing after `a`, whatever was recorded before the rewind.
        assert_eq!(
            s.remaining_after(0, 4, Some("ns"), Some("ns/a"), 0, "ns/a"),
            0
        );
    }

    #[test]
    fn a_bounded_history_raises_the_floor() {
        let mut s = Storage::new(1, 2, 16);
        s.register(ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
        for i in 0..5 {
            s.commit(
                0,
                format!("ns/p{i}"),
                ChangeType::Added,
                pod(&format!("p{i}"), 1),
                None,
            );
        }
        assert_eq!((s.head, s.floor, s.history_len()), (6, 4, 2));
    }
}

#[cfg(test)]
mod rv_codec_tests {
    use super::RvCodec;

    #[test]
    fn each_codec_reads_back_exactly_what_it_writes() {
        let (decimal, opaque) = (RvCodec::new(false), RvCodec::new(true));
        for rv in [1, 9, 10, 15, 16, 255, 256, 1 << 40, u64::MAX] {
            assert_eq!(decimal.decode(&decimal.encode(rv)), Some(rv));
            assert_eq!(opaque.decode(&opaque.encode(rv)), Some(rv));
        }
        assert_eq!(opaque.encode(31), "x1f");
        // Text order is not revision order.
        assert!(opaque.encode(16) < opaque.encode(9));
        // Only the strings the server writes: not the other codec's, nor other spellings.
        for s in ["31", "x", "x01f", "x1F", "X1f", "x-1", "x+1", "x1g", " x1f"] {
            assert_eq!(opaque.decode(s), None, "{s:?}");
        }
        assert_eq!(decimal.decode("x1f"), None);
    }
}
