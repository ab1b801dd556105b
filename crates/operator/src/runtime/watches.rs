//! The watches behind the caches, declared one line per kind by the run loop
//! through [`Watches::cache`]: what each selects, what its cache keeps, and
//! the stream of changed objects it hands the controller. I/O: the watches
//! list and watch the API server, each in its own task.

use std::{fmt::Debug, time::Duration};

use futures::{SinkExt, Stream, StreamExt, TryStreamExt, stream::BoxStream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Resource,
    api::ObjectMeta,
    core::{NamespaceResourceScope, PartialObjectMeta, PartialObjectMetaExt},
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher::{self, watcher},
    },
};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use vllmservice_api::VLLMService;

use super::namespaces;
use crate::{
    cache::{Cache, CachedVllmService},
    names,
};

/// Objects per list page when the API server cannot stream lists: a page is
/// held whole (its JSON and its objects) until its last object is cached,
/// and every watch lists at the same time, so smaller pages lower the
/// operator's peak memory at a restart, for more list requests.
const LIST_PAGE_SIZE: u32 = 25;

/// Changed objects a watch hands the controller ahead of it taking them.
pub const TRIGGER_BUFFER: usize = 256;

/// How the watches fill their caches at start (and after a re-list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// The API server streams the current objects as watch events
    /// (`sendInitialEvents`, Kubernetes' WatchList): one object at a time is
    /// in flight, never a page of them.
    Streaming,
    /// Lists in pages of [`LIST_PAGE_SIZE`], then a watch: for API servers
    /// without WatchList.
    Paged,
}

impl ListStrategy {
    /// Asks the API server for a streamed list of one CRD (the operator's own;
    /// the operator may watch CRDs): refused (422) where WatchList is off.
    pub async fn probe(client: &Client) -> ListStrategy {
        let crds = Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone());
        let name = <VLLMService as kube::CustomResourceExt>::crd_name();
        let params = kube::api::WatchParams::streaming_lists()
            .fields(&format!("metadata.name={name}"))
            .timeout(1);
        match crds.watch_metadata(&params, "0").await {
            Ok(_) => ListStrategy::Streaming,
            Err(e) => {
                tracing::info!(error = %e, "streaming lists refused; listing in pages");
                ListStrategy::Paged
            }
        }
    }

    fn apply(self, config: watcher::Config) -> watcher::Config {
        match self {
            ListStrategy::Streaming => config.streaming_lists(),
            ListStrategy::Paged => config.page_size(LIST_PAGE_SIZE),
        }
    }
}

/// How a watch retries after an error (e.g. the API server restarting): from
/// 250 ms, doubling, capped at 5 s, with jitter; reset by the next event.
/// kube's default (800 ms to 30 s, reset only after 2 minutes of success)
/// left the operator blind for minutes after an API-server restart
/// (docs/reliability.md).
pub fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The watch of `api`, started afresh (with a list) when its connection to
/// the API server is lost while watching. Only this watch lists again; the
/// others resume on their own when their connections go too.
///
/// A watch resumed from its old resourceVersion after an API-server restart
/// was answered only after 50-140 s, with 410 Gone (docs/reliability.md), so
/// changes made meanwhile went unseen; a fresh list is answered at once. An
/// error the API server answered (a 403, a 410) is left to kube's watcher,
/// which retries with [`watch_backoff`] or lists again itself.
pub fn relisting<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let fresh = move || {
        watcher(api.clone(), config.clone())
            .backoff(watch_backoff())
            .boxed()
    };
    let first = fresh();
    futures::stream::unfold((first, fresh), |(mut inner, fresh)| async move {
        let item = inner.next().await?;
        if lost_while_watching(&item) {
            inner = fresh();
        }
        Some((item, (inner, fresh)))
    })
}

/// The connection broke while watching (not while listing: a failed list is
/// retried by the watcher with its backoff, and a new watcher would retry at once).
fn lost_while_watching<K>(item: &watcher::Result<watcher::Event<K>>) -> bool {
    use kube::Error as E;
    matches!(
        item,
        Err(
            watcher::Error::WatchStartFailed(E::HyperError(_) | E::Service(_) | E::ReadEvents(_))
                | watcher::Error::WatchFailed(E::HyperError(_) | E::Service(_) | E::ReadEvents(_))
        )
    )
}

/// Which objects of a kind a watch asks for.
#[derive(Debug, Clone, Copy)]
pub enum Select {
    /// The operator's children: its managed-by label.
    Managed,
    /// Every object in the watched namespace(s).
    All,
    /// Objects that carry this label.
    Labelled(&'static str),
    /// Every object in the cluster, whatever namespace the operator watches
    /// (the GPU count's pods).
    Cluster,
}

/// What a cache keeps of the objects its watch sees.
#[derive(Debug, Clone, Copy)]
pub enum Keep {
    Every,
    /// Only objects whose metadata this accepts: one that stops qualifying
    /// (e.g. is relabelled) leaves the cache, others never enter.
    Only(fn(&ObjectMeta) -> bool),
}

/// The watches of one incarnation of the controller, and the tasks they run
/// in. A watch never ends by itself (it retries every error), so a task that
/// ends, or panics, is a bug: [`Watches::ended`] says which, and the
/// controller stops rather than go on with a cache that no longer changes.
/// Dropping `Watches` aborts every task.
pub struct Watches {
    pub client: Client,
    /// The namespaces watched; none: every namespace.
    namespaces: Vec<String>,
    lists: ListStrategy,
    tasks: JoinSet<String>,
    /// Tasks that run beside the watches and may end (`spawn_helper`).
    helpers: JoinSet<()>,
}

impl Watches {
    pub fn new(client: Client, namespaces: Vec<String>, lists: ListStrategy) -> Self {
        Watches {
            client,
            namespaces,
            lists,
            tasks: JoinSet::new(),
            helpers: JoinSet::new(),
        }
    }

    /// Completes when a watch task ends, with what ended and how: the resource
    /// it watched, or its panic. Pending while no watch runs.
    pub async fn ended(&mut self) -> String {
        match self.tasks.join_next().await {
            Some(Ok(resource)) => format!("the watch of {resource} ended"),
            Some(Err(e)) if e.is_panic() => format!("a watch task panicked: {e}"),
            Some(Err(e)) => format!("a watch task was cancelled: {e}"),
            None => std::future::pending().await,
        }
    }

    /// The events of the objects `select` asks for, in the watched
    /// namespaces. `store` is the one that will hold them (a watch of several
    /// namespaces deletes from it what a namespace's new list lacks).
    fn events<K>(
        &self,
        select: Select,
        store: Store<K>,
    ) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let config = self.config(select);
        match (select, self.namespaces.as_slice()) {
            (Select::Cluster, _) | (_, []) => {
                relisting(Api::all(self.client.clone()), config).boxed()
            }
            (_, [ns]) => relisting(Api::namespaced(self.client.clone(), ns), config).boxed(),
            (_, many) => {
                let apis = many
                    .iter()
                    .map(|ns| (ns.clone(), Api::namespaced(self.client.clone(), ns)))
                    .collect();
                namespaces::merged(apis, config, store).boxed()
            }
        }
    }

    fn config(&self, select: Select) -> watcher::Config {
        let config = self.lists.apply(watcher::Config::default());
        match select {
            Select::Managed => config.labels(&names::managed_selector()),
            Select::Labelled(label) => config.labels(label),
            Select::All | Select::Cluster => config,
        }
    }

    /// A watch of `K` whose objects `keep` selects are cached, without the
    /// field sets of their managed fields (the apply step reads only who
    /// manages an object). The watch runs in its own task, so the cache
    /// fills whatever the controller does; `on_event` sees every event
    /// first (so it may index what the cache drops). The stream yields
    /// `trigger` of every changed object once the cache holds it.
    pub fn cache<K, T>(
        &mut self,
        select: Select,
        keep: Keep,
        on_event: impl Fn(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static,
        trigger: impl Fn(K) -> T + Send + 'static,
    ) -> (
        Cache<K>,
        impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    )
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
        T: Send + 'static,
    {
        let (store, writer) = reflector::store();
        let (cache, fill) = Cache::new(store.clone());
        // Bounded: the controller takes events from its start (its queue keeps
        // one entry per object), so a full channel only briefly holds the watch.
        let (mut tx, rx) = futures::channel::mpsc::channel(TRIGGER_BUFFER);
        let stream = self
            .events::<K>(select, store.clone())
            .inspect(move |event| {
                fill.saw(event);
                on_event(event);
            })
            .try_filter_map(move |event| futures::future::ready(Ok(kept(event, keep))))
            .modify(|o| without_field_sets(o.meta_mut()))
            .reflect(writer)
            .touched_objects()
            .map_ok(trigger);
        let resource = K::plural(&()).to_string();
        self.tasks.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if tx.send(item).await.is_err() {
                    break;
                }
            }
            resource
        });
        (cache, rx)
    }

    /// A watch of `K` as [`Watches::cache`], whose changed objects trigger
    /// reconciles of the VLLMServices `trigger` names, through `triggers`
    /// (the controller's input for watches started after it).
    pub fn cache_triggering<K>(
        &mut self,
        select: Select,
        keep: Keep,
        trigger: impl Fn(&K) -> Vec<ObjectRef<CachedVllmService>> + Send + 'static,
        mut triggers: futures::channel::mpsc::Sender<ObjectRef<CachedVllmService>>,
    ) -> Cache<K>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let (cache, events) = self.cache(select, keep, ignore, move |o: K| trigger(&o));
        let resource = K::plural(&()).to_string();
        self.tasks.spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(item) = events.next().await {
                for service in item.into_iter().flatten() {
                    if triggers.send(service).await.is_err() {
                        return resource;
                    }
                }
            }
            resource
        });
        cache
    }

    /// Runs `task` for as long as these watches run.
    pub fn spawn_helper(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.helpers.spawn(task);
    }

    /// A watch that only feeds `on_event` (an index such as the GPU count).
    pub fn index<K>(
        &mut self,
        select: Select,
        on_event: impl Fn(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static,
    ) where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let stream = relisting(Api::all(self.client.clone()), self.config(select));
        let resource = K::plural(&()).to_string();
        self.tasks.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                on_event(&event);
            }
            resource
        });
    }
}

/// `event` for a cache that holds only the objects `keep` accepts.
fn kept<K: Resource>(event: watcher::Event<K>, keep: Keep) -> Option<watcher::Event<K>> {
    let Keep::Only(keep) = keep else {
        return Some(event);
    };
    match event {
        watcher::Event::Apply(o) if !keep(o.meta()) => Some(watcher::Event::Delete(o)),
        watcher::Event::InitApply(o) if !keep(o.meta()) => None,
        e => Some(e),
    }
}

/// `meta` without the field sets of its managed fields, nor when each entry
/// was written: every entry stays, in order (the apply step patches ours by
/// its index), with its manager and operation.
fn without_field_sets(meta: &mut ObjectMeta) {
    for entry in meta.managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
        entry.fields_type = None;
        entry.time = None;
    }
}

/// What the controller needs of a changed child to find its VLLMService:
/// its name, namespace, owner references and labels. (The queue holds every
/// child of the first lists until the controller starts.)
pub fn meta_only<K: Resource<DynamicType = ()>>(mut obj: K) -> PartialObjectMeta<K> {
    let meta = std::mem::take(obj.meta_mut());
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        labels: meta.labels,
        owner_references: meta.owner_references,
        ..ObjectMeta::default()
    }
    .into_response_partial::<K>()
}

/// An `on_event` for a watch whose events only fill its cache.
pub fn ignore<K>(_: &Result<watcher::Event<K>, watcher::Error>) {}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
    use kube::ResourceExt;
    use serde_json::json;

    #[tokio::test]
    async fn a_watch_task_that_ends_or_panics_is_reported() {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .expect("a client (never connected)");
        let mut w = Watches::new(client, vec![], ListStrategy::Paged);
        // No task: pending, not an error.
        let idle = tokio::time::timeout(Duration::from_millis(10), w.ended()).await;
        assert!(idle.is_err());
        w.tasks.spawn(async { "pods".to_string() });
        assert_eq!(w.ended().await, "the watch of pods ended");
        w.tasks.spawn(async { panic!("a bug") });
        let ended = w.ended().await;
        assert!(ended.starts_with("a watch task panicked"), "{ended}");
    }

    #[test]
    fn a_trigger_keeps_what_finds_the_owner_and_nothing_else() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "ns", "uid": "u", "resourceVersion": "5",
                "labels": {"a": "b"}, "annotations": {"big": "x"},
                "ownerReferences": [{"apiVersion": "aiinfra.example.com/v1alpha1",
                    "kind": "VLLMService", "name": "qwen", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Apply"}]},
            "spec": {"replicas": 3, "selector": {}, "template": {}}
        }))
        .unwrap();
        let t = meta_only(d);
        assert_eq!(t.metadata.name.as_deref(), Some("d"));
        assert_eq!(t.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(t.metadata.labels.unwrap()["a"], "b");
        assert_eq!(t.metadata.owner_references.unwrap()[0].name, "qwen");
        assert!(t.metadata.annotations.is_none());
        assert!(t.metadata.managed_fields.is_none());
        assert!(t.metadata.resource_version.is_none());
    }

    #[test]
    fn managed_fields_keep_their_managers_in_order_without_field_sets() {
        let mut d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d",
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}, "time": "2026-01-01T00:00:00Z"},
                {"manager": "vllmservice-operator", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {}}}]}}))
        .unwrap();
        without_field_sets(&mut d.metadata);
        let entries = d.metadata.managed_fields.unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].manager.as_deref(), Some("vllmservice-operator"));
        assert_eq!(entries[1].operation.as_deref(), Some("Apply"));
        assert!(
            entries
                .iter()
                .all(|e| e.fields_v1.is_none() && e.time.is_none())
        );
    }

    fn pod(name: &str, managed: bool) -> Pod {
        let labels = if managed {
            json!({names::MANAGED_BY_LABEL: names::MANAGED_BY_VALUE})
        } else {
            json!({})
        };
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "labels": labels}}),
        )
        .unwrap()
    }

    #[test]
    fn a_cache_of_some_objects_drops_the_others_and_those_that_stop_qualifying() {
        let keep = |e| kept(e, Keep::Only(names::is_managed));
        let name = |e: Option<watcher::Event<Pod>>| match e {
            Some(watcher::Event::Apply(p)) => format!("apply {}", p.name_any()),
            Some(watcher::Event::InitApply(p)) => format!("init {}", p.name_any()),
            Some(watcher::Event::Delete(p)) => format!("delete {}", p.name_any()),
            Some(_) => "other".into(),
            None => "dropped".into(),
        };
        assert_eq!(name(keep(watcher::Event::Apply(pod("a", true)))), "apply a");
        assert_eq!(
            name(keep(watcher::Event::InitApply(pod("a", true)))),
            "init a"
        );
        assert_eq!(
            name(keep(watcher::Event::InitApply(pod("b", false)))),
            "dropped"
        );
        // Relabelled away (or never ours): removed from the cache if it was there.
        assert_eq!(
            name(keep(watcher::Event::Apply(pod("b", false)))),
            "delete b"
        );
        assert_eq!(
            name(keep(watcher::Event::Delete(pod("b", false)))),
            "delete b"
        );
        assert_eq!(name(keep(watcher::Event::InitDone)), "other");
    }
}
