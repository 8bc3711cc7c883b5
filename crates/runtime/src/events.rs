//! Kubernetes Events from a controller (`events.k8s.io/v1`), as client-go's `tools/events`
//! writes them: see [`Recorder`].

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long an event may go without a repeat before a repeat starts a new Event instead of
/// counting in the old one's series (client-go's `finishTime`).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// The series a recorder follows at most by default; past it, the one seen least recently is
/// dropped (its next repeat starts a new Event).
pub const MAX_SERIES: usize = 4096;

/// Who writes the events: the controller's name (`reportingController`, e.g.
/// `example.com/widget-controller`) and this replica (`reportingInstance`, e.g. the pod name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// `reportingController`.
    pub controller: String,
    /// `reportingInstance`.
    pub instance: Option<String>,
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something a person may need to look at.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event, about the object it is published for.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// Why, in one CamelCase word (`Created`, `FailedScaling`).
    pub reason: String,
    /// What the controller did or failed to do (`Reconcile`, `Scale`).
    pub action: String,
    /// A human-readable description (at most 1 kB is kept by the API server).
    pub note: Option<String>,
    /// A second object the event is about (the child created, say).
    pub related: Option<ObjectReference>,
}

/// An event's identity for its series: what client-go's `getKey` compares (the note is not
/// part of it: a repeat with another note counts in the same series).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    type_: EventType,
    action: String,
    reason: String,
    regarding: Vec<Option<String>>,
    related: Option<Vec<Option<String>>>,
}

impl Key {
    /// The series `spec` about `regarding` counts in.
    fn new(spec: &EventSpec, regarding: &ObjectReference) -> Self {
        Self {
            type_: spec.type_,
            action: spec.action.clone(),
            reason: spec.reason.clone(),
            regarding: reference_key(regarding),
            related: spec.related.as_ref().map(reference_key),
        }
    }
}

/// Every field of a reference, as a key.
fn reference_key(r: &ObjectReference) -> Vec<Option<String>> {
    vec![
        r.api_version.clone(),
        r.kind.clone(),
        r.namespace.clone(),
        r.name.clone(),
        r.uid.clone(),
        r.field_path.clone(),
        r.resource_version.clone(),
    ]
}

/// A series: the Event written for it, its count, when it was last seen.
#[derive(Debug)]
struct Series {
    namespace: String,
    name: String,
    count: i32,
    seen: Instant,
}

/// A repeat of a followed series: its Event and its count now.
#[derive(Debug)]
struct Repeat {
    namespace: String,
    name: String,
    count: i32,
}

/// Publishes Kubernetes Events (`events.k8s.io/v1`) about objects, client-go's way: the first
/// occurrence creates an Event; a repeat (same type, action, reason, regarding and related
/// objects) within [`SERIES_WINDOW`] of the last one counts in its `series` (`count`,
/// `lastObservedTime`, a merge patch) instead of creating another. A series not repeated for
/// the window is forgotten, and at most [`MAX_SERIES`] are followed, so the recorder's memory
/// is bounded. An Event is written in its object's namespace (`default` for a cluster-scoped
/// object) and named `<object name>.<hex time>`.
///
/// ```no_run
/// use informer_runtime::events::{EventSpec, EventType, Recorder, Reporter};
/// use k8s_openapi::api::core::v1::ObjectReference;
///
/// # async fn run(client: kube::Client, pod: ObjectReference) -> Result<(), kube::Error> {
/// let recorder = Recorder::new(client, Reporter {
///     controller: "example.com/widget-controller".into(),
///     instance: std::env::var("POD_NAME").ok(),
/// });
/// let spec = EventSpec {
///     type_: EventType::Normal,
///     reason: "Created".into(),
///     action: "Reconcile".into(),
///     note: Some("created the widget's config map".into()),
///     related: None,
/// };
/// recorder.publish(&spec, &pod).await?;
/// # Ok(()) }
/// ```
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    window: Duration,
    max_series: usize,
    series: Mutex<HashMap<Key, Series>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("reporter", &self.reporter)
            .field("window", &self.window)
            .field("series", &self.series())
            .finish()
    }
}

impl Recorder {
    /// A recorder writing through `client` as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            window: SERIES_WINDOW,
            max_series: MAX_SERIES,
            series: Mutex::new(HashMap::new()),
        }
    }

    /// Another bound than [`MAX_SERIES`] on the series followed (at least 1).
    pub fn with_max_series(mut self, max: usize) -> Self {
        self.max_series = max.max(1);
        self
    }

    /// Another series window than [`SERIES_WINDOW`] (zero: every occurrence its own Event).
    pub fn with_series_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Publishes `spec` about `regarding`: a new Event, or one more in a series. An error is
    /// the API server's answer; the event is not retried (events are best effort).
    pub async fn publish(
        &self,
        spec: &EventSpec,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = Key::new(spec, regarding);
        let now = SystemTime::now();
        if let Some(repeat) = self.repeat(&key) {
            match self.count_in_series(&repeat, now).await {
                Ok(()) => return Ok(()),
                // The Event is gone (expired, deleted): start the series again.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.lock().remove(&key);
                }
                Err(e) => return Err(e),
            }
        }
        let (namespace, name) = event_place(regarding, now);
        let event = self.event(spec, regarding, &namespace, &name, now);
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await?;
        self.follow(key, namespace, name);
        Ok(())
    }

    /// Counts one more occurrence in `key`'s series, if it is followed (series past the window
    /// are forgotten first): the series' Event and its new count.
    fn repeat(&self, key: &Key) -> Option<Repeat> {
        let mut series = self.lock();
        let window = self.window;
        series.retain(|_, s| s.seen.elapsed() < window);
        match series.get_mut(key) {
            Some(s) => {
                s.count += 1;
                s.seen = Instant::now();
                Some(Repeat {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    count: s.count,
                })
            }
            None => None,
        }
    }

    /// Writes a repeat into its Event's `series` (a merge patch).
    async fn count_in_series(&self, repeat: &Repeat, now: SystemTime) -> Result<(), kube::Error> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &repeat.namespace);
        let patch = json!({"series": EventSeries {
            count: repeat.count,
            last_observed_time: micro_time(now),
        }});
        api.patch(&repeat.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// The Event of a first occurrence of `spec` about `regarding`, named `name` in
    /// `namespace`.
    fn event(
        &self,
        spec: &EventSpec,
        regarding: &ObjectReference,
        namespace: &str,
        name: &str,
        now: SystemTime,
    ) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            action: Some(spec.action.clone()),
            reason: Some(spec.reason.clone()),
            note: spec.note.clone(),
            type_: Some(spec.type_.as_str().to_owned()),
            regarding: Some(regarding.clone()),
            related: spec.related.clone(),
            event_time: Some(micro_time(now)),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            ..Event::default()
        }
    }

    /// Follows the series `key` begins with the Event `name` in `namespace`; at the bound, in
    /// place of the series seen least recently.
    fn follow(&self, key: Key, namespace: String, name: String) {
        let mut series = self.lock();
        if series.len() >= self.max_series
            && let Some(oldest) = series
                .iter()
                .min_by_key(|(_, s)| s.seen)
                .map(|(k, _)| k.clone())
        {
            series.remove(&oldest);
        }
        series.insert(
            key,
            Series {
                namespace,
                name,
                count: 1,
                seen: Instant::now(),
            },
        );
    }

    /// The series (a panic while they were held leaves them consistent: each change is one
    /// statement).
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Series>> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many series the recorder follows now.
    pub fn series(&self) -> usize {
        self.lock().len()
    }
}

/// Where the Event of a first occurrence about `regarding` at `now` is written: the object's
/// namespace (`default` for a cluster-scoped object) and `<object name>.<hex time>`.
fn event_place(regarding: &ObjectReference, now: SystemTime) -> (String, String) {
    let namespace = regarding
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let name = format!(
        "{}.{nanos:x}",
        regarding.name.as_deref().unwrap_or("unnamed")
    );
    (namespace, name)
}

fn micro_time(t: SystemTime) -> MicroTime {
    MicroTime(Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH))
}
