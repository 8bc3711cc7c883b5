//! The reconciler runtime's integration tests, in one test binary: a module per area. Those
//! that talk to the simulator through kube-client need the `kube` feature (on by default).

#[cfg(feature = "kube")]
mod apply_status;
#[cfg(feature = "kube")]
mod client_requests;
mod controller;
#[cfg(feature = "kube")]
mod events;
#[cfg(feature = "kube")]
mod expectations_late_cache;
#[cfg(feature = "kube")]
mod finalizer;
mod leader;
mod priority;
#[cfg(feature = "kube")]
mod read_your_writes;
mod sharded;
