//! How a reflector gets a collection's state: a list (paginated, each page handed on or held
//! whole), or a streaming list (a watch that sends the initial state first).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Waker;

use futures::StreamExt;
use informer_store::{KeyFunc, ReflectorStore, ReplaceParts};
use tokio::time::Instant;

use crate::error::Error;
use crate::lister_watcher::{
    ListFilter, ListPage, ListParams, ListSink, ListerWatcher, ResourceVersionMatch, WatchEvent,
    WatchParams, WatchStream, wait_while,
};
use crate::observer::ListReason;

use crate::reaction::{Delay, Reaction, RunState, Step, react};
use crate::reflector::{DEFAULT_PAGE_SIZE, ListInterner, Reflector};

/// How many parts a page size of a streaming list's initial events is handed over in.
const STREAMING_PARTS: usize = 4;

/// What a list has collected so far.
struct Listed<K> {
    items: Collected<K>,
    /// Objects listed (over every page).
    count: usize,
    /// The last page's resource version.
    resource_version: String,
    /// Its objects go through the interner: the store may hold some already.
    interning: bool,
}

/// A list's pages: concatenated, or handed to the store page by page.
enum Collected<K> {
    Whole(Vec<Arc<K>>),
    Parts(ReplaceParts<K>),
}

impl<K> Listed<K> {
    /// Forgets the pages so far (a list that starts again).
    fn restart(&mut self) {
        self.count = 0;
        match &mut self.items {
            Collected::Whole(all) => all.clear(),
            Collected::Parts(parts) => parts.restart(),
        }
    }
}

impl<K, L, S> Reflector<K, L, S>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
    S: ReflectorStore<K>,
{
    /// The label, field and shard selectors to send.
    pub(crate) fn selectors(&self) -> (Option<String>, Option<String>, Option<String>) {
        (
            self.config.label_selector.clone(),
            self.config.field_selector.clone(),
            self.shard_selector_param(),
        )
    }

    /// Lists one page into `listed`, its objects through the interner if there is one: kept
    /// with the pages before, or, listing by page, handed to the store in batches of a page size
    /// as they are decoded (a server that answers with one response of everything still has it
    /// applied a page at a time), then what is left of the page. Returns the page, its objects
    /// taken out.
    async fn list_page(
        &self,
        params: &ListParams,
        listed: &mut Listed<K>,
    ) -> Result<ListPage<K>, Error> {
        let intern = self.interner(listed);
        let in_shards = |object: &K| self.in_shards(object);
        let filter: Option<ListFilter<'_, K>> = self.filters_shards().then_some(&in_shards);
        let parts = match &mut listed.items {
            Collected::Whole(all) => {
                let mut sink = ListSink::new().filtering(filter).interning(intern);
                let mut page = self.lister_watcher.list_into(params, &mut sink).await?;
                self.observe_response();
                listed.count += page.items.len();
                let items = std::mem::take(&mut page.items);
                if all.is_empty() {
                    *all = items;
                } else {
                    all.extend(items);
                }
                return Ok(page);
            }
            Collected::Parts(parts) => parts,
        };
        let mut hand_over = |batch: Vec<Arc<K>>| self.replace_part(batch, parts);
        let every = self.page_size();
        let backlogged = |waker: &Waker| self.backlogged(waker);
        let mut sink = ListSink::new()
            .filtering(filter)
            .interning(intern)
            .handing_over(every, &mut hand_over)
            .pacing(&backlogged);
        let page = self.lister_watcher.list_into(params, &mut sink).await;
        listed.count += sink.handed_over();
        drop(sink);
        let mut page = page?;
        self.observe_response();
        let rest = std::mem::take(&mut page.items);
        if page.resource_version.is_empty() && page.continue_token.is_none() {
            // The list is an error (see `list`): its last page changes nothing.
            return Ok(page);
        }
        listed.count += rest.len();
        if !rest.is_empty() {
            self.replace_part(rest, parts)?;
        }
        if page.continue_token.is_some() {
            self.wait_for_backlog().await;
        }
        Ok(page)
    }

    /// Waits, before the next page (or part) of a list by page, while the store is a queue
    /// whose consumer has more than a page's worth of changes still to take: the decoding
    /// never runs ahead of the consumer (a cache that packs, indexes or hands each object to
    /// handlers) by more than that and the part being read, so the decoded objects in flight
    /// stay bounded whatever the list's size, while the consumer has the rest of a page to
    /// take as the next part is read. The queue wakes the wait as its consumer takes what
    /// leaves a page or less (the wait also looks again every
    /// [`LOOK_AGAIN`](crate::LOOK_AGAIN)); a stop ends the wait with the run. Nothing waits
    /// after the last page: the list ends and the watch starts whatever the consumer's pace.
    async fn wait_for_backlog(&self) {
        wait_while(&|waker: &Waker| self.backlogged(waker)).await;
    }

    /// Whether the store is a queue whose consumer has more than a page's worth of changes
    /// still to take; if so, `waker` is woken once it has a page or less.
    fn backlogged(&self, waker: &Waker) -> bool {
        let bound = self.page_size();
        self.store
            .backlog_waking(bound, waker)
            .is_some_and(|queued| queued > bound)
    }

    /// The list: at `"0"` the first time, at the last synced version after that, at `""` once
    /// that version is known to be unavailable.
    pub(crate) async fn list(&self, state: &mut RunState) -> Result<(), Error> {
        let rv = state.relist_resource_version(&self.last_sync_resource_version());
        let begun = Instant::now();
        let listed = match self.paginated_list(rv).await {
            Ok(listed) => listed,
            Err(err @ Error::Store(_)) => return Err(err),
            Err(err) => {
                state.observe_list(false, begun, Err(err.kind()));
                match state.react(&err, Step::List) {
                    Reaction::ReadLatest => {
                        tracing::debug!(reflector = %self.name, error = %err, "list at a version the server no longer has, listing the latest state");
                        state.rv_unavailable = true;
                        state.list_reason = ListReason::after(err.kind());
                        let rv = state.relist_resource_version(&self.last_sync_resource_version());
                        let begun = Instant::now();
                        // A failure of this second list ends the cycle, whatever it is.
                        match self.paginated_list(rv).await {
                            Ok(listed) => listed,
                            Err(err @ Error::Store(_)) => return Err(err),
                            Err(e) => {
                                state.observe_list(false, begun, Err(e.kind()));
                                return Err(Error::List(Box::new(e)));
                            }
                        }
                    }
                    reaction => return Err(state.fail(reaction, Error::List(Box::new(err)))),
                }
            }
        };
        state.observe_list(false, begun, Ok(listed.count));
        state.ready();
        self.mark_served();
        state.rv_unavailable = false;
        if listed.resource_version.is_empty() {
            return Err(Error::List(Box::new(Error::decode(
                "list response without a resourceVersion",
            ))));
        }
        tracing::debug!(reflector = %self.name, items = listed.count, resource_version = %listed.resource_version, "listed");
        self.end_listing(listed)
    }

    /// Whether this list is handed to the store by page as it arrives: always the first
    /// (nothing is cached yet, so applying it page by page frees each page's objects while the
    /// rest arrives, and the queue counts as synced only at its end), and every relist with
    /// [`with_relist_by_page`](Self::with_relist_by_page).
    fn new_listing(&self) -> Listed<K> {
        let by_page = self.config.relist_by_page || self.last_sync_resource_version().is_empty();
        Listed {
            items: if by_page {
                Collected::Parts(ReplaceParts::new())
            } else {
                Collected::Whole(Vec::new())
            },
            count: 0,
            resource_version: String::new(),
            interning: self.config.list_interner.is_some()
                && (self.handed_parts.load(Ordering::Relaxed)
                    || !self.last_sync_resource_version().is_empty()),
        }
    }

    /// The page size: the configured one, or the default.
    fn page_size(&self) -> usize {
        self.config.page_size.unwrap_or(DEFAULT_PAGE_SIZE) as usize
    }

    /// The interner for `listed`'s objects, if they go through one.
    fn interner(&self, listed: &Listed<K>) -> Option<&ListInterner<K>> {
        self.config
            .list_interner
            .as_ref()
            .filter(|_| listed.interning)
    }

    /// Hands a part of a list to the store.
    fn replace_part(&self, batch: Vec<Arc<K>>, parts: &mut ReplaceParts<K>) -> Result<(), Error> {
        self.handed_parts.store(true, Ordering::Relaxed);
        self.store
            .replace_part(batch, parts)
            .map_err(|e| Error::Store(Box::new(e)))
    }

    /// Ends a list (or a streaming list) at its resource version: replaces the store's content
    /// with it, or ends its parts.
    fn end_listing(&self, listed: Listed<K>) -> Result<(), Error> {
        let rv = listed.resource_version;
        let result = match listed.items {
            Collected::Whole(items) => self.store.replace(items, rv.clone()),
            Collected::Parts(parts) => self.store.replace_parts_done(parts, rv.clone()),
        };
        result.map_err(|e| Error::Store(Box::new(e)))?;
        self.set_last_sync_resource_version(&rv);
        self.note_listed_shards();
        Ok(())
    }

    /// All pages of one list (client-go's pager): concatenated, or handed to the store page by
    /// page with [`with_relist_by_page`](Self::with_relist_by_page). A store's failure on a
    /// page is returned as [`Error::Store`].
    async fn paginated_list(&self, rv: String) -> Result<Listed<K>, Error> {
        // Every list asks for pages: a server with its watch cache on ignores the limit for lists
        // at "0" or at a version, but one without it (or any server that pages) would otherwise
        // read the whole collection into one response.
        let limit = Some(self.config.page_size.unwrap_or(DEFAULT_PAGE_SIZE));
        // With a limit, a list at a version and no match would be read at exactly that version
        // (and fail with 410 once it is compacted): ask for "not older than" explicitly, which is
        // what a list at a version means to the reflector.
        let resource_version_match =
            (!rv.is_empty() && rv != "0").then_some(ResourceVersionMatch::NotOlderThan);
        let (label_selector, field_selector, shard_selector) = self.selectors();
        let first = ListParams {
            label_selector,
            field_selector,
            shard_selector,
            limit,
            continue_token: None,
            resource_version: rv,
            resource_version_match,
        };
        let mut listed = self.new_listing();
        let mut page = self.list_page(&first, &mut listed).await?;
        self.note_server_filtering(false, page.shard_info.as_deref());
        loop {
            listed.resource_version = page.resource_version;
            let Some(token) = page.continue_token else {
                return Ok(listed);
            };
            let next = ListParams {
                continue_token: Some(token),
                resource_version: String::new(),
                resource_version_match: None,
                ..first.clone()
            };
            match self.list_page(&next, &mut listed).await {
                Ok(more) => page = more,
                Err(err) => match react(err.kind(), Step::ListPage, || false) {
                    Reaction::ListWhole => {
                        tracing::debug!(reflector = %self.name, "continue token expired, listing everything at once");
                        let full = ListParams {
                            limit: None,
                            continue_token: None,
                            ..first.clone()
                        };
                        // The pages so far were of another snapshot: only this list counts.
                        listed.restart();
                        let whole = self.list_page(&full, &mut listed).await?;
                        listed.resource_version = whole.resource_version;
                        return Ok(listed);
                    }
                    // The list's own failure: its caller reacts to it as a list error.
                    _ => return Err(err),
                },
            }
        }
    }

    /// The initial state as a streaming list. On success returns the open stream, positioned
    /// just after the initial-events-end bookmark.
    pub(crate) async fn streaming_list(
        &self,
        state: &mut RunState,
        key: &KeyFunc<K>,
    ) -> Result<WatchStream<K>, Error> {
        loop {
            let rv = if state.rv_unavailable {
                String::new()
            } else {
                self.last_sync_resource_version()
            };
            let (label_selector, field_selector, shard_selector) = self.selectors();
            let params = WatchParams {
                label_selector,
                field_selector,
                shard_selector,
                resource_version: rv,
                resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
                timeout: Some(state.watch_timeout()),
                allow_bookmarks: true,
                send_initial_events: true,
            };
            let begun = Instant::now();
            let opened = self.lister_watcher.watch(&params).await;
            if opened.is_ok() {
                self.observe_response();
            }
            let failure = match opened {
                Ok(mut stream) => match self.collect_initial_events(&mut stream, key).await {
                    Ok(Some(listed)) => {
                        state.observe_list(true, begun, Ok(listed.count));
                        state.ready();
                        self.mark_served();
                        self.note_server_filtering(true, None);
                        state.rv_unavailable = false;
                        tracing::debug!(reflector = %self.name, items = listed.count, resource_version = %listed.resource_version, "streamed the initial list");
                        self.end_listing(listed)?;
                        // The stream goes on as the watch: told as one, as its end will be.
                        if let Some(observer) = &self.config.observer {
                            observer.watch_started();
                        }
                        return Ok(stream);
                    }
                    Ok(None) => {
                        // The stream ended before the end bookmark (a server still starting
                        // answers so): start again on the readiness cadence, so that a server
                        // which closes at once cannot make us spin.
                        tracing::debug!(reflector = %self.name, "streaming list ended before its end bookmark, retrying");
                        state.wait(Delay::Ready(None)).await;
                        continue;
                    }
                    Err(err) => err,
                },
                Err(err) => err,
            };
            state.observe_list(true, begun, Err(failure.kind()));
            match state.react(&failure, Step::StreamingList) {
                Reaction::Retry { after } => {
                    tracing::debug!(reflector = %self.name, error = %failure, "streaming list failed, retrying");
                    state.wait(after).await;
                }
                Reaction::ReadLatest => {
                    tracing::debug!(reflector = %self.name, error = %failure, "streaming list from a version the server no longer has, streaming the latest state");
                    state.rv_unavailable = true;
                    state.list_reason = ListReason::after(failure.kind());
                }
                // The caller falls back to a list, in the same cycle.
                reaction => {
                    return Err(state.fail(reaction, Error::StreamingList(Box::new(failure))));
                }
            }
        }
    }

    /// Reads the initial events of a streaming list: handed to the store a quarter of a page
    /// size at a time as they arrive when the list goes by page
    /// ([`new_listing`](Self::new_listing)), else collected into a temporary set for one
    /// replace. `None` if the stream ended before the end bookmark (what was handed over
    /// stays, as after a list that failed part way).
    async fn collect_initial_events(
        &self,
        stream: &mut WatchStream<K>,
        key: &KeyFunc<K>,
    ) -> Result<Option<Listed<K>>, Error> {
        let mut listed = self.new_listing();
        let mut initial = Initial::default();
        // A quarter of a page at a time: the events come as fast as the server sends them, often
        // faster than a cache that packs its objects takes them, so the queue fills to its bound
        // (a page, see `wait_for_backlog`); with parts that small, what is queued stays within a
        // page and a quarter, and the consumer still has the rest of a page as the next comes.
        let every = self.page_size().div_ceil(STREAMING_PARTS);
        while let Some(event) = stream.next().await {
            match event? {
                // Outside the shard set: never cached, so neither added nor removed.
                WatchEvent::Added { object, .. }
                | WatchEvent::Modified { object, .. }
                | WatchEvent::Deleted { object, .. }
                    if !self.in_shards(&object) => {}
                WatchEvent::Added { object, .. } | WatchEvent::Modified { object, .. } => {
                    let object = match self.interner(&listed) {
                        Some(intern) => intern(object),
                        None => object,
                    };
                    initial.add(object);
                    // Only by page: a list collected whole keeps every object until the end.
                    if let Collected::Parts(parts) = &mut listed.items
                        && let Some(batch) = initial.full(every)
                    {
                        listed.count += batch.len();
                        self.replace_part(batch, parts)?;
                        self.wait_for_backlog().await;
                    }
                }
                WatchEvent::Deleted { object, .. } => {
                    if let Ok(k) = key(&object) {
                        initial.remove(&k, &mut listed.items, key);
                    }
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end: true,
                } => {
                    let rest = initial.into_rest();
                    listed.count += rest.len();
                    match &mut listed.items {
                        Collected::Whole(all) => *all = rest,
                        Collected::Parts(parts) if !rest.is_empty() => {
                            self.replace_part(rest, parts)?
                        }
                        Collected::Parts(_) => {}
                    }
                    listed.resource_version = resource_version;
                    return Ok(Some(listed));
                }
                WatchEvent::Bookmark { .. } => {}
                WatchEvent::Error(status) => return Err(Error::Api(status)),
            }
        }
        Ok(None)
    }
}

/// The initial events of a streaming list not handed to the store yet, in their order (a
/// later one of a key wins, in the store as in a list). Their keys are not kept: the store
/// computes them, and a deletion among the initial events (rare) computes those it needs.
struct Initial<K> {
    objects: Vec<Arc<K>>,
}

impl<K> Default for Initial<K> {
    fn default() -> Self {
        Self {
            objects: Vec::new(),
        }
    }
}

impl<K> Initial<K> {
    fn add(&mut self, object: Arc<K>) {
        self.objects.push(object);
    }

    /// The objects to hand over, once there are `every` of them; the next ones go on in room
    /// made for them (up to 4,096: a page size may be as large as a user likes).
    fn full(&mut self, every: usize) -> Option<Vec<Arc<K>>> {
        (self.objects.len() >= every.max(1))
            .then(|| std::mem::replace(&mut self.objects, Vec::with_capacity(every.min(4096))))
    }

    /// Forgets `key`, here and in the parts handed over before.
    fn remove(&mut self, key: &str, items: &mut Collected<K>, key_of: &KeyFunc<K>) {
        self.objects
            .retain(|object| key_of(object).ok().as_deref() != Some(key));
        if let Collected::Parts(parts) = items {
            parts.unlist(key, |object| key_of(object).ok());
        }
    }

    fn take(&mut self) -> Vec<Arc<K>> {
        std::mem::take(&mut self.objects)
    }

    fn into_rest(mut self) -> Vec<Arc<K>> {
        self.take()
    }
}
