//! A reflector for a shard set: the selector sent, the objects and events outside the set
//! dropped whatever the server sent, what the server said about it, and a change of the set
//! while watching.

use crate::common;

use std::sync::Arc;

use common::*;
use informer_reflector::{
    Error, ListPage, Request, ServerFiltering, ShardBy, ShardField, ShardSelector, Status,
    WatchStep,
};
use informer_store::{Identity, KeyError, SharedIdentity, meta_namespace_key};
use tokio::sync::watch;

/// Objects whose uid is their name, and whose controller is `owner-of-<name>` when their name
/// starts with `child`.
struct ByName;

impl Identity<Obj> for ByName {
    fn key(&self, obj: &Obj) -> Result<String, KeyError> {
        meta_namespace_key(None, &obj.name)
    }

    fn uid<'a>(&self, obj: &'a Obj) -> Option<&'a str> {
        Some(&obj.name)
    }

    fn controller_uid<'a>(&self, obj: &'a Obj) -> Option<&'a str> {
        obj.name.strip_prefix("child-")
    }
}

fn identity() -> SharedIdentity<Obj> {
    Arc::new(ByName)
}

/// The `i`th object name: names that differ from their first byte on, as random uids do (the
/// hash's top bits depend little on a value's last bytes).
fn name(i: u32) -> String {
    format!("{:08x}-obj", i.wrapping_mul(2_654_435_761))
}

fn quarter(shards: &[u32]) -> ShardSelector {
    ShardSelector::for_shards(ShardField::Uid, 4, shards.iter().copied()).unwrap()
}

/// Names whose hash falls in `set`, and names whose hash does not, `n` of each.
fn names(set: &ShardSelector, n: usize) -> (Vec<String>, Vec<String>) {
    let all = (0..200_u32).map(name);
    let (inside, outside): (Vec<_>, Vec<_>) = all.partition(|name| set.matches(name));
    (inside[..n].to_vec(), outside[..n].to_vec())
}

fn sent(request: &Request) -> Option<&str> {
    match request {
        Request::List { params, .. } => params.shard_selector.as_deref(),
        Request::Watch { params, .. } => params.shard_selector.as_deref(),
    }
}

fn keys(h: &Harness) -> Vec<String> {
    h.store.content().into_iter().map(|(k, _)| k).collect()
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test(start_paused = true)]
async fn objects_and_events_outside_the_set_are_dropped_and_the_server_is_asked_for_it() {
    let set = quarter(&[0, 1]);
    let (inside, outside) = names(&set, 4);
    let fake = Fake::new();
    let listed = inside[..2].iter().chain(&outside[..2]).map(|n| obj(n, 1));
    fake.push_list(ListPage::new(listed.collect(), "10"));
    fake.push_watch(vec![
        added(&inside[2], 1, "11"),
        added(&outside[2], 1, "12"),
        modified(&outside[0], 2, "13"),
        deleted(&outside[1], 1, "14"),
        deleted(&inside[0], 1, "15"),
        WatchStep::Hang,
    ]);
    let (_tx, rx) = watch::channel(Some(set.clone()));
    let h = Harness::new(fake, |r| r.with_shards(rx, ShardBy::Object, identity())).start();
    let requests = h.requests(2).await;
    h.until("the last event", |h| h.last_rv() == "15").await;

    let text = set.to_string();
    assert!(requests.iter().all(|r| sent(r) == Some(text.as_str())));
    assert_eq!(keys(&h), sorted(vec![inside[1].clone(), inside[2].clone()]));
    // Nothing of an object outside the set reached the store, its deletion neither.
    let ops = format!("{:?}", h.store.ops());
    assert!(outside.iter().all(|n| !ops.contains(n.as_str())), "{ops}");
    // The list had no shardInfo: a server that ignored the selector.
    assert_eq!(h.reflector.server_filtering(), ServerFiltering::NotFiltered);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_list_with_shard_info_was_filtered_by_the_server() {
    let set = quarter(&[2]);
    let (inside, _) = names(&set, 1);
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj(&inside[0], 1)], "10").with_shard_info(set.to_string()));
    fake.push_watch(vec![WatchStep::Hang]);
    let (_tx, rx) = watch::channel(Some(set));
    let h = Harness::new(fake, |r| r.with_shards(rx, ShardBy::Object, identity())).start();
    h.requests(2).await;
    assert_eq!(h.reflector.server_filtering(), ServerFiltering::Filtered);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_change_of_the_set_ends_the_watch_and_relists_at_once_with_the_new_set() {
    let (before, after) = (quarter(&[0, 1]), quarter(&[1, 2]));
    let every: Vec<String> = (0..40).map(name).collect();
    let all = || every.iter().map(|n| obj(n, 1)).collect::<Vec<_>>();
    let fake = Fake::new();
    fake.push_list(ListPage::new(all(), "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    fake.push_list(ListPage::new(all(), "11"));
    fake.push_watch(vec![WatchStep::Hang]);
    let (tx, rx) = watch::channel(Some(before.clone()));
    let h = Harness::new(fake, |r| r.with_shards(rx, ShardBy::Object, identity())).start();
    h.requests(2).await;
    let of = |set: &ShardSelector| -> Vec<String> {
        let mut names: Vec<String> = every.iter().filter(|n| set.matches(n)).cloned().collect();
        names.sort();
        names
    };
    assert!(!of(&before).is_empty() && of(&before) != of(&after));
    assert_eq!(keys(&h), of(&before));

    tx.send_replace(Some(after.clone()));
    let requests = h.requests(4).await;
    assert_eq!(shapes(&requests), "list@0 watch@10 list@10 watch@11");
    assert_eq!(sent(&requests[2]), Some(after.to_string().as_str()));
    // At once: no backoff delay between the watch's end and the relist.
    assert_eq!(gap(requests[1].at(), requests[2].at()), 0.0);
    assert_eq!(h.reflector.current_shards(), Some(after.clone()));
    assert_eq!(keys(&h), of(&after));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn children_follow_their_owner_and_nothing_is_sent_for_a_uid_set() {
    let set = quarter(&[3]);
    let (inside, outside) = names(&set, 2);
    let fake = Fake::new();
    let objects = [
        format!("child-{}", inside[0]),
        format!("child-{}", outside[0]),
        inside[1].clone(),
        outside[1].clone(),
    ];
    fake.push_list(ListPage::new(
        objects.iter().map(|n| obj(n, 1)).collect(),
        "10",
    ));
    fake.push_watch(vec![WatchStep::Hang]);
    let (_tx, rx) = watch::channel(Some(set));
    let h = Harness::new(fake, |r| r.with_shards(rx, ShardBy::Owner, identity())).start();
    let requests = h.requests(2).await;
    assert!(requests.iter().all(|r| sent(r).is_none()));
    assert_eq!(
        keys(&h),
        sorted(vec![format!("child-{}", inside[0]), inside[1].clone()])
    );
    assert_eq!(h.reflector.server_filtering(), ServerFiltering::Unknown);
    h.stop().await;
}

/// The set of the last list completed follows a change only once the relist at the new set is
/// in the store: not while it fails, nor before the store holds its objects.
#[tokio::test(start_paused = true)]
async fn the_listed_set_follows_a_change_only_once_its_relist_is_in() {
    let (before, after) = (quarter(&[0]), quarter(&[0, 3]));
    let every: Vec<String> = (0..40).map(name).collect();
    let all = || every.iter().map(|n| obj(n, 1)).collect::<Vec<_>>();
    let fake = Fake::new();
    fake.push_list(ListPage::new(all(), "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    fake.push_list_error(Error::Api(Status::internal_error("etcd unavailable")));
    fake.push_list(ListPage::new(all(), "11"));
    fake.push_watch(vec![WatchStep::Hang]);
    let (tx, rx) = watch::channel(Some(before.clone()));
    let (listed_tx, listed) = watch::channel(None);
    let h = Harness::new(fake, |r| {
        r.with_shards(rx, ShardBy::Object, identity())
            .with_listed_shards(move |set| {
                listed_tx.send_replace(set.cloned());
            })
    })
    .start();
    h.requests(2).await;
    assert_eq!(*listed.borrow(), Some(before.clone()));

    tx.send_replace(Some(after.clone()));
    // The relist at the new set failed: the store still holds the old set, and says so.
    h.requests(3).await;
    h.settle().await;
    assert_eq!(h.reflector.current_shards(), Some(after.clone()));
    assert_eq!(*listed.borrow(), Some(before.clone()));
    let of = |set: &ShardSelector| -> Vec<String> {
        sorted(every.iter().filter(|n| set.matches(n)).cloned().collect())
    };
    assert_eq!(keys(&h), of(&before));

    // Retried after a backoff.
    h.requests(5).await;
    h.until("the relist in", |h| h.last_rv() == "11").await;
    assert_eq!(*listed.borrow(), Some(after.clone()));
    assert_eq!(keys(&h), of(&after));
    h.stop().await;
}
