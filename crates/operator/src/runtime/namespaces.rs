//! One watch over a list of namespaces (`run --watch-namespace a,b`): a watch
//! per namespace (the operator may list only there), merged into the one
//! stream that a cache's reflector and indexes take. No I/O of its own: the
//! per-namespace watches list and watch.
//!
//! A reflector reads a list as `Init`, `InitApply`…, `InitDone` and replaces
//! its whole store at `InitDone`, and so do the indexes; two namespaces'
//! lists passed on as they come would each wipe the other's objects. So the
//! merged stream lists once, as one watch would, and its `InitDone` comes
//! when every namespace has listed. A namespace's later list (its connection
//! lost, or a 410 Gone) is passed on as changes to that namespace only:
//! `Apply` for each object it lists, `Delete` for each it no longer has.

use std::{collections::HashSet, fmt::Debug};

use futures::{Stream, StreamExt};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher::{self, Event},
    },
};
use serde::de::DeserializeOwned;

use super::watches::relisting;

/// The events of the watches of `apis` (one namespace each) as one watch's.
/// `store` is the reflector's that takes them: an object a namespace no longer
/// lists is deleted as the store holds it.
pub fn merged<K>(
    apis: Vec<(String, Api<K>)>,
    config: watcher::Config,
    store: Store<K>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut merge = Merge::new(apis.iter().map(|(ns, _)| ns.clone()).collect());
    let watches = apis
        .into_iter()
        .enumerate()
        .map(|(i, (_, api))| relisting(api, config.clone()).map(move |e| (i, e)).boxed());
    let events = futures::stream::select_all(watches)
        .flat_map(move |(i, item)| futures::stream::iter(merge.step(i, item)));
    // Gone objects are looked up as each is taken, after what came before
    // it (e.g. the InitDone that put it into the store) reached the store.
    futures::stream::once(async { Out::Pass(Ok(Event::Init)) })
        .chain(events)
        .filter_map(move |out| {
            let item = match out {
                Out::Pass(item) => Some(item),
                Out::Gone(key) => store.get(&key).map(|o| Ok(Event::Delete((*o).clone()))),
            };
            futures::future::ready(item)
        })
}

/// What the merged stream passes on.
#[derive(Debug)]
enum Out<K: Resource<DynamicType = ()>> {
    Pass(watcher::Result<Event<K>>),
    /// An object its namespace's new list no longer has.
    Gone(ObjectRef<K>),
}

/// What the merged stream knows of one namespace's watch.
#[derive(Debug, Default)]
struct Namespace {
    name: String,
    /// Its first list is complete.
    listed: bool,
    /// The names of its objects passed on.
    known: HashSet<String>,
    /// The names listed so far by a list in progress.
    listing: Option<HashSet<String>>,
}

/// The merge, as a state machine over (namespace, event) pairs.
#[derive(Debug)]
struct Merge<K: Resource<DynamicType = ()>> {
    namespaces: Vec<Namespace>,
    /// Some until every namespace has listed: the changes of the namespaces
    /// already listed, passed on after the merged `InitDone` (a reflector
    /// would lose a change made to its store before the swap).
    held: Option<Vec<Out<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone> Merge<K> {
    fn new(names: Vec<String>) -> Self {
        Merge {
            namespaces: names
                .into_iter()
                .map(|name| Namespace {
                    name,
                    ..Namespace::default()
                })
                .collect(),
            held: Some(Vec::new()),
        }
    }

    /// What to pass on for `item` of namespace `i`.
    fn step(&mut self, i: usize, item: watcher::Result<Event<K>>) -> Vec<Out<K>> {
        let first_list = self.held.is_some();
        let ns = &mut self.namespaces[i];
        let out = match item {
            // The cache records why its watch fails, whatever the phase.
            Err(e) => return vec![Out::Pass(Err(e))],
            Ok(Event::Init) => {
                ns.listing = Some(HashSet::new());
                vec![]
            }
            Ok(Event::InitApply(o)) => {
                // A streamed list has no Init: its first object starts it.
                ns.listing.get_or_insert_default().insert(o.name_any());
                if first_list && !ns.listed {
                    // Into the reflector's list; known now, so that a list
                    // started again before it completes removes what the
                    // first attempt saw and the second does not.
                    ns.known.insert(o.name_any());
                    return vec![Out::Pass(Ok(Event::InitApply(o)))];
                }
                vec![Out::Pass(Ok(Event::Apply(o)))]
            }
            Ok(Event::InitDone) => {
                let listed = ns.listing.take().unwrap_or_default();
                let gone = ns
                    .known
                    .difference(&listed)
                    .map(|name| Out::Gone(ObjectRef::new(name).within(&ns.name)))
                    .collect();
                ns.known = listed;
                ns.listed = true;
                gone
            }
            Ok(Event::Apply(o)) => {
                ns.known.insert(o.name_any());
                vec![Out::Pass(Ok(Event::Apply(o)))]
            }
            Ok(Event::Delete(o)) => {
                ns.known.remove(&o.name_any());
                vec![Out::Pass(Ok(Event::Delete(o)))]
            }
        };
        let Some(held) = &mut self.held else {
            return out;
        };
        held.extend(out);
        if !self.namespaces.iter().all(|n| n.listed) {
            return vec![];
        }
        let mut done = vec![Out::Pass(Ok(Event::InitDone))];
        done.append(held);
        self.held = None;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use serde_json::json;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
    }

    /// Feeds (namespace index, event) pairs through the merge into a
    /// reflector, as `merged` does, and returns what the store holds after
    /// each step, as sorted "ns/name".
    struct Harness {
        merge: Merge<ConfigMap>,
        writer: reflector::store::Writer<ConfigMap>,
        store: Store<ConfigMap>,
        passed: Vec<String>,
    }

    impl Harness {
        fn new(names: &[&str]) -> Self {
            let (store, mut writer) = reflector::store();
            writer.apply_watcher_event(&Event::Init);
            Harness {
                merge: Merge::new(names.iter().map(|s| s.to_string()).collect()),
                writer,
                store,
                passed: vec![],
            }
        }

        fn feed(&mut self, i: usize, event: Event<ConfigMap>) {
            for out in self.merge.step(i, Ok(event)) {
                let event = match out {
                    Out::Pass(Ok(e)) => e,
                    Out::Pass(Err(e)) => panic!("{e}"),
                    Out::Gone(key) => match self.store.get(&key) {
                        Some(o) => Event::Delete((*o).clone()),
                        None => continue,
                    },
                };
                self.passed.push(match &event {
                    Event::Init => "init".into(),
                    Event::InitApply(o) => format!("init-apply {}", o.name_any()),
                    Event::InitDone => "init-done".into(),
                    Event::Apply(o) => format!("apply {}", o.name_any()),
                    Event::Delete(o) => format!("delete {}", o.name_any()),
                });
                self.writer.apply_watcher_event(&event);
            }
        }

        fn held(&self) -> Vec<String> {
            let mut names: Vec<_> = self
                .store
                .state()
                .iter()
                .map(|o| format!("{}/{}", o.namespace().unwrap(), o.name_any()))
                .collect();
            names.sort();
            names
        }
    }

    #[test]
    fn the_merged_list_completes_when_every_namespace_has_listed() {
        let mut h = Harness::new(&["a", "b"]);
        h.feed(0, Event::Init);
        h.feed(0, Event::InitApply(cm("a", "x")));
        h.feed(0, Event::InitDone);
        // a is listed, b is not: nothing is complete yet, and a's change waits.
        h.feed(0, Event::Apply(cm("a", "y")));
        assert!(!h.passed.contains(&"init-done".to_string()));
        // A streamed list: no Init.
        h.feed(1, Event::InitApply(cm("b", "z")));
        h.feed(1, Event::InitDone);
        assert_eq!(
            h.passed,
            ["init-apply x", "init-apply z", "init-done", "apply y"]
        );
        assert_eq!(h.held(), ["a/x", "a/y", "b/z"]);
    }

    #[test]
    fn a_namespace_that_lists_again_changes_only_its_own_objects() {
        let mut h = Harness::new(&["a", "b"]);
        for (i, ns, names) in [(0, "a", ["x", "y"]), (1, "b", ["x", "w"])] {
            h.feed(i, Event::Init);
            for n in names {
                h.feed(i, Event::InitApply(cm(ns, n)));
            }
            h.feed(i, Event::InitDone);
        }
        assert_eq!(h.held(), ["a/x", "a/y", "b/w", "b/x"]);
        // a's watch lists again: y went, v came, and b is untouched.
        h.passed.clear();
        h.feed(0, Event::Init);
        h.feed(0, Event::InitApply(cm("a", "x")));
        h.feed(0, Event::InitApply(cm("a", "v")));
        assert_eq!(h.held(), ["a/v", "a/x", "a/y", "b/w", "b/x"]);
        h.feed(0, Event::InitDone);
        assert_eq!(h.passed, ["apply x", "apply v", "delete y"]);
        assert_eq!(h.held(), ["a/v", "a/x", "b/w", "b/x"]);
        // Changes pass as they come.
        h.feed(1, Event::Delete(cm("b", "w")));
        h.feed(1, Event::Apply(cm("b", "u")));
        assert_eq!(h.held(), ["a/v", "a/x", "b/u", "b/x"]);
        // And a deleted object is not deleted again by the next list.
        h.passed.clear();
        h.feed(1, Event::Init);
        h.feed(1, Event::InitApply(cm("b", "x")));
        h.feed(1, Event::InitDone);
        assert_eq!(h.passed, ["apply x", "delete u"]);
        assert_eq!(h.held(), ["a/v", "a/x", "b/x"]);
    }

    #[test]
    fn a_first_list_started_again_drops_what_only_the_first_attempt_saw() {
        let mut h = Harness::new(&["a"]);
        h.feed(0, Event::Init);
        h.feed(0, Event::InitApply(cm("a", "x")));
        h.feed(0, Event::InitApply(cm("a", "y")));
        // The list failed midway and starts again; y went meanwhile.
        h.feed(0, Event::Init);
        h.feed(0, Event::InitApply(cm("a", "x")));
        h.feed(0, Event::InitDone);
        assert_eq!(h.held(), ["a/x"]);
    }
}
