//! `strip_managed_fields` on an object nobody else holds changes it where it is: no allocation.
//!
//! Alone in its own test binary, because the counting allocator counts every thread of the
//! process: another test running beside it would be counted too.

use std::alloc::System;
use std::sync::Arc;

use informer_kube::strip_managed_fields;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[test]
fn an_unshared_object_is_stripped_without_an_allocation() {
    let strip = strip_managed_fields::<Pod>();
    let mut pod = Pod::default();
    pod.metadata.name = Some("web-0".into());
    pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubectl".into()),
        ..Default::default()
    }]);
    let pod = Arc::new(pod);

    let region = Region::new(GLOBAL);
    let out = strip(pod).unwrap();
    let stats = region.change();

    assert_eq!(out.metadata.managed_fields, None);
    assert_eq!(out.metadata.name.as_deref(), Some("web-0"));
    assert_eq!(
        stats.allocations, 0,
        "stripping an unshared object allocated: {stats:?}"
    );
    // The managed fields were freed: the vector and the manager's name.
    assert!(stats.deallocations >= 2, "{stats:?}");
}
