//! The per-object retry policy: how many times in a row each VLLMService's
//! reconcile failed, and how long it waits before the next try. No I/O.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use kube::runtime::reflector::ObjectRef;

use crate::cache::CachedVllmService;

/// Consecutive failures per VLLMService. An entry goes when its object
/// reconciles or is deleted (the VLLMService watch calls [`Failures::forget`]
/// on each Delete), so the map holds only objects that exist and fail.
#[derive(Clone, Default)]
pub struct Failures(Arc<Mutex<HashMap<ObjectRef<CachedVllmService>, u32>>>);

impl Failures {
    /// Counts a failed reconcile of `obj`; returns how many in a row.
    pub fn failed(&self, obj: ObjectRef<CachedVllmService>) -> u32 {
        let mut f = self.0.lock().expect("failures lock");
        let n = f.entry(obj).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// How many reconciles of `obj` failed in a row.
    pub fn count(&self, obj: &ObjectRef<CachedVllmService>) -> u32 {
        self.0
            .lock()
            .expect("failures lock")
            .get(obj)
            .copied()
            .unwrap_or(0)
    }

    /// Forgets the failures of `obj`: it reconciled, or it is gone.
    pub fn forget(&self, obj: &ObjectRef<CachedVllmService>) {
        self.0.lock().expect("failures lock").remove(obj);
    }

    /// The objects failing now.
    pub fn objects(&self) -> Vec<ObjectRef<CachedVllmService>> {
        self.0
            .lock()
            .expect("failures lock")
            .keys()
            .cloned()
            .collect()
    }

    /// How many objects are failing now.
    pub fn len(&self) -> usize {
        self.0.lock().expect("failures lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The wait before retry number `failures`: 1 s, 2 s, 4 s ... capped at
/// 256 s, each stretched by a random 0-50 %, so that objects that failed
/// together (an API server outage, a webhook down) do not retry together.
pub fn backoff(failures: u32) -> Duration {
    stretched(failures, fastrand::f64())
}

/// [`backoff`] with the random part given (`jitter` in [0, 1)).
fn stretched(failures: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1u64 << failures.saturating_sub(1).min(8));
    base.mul_f64(1.0 + 0.5 * jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_spreads_by_half() {
        assert_eq!(stretched(1, 0.0), Duration::from_secs(1));
        assert_eq!(stretched(2, 0.0), Duration::from_secs(2));
        assert_eq!(stretched(5, 0.0), Duration::from_secs(16));
        assert_eq!(stretched(40, 0.0), Duration::from_secs(256));
        assert_eq!(stretched(u32::MAX, 0.0), Duration::from_secs(256));
        assert_eq!(stretched(3, 0.5), Duration::from_secs(5));
        assert_eq!(stretched(40, 1.0), Duration::from_secs(384));
        // Two objects failing together rarely wait the same time.
        let waits: std::collections::HashSet<_> = (0..20).map(|_| backoff(6)).collect();
        assert!(waits.len() > 1, "{waits:?}");
        assert!(
            waits
                .iter()
                .all(|w| (Duration::from_secs(32)..Duration::from_secs(48)).contains(w))
        );
    }

    #[test]
    fn failures_count_in_a_row_and_go_with_their_object() {
        let f = Failures::default();
        let a = ObjectRef::new("a").within("ns");
        assert_eq!(f.failed(a.clone()), 1);
        assert_eq!(f.failed(a.clone()), 2);
        assert_eq!(f.failed(ObjectRef::new("b").within("ns")), 1);
        f.forget(&a);
        assert_eq!(f.len(), 1);
        assert_eq!(f.objects(), vec![ObjectRef::new("b").within("ns")]);
        assert_eq!(f.failed(a), 1);
    }
}
