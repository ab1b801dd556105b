//! Which objects of one kind point at which name, kept up to date by their
//! watch: the pods of each VLLMService, the VLLMServices that mount each
//! claim. No I/O.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use kube::{Resource, ResourceExt, runtime::watcher};

use super::{CachedPod, relist};
use crate::names;

/// Which objects of one kind point at which name, kept up to date by their
/// watch: e.g. the pods of each VLLMService (their instance label), or the
/// VLLMServices that mount each claim. A lookup and an event cost O(1) in the
/// number of objects, not a scan of the cache.
pub struct NameIndex<K> {
    state: Arc<RwLock<IndexState>>,
    /// When an object pointing at (namespace, name) was last deleted.
    removed: Arc<RwLock<HashMap<(String, String), Instant>>>,
    /// The name `obj` points at, if any.
    key: fn(&K) -> Option<String>,
}

/// How long a deletion is remembered (what reads it looks seconds back).
const REMOVAL_MEMORY: Duration = Duration::from_secs(300);

/// The pods of each VLLMService, by namespace and the pods' instance label.
pub type PodIndex = NameIndex<CachedPod>;

#[derive(Default)]
struct IndexState {
    /// (namespace, pointed-at name) → the objects' names.
    by_key: HashMap<(String, String), BTreeSet<String>>,
    /// (namespace, object name) → where the object points.
    of: HashMap<(String, String), String>,
    /// The index being rebuilt during a re-list, swapped in at its end.
    relisting: Option<Box<IndexState>>,
}

impl IndexState {
    fn set(&mut self, id: (String, String), key: Option<String>) {
        if let Some(old) = self.of.remove(&id) {
            let k = (id.0.clone(), old);
            if let Some(names) = self.by_key.get_mut(&k) {
                names.remove(&id.1);
                if names.is_empty() {
                    self.by_key.remove(&k);
                }
            }
        }
        if let Some(key) = key {
            self.by_key
                .entry((id.0.clone(), key.clone()))
                .or_default()
                .insert(id.1.clone());
            self.of.insert(id, key);
        }
    }
}

impl<K> Clone for NameIndex<K> {
    fn clone(&self) -> Self {
        NameIndex {
            state: self.state.clone(),
            removed: self.removed.clone(),
            key: self.key,
        }
    }
}

impl<K: Resource> NameIndex<K> {
    pub fn new(key: fn(&K) -> Option<String>) -> Self {
        NameIndex {
            state: Arc::default(),
            removed: Arc::default(),
            key,
        }
    }

    /// Applies one event of the objects' watch.
    pub fn saw(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        let Ok(event) = event else { return };
        let id = |o: &K| -> Option<(String, String)> {
            Some((o.meta().namespace.clone()?, o.meta().name.clone()?))
        };
        if let watcher::Event::Delete(o) = event
            && let (Some(ns), Some(key)) = (o.meta().namespace.clone(), (self.key)(o))
        {
            let mut removed = self.removed.write().expect("index lock");
            removed.retain(|_, at| at.elapsed() < REMOVAL_MEMORY);
            removed.insert((ns, key), Instant::now());
        }
        let mut s = self.state.write().expect("index lock");
        match event {
            watcher::Event::Init => s.relisting = Some(Box::default()),
            watcher::Event::InitDone => *s = *s.relisting.take().unwrap_or_default(),
            watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
                let Some(id) = id(o) else { return };
                let key = match event {
                    watcher::Event::Delete(_) => None,
                    _ => (self.key)(o),
                };
                match event {
                    watcher::Event::InitApply(_) => relist(&mut s.relisting).set(id, key),
                    _ => s.set(id, key),
                }
            }
        }
    }

    /// How long ago an object pointing at `name` in `namespace` was deleted
    /// (the last one, within the last few minutes).
    pub fn removed_ago(&self, namespace: &str, name: &str) -> Option<Duration> {
        let removed = self.removed.read().expect("index lock");
        removed
            .get(&(namespace.to_string(), name.to_string()))
            .map(Instant::elapsed)
    }

    /// The names of the objects in `namespace` that point at `name`.
    pub fn names_of(&self, namespace: &str, name: &str) -> Vec<String> {
        let s = self.state.read().expect("index lock");
        s.by_key
            .get(&(namespace.to_string(), name.to_string()))
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Default for PodIndex {
    fn default() -> Self {
        NameIndex::new(|pod| names::instance_of(pod.labels()).map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, instance: Option<&str>) -> CachedPod {
        let mut labels = json!({});
        if let Some(i) = instance {
            labels = json!({names::NAME_LABEL: names::NAME_VALUE, names::INSTANCE_LABEL: i});
        }
        let pod = json!({"metadata": {"name": name, "namespace": ns, "labels": labels}});
        serde_json::from_value(pod).unwrap()
    }

    #[test]
    fn indexes_rebuild_from_a_streamed_list_without_init_and_an_empty_one() {
        let idx = PodIndex::default();
        let ev = |e| idx.saw(&Ok(e));
        // A streamed list (WatchList): no Init before its objects.
        ev(watcher::Event::InitApply(pod("a", "p1", Some("qwen"))));
        ev(watcher::Event::InitDone);
        assert_eq!(idx.names_of("a", "qwen"), ["p1"]);
        // A streamed re-list that finds nothing: InitDone alone empties the index.
        ev(watcher::Event::InitDone);
        assert!(idx.names_of("a", "qwen").is_empty());
    }

    #[test]
    fn pod_index_follows_applies_deletes_relabels_and_relists() {
        let idx = PodIndex::default();
        let ev = |e| idx.saw(&Ok(e));
        ev(watcher::Event::Apply(pod("a", "p1", Some("qwen"))));
        ev(watcher::Event::Apply(pod("a", "p2", Some("qwen"))));
        ev(watcher::Event::Apply(pod("b", "p1", Some("qwen"))));
        assert_eq!(idx.names_of("a", "qwen"), ["p1", "p2"]);
        assert_eq!(idx.names_of("b", "qwen"), ["p1"]);
        // Relabelled away from the service.
        ev(watcher::Event::Apply(pod("a", "p2", None)));
        assert_eq!(idx.names_of("a", "qwen"), ["p1"]);
        assert_eq!(idx.removed_ago("a", "qwen"), None);
        ev(watcher::Event::Delete(pod("a", "p1", Some("qwen"))));
        assert!(idx.names_of("a", "qwen").is_empty());
        assert!(
            idx.removed_ago("a", "qwen").is_some(),
            "the deletion is remembered"
        );
        assert_eq!(idx.removed_ago("b", "qwen"), None);
        // A re-list replaces everything at its end.
        ev(watcher::Event::Init);
        ev(watcher::Event::InitApply(pod("c", "p9", Some("llama"))));
        assert_eq!(
            idx.names_of("b", "qwen"),
            ["p1"],
            "old index until the list is done"
        );
        ev(watcher::Event::InitDone);
        assert!(idx.names_of("b", "qwen").is_empty());
        assert_eq!(idx.names_of("c", "llama"), ["p9"]);
    }
}
