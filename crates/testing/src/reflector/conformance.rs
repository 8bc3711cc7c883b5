//! A reusable suite that checks a [`ListerWatcher`] against a live backend: what the reflector
//! relies on from the server.
//!
//! Run it against every `ListerWatcher` that talks to something stateful (the kube-client
//! adapter against an API server, an in-memory server). The backend is driven through
//! [`Backend`]; the suite starts from an empty collection and leaves three objects behind.
//!
//! It checks, with generous time bounds (the suite runs on any tokio runtime):
//!
//! 1. a list returns every object with a non-empty resource version;
//! 2. a list in pages of one, following continue tokens, returns the same objects at the same
//!    resource version;
//! 3. a watch from the list's version delivers exactly the later changes, in order, each with
//!    its object's resource version, `DELETED` carrying the last state;
//! 4. a watch resumed from any event's version delivers exactly the events after it;
//! 5. a watch from `"0"` starts with an `ADDED` for every current object.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;

use informer_reflector::{ListParams, ListerWatcher, WatchEvent, WatchParams, WatchStream};

/// How the suite changes the backend's state and reads an object's name.
pub trait Backend<K>: Send + Sync {
    /// Creates the object `name`, or updates it if it exists.
    fn put(&self, name: &str) -> impl Future<Output = ()> + Send;

    /// Deletes the object `name`.
    fn delete(&self, name: &str) -> impl Future<Output = ()> + Send;

    /// The name of an object.
    fn name_of(&self, object: &K) -> String;
}

const WAIT: Duration = Duration::from_secs(10);

/// Runs the whole suite; panics with a description of the first broken rule.
pub async fn check<K, L, B>(lister_watcher: &L, backend: &B)
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
    B: Backend<K>,
{
    for name in ["conf-a", "conf-b", "conf-c"] {
        backend.put(name).await;
    }

    // 1. A list returns everything, with a version.
    let full = lister_watcher
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(
        !full.resource_version.is_empty(),
        "list without a resource version"
    );
    assert_eq!(
        full.continue_token, None,
        "an unpaginated list has no continue token"
    );
    let names: BTreeSet<_> = full.items.iter().map(|o| backend.name_of(o)).collect();
    assert!(
        ["conf-a", "conf-b", "conf-c"]
            .iter()
            .all(|n| names.contains(*n)),
        "list misses objects: {names:?}"
    );

    // 2. Pages of one, concatenated, are the same list at the same version.
    let mut paged = Vec::new();
    let mut params = ListParams {
        limit: Some(1),
        ..ListParams::default()
    };
    let mut page_rv = None;
    for _ in 0..=names.len() + 1 {
        let page = lister_watcher.list(&params).await.expect("list page");
        assert!(page.items.len() <= 1, "a page larger than its limit");
        if let Some(rv) = &page_rv {
            assert_eq!(
                &page.resource_version, rv,
                "pages of one list at different versions"
            );
        }
        page_rv = Some(page.resource_version.clone());
        paged.extend(page.items.iter().map(|o| backend.name_of(o)));
        match page.continue_token {
            Some(token) => {
                params = ListParams {
                    limit: Some(1),
                    continue_token: Some(token),
                    ..ListParams::default()
                };
            }
            None => break,
        }
    }
    assert_eq!(
        paged.iter().cloned().collect::<BTreeSet<_>>(),
        names,
        "pages differ from the full list"
    );
    assert_eq!(paged.len(), names.len(), "an object on two pages");

    // 3. A watch from the list's version sees exactly the later changes, in order.
    let watch = |rv: &str| WatchParams {
        resource_version: rv.to_owned(),
        timeout: Some(Duration::from_secs(60)),
        allow_bookmarks: true,
        ..WatchParams::default()
    };
    let mut stream = lister_watcher
        .watch(&watch(&full.resource_version))
        .await
        .expect("watch");
    backend.put("conf-d").await;
    backend.put("conf-a").await;
    backend.delete("conf-b").await;
    let events = next_changes(&mut stream, backend, 3).await;
    assert_eq!(
        events
            .iter()
            .map(|(t, n, _)| format!("{t} {n}"))
            .collect::<Vec<_>>(),
        ["ADDED conf-d", "MODIFIED conf-a", "DELETED conf-b"],
        "watch from the list's version"
    );
    let versions: BTreeSet<_> = events.iter().map(|(_, _, rv)| rv.clone()).collect();
    assert_eq!(
        versions.len(),
        3,
        "events share a resource version: {events:?}"
    );
    drop(stream);

    // 4. Resuming from the first event's version delivers the second and third, nothing else.
    let mut resumed = lister_watcher
        .watch(&watch(&events[0].2))
        .await
        .expect("resumed watch");
    let again = next_changes(&mut resumed, backend, 2).await;
    assert_eq!(again, events[1..], "resumed watch");
    drop(resumed);

    // 5. A watch from "0" opens with the current state as ADDED events.
    let mut fresh = lister_watcher
        .watch(&watch("0"))
        .await
        .expect("watch from 0");
    let initial = next_changes(&mut fresh, backend, 3).await;
    let added: BTreeSet<_> = initial
        .iter()
        .map(|(t, n, _)| {
            assert_eq!(t, "ADDED", "initial events of a watch from 0");
            n.clone()
        })
        .collect();
    let expected: BTreeSet<String> = ["conf-a", "conf-c", "conf-d"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert!(expected.is_subset(&added), "initial events {added:?}");
}

/// The next `n` object events (bookmarks skipped) as `(type, name, resource version)`.
async fn next_changes<K, B: Backend<K>>(
    stream: &mut WatchStream<K>,
    backend: &B,
    n: usize,
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    while out.len() < n {
        let event = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("a watch event within the time bound")
            .expect("the watch ended early")
            .expect("a watch error");
        match &event {
            WatchEvent::Added { object, .. }
            | WatchEvent::Modified { object, .. }
            | WatchEvent::Deleted { object, .. } => {
                let rv = event.resource_version().unwrap_or_default().to_owned();
                assert!(!rv.is_empty(), "an event without a resource version");
                out.push((event.type_name().to_owned(), backend.name_of(object), rv));
            }
            WatchEvent::Bookmark { .. } => {}
            WatchEvent::Error(status) => panic!("unexpected ERROR event: {status}"),
        }
    }
    out
}
