//! What every reconcile shares: the client, the watch caches (filled by
//! [`crate::controller`]), the event recorder, metrics, and per-object memory
//! (retry counts, the last status written).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::Job,
    core::v1::{
        Container, Node, NodeSpec, NodeStatus, PersistentVolumeClaim, Pod, PodSpec, PodStatus,
        ResourceRequirements, Service, Taint,
    },
    policy::v1::PodDisruptionBudget,
};
use k8s_openapi::apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta};
use kube::{
    Client, Resource, ResourceExt,
    runtime::{
        events::Reporter,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use serde::{Deserialize, de::DeserializeOwned};
use tokio::sync::watch;
use vllmservice_api::{VLLMService, VLLMServiceStatus};

use crate::{
    compact::{Compact, Held, Unparsable},
    keda::scaledobjects::ScaledObject,
    metrics::Metrics,
    names,
    optional::Apis,
    placement::{self, Amounts, Capacity, NodeFacts},
    prometheus::{prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor},
    recorder::Recorder,
    wakeup::Wakeups,
};

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// The optional APIs installed when this controller's watches were set up.
    pub apis: Apis,
    /// The namespace the controller watches (None: all).
    pub namespace: Option<String>,
    /// The controller's cache of VLLMServices.
    pub services: Store<Compact<VLLMService>>,
    /// The controller's caches of children and of the objects they depend on.
    pub caches: Caches,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub resync: Duration,
    /// How long a new VLLMService's first status may wait for its pods (`settle`).
    pub status_settle: Duration,
    /// Where KEDA queries Prometheus unless a spec says otherwise.
    pub prometheus_address: String,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<ObjectRef<Compact<VLLMService>>, u32>>,
    /// The last status this operator wrote per VLLMService, until the watch shows it.
    written: StatusEchoes,
    /// Reconciles due later (a held first status: `settle`, `wakeup`).
    pub wakeups: Wakeups,
}

/// The statuses this operator wrote that the VLLMService cache may not show
/// yet, per VLLMService. An entry goes as soon as the cache holds a newer copy
/// of its object (the VLLMService watch calls [`StatusEchoes::cached`] after
/// the cache took each event), so the memory is that of the writes in flight,
/// not one status per VLLMService for as long as it exists.
#[derive(Clone, Default)]
pub struct StatusEchoes(Arc<Mutex<HashMap<ObjectRef<Compact<VLLMService>>, Written>>>);

fn key_of(vs: &VLLMService) -> ObjectRef<Compact<VLLMService>> {
    ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default())
}

impl StatusEchoes {
    /// `vs` (a cached copy) with the status it has now: the status written on
    /// it if there is one, else `vs` itself.
    pub fn latest<'a>(&self, vs: &'a VLLMService) -> std::borrow::Cow<'a, VLLMService> {
        let key = key_of(vs);
        let mut written = self.0.lock().expect("written lock");
        match written.get(&key) {
            Some(w)
                if Some(&w.uid) == vs.metadata.uid.as_ref()
                    && w.based_on == vs.metadata.resource_version =>
            {
                let mut latest = vs.clone();
                latest.status = Some(w.status.clone());
                std::borrow::Cow::Owned(latest)
            }
            Some(_) => {
                // The cache has caught up (or the object was replaced).
                written.remove(&key);
                std::borrow::Cow::Borrowed(vs)
            }
            None => std::borrow::Cow::Borrowed(vs),
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
        cached: impl FnOnce(&ObjectRef<Compact<VLLMService>>) -> Option<Option<String>>,
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
    pub fn cached(&self, vs: &Compact<VLLMService>) {
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

/// The controller's caches. Children are label-selected
/// (`app.kubernetes.io/managed-by`) and held [`Compact`] (parsed when read),
/// Pods without their spec; a child's `managedFields` keep only who manages
/// it (manager and operation, not which fields), and Pods and PVCs, which the
/// operator never applies, keep none.
#[derive(Clone)]
pub struct Caches {
    pub deployments: Cache<Compact<Deployment>>,
    pub services: Cache<Compact<Service>>,
    pub pods: Cache<Compact<Pod>>,
    /// The pods of each VLLMService, by namespace and instance label.
    pub pod_index: PodIndex,
    /// What was read from each pod's vLLM log, so that a container instance's log is
    /// read at most once; kept by the pod watch (dropped with the pod).
    pub pod_logs: PodLogs,
    pub pvcs: Cache<Compact<PersistentVolumeClaim>>,
    pub pdbs: Cache<Compact<PodDisruptionBudget>>,
    /// The model download Jobs.
    pub jobs: Cache<Compact<Job>>,
    /// Nodes and what every pod holds on them; None when the operator watches
    /// one namespace (it cannot see other namespaces' pods).
    pub placement: Option<Placement>,
    /// Present when the Gateway API is installed.
    pub routes: Option<Cache<Compact<HttpRoute>>>,
    pub gateways: Option<Cache<Compact<Gateway>>>,
    /// Present when the Prometheus Operator's CRDs are installed.
    pub monitors: Option<Cache<Compact<ServiceMonitor>>>,
    pub rules: Option<Cache<Compact<PrometheusRule>>>,
    /// Present when KEDA's CRDs are installed.
    pub scaled_objects: Option<Cache<Compact<ScaledObject>>>,
    /// The HorizontalPodAutoscalers KEDA makes (label `scaledobject.keda.sh/name`).
    pub hpas: Cache<Compact<HorizontalPodAutoscaler>>,
}

impl Caches {
    /// Completes when every cache holds its first complete list.
    pub async fn synced(&self) {
        self.deployments.synced().await;
        self.services.synced().await;
        self.pods.synced().await;
        self.pvcs.synced().await;
        self.pdbs.synced().await;
        self.jobs.synced().await;
        if let Some(c) = &self.routes {
            c.synced().await;
        }
        if let Some(c) = &self.gateways {
            c.synced().await;
        }
        if let Some(c) = &self.monitors {
            c.synced().await;
        }
        if let Some(c) = &self.rules {
            c.synced().await;
        }
        if let Some(c) = &self.scaled_objects {
            c.synced().await;
        }
        self.hpas.synced().await;
    }
}

/// One watch cache: the store, whether it holds a complete list yet, and why
/// not when its watch fails (e.g. a missing RBAC rule).
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    ready: watch::Receiver<bool>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl<K> Clone for Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Cache {
            store: self.store.clone(),
            ready: self.ready.clone(),
            last_error: self.last_error.clone(),
        }
    }
}

/// The writing side of a [`Cache`]'s readiness, held by its watch.
pub struct CacheFill {
    ready: watch::Sender<bool>,
    last_error: Arc<Mutex<Option<String>>>,
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
            Err(e) => *self.last_error.lock().expect("cache error lock") = Some(e.to_string()),
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
        (
            Cache {
                store,
                ready: rx,
                last_error: last_error.clone(),
            },
            CacheFill {
                ready: tx,
                last_error,
            },
        )
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
        let error = self.last_error.lock().expect("cache error lock").clone();
        Err(NotSynced {
            resource: K::plural(&K::DynamicType::default()).to_string(),
            error,
        })
    }
}

/// A cache that holds no complete list yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotSynced {
    /// The resource, e.g. `persistentvolumeclaims`.
    pub resource: String,
    /// The last error of its watch, if it failed (e.g. 403 Forbidden).
    pub error: Option<String>,
}

/// The object `name` in `namespace` from a store of [`Compact`] objects, whole.
pub fn expanded<K>(
    store: &Store<Compact<K>>,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, Unparsable>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Held,
{
    store
        .get(&ObjectRef::new(name).within(namespace))
        .map(|o| o.expand())
        .transpose()
}

/// The state being rebuilt by a (re-)list. A paged list starts with
/// `Event::Init`; a streamed one (WatchList) starts with its first
/// `InitApply`, and an empty one has none: every index starts its rebuild at
/// whichever comes first, and `InitDone` swaps in what was rebuilt (empty if
/// nothing came).
fn relist<T: Default>(relisting: &mut Option<T>) -> &mut T {
    relisting.get_or_insert_with(T::default)
}

/// Which objects of one kind point at which name, kept up to date by their
/// watch: e.g. the pods of each VLLMService (their instance label), or the
/// VLLMServices that mount each claim. A lookup and an event cost O(1) in the
/// number of objects, not a scan of the cache.
pub struct NameIndex<K> {
    state: Arc<RwLock<IndexState>>,
    /// The name `obj` points at, if any.
    key: fn(&K) -> Option<String>,
}

/// The pods of each VLLMService, by namespace and the pods' instance label.
pub type PodIndex = NameIndex<Compact<Pod>>;

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
            key: self.key,
        }
    }
}

impl<K: Resource> NameIndex<K> {
    pub fn new(key: fn(&K) -> Option<String>) -> Self {
        NameIndex {
            state: Arc::default(),
            key,
        }
    }

    /// Applies one event of the objects' watch.
    pub fn saw(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        let Ok(event) = event else { return };
        let id = |o: &K| -> Option<(String, String)> {
            Some((o.meta().namespace.clone()?, o.meta().name.clone()?))
        };
        let mut s = self.state.write().expect("index lock");
        match event {
            watcher::Event::Apply(o) => {
                if let Some(id) = id(o) {
                    s.set(id, (self.key)(o));
                }
            }
            watcher::Event::Delete(o) => {
                if let Some(id) = id(o) {
                    s.set(id, None);
                }
            }
            watcher::Event::Init => s.relisting = Some(Box::default()),
            watcher::Event::InitApply(o) => {
                if let Some(id) = id(o) {
                    relist(&mut s.relisting).set(id, (self.key)(o));
                }
            }
            watcher::Event::InitDone => *s = *s.relisting.take().unwrap_or_default(),
        }
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

impl PodIndex {
    /// The names of the pods of VLLMService `name` in `namespace`.
    pub fn pods_of(&self, namespace: &str, name: &str) -> Vec<String> {
        self.names_of(namespace, name)
    }
}

/// The nodes and the extended resources every pod holds on each, kept up to
/// date by a node watch and a watch of all running pods, so that a reconcile
/// can ask how many more pods of a VLLMService fit without listing anything.
#[derive(Clone, Default)]
pub struct Placement(Arc<RwLock<PlacementState>>);

#[derive(Default)]
struct PlacementState {
    nodes: HashMap<String, NodeFacts>,
    nodes_relisting: Option<HashMap<String, NodeFacts>>,
    nodes_synced: bool,
    /// Per pod with a node and extended resources: its node and amounts.
    pods: HashMap<(String, String), (String, Amounts)>,
    pods_relisting: Option<HashMap<(String, String), (String, Amounts)>>,
    pods_synced: bool,
    /// The sums of `pods` per node.
    used: HashMap<String, Amounts>,
}

/// A pod's key and what it holds on its node, if anything: a finished pod
/// (Succeeded, Failed) holds nothing.
fn holding(pod: &Pod) -> Option<((String, String), (String, Amounts))> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let demand = placement::pod_demand(pod);
    let key = (pod.namespace()?, pod.name_any());
    (!demand.is_empty()).then_some((key, (node, demand)))
}

/// What the GPU count reads of a pod (its node, phase and containers'
/// resources), parsed from the cached text without the rest of the spec: a
/// whole Pod parse per pod event cost more than the rest of the event.
#[derive(Deserialize)]
struct PlacedPod {
    spec: Option<PlacedSpec>,
    status: Option<PlacedStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlacedSpec {
    node_name: Option<String>,
    #[serde(default)]
    containers: Vec<PlacedContainer>,
    init_containers: Option<Vec<PlacedContainer>>,
}

#[derive(Deserialize)]
struct PlacedContainer {
    resources: Option<ResourceRequirements>,
}

#[derive(Deserialize)]
struct PlacedStatus {
    phase: Option<String>,
}

impl PlacedPod {
    /// A Pod with these fields (and `meta`), for [`holding`].
    fn into_pod(self, meta: &ObjectMeta) -> Pod {
        let container = |c: PlacedContainer| Container {
            resources: c.resources,
            ..Container::default()
        };
        Pod {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                ..ObjectMeta::default()
            },
            spec: self.spec.map(|s| PodSpec {
                node_name: s.node_name,
                containers: s.containers.into_iter().map(container).collect(),
                init_containers: s
                    .init_containers
                    .map(|c| c.into_iter().map(container).collect()),
                ..PodSpec::default()
            }),
            status: self.status.map(|s| PodStatus {
                phase: s.phase,
                ..PodStatus::default()
            }),
        }
    }
}

/// What the GPU count reads of a node (its labels, taints, whether it is
/// cordoned and what it can allocate), parsed from the cached text: a whole
/// Node's parser would be built into the binary for these few fields.
#[derive(Deserialize, Default)]
struct PlacedNode {
    #[serde(default)]
    metadata: PlacedNodeMeta,
    spec: Option<PlacedNodeSpec>,
    status: Option<PlacedNodeStatus>,
}

/// The labels are held as text, with the rest of a node's metadata
/// (`compact::Held::LABELS_READ`).
#[derive(Deserialize, Default)]
struct PlacedNodeMeta {
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct PlacedNodeSpec {
    taints: Option<Vec<Taint>>,
    unschedulable: Option<bool>,
}

#[derive(Deserialize)]
struct PlacedNodeStatus {
    allocatable: Option<BTreeMap<String, Quantity>>,
}

impl PlacedNode {
    /// The facts of `node`; a node whose text does not parse offers nothing.
    fn facts(node: &Compact<Node>) -> NodeFacts {
        let placed = node.project::<PlacedNode>().unwrap_or_default();
        NodeFacts::of(&Node {
            metadata: ObjectMeta {
                name: node.meta().name.clone(),
                labels: placed.metadata.labels,
                ..ObjectMeta::default()
            },
            spec: placed.spec.map(|s| NodeSpec {
                taints: s.taints,
                unschedulable: s.unschedulable,
                ..NodeSpec::default()
            }),
            status: placed.status.map(|s| NodeStatus {
                allocatable: s.allocatable,
                ..NodeStatus::default()
            }),
        })
    }
}

fn sum_by_node(pods: &HashMap<(String, String), (String, Amounts)>) -> HashMap<String, Amounts> {
    let mut used: HashMap<String, Amounts> = HashMap::new();
    for (node, amounts) in pods.values() {
        let total = used.entry(node.clone()).or_default();
        for (name, n) in amounts {
            *total.entry(name.clone()).or_default() += n;
        }
    }
    used
}

impl PlacementState {
    fn set_pod(&mut self, key: (String, String), held: Option<(String, Amounts)>) {
        let adjust = |used: &mut HashMap<String, Amounts>,
                      (node, amounts): &(String, Amounts),
                      sign: i64| {
            let total = used.entry(node.clone()).or_default();
            for (name, n) in amounts {
                *total.entry(name.clone()).or_default() += sign * n;
            }
            total.retain(|_, n| *n != 0);
            if total.is_empty() {
                used.remove(node);
            }
        };
        if let Some(old) = self.pods.remove(&key) {
            adjust(&mut self.used, &old, -1);
        }
        if let Some(new) = held {
            adjust(&mut self.used, &new, 1);
            self.pods.insert(key, new);
        }
    }
}

impl Placement {
    /// Applies one event of the node watch.
    pub fn saw_node(&self, event: &Result<watcher::Event<Compact<Node>>, watcher::Error>) {
        let Ok(event) = event else { return };
        let mut s = self.0.write().expect("placement lock");
        match event {
            watcher::Event::Apply(n) => {
                s.nodes.insert(n.name_any(), PlacedNode::facts(n));
            }
            watcher::Event::Delete(n) => {
                s.nodes.remove(&n.name_any());
            }
            watcher::Event::Init => s.nodes_relisting = Some(HashMap::new()),
            watcher::Event::InitApply(n) => {
                relist(&mut s.nodes_relisting).insert(n.name_any(), PlacedNode::facts(n));
            }
            watcher::Event::InitDone => {
                s.nodes = s.nodes_relisting.take().unwrap_or_default();
                s.nodes_synced = true;
            }
        }
    }

    /// Applies one event of the watch of all running pods.
    pub fn saw_pod(&self, event: &Result<watcher::Event<Compact<Pod>>, watcher::Error>) {
        let Ok(event) = event else { return };
        let mut s = self.0.write().expect("placement lock");
        let key = |p: &Compact<Pod>| (p.namespace().unwrap_or_default(), p.name_any());
        let holding = |p: &Compact<Pod>| match p.project::<PlacedPod>() {
            Ok(placed) => holding(&placed.into_pod(p.meta())),
            Err(e) => {
                tracing::warn!(error = %e, "a pod left out of the GPU count");
                None
            }
        };
        match event {
            watcher::Event::Apply(p) => {
                let held = holding(p).map(|(_, h)| h);
                s.set_pod(key(p), held);
            }
            watcher::Event::Delete(p) => s.set_pod(key(p), None),
            watcher::Event::Init => s.pods_relisting = Some(HashMap::new()),
            watcher::Event::InitApply(p) => {
                let next = relist(&mut s.pods_relisting);
                if let Some((k, h)) = holding(p) {
                    next.insert(k, h);
                }
            }
            watcher::Event::InitDone => {
                let next = s.pods_relisting.take().unwrap_or_default();
                s.used = sum_by_node(&next);
                s.pods = next;
                s.pods_synced = true;
            }
        }
    }

    /// Where the pods of `spec` may run and how many more fit; None until both
    /// watches have listed, or when the pods ask for no extended resource.
    pub fn capacity(&self, spec: &vllmservice_api::VLLMServiceSpec) -> Option<Capacity> {
        let s = self.0.read().expect("placement lock");
        if !(s.nodes_synced && s.pods_synced) {
            return None;
        }
        placement::capacity(spec, s.nodes.values(), |node| s.used.get(node))
    }
}

/// Why a container log is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogPurpose {
    /// A container that failed, restarts or overran its startup budget.
    Diagnosis,
    /// The start-up lines of a Ready container (the engine's settings).
    Engine,
    /// The output of a download Job's pod.
    Download,
}

impl LogPurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            LogPurpose::Diagnosis => "diagnosis",
            LogPurpose::Engine => "engine",
            LogPurpose::Download => "download",
        }
    }
}

/// What one log read found.
#[derive(Debug, Clone, PartialEq)]
pub enum LogOutcome {
    /// The read failed (the message is for the operator's log only).
    Failed,
    /// A diagnosis, and how far the load got.
    Diagnosed {
        diagnosis: Option<crate::enginelog::Diagnosis>,
        progress: Option<String>,
    },
    Engine(crate::enginelog::EngineInfo),
    /// Why a download pod failed.
    Download(crate::hflog::Classified),
}

/// Per pod UID, per purpose: the container instance last read (its key) and what
/// the read found. One entry per purpose and pod, so the memory is bounded by the
/// pods in the cache; an entry goes with its pod's Delete event (or a re-list
/// without it).
#[derive(Clone, Default)]
pub struct PodLogs(Arc<Mutex<LogsState>>);

#[derive(Default)]
struct LogsState {
    by_pod: HashMap<String, HashMap<LogPurpose, (String, LogOutcome)>>,
    /// The UIDs of a re-list in progress.
    relisting: Option<BTreeSet<String>>,
}

impl PodLogs {
    /// Applies one event of the pod watch: forgets deleted pods.
    pub fn saw<K: Resource>(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        let Ok(event) = event else { return };
        let mut s = self.0.lock().expect("pod logs lock");
        match event {
            watcher::Event::Delete(pod) => {
                if let Some(uid) = &pod.meta().uid {
                    s.by_pod.remove(uid);
                }
            }
            watcher::Event::Init => s.relisting = Some(BTreeSet::new()),
            watcher::Event::InitApply(pod) => {
                let seen = relist(&mut s.relisting);
                if let Some(uid) = &pod.meta().uid {
                    seen.insert(uid.clone());
                }
            }
            watcher::Event::InitDone => {
                let seen = s.relisting.take().unwrap_or_default();
                s.by_pod.retain(|uid, _| seen.contains(uid));
            }
            watcher::Event::Apply(_) => {}
        }
    }

    /// What the read of `key` (a container instance) for `purpose` of pod `uid`
    /// found, if that instance was read.
    pub fn get(&self, uid: &str, purpose: LogPurpose, key: &str) -> Option<LogOutcome> {
        let s = self.0.lock().expect("pod logs lock");
        match s.by_pod.get(uid)?.get(&purpose) {
            Some((k, outcome)) if k == key => Some(outcome.clone()),
            _ => None,
        }
    }

    /// Remembers what the read of `key` found (replacing the pod's older instance).
    pub fn put(&self, uid: &str, purpose: LogPurpose, key: &str, outcome: LogOutcome) {
        let mut s = self.0.lock().expect("pod logs lock");
        s.by_pod
            .entry(uid.to_string())
            .or_default()
            .insert(purpose, (key.to_string(), outcome));
    }

    /// How many pods have an entry (for tests).
    pub fn len(&self) -> usize {
        self.0.lock().expect("pod logs lock").by_pod.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        reporter: Reporter,
        resync: Duration,
        status_settle: Duration,
        prometheus_address: String,
        namespace: Option<String>,
        apis: Apis,
        services: Store<Compact<VLLMService>>,
        caches: Caches,
        written: StatusEchoes,
        wakeups: Wakeups,
    ) -> Self {
        let recorder = Recorder::new(client.clone(), reporter);
        Context {
            client,
            apis,
            namespace,
            services,
            caches,
            metrics,
            recorder,
            resync,
            status_settle,
            prometheus_address,
            failures: Mutex::default(),
            written,
            wakeups,
        }
    }

    /// `vs` with the status it has now: the cached copy, unless this operator has
    /// written a status the cache does not show yet (the watch event of its own
    /// write can arrive after the next reconcile started). Comparing with the stale
    /// copy would write the same status again and repeat its events.
    pub fn latest<'a>(&self, vs: &'a VLLMService) -> std::borrow::Cow<'a, VLLMService> {
        self.written.latest(vs)
    }

    /// Remembers a status written for `vs` (the copy the write was based on).
    pub fn wrote_status(&self, vs: &VLLMService, status: &VLLMServiceStatus) {
        self.written.wrote(vs, status, |key| {
            self.services
                .get(key)
                .map(|c| c.meta().resource_version.clone())
        });
    }

    /// Counts a failed reconcile of `obj`; returns how many in a row.
    pub fn failed(&self, obj: ObjectRef<Compact<VLLMService>>) -> u32 {
        let mut f = self.failures.lock().expect("failures lock");
        let n = f.entry(obj).or_default();
        *n = n.saturating_add(1);
        *n
    }

    pub fn succeeded(&self, obj: &ObjectRef<Compact<VLLMService>>) {
        self.failures.lock().expect("failures lock").remove(obj);
    }
}

/// Exponential backoff: 1s, 2s, 4s ... capped at 256s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(40), Duration::from_secs(256));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(256));
    }

    fn service_at(rv: &str, phase: &str) -> (VLLMService, Compact<VLLMService>) {
        let text = json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "a", "uid": "u1", "resourceVersion": rv},
            "spec": {"image": "vllm/vllm-openai:latest", "modelPath": "/m", "modelName": "m",
                     "storage": {"pvcName": "p", "mountPath": "/data"}},
            "status": {"phase": phase},
        })
        .to_string();
        (
            serde_json::from_str(&text).unwrap(),
            serde_json::from_str(&text).unwrap(),
        )
    }

    fn phase(vs: &VLLMService) -> Option<&'static str> {
        vs.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str())
    }

    /// A written status stands in for the cached one until the cache holds a
    /// newer copy, and is forgotten then, with no later reconcile needed: at
    /// 1,000 converged services nothing of their last writes stays in memory.
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

    fn pod(ns: &str, name: &str, instance: Option<&str>) -> Compact<Pod> {
        let mut labels = json!({});
        if let Some(i) = instance {
            labels = json!({names::NAME_LABEL: names::NAME_VALUE, names::INSTANCE_LABEL: i});
        }
        let pod = json!({"metadata": {"name": name, "namespace": ns, "labels": labels}});
        serde_json::from_str(&pod.to_string()).unwrap()
    }

    #[test]
    fn indexes_rebuild_from_a_streamed_list_without_init_and_an_empty_one() {
        let idx = PodIndex::default();
        let ev = |e| idx.saw(&Ok(e));
        // A streamed list (WatchList): no Init before its objects.
        ev(watcher::Event::InitApply(pod("a", "p1", Some("qwen"))));
        ev(watcher::Event::InitDone);
        assert_eq!(idx.pods_of("a", "qwen"), ["p1"]);
        // A streamed re-list that finds nothing: InitDone alone empties the index.
        ev(watcher::Event::InitDone);
        assert!(idx.pods_of("a", "qwen").is_empty());

        let placement = Placement::default();
        let node: Compact<Node> = serde_json::from_value(json!({"metadata": {"name": "n1"},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}))
        .unwrap();
        placement.saw_node(&Ok(watcher::Event::InitApply(node)));
        placement.saw_node(&Ok(watcher::Event::InitDone));
        let s = placement.0.read().unwrap();
        assert!(s.nodes_synced);
        assert_eq!(s.nodes.len(), 1, "the streamed node is kept");
    }

    #[test]
    fn a_nodes_facts_come_from_its_cached_text_as_from_the_whole_node() {
        let text = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"gpu": "a100"}, "annotations": {"a": "b"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                     "unschedulable": true, "podCIDR": "198.18.0.0/24"},
            "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"},
                       "nodeInfo": {"kubeletVersion": "v1.36.0"}}});
        let whole: Node = serde_json::from_value(text.clone()).unwrap();
        let compact: Compact<Node> = serde_json::from_value(text).unwrap();
        let facts = PlacedNode::facts(&compact);
        assert_eq!(facts, NodeFacts::of(&whole));
        assert_eq!(facts.labels["gpu"], "a100");
        assert!(facts.unschedulable);
        assert_eq!(facts.taints.len(), 1);
        assert_eq!(facts.allocatable["nvidia.com/gpu"], 4);
    }

    #[test]
    fn a_finished_pod_holds_nothing_on_its_node() {
        let gpu_pod = |phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c",
                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": phase}}))
            .unwrap()
        };
        assert!(holding(&gpu_pod("Running")).is_some());
        assert!(holding(&gpu_pod("Pending")).is_some());
        assert!(holding(&gpu_pod("Succeeded")).is_none());
        assert!(holding(&gpu_pod("Failed")).is_none());
        // The watch hands the count pods as cached (compact): their spec is read.
        let compact = |phase| -> Compact<Pod> {
            serde_json::from_str(&serde_json::to_string(&gpu_pod(phase)).unwrap()).unwrap()
        };
        let placement = Placement::default();
        placement.saw_pod(&Ok(watcher::Event::InitApply(compact("Running"))));
        placement.saw_pod(&Ok(watcher::Event::InitDone));
        let held = |p: &Placement| p.0.read().unwrap().used.get("n1").cloned();
        assert_eq!(held(&placement).unwrap()["nvidia.com/gpu"], 1);
        placement.saw_pod(&Ok(watcher::Event::Apply(compact("Succeeded"))));
        assert_eq!(held(&placement), None);
    }

    #[test]
    fn the_placement_view_of_a_pod_holds_what_the_whole_pod_holds() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"nodeName": "n1",
                "containers": [
                    {"name": "a", "image": "i", "args": ["--x"],
                     "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
                    {"name": "b", "resources": {"requests": {"example.com/fpga": "1"},
                     "limits": {"example.com/fpga": "3"}}}],
                "initContainers": [{"name": "i",
                    "resources": {"requests": {"nvidia.com/gpu": "4"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "podIP": "198.18.0.9",
                "conditions": [{"type": "Ready", "status": "True"}]}}))
        .unwrap();
        let compact: Compact<Pod> =
            serde_json::from_str(&serde_json::to_string(&pod).unwrap()).unwrap();
        let view = compact
            .project::<PlacedPod>()
            .unwrap()
            .into_pod(compact.meta());
        let whole = holding(&pod).unwrap();
        assert_eq!(whole.1.1["nvidia.com/gpu"], 4);
        assert_eq!(whole.1.1["example.com/fpga"], 1);
        assert_eq!(holding(&view), Some(whole));
    }

    #[test]
    fn pod_index_follows_applies_deletes_relabels_and_relists() {
        let idx = PodIndex::default();
        let ev = |e| idx.saw(&Ok(e));
        ev(watcher::Event::Apply(pod("a", "p1", Some("qwen"))));
        ev(watcher::Event::Apply(pod("a", "p2", Some("qwen"))));
        ev(watcher::Event::Apply(pod("b", "p1", Some("qwen"))));
        assert_eq!(idx.pods_of("a", "qwen"), ["p1", "p2"]);
        assert_eq!(idx.pods_of("b", "qwen"), ["p1"]);
        // Relabelled away from the service.
        ev(watcher::Event::Apply(pod("a", "p2", None)));
        assert_eq!(idx.pods_of("a", "qwen"), ["p1"]);
        ev(watcher::Event::Delete(pod("a", "p1", Some("qwen"))));
        assert!(idx.pods_of("a", "qwen").is_empty());
        // A re-list replaces everything at its end.
        ev(watcher::Event::Init);
        ev(watcher::Event::InitApply(pod("c", "p9", Some("llama"))));
        assert_eq!(
            idx.pods_of("b", "qwen"),
            ["p1"],
            "old index until the list is done"
        );
        ev(watcher::Event::InitDone);
        assert!(idx.pods_of("b", "qwen").is_empty());
        assert_eq!(idx.pods_of("c", "llama"), ["p9"]);
    }
}
