//! The statuses this operator wrote that the VLLMService cache does not show
//! yet. The watch event of the operator's own write can arrive after the
//! next reconcile started; comparing with the stale copy would write the same
//! status again and repeat its events. No I/O.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{Arc, Mutex},
};

use kube::{Resource, ResourceExt, runtime::reflector::ObjectRef};
use vllmservice_api::{VLLMService, VLLMServiceStatus};

use super::CachedVllmService;

/// The statuses this operator wrote that the VLLMService cache may not show
/// yet, per VLLMService. An entry goes as soon as the cache holds a newer copy
/// of its object (the VLLMService watch calls [`StatusEchoes::cached`] after
/// the cache took each event), so the memory is that of the writes in flight,
/// not one status per VLLMService for as long as it exists.
#[derive(Clone, Default)]
pub struct StatusEchoes(Arc<Mutex<HashMap<ObjectRef<CachedVllmService>, Written>>>);

fn key_of(vs: &VLLMService) -> ObjectRef<CachedVllmService> {
    ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default())
}

impl StatusEchoes {
    /// `vs` (a cached copy) with the status it has now: the status written on
    /// it if there is one, else `vs` itself.
    pub fn latest<'a>(&self, vs: &'a VLLMService) -> Cow<'a, VLLMService> {
        let key = key_of(vs);
        let mut written = self.0.lock().expect("written lock");
        match written.get(&key) {
            Some(w)
                if Some(&w.uid) == vs.metadata.uid.as_ref()
                    && w.based_on == vs.metadata.resource_version =>
            {
                let mut latest = vs.clone();
                latest.status = Some(w.status.clone());
                Cow::Owned(latest)
            }
            Some(_) => {
                // The cache has caught up (or the object was replaced).
                written.remove(&key);
                Cow::Borrowed(vs)
            }
            None => Cow::Borrowed(vs),
        }
    }

    /// Remembers `status`, written on `vs` (the copy the write was based
    /// on), unless `cached` (what the cache holds now) is newer than `vs`:
    /// then the cache took the write's echo already, checked under the lock
    /// that [`StatusEchoes::cached`] takes after each change of the cache.
    pub fn wrote(
        &self,
        vs: &VLLMService,
        status: &VLLMServiceStatus,
        cached: impl FnOnce(&ObjectRef<CachedVllmService>) -> Option<Option<String>>,
    ) {
        let key = key_of(vs);
        let mut written = self.0.lock().expect("written lock");
        if cached(&key).is_some_and(|rv| rv != vs.metadata.resource_version) {
            written.remove(&key);
            return;
        }
        written.insert(
            key,
            Written {
                uid: vs.metadata.uid.clone().unwrap_or_default(),
                based_on: vs.metadata.resource_version.clone(),
                status: status.clone(),
            },
        );
    }

    /// The VLLMService cache now holds `vs` (or has dropped it, for a
    /// deleted one): a status written on an older copy is there, or moot.
    pub fn cached(&self, vs: &CachedVllmService) {
        let mut written = self.0.lock().expect("written lock");
        if written.is_empty() {
            return;
        }
        let key = ObjectRef::from_obj(vs);
        if written
            .get(&key)
            .is_some_and(|w| w.based_on != vs.meta().resource_version)
        {
            written.remove(&key);
        }
    }

    /// How many writes the cache has not shown yet.
    pub fn len(&self) -> usize {
        self.0.lock().expect("written lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A status write the cache may not have seen yet.
struct Written {
    uid: String,
    /// The resourceVersion of the copy the write was based on.
    based_on: Option<String>,
    status: VLLMServiceStatus,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service_at(rv: &str, phase: &str) -> (VLLMService, CachedVllmService) {
        let text = json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "a", "uid": "u1", "resourceVersion": rv},
            "spec": {"image": "vllm/vllm-openai:latest", "modelPath": "/m", "modelName": "m",
                     "storage": {"pvcName": "p", "mountPath": "/data"}},
            "status": {"phase": phase},
        });
        (
            serde_json::from_value(text.clone()).unwrap(),
            serde_json::from_value(text).unwrap(),
        )
    }

    fn phase(vs: &VLLMService) -> Option<&'static str> {
        vs.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
    }

    /// A written status stands in for the cached one until the cache holds a
    /// newer copy, and is forgotten then, with no later reconcile needed.
    #[test]
    fn a_written_status_is_remembered_until_the_cache_shows_a_newer_copy() {
        let echoes = StatusEchoes::default();
        let (v5, c5) = service_at("5", "Pending");
        let written: VLLMServiceStatus =
            serde_json::from_value(json!({"phase": "Running"})).unwrap();
        echoes.wrote(&v5, &written, |_| Some(Some("5".into())));
        assert_eq!(phase(&echoes.latest(&v5)), Some("Running"));
        // The cache takes an event of the same copy again (a re-list): kept.
        echoes.cached(&c5);
        assert_eq!(echoes.len(), 1);
        assert_eq!(phase(&echoes.latest(&v5)), Some("Running"));
        // The write's echo: forgotten at once.
        let (v6, c6) = service_at("6", "Running");
        echoes.cached(&c6);
        assert!(echoes.is_empty());
        assert_eq!(phase(&echoes.latest(&v6)), Some("Running"));

        // The echo reached the cache before the write's answer: nothing kept.
        echoes.wrote(&v5, &written, |_| Some(Some("6".into())));
        assert!(echoes.is_empty());
        // A deleted service (no longer cached) drops its entry with its Delete event.
        echoes.wrote(&v6, &written, |_| None);
        assert_eq!(echoes.len(), 1);
        let (_, deleted) = service_at("7", "Running");
        echoes.cached(&deleted);
        assert!(echoes.is_empty());
    }
}
