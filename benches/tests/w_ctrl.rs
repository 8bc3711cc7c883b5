//! W-CTRL's invariants on tiny sizes, both sides: one reconcile per pod from a cold start, and
//! after the updates every pod reconciled at its final version (the runs panic otherwise),
//! with no more reconciles than updates and no fewer than the pods they touch. Times are not
//! checked.

use informer_benches::w_ctrl::{self, Data};
use informer_benches::{Sizes, w_inf};

#[test]
fn both_sides_reconcile_every_pod_once_then_at_its_final_version() {
    let s = Sizes::tiny();
    let data = Data::new(s.ctrl_pods, s.ctrl_updates);
    assert_eq!(data.touched(), s.ctrl_pods);
    let rt = w_inf::runtime();
    for run in [w_ctrl::ours(&rt, &data), w_ctrl::kube_runtime(&rt, &data)] {
        assert_eq!(run.cold_reconciles, s.ctrl_pods, "{run:?}");
        assert!(
            (data.touched()..=data.updates()).contains(&run.reconciles),
            "{run:?}"
        );
        assert!(run.reconciles_per_sec() > 0.0, "{run:?}");
    }
}

#[test]
fn a_pod_without_updates_is_final_from_the_list_on() {
    // 7919 is 7 * 1131 + 2 modulo 7: with 7 pods and 3 updates, pods 0, 2 and 4 get one each,
    // the others keep the list's version.
    let data = Data::new(7, 3);
    assert_eq!(data.touched(), 3);
    let rt = w_inf::runtime();
    for run in [w_ctrl::ours(&rt, &data), w_ctrl::kube_runtime(&rt, &data)] {
        assert_eq!(run.cold_reconciles, 7, "{run:?}");
        assert_eq!(run.reconciles, 3, "{run:?}");
    }
}
