//! Test support: a source of scripted lister-watchers that records what it was asked for.
#![allow(unreachable_pub)]

use std::sync::Arc;

use informer_factory::{ListerWatcherSource, Selection};
use informer_reflector::{Error, FakeListerWatcher, ListPage, Status, WatchEvent, WatchStep};
use informer_store::{FnIdentity, ResourceVersionFunc, SharedIdentity};
use informer_store::{
    IndexValues, Indexers, KeyFunc, NAMESPACE_INDEX, index_func, indexers, key_func,
    meta_namespace_key,
};
use parking_lot::Mutex;

/// The object every test caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj {
    pub ns: String,
    pub name: String,
    pub rv: String,
    pub app: String,
}

pub fn obj(ns: &str, name: &str, app: &str) -> Arc<Obj> {
    Arc::new(Obj {
        ns: ns.into(),
        name: name.into(),
        rv: "1".into(),
        app: app.into(),
    })
}

/// Resource names the source serves: each gets its own informers.
pub struct Pods;
pub struct Secrets;
/// Served by a server that never answers a list.
pub struct Stuck;
/// Not served by the server: its first list is answered `404 NotFound` (a CRD not installed
/// yet), the later ones never.
pub struct NotYet;

/// A lister-watcher the source made, with what it was made for.
#[derive(Clone)]
pub struct Made {
    pub resource: &'static str,
    pub selection: Selection,
    pub fake: Arc<FakeListerWatcher<Obj>>,
}

/// Serves `objects` (narrowed by each selection's namespace) to every lister-watcher, then a
/// watch that stays open; `Stuck` gets no answer at all.
#[derive(Default)]
pub struct Source {
    pub objects: Vec<Arc<Obj>>,
    pub made: Mutex<Vec<Made>>,
    /// If set, the watch fails with 410 Expired at once, and the relist serves this one page
    /// with a continue token, then never answers the next page.
    pub relist_first_page: Option<Vec<Arc<Obj>>>,
    /// Its lister-watchers say they serve streaming lists (the answers stay a list, then a
    /// watch: a streaming informer's first watch consumes the list's place, so use it only to
    /// see what is asked first).
    pub streaming: bool,
}

impl Source {
    pub fn with(objects: Vec<Arc<Obj>>) -> Self {
        Self {
            objects,
            made: Mutex::default(),
            relist_first_page: None,
            streaming: false,
        }
    }

    /// As [`with`](Self::with), its lister-watchers serving streaming lists.
    pub fn streaming(objects: Vec<Arc<Obj>>) -> Self {
        Self {
            streaming: true,
            ..Self::with(objects)
        }
    }

    /// As [`with`](Self::with), and every informer relists at once, getting only the first
    /// page of its relist (`page`).
    pub fn relisting(objects: Vec<Arc<Obj>>, page: Vec<Arc<Obj>>) -> Self {
        Self {
            relist_first_page: Some(page),
            ..Self::with(objects)
        }
    }

    pub fn made(&self) -> Vec<Made> {
        self.made.lock().clone()
    }

    fn make(
        &self,
        resource: &'static str,
        selection: &Selection,
        answer: bool,
    ) -> Arc<FakeListerWatcher<Obj>> {
        let fake = match self.streaming {
            true => FakeListerWatcher::new().supporting_streaming_lists(),
            false => FakeListerWatcher::new(),
        };
        let fake = Arc::new(fake);
        if resource == "NotYet" {
            fake.push_list_error(Error::Api(Status::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )));
        } else if answer {
            let items = self
                .objects
                .iter()
                .filter(|o| selection.namespace.as_ref().is_none_or(|ns| *ns == o.ns))
                .cloned()
                .collect();
            fake.push_list(ListPage::new(items, "10"));
            match &self.relist_first_page {
                None => {
                    fake.push_watch(vec![WatchStep::Hang]);
                }
                Some(page) => {
                    let expired = Status::expired("too old resource version");
                    fake.push_watch(vec![WatchStep::Event(WatchEvent::Error(expired))]);
                    fake.push_list(ListPage::new(page.clone(), "20").with_continue("more"));
                }
            }
        }
        self.made.lock().push(Made {
            resource,
            selection: selection.clone(),
            fake: Arc::clone(&fake),
        });
        fake
    }
}

fn obj_key() -> KeyFunc<Obj> {
    key_func(|o: &Obj| meta_namespace_key(Some(&o.ns), &o.name))
}

fn obj_rv() -> ResourceVersionFunc<Obj> {
    Arc::new(|o: &Obj| Some(o.rv.as_str()))
}

fn obj_indexers() -> Indexers<Obj> {
    indexers([(
        NAMESPACE_INDEX,
        index_func(|o: &Obj| Ok(IndexValues::one(o.ns.as_str()))),
    )])
}

macro_rules! serve {
    ($resource:ident, $answer:expr) => {
        impl ListerWatcherSource<$resource> for Source {
            type Object = Obj;
            type ListerWatcher = Arc<FakeListerWatcher<Obj>>;

            fn lister_watcher(&self, selection: &Selection) -> Self::ListerWatcher {
                self.make(stringify!($resource), selection, $answer)
            }
            fn identity(&self) -> SharedIdentity<Obj> {
                Arc::new(
                    FnIdentity::new(obj_key())
                        .with_resource_version(obj_rv())
                        .with_indexers(obj_indexers()),
                )
            }
        }
    };
}

serve!(Pods, true);
serve!(Secrets, true);
serve!(Stuck, false);
serve!(NotYet, false);

/// The standard objects: two namespaces, two apps.
pub fn objects() -> Vec<Arc<Obj>> {
    vec![
        obj("a", "web-0", "web"),
        obj("a", "db-0", "db"),
        obj("b", "web-0", "web"),
    ]
}
