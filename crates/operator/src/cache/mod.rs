//! What the watches keep for the reconciles: one store per watched kind, the
//! indexes that answer a reconcile's lookups without scanning a store, the
//! free-GPU count, and what was already read from pod logs. No I/O: the
//! watches in [`crate::runtime`] fill these; the read step only looks.
//!
//! Objects are kept as kube's reflector keeps them, typed, with two changes
//! made as they arrive (`runtime::watches`): the field sets of
//! `managedFields` are dropped (the apply step reads only which managers an
//! object has), and pods, nodes, claims and Gateways are kept as projections
//! with just the fields the operator reads ([`pods::CachedPod`],
//! [`gpus::NodeView`], [`children::CachedClaim`], [`gateways::CachedGateway`]),
//! Deployments and Services with their spec as JSON text ([`children`]).

pub mod children;
pub mod echoes;
pub mod gateways;
pub mod gpus;
pub mod index;
pub mod placement;
pub mod pod_logs;
pub mod pods;

use std::sync::{Arc, Mutex};

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{
    autoscaling::v2::HorizontalPodAutoscaler, batch::v1::Job, policy::v1::PodDisruptionBudget,
};
use kube::{
    Resource,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::watch;

pub use children::{CachedClaim, CachedDeployment, CachedService};
pub use echoes::StatusEchoes;
pub use gateways::CachedGateway;
pub use gpus::Placement;
pub use index::{NameIndex, PodIndex};
pub use pod_logs::{LogOutcome, LogPurpose, PodLogs};
pub use pods::CachedPod;

use crate::{
    kinds::{
        keda::ScaledObject,
        prometheus::{PrometheusRule, ServiceMonitor},
    },
    optional_apis::Apis,
};

/// The controller's caches of children and of the objects they depend on.
/// Children are label-selected (`app.kubernetes.io/managed-by`).
#[derive(Clone)]
pub struct Caches {
    pub deployments: Cache<CachedDeployment>,
    pub services: Cache<CachedService>,
    pub pods: Cache<CachedPod>,
    /// The pods of each VLLMService, by namespace and instance label.
    pub pod_index: PodIndex,
    /// What was read from each pod's logs, so that a container instance's log is
    /// read at most once; kept by the pod watch (dropped with the pod).
    pub pod_logs: PodLogs,
    pub pvcs: Cache<CachedClaim>,
    pub pdbs: Cache<PodDisruptionBudget>,
    /// The model download Jobs.
    pub jobs: Cache<Job>,
    /// Nodes and what every pod holds on them; None when the operator watches
    /// one namespace (it cannot see other namespaces' pods).
    pub placement: Option<Placement>,
    /// The HorizontalPodAutoscalers KEDA makes (label `scaledobject.keda.sh/name`).
    pub hpas: Cache<HorizontalPodAutoscaler>,
    /// The optional APIs installed, and their caches: they come and go with
    /// their CRDs while the rest stays.
    pub optional: watch::Receiver<OptionalCaches>,
}

/// Which optional APIs the reconciles may use, and the caches of those: an
/// API counts from when its caches hold their first lists (or their watches
/// had their time to) until its CRDs go.
#[derive(Clone, Default)]
pub struct OptionalCaches {
    pub apis: Apis,
    /// Present with the Gateway API.
    pub routes: Option<Cache<HttpRoute>>,
    pub gateways: Option<Cache<CachedGateway>>,
    /// Present with the Prometheus Operator's CRDs.
    pub monitors: Option<Cache<ServiceMonitor>>,
    pub rules: Option<Cache<PrometheusRule>>,
    /// Present with KEDA's CRDs.
    pub scaled_objects: Option<Cache<ScaledObject>>,
}

/// One watch cache: the store, whether it holds a complete list yet, and why
/// not when its watch fails (e.g. a missing RBAC rule).
#[derive(Clone)]
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    ready: watch::Receiver<bool>,
    last_error: Arc<Mutex<Option<WatchFailure>>>,
}

/// Why a watch failed last: its message, and whether RBAC refused it.
#[derive(Debug, Clone)]
struct WatchFailure {
    message: String,
    forbidden: bool,
}

/// The writing side of a [`Cache`]'s readiness, held by its watch.
pub struct CacheFill {
    ready: watch::Sender<bool>,
    last_error: Arc<Mutex<Option<WatchFailure>>>,
}

impl CacheFill {
    /// Records a watch event: the first complete list makes the cache ready.
    pub fn saw<K>(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        match event {
            Ok(watcher::Event::InitDone) => {
                self.ready.send_replace(true);
                *self.last_error.lock().expect("cache error lock") = None;
            }
            Ok(_) => {}
            Err(e) => {
                *self.last_error.lock().expect("cache error lock") = Some(WatchFailure {
                    message: e.to_string(),
                    forbidden: crate::error::watch_forbidden(e),
                })
            }
        }
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// A cache over `store`, and the handle its watch reports through.
    pub fn new(store: Store<K>) -> (Cache<K>, CacheFill) {
        let (tx, rx) = watch::channel(false);
        let last_error = Arc::new(Mutex::new(None));
        let fill = CacheFill {
            ready: tx,
            last_error: last_error.clone(),
        };
        let cache = Cache {
            store,
            ready: rx,
            last_error,
        };
        (cache, fill)
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Completes once the cache holds a complete list.
    pub async fn synced(&self) {
        let mut rx = self.ready.clone();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// The store once it holds a complete list, or why it does not.
    pub fn store(&self) -> Result<&Store<K>, NotSynced> {
        if self.is_ready() {
            return Ok(&self.store);
        }
        let failure = self.last_error.lock().expect("cache error lock").clone();
        Err(NotSynced {
            resource: K::plural(&K::DynamicType::default()).to_string(),
            forbidden: failure.as_ref().is_some_and(|f| f.forbidden),
            error: failure.map(|f| f.message),
        })
    }

    /// The object `name` in `namespace`, once the cache holds a complete list.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<K>, NotSynced> {
        let key = ObjectRef::new(name).within(namespace);
        Ok(self.store()?.get(&key).map(|o| (*o).clone()))
    }
}

impl Caches {
    /// Completes when every cache of the watches that always run holds its
    /// first complete list.
    pub async fn synced(&self) {
        self.deployments.synced().await;
        self.services.synced().await;
        self.pods.synced().await;
        self.pvcs.synced().await;
        self.pdbs.synced().await;
        self.jobs.synced().await;
        self.hpas.synced().await;
    }

    /// The optional APIs and their caches, as they are now.
    pub fn optional(&self) -> OptionalCaches {
        self.optional.borrow().clone()
    }
}

impl OptionalCaches {
    /// Completes when each of these caches holds its first complete list.
    pub async fn synced(&self) {
        synced(&self.routes).await;
        synced(&self.gateways).await;
        synced(&self.monitors).await;
        synced(&self.rules).await;
        synced(&self.scaled_objects).await;
    }
}

async fn synced<K>(cache: &Option<Cache<K>>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    if let Some(c) = cache {
        c.synced().await;
    }
}

/// A cache that holds no complete list yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotSynced {
    /// The resource, e.g. `persistentvolumeclaims`.
    pub resource: String,
    /// The last error of its watch, if it failed (e.g. 403 Forbidden).
    pub error: Option<String>,
    /// Whether RBAC refused the watch (fixing RBAC fixes it).
    pub forbidden: bool,
}

/// The state being rebuilt by a (re-)list. A paged list starts with
/// `Event::Init`; a streamed one (WatchList) starts with its first
/// `InitApply`, and an empty one has none: every index starts its rebuild at
/// whichever comes first, and `InitDone` swaps in what was rebuilt (empty if
/// nothing came).
fn relist<T: Default>(relisting: &mut Option<T>) -> &mut T {
    relisting.get_or_insert_with(T::default)
}

/// A VLLMService as its cache holds it: parsed, or the metadata and the
/// error of one stored in a shape the types cannot read (e.g. under an older
/// schema), so that one such object is reported instead of stalling the watch.
pub type CachedVllmService = kube::core::DeserializeGuard<vllmservice_api::VLLMService>;
