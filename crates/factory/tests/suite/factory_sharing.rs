//! One informer per resource, selection and transform name, however many callers ask.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Obj, Pods, Secrets, Source, objects};
use informer_factory::{InformerOptions, Selection, SharedInformerFactory};
use informer_fifo::transform_func;

#[test]
fn the_same_resource_and_options_get_the_same_informer() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let first = factory.informer::<Pods>();
    let again = factory.informer::<Pods>();
    let explicit = factory.informer_with::<Pods>(InformerOptions::new());
    let everything = factory.informer_with::<Pods>(InformerOptions::new().namespace(""));
    assert!(Arc::ptr_eq(&first, &again));
    assert!(Arc::ptr_eq(&first, &explicit));
    assert!(Arc::ptr_eq(&first, &everything), "\"\" is all namespaces");
    assert_eq!(factory.source().made().len(), 1, "one lister-watcher");

    let in_a = factory.informer_with::<Pods>(InformerOptions::new().namespace("a"));
    assert!(Arc::ptr_eq(
        &in_a,
        &factory.informer_with::<Pods>(InformerOptions::new().namespace("a"))
    ));
    assert_eq!(factory.informers().len(), 2);
}

#[test]
fn different_types_selections_and_transforms_get_different_informers() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let pods = factory.informer::<Pods>();
    let secrets = factory.informer::<Secrets>();
    let in_a = factory.informer_with::<Pods>(InformerOptions::new().namespace("a"));
    let web = factory.informer_with::<Pods>(InformerOptions::new().labels("app=web"));
    let on_node = factory.informer_with::<Pods>(InformerOptions::new().fields("spec.nodeName=n1"));
    let slim = factory.informer_with::<Pods>(
        InformerOptions::new().transform("slim", transform_func(|o: Arc<Obj>| Ok(o))),
    );
    let all = [&pods, &secrets, &in_a, &web, &on_node, &slim];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert!(!Arc::ptr_eq(a, b));
        }
    }
    // A second request naming the same transform shares the first one's informer.
    let slim_again = factory.informer_with::<Pods>(
        InformerOptions::new().transform("slim", transform_func(|o: Arc<Obj>| Ok(o))),
    );
    assert!(Arc::ptr_eq(&slim, &slim_again));

    let made: Vec<_> = factory
        .source()
        .made()
        .into_iter()
        .map(|m| (m.resource, m.selection))
        .collect();
    assert_eq!(
        made,
        [
            ("Pods", Selection::all()),
            ("Secrets", Selection::all()),
            ("Pods", Selection::all().namespace("a")),
            ("Pods", Selection::all().labels("app=web")),
            ("Pods", Selection::all().fields("spec.nodeName=n1")),
            ("Pods", Selection::all()), // the transformed one
        ]
    );
}

#[test]
fn factory_defaults_fill_in_what_options_leave_unset() {
    let factory = SharedInformerFactory::new(Source::with(objects()))
        .with_namespace("a")
        .with_selectors("app=web", "");
    let default = factory.informer::<Pods>();
    let same = factory.informer_with::<Pods>(InformerOptions::new().namespace("a"));
    assert!(Arc::ptr_eq(&default, &same));
    factory.informer_with::<Pods>(InformerOptions::new().namespace("").labels(""));
    factory.informer_with::<Pods>(InformerOptions::new().fields("status.phase=Running"));
    let made: Vec<_> = factory
        .source()
        .made()
        .into_iter()
        .map(|m| m.selection)
        .collect();
    assert_eq!(
        made,
        [
            Selection::all().namespace("a").labels("app=web"),
            Selection::all(),
            Selection::all()
                .namespace("a")
                .labels("app=web")
                .fields("status.phase=Running"),
        ]
    );
}

#[test]
fn configure_runs_once_per_new_informer_of_its_type() {
    let calls = Arc::new(AtomicUsize::new(0));
    let factory = SharedInformerFactory::new(Source::with(objects())).configure::<Pods>({
        let calls = Arc::clone(&calls);
        move |informer| {
            calls.fetch_add(1, Ordering::SeqCst);
            informer
        }
    });
    factory.informer::<Pods>();
    factory.informer::<Pods>();
    factory.informer::<Secrets>();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    factory.informer_with::<Pods>(InformerOptions::new().namespace("b"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn sharing_holds_under_concurrent_requests() {
    let factory = Arc::new(SharedInformerFactory::new(Source::with(objects())));
    let informers: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| factory.informer::<Pods>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(informers.iter().all(|i| Arc::ptr_eq(i, &informers[0])));
    assert_eq!(factory.source().made().len(), 1);
}
