//! The controller runtime around the reconcile pipeline: what is watched and
//! cached, how events map to VLLMServices, when reconciles may start,
//! concurrency, and the per-object retry policy.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Future, FutureExt, Stream, StreamExt, TryStreamExt};
use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::Job,
    core::v1::{Node, PersistentVolumeClaim, Pod, Service},
    policy::v1::PodDisruptionBudget,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client, Resource, ResourceExt,
    core::{PartialObjectMeta, PartialObjectMetaExt},
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        events::{EventType, Reporter},
        predicates,
        reflector::{self, ObjectRef, Store},
        watcher::{self, watcher},
    },
};
use serde::de::DeserializeOwned;
use tracing::Instrument;
use vllmservice_api::VLLMService;

use crate::keda::scaledobjects::ScaledObject;
use crate::prometheus::{prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor};
use crate::{
    build,
    compact::Compact,
    context::{
        Cache, CacheFill, Caches, Context, NameIndex, Placement, PodIndex, PodLogs, StatusEchoes,
        backoff,
    },
    error::Error,
    events,
    health::Health,
    metrics::Metrics,
    names,
    optional::{self, Apis},
    reconcile,
    route::Target,
    slim::{self, Slim},
    wakeup::Wakeups,
};

/// How long a new VLLMService's first status waits for its pods by default.
pub const DEFAULT_STATUS_SETTLE: Duration = Duration::from_secs(5);

/// Options of the controller loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many VLLMServices are reconciled at once.
    pub concurrency: u16,
    /// Re-check every object this often even without events (level-triggered safety net).
    pub resync: Duration,
    /// How long a new VLLMService's first status may wait for its pods to
    /// become ready, so that a quick start is written once (`settle`); zero
    /// writes it at once.
    pub status_settle: Duration,
    /// Name reported as the source of events.
    pub reporter: String,
    /// This replica's identity (pod name), reported with events.
    pub instance: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    pub namespace: Option<String>,
    /// Where the controller reports cache sync and loop state (for `/readyz`, `/healthz`).
    pub health: Health,
    /// Watch every node and every running pod of the cluster to count free GPUs
    /// (rollout strategy Auto, the numbers of a blocked rollout). Needs the
    /// cluster-wide node and pod rules; off in watch-namespace mode.
    pub gpu_accounting: bool,
    /// The Prometheus KEDA queries for a VLLMService whose
    /// `spec.autoscaling.prometheus.serverAddress` is unset.
    pub prometheus_address: String,
    /// Fill the caches from streamed lists (WatchList) when the API server
    /// offers them; otherwise, and by default, from lists in pages.
    pub streaming_lists: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 16,
            resync: Duration::from_secs(300),
            status_settle: DEFAULT_STATUS_SETTLE,
            reporter: names::MANAGED_BY_VALUE.to_string(),
            instance: None,
            namespace: None,
            health: Health::default(),
            gpu_accounting: true,
            prometheus_address: build::DEFAULT_PROMETHEUS_ADDRESS.to_string(),
            streaming_lists: false,
        }
    }
}

/// Runs the controller until `shutdown` completes. When an optional API (Gateway
/// API, Prometheus Operator, KEDA) is installed or removed, the watches are rebuilt
/// and every VLLMService is reconciled again; no restart of the process is needed.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let health = opts.health.clone();
    health.set_running(true);
    run_until_stopped(client, metrics, opts, shutdown).await;
    health.set_running(false);
}

async fn run_until_stopped(
    client: Client,
    metrics: Arc<Metrics>,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = shutdown.shared();
    let stopping = Arc::new(AtomicBool::new(false));
    loop {
        let apis = tokio::select! {
            apis = discover_until_ok(&client) => apis,
            _ = shutdown.clone() => return,
        };
        let lists = match opts.streaming_lists {
            true => ListStrategy::probe(&client).await,
            false => ListStrategy::Paged,
        };
        tracing::info!(
            gateway_api = apis.gateway,
            prometheus_operator = apis.prometheus,
            keda = apis.keda,
            streaming_lists = lists == ListStrategy::Streaming,
            "optional APIs"
        );
        let (changed_tx, changed) = tokio::sync::oneshot::channel::<()>();
        let watch_crds = tokio::spawn({
            let client = client.clone();
            async move {
                apis_changed(client, apis).await;
                let _ = changed_tx.send(());
            }
        });
        let stop = {
            let (shutdown, stopping) = (shutdown.clone(), stopping.clone());
            async move {
                tokio::select! {
                    _ = shutdown => stopping.store(true, Ordering::SeqCst),
                    _ = changed => {}
                }
            }
        };
        run_watches(client.clone(), metrics.clone(), &opts, apis, lists, stop).await;
        watch_crds.abort();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        tracing::info!("rebuilding watches");
    }
}

/// Reads the optional APIs' CRDs (each with a list by name: the operator may list
/// and watch CRDs, nothing more); an API counts as installed when all its CRDs
/// are Established.
async fn discover_apis(client: &Client) -> kube::Result<Apis> {
    let crds: Api<optional::CrdConditions> = Api::all(client.clone());
    let mut established = Vec::new();
    for name in optional::all_crds() {
        let by_name = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
        let crd = crds.list(&by_name).await?.items.into_iter().next();
        if crd.is_some_and(|crd| crd.is_established()) {
            established.push(name.to_string());
        }
    }
    Ok(Apis::from_established(&established))
}

async fn discover_until_ok(client: &Client) -> Apis {
    let mut failures = 0;
    loop {
        match discover_apis(client).await {
            Ok(apis) => return apis,
            Err(e) => {
                failures += 1;
                let delay = backoff(failures);
                tracing::warn!(error = %e, retry_in = ?delay, "reading CRDs failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Completes when the watches must be rebuilt: the set of installed optional
/// APIs differs from `current`, or the connection to the API server was lost
/// (e.g. it restarted) and is back.
///
/// After an API-server restart, watches that resume from their old
/// resourceVersion were answered only after 1–4 minutes (with 410 Gone), so
/// changes made meanwhile went unseen (docs/reliability.md). Fresh watches,
/// which list first, are answered at once; rebuilding also re-reads every
/// object, which is what a level-triggered controller should do after an outage.
async fn apis_changed(client: Client, current: Apis) {
    let crds = Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone());
    let mut events = watcher(crds, watcher::Config::default())
        .backoff(watch_backoff())
        .boxed();
    // A (re-)list is checked once as a whole, not once per CRD in it: a CRD
    // installed between the discovery of `current` and the first list shows only there.
    while let Some(event) = events.next().await {
        let relevant = match event {
            // The API server answered (with an error status, e.g. 403): still connected.
            Err(
                watcher::Error::WatchError(_)
                | watcher::Error::InitialListFailed(kube::Error::Api(_))
                | watcher::Error::WatchStartFailed(kube::Error::Api(_))
                | watcher::Error::WatchFailed(kube::Error::Api(_)),
            ) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "lost the connection to the API server");
                while discover_apis(&client).await.is_err() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                tracing::info!("the API server is reachable again");
                return;
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
            Ok(watcher::Event::InitDone) => true,
            Ok(watcher::Event::Apply(crd) | watcher::Event::Delete(crd)) => {
                Apis::is_relevant(&crd.name_any())
            }
        };
        if relevant
            && let Ok(now) = discover_apis(&client).await
            && now != current
        {
            tracing::info!("optional APIs changed");
            return;
        }
    }
}

/// How the watches fill their caches at start (and after a re-list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// The API server streams the current objects as watch events
    /// (`sendInitialEvents`, Kubernetes' WatchList): one object at a time is
    /// in flight, never a page of them.
    Streaming,
    /// Lists in pages of [`LIST_PAGE_SIZE`], then a watch: for API servers
    /// without WatchList (1.33 has it off by default, older ones lack it).
    Paged,
}

/// Objects per list page when the API server cannot stream lists: a page is
/// held whole (its JSON and its objects) until its last object is cached, and
/// the watches list at the same time. 25 instead of 100: a restarted
/// operator's peak at 1,000 services 60.7 → 58.2 MiB, for 40 list requests
/// per kind instead of 10 (BENCHMARKS.md, "Fourth step").
const LIST_PAGE_SIZE: u32 = 25;

impl ListStrategy {
    /// Asks the API server for a streamed list of one CRD (the operator's own;
    /// the operator may watch CRDs): refused (422) where WatchList is off.
    async fn probe(client: &Client) -> ListStrategy {
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

    /// `config` with this strategy.
    fn apply(self, config: watcher::Config) -> watcher::Config {
        match self {
            ListStrategy::Streaming => config.streaming_lists(),
            ListStrategy::Paged => config.page_size(LIST_PAGE_SIZE),
        }
    }
}

/// How a watch retries after an error (e.g. the API server restarting): from
/// 250 ms, doubling, capped at 5 s, with jitter; reset by the next event. kube's
/// default (800 ms to 30 s, reset only after 2 minutes of success) left the
/// operator blind for minutes after an API-server restart (docs/reliability.md).
fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// A watch whose objects are kept in a cache, slimmed by `slim`, with
/// `managedFields` reduced to who manages the object (the apply step needs
/// no more). The watch runs in its own task, so the cache fills before the
/// controller starts; `on_event` sees every event first, before `keep` and
/// `slim` (so it may read what the cache drops). The stream yields
/// `trigger` of every changed object once the cache holds it, for the
/// controller: for a child only
/// its metadata ([`meta_only`]), since the stream is queued until the
/// controller starts and a full copy of every object would wait there.
fn cached_watch<K, T>(
    api: Api<Slim<K>>,
    config: watcher::Config,
    Keep { only: keep, slim }: Keep<K>,
    on_event: impl Fn(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static,
    trigger: impl Fn(K) -> T + Send + 'static,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> (
    Cache<K>,
    impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    T: Send + 'static,
{
    let (store, writer) = reflector::store();
    let (cache, fill): (Cache<K>, CacheFill) = Cache::new(store);
    // Unbounded: the watch must never wait for the controller, or the cache
    // would not fill before the controller starts.
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let stream = watcher(api, config)
        .backoff(watch_backoff())
        .map_ok(slim::event)
        .inspect(move |event| {
            fill.saw(event);
            on_event(event);
        })
        .try_filter_map(move |event| futures::future::ready(Ok(kept(event, keep))))
        .modify(slim)
        .reflect(writer)
        .touched_objects()
        .map_ok(trigger);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if tx.unbounded_send(item).is_err() {
                return;
            }
        }
    }));
    (cache, rx)
}

/// `event` for a cache that holds only the objects `keep` accepts: an object
/// that no longer qualifies (e.g. relabelled) leaves it, others never enter.
fn kept<K>(event: watcher::Event<K>, keep: fn(&K) -> bool) -> Option<watcher::Event<K>> {
    match event {
        watcher::Event::Apply(o) if !keep(&o) => Some(watcher::Event::Delete(o)),
        watcher::Event::InitApply(o) if !keep(&o) => None,
        e => Some(e),
    }
}

/// What a cache holds of its watch's objects: those `only` accepts, slimmed by `slim`.
struct Keep<K> {
    only: fn(&K) -> bool,
    slim: fn(&mut K),
}

impl<K> Keep<K> {
    /// Every object, whole.
    fn all() -> Self {
        Keep {
            only: |_| true,
            slim: |_| {},
        }
    }
}

/// What the controller needs of a changed child to find its VLLMService:
/// its name, namespace, owner references and labels; not its spec, status,
/// annotations or managed fields. (The queue holds every child of the first
/// lists until the controller starts.)
fn meta_only<K: Resource<DynamicType = ()>>(obj: K) -> PartialObjectMeta<K> {
    let mut obj = obj;
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

/// A watch that only feeds `on_event` (an index such as [`Placement`]), in its own task.
fn index_watch<K>(
    api: Api<Slim<K>>,
    config: watcher::Config,
    on_event: impl Fn(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let stream = watcher(api, config)
        .backoff(watch_backoff())
        .map_ok(slim::event);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            on_event(&event);
        }
    }));
}

/// The node watch behind [`Placement`]; its pods come from the pod watch.
fn placement_watch(
    client: &Client,
    config: watcher::Config,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Placement {
    let placement = Placement::default();
    let p = placement.clone();
    index_watch(
        Api::<Slim<Compact<Node>>>::all(client.clone()),
        config,
        move |e| p.saw_node(e),
        tasks,
    );
    placement
}

/// The claim a VLLMService mounts (`spec.storage.pvcName`), read alone from
/// its cached text: every VLLMService event (its status writes too) asks.
fn claim_of(vs: &Compact<VLLMService>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Claim {
        spec: ClaimSpec,
    }
    #[derive(serde::Deserialize)]
    struct ClaimSpec {
        #[serde(default)]
        storage: ClaimStorage,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct ClaimStorage {
        pvc_name: Option<String>,
    }
    vs.project::<Claim>().ok()?.spec.storage.pvc_name
}

/// Objects this operator manages (its label), e.g. its pods among all pods.
fn is_managed<K: Resource>(obj: &K) -> bool {
    names::is_managed(obj.meta())
}

fn ignore<K>(_: &Result<watcher::Event<K>, watcher::Error>) {}

/// Pods: the reconcile reads only their metadata and status (who manages
/// one does not matter either: `compact::Held`).
fn slim_pod(pod: &mut Compact<Pod>) {
    pod.without("spec");
}

/// The label KEDA puts on its HPAs (and ScaledObjects): the ScaledObject's name.
const SCALED_OBJECT_LABEL: &str = "scaledobject.keda.sh/name";

/// How long the controller waits for its caches before it starts anyway: a
/// cache whose watch is refused (e.g. a missing RBAC rule) never fills, and
/// the reconciles that need it then report why.
const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// One incarnation of the controller, with the watches `apis` allows.
async fn run_watches(
    client: Client,
    metrics: Arc<Metrics>,
    opts: &Options,
    apis: Apis,
    lists: ListStrategy,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let scope = ScopedApis(client.clone(), opts.namespace.clone());
    let config = || lists.apply(watcher::Config::default());
    let managed = config().labels(&names::managed_selector());
    let mut tasks = Vec::new();
    opts.health.set_caches_synced(false);

    // The VLLMServices: a change of the spec (generation) or of the object's
    // identity triggers a reconcile; a status change does not, so the operator's
    // own status writes do not come back as work. A status edited by someone
    // else is corrected at the next child event or resync.
    // Which services mount each claim, for the PVC watch.
    let claims: NameIndex<Compact<VLLMService>> = NameIndex::new(claim_of);
    // The statuses written that the cache does not show yet: each goes once
    // the cache holds a newer copy of its VLLMService.
    let echoes = StatusEchoes::default();
    let (vllm_cache, vllm_services) = {
        let (claims, echoes) = (claims.clone(), echoes.clone());
        cached_watch(
            scope.api::<Slim<Compact<VLLMService>>>(),
            config().any_semantic(),
            Keep::all(),
            move |e| claims.saw(e),
            move |vs| {
                echoes.cached(&vs);
                vs
            },
            &mut tasks,
        )
    };
    let store = vllm_cache.store.clone();
    let vllm_services = vllm_services.predicate_filter(predicates::generation, Default::default());
    // Reconciles of held first statuses, when their settle window ends.
    let (wakeups, due) = Wakeups::new();
    let mut controller = Controller::for_stream(vllm_services, store.clone()).reconcile_on(due);

    let (deployments, deployment_events) = cached_watch(
        scope.api::<Slim<Compact<Deployment>>>(),
        managed.clone(),
        Keep::all(),
        ignore,
        meta_only,
        &mut tasks,
    );
    let (services, service_events) = cached_watch(
        scope.api::<Slim<Compact<Service>>>(),
        managed.clone(),
        Keep::all(),
        ignore,
        meta_only,
        &mut tasks,
    );
    let pod_index = PodIndex::default();
    let pod_logs = PodLogs::default();
    // Free GPUs are counted over the whole cluster: only an operator that may
    // see every namespace's pods can count them. Then one watch of every pod
    // feeds the count and, with the operator's own pods, the cache, so that
    // no pod is sent (and parsed) twice.
    let placement = opts
        .gpu_accounting
        .then(|| placement_watch(&client, config(), &mut tasks));
    let (pods, pod_events) = {
        let (index, logs, counted) = (pod_index.clone(), pod_logs.clone(), placement.clone());
        let (api, selected) = match &placement {
            Some(_) => (Api::<Slim<Compact<Pod>>>::all(client.clone()), config()),
            None => (scope.api::<Slim<Compact<Pod>>>(), managed.clone()),
        };
        cached_watch(
            api,
            selected,
            Keep {
                only: is_managed,
                slim: slim_pod,
            },
            move |e| {
                if let Some(p) = &counted {
                    p.saw_pod(e);
                }
                index.saw(e);
                logs.saw(e);
            },
            meta_only,
            &mut tasks,
        )
    };
    let (pvcs, pvc_events) = cached_watch(
        scope.api::<Slim<Compact<PersistentVolumeClaim>>>(),
        config(),
        Keep::all(),
        ignore,
        meta_only,
        &mut tasks,
    );
    let (pdbs, pdb_events) = cached_watch(
        scope.api::<Slim<Compact<PodDisruptionBudget>>>(),
        managed.clone(),
        Keep::all(),
        ignore,
        meta_only,
        &mut tasks,
    );
    // Download Jobs may have several owners (services sharing a download), none
    // a controller: every owner hears of the Job.
    let (jobs, job_events) = cached_watch(
        scope.api::<Slim<Compact<Job>>>(),
        managed.clone(),
        Keep::all(),
        ignore,
        meta_only,
        &mut tasks,
    );
    // KEDA's HPAs, whose ScalingLimited the status reports: the HPA's owner is
    // the ScaledObject, named like the VLLMService (its label says which).
    let (hpas, hpa_events) = cached_watch(
        scope.api::<Slim<Compact<HorizontalPodAutoscaler>>>(),
        config().labels(SCALED_OBJECT_LABEL),
        Keep::all(),
        ignore,
        meta_only,
        &mut tasks,
    );
    controller = controller
        .owns_stream(deployment_events)
        .owns_stream(service_events)
        .owns_stream(pdb_events)
        .watches_stream(job_events, |job| {
            let ns = job.namespace().unwrap_or_default();
            job.owner_references()
                .iter()
                .filter(|r| r.kind == "VLLMService")
                .map(|r| ObjectRef::<Compact<VLLMService>>::new(&r.name).within(&ns))
                .collect::<Vec<_>>()
        })
        .watches_stream(hpa_events, |hpa| {
            let ns = hpa.namespace()?;
            let name = hpa.labels().get(SCALED_OBJECT_LABEL)?;
            Some(ObjectRef::new(name).within(&ns))
        })
        .watches_stream(pod_events, |pod| {
            let ns = pod.namespace()?;
            names::instance_of(pod.labels()).map(|n| ObjectRef::new(n).within(&ns))
        })
        .watches_stream(pvc_events, move |pvc| {
            let ns = pvc.namespace().unwrap_or_default();
            claims
                .names_of(&ns, name_of(&pvc))
                .into_iter()
                .map(|n| ObjectRef::new(&n).within(&ns))
                .collect::<Vec<_>>()
        });
    let mut caches = Caches {
        deployments,
        services,
        pods,
        pod_index,
        pod_logs,
        pvcs,
        pdbs,
        jobs,
        placement,
        routes: None,
        gateways: None,
        monitors: None,
        rules: None,
        scaled_objects: None,
        hpas,
    };
    if apis.gateway {
        let (routes, route_events) = cached_watch(
            scope.api::<Slim<Compact<HttpRoute>>>(),
            managed.clone(),
            Keep::all(),
            ignore,
            meta_only,
            &mut tasks,
        );
        let (gateways, gateway_events) = cached_watch(
            scope.api::<Slim<Compact<Gateway>>>(),
            config(),
            Keep::all(),
            ignore,
            meta_only,
            &mut tasks,
        );
        let gw_store = store.clone();
        controller =
            controller
                .owns_stream(route_events)
                .watches_stream(gateway_events, move |gw| {
                    let ns = gw.namespace().unwrap_or_default();
                    services_referencing(&gw_store, &gw, |vs| {
                        vs.spec.gateway_ref.as_ref().is_some_and(|r| {
                            let t = Target::of(vs, r);
                            t.namespace == ns && &t.name == name_of(&gw)
                        })
                    })
                });
        (caches.routes, caches.gateways) = (Some(routes), Some(gateways));
    }
    if apis.prometheus {
        let (monitors, monitor_events) = cached_watch(
            scope.api::<Slim<Compact<ServiceMonitor>>>(),
            managed.clone(),
            Keep::all(),
            ignore,
            meta_only,
            &mut tasks,
        );
        let (rules, rule_events) = cached_watch(
            scope.api::<Slim<Compact<PrometheusRule>>>(),
            managed.clone(),
            Keep::all(),
            ignore,
            meta_only,
            &mut tasks,
        );
        controller = controller
            .owns_stream(monitor_events)
            .owns_stream(rule_events);
        (caches.monitors, caches.rules) = (Some(monitors), Some(rules));
    }
    if apis.keda {
        let (scaled_objects, scaled_object_events) = cached_watch(
            scope.api::<Slim<Compact<ScaledObject>>>(),
            managed.clone(),
            Keep::all(),
            ignore,
            meta_only,
            &mut tasks,
        );
        controller = controller.owns_stream(scaled_object_events);
        caches.scaled_objects = Some(scaled_objects);
    }

    // Reconciles start once every cache holds its first list, so that a start
    // does not take, say, a PVC for missing because its cache is still empty.
    let stop = stop.shared();
    let all_synced = {
        let (caches, vllm_cache) = (caches.clone(), vllm_cache.clone());
        move || {
            let (caches, vllm_cache) = (caches.clone(), vllm_cache.clone());
            async move {
                vllm_cache.synced().await;
                caches.synced().await;
            }
        }
    };
    tokio::select! {
        synced = tokio::time::timeout(CACHE_SYNC_TIMEOUT, all_synced()) => {
            if synced.is_err() {
                tracing::warn!(timeout = ?CACHE_SYNC_TIMEOUT, "some watch caches are not filled; starting anyway");
            }
        }
        _ = stop.clone() => {
            tasks.iter().for_each(|t| t.abort());
            return;
        }
    }
    let health = opts.health.clone();
    tasks.push(tokio::spawn(async move {
        all_synced().await;
        health.set_caches_synced(true);
    }));

    let reporter = Reporter {
        controller: opts.reporter.clone(),
        instance: opts.instance.clone(),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        reporter,
        opts.resync,
        opts.status_settle,
        opts.prometheus_address.clone(),
        opts.namespace.clone(),
        apis,
        store,
        caches,
        echoes,
        wakeups,
    ));
    controller
        .with_config(controller::Config::default().concurrency(opts.concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile_guarded, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile loop");
            }
        })
        .await;
    tasks.iter().for_each(|t| t.abort());
}

/// Makes `Api`s for all namespaces or for one.
struct ScopedApis(Client, Option<String>);

impl ScopedApis {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.1 {
            Some(ns) => Api::namespaced(self.0.clone(), ns),
            None => Api::all(self.0.clone()),
        }
    }
}

fn name_of<K: Resource>(obj: &K) -> &String {
    static EMPTY: String = String::new();
    obj.meta().name.as_ref().unwrap_or(&EMPTY)
}

/// The VLLMServices in the cache that `uses` says depend on `obj` (a PVC or a
/// Gateway), to reconcile when it changes.
fn services_referencing<K: Resource>(
    store: &Store<Compact<VLLMService>>,
    obj: &K,
    uses: impl Fn(&VLLMService) -> bool,
) -> Vec<ObjectRef<Compact<VLLMService>>> {
    if obj.meta().namespace.is_none() {
        return vec![];
    }
    store
        .state()
        .iter()
        .filter_map(|c| c.expand().ok())
        .filter(|vs| uses(vs))
        .map(|vs| ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default()))
        .collect()
}

async fn reconcile_guarded(
    obj: Arc<Compact<VLLMService>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    ctx.metrics.reconciles_in_flight.inc();
    ctx.metrics.managed_objects.set(ctx.services.len() as i64);
    // Every log line of this reconcile carries the object's namespace and name.
    let span = tracing::info_span!(
        "reconcile",
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any()
    );
    let result = match reconcile::reconcile(&obj, &ctx).instrument(span).await {
        // The namespace is being deleted: the children go with it; nothing to retry.
        Err(Error::Kube(kube::Error::Api(e)))
            if e.code == 403 && e.message.contains("being terminated") =>
        {
            Ok(Action::await_change())
        }
        other => other,
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics.reconciles_in_flight.dec();
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(obj.as_ref()));
    }
    result
}

fn error_policy(obj: Arc<Compact<VLLMService>>, err: &Error, ctx: Arc<Context>) -> Action {
    let category = err.category().as_str();
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::ErrorLabels {
            category: category.to_string(),
        })
        .inc();
    let failures = ctx.failed(ObjectRef::from_obj(obj.as_ref()));
    let delay = backoff(failures);
    tracing::warn!(
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any(),
        category,
        failures,
        retry_in = ?delay,
        error = %err,
        "reconcile failed"
    );
    // One event when an object starts failing, not one per retry.
    if let (1, Ok(vs)) = (failures, obj.expand()) {
        let ctx = ctx.clone();
        let note = format!("reconcile failed ({category}), retrying with backoff: {err}");
        tokio::spawn(async move {
            events::publish(
                &ctx,
                &vs,
                EventType::Warning,
                "ReconcileFailed",
                &note,
                None,
            )
            .await;
        });
    }
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claim_of_a_service_is_its_pvc_name_as_the_whole_parse_reads_it() {
        let vs = |storage: serde_json::Value| -> Compact<VLLMService> {
            serde_json::from_value(json!({
                "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
                "metadata": {"name": "qwen", "namespace": "ns"},
                "spec": {"image": "vllm/vllm-openai:v0.18.0", "modelPath": "/models/m",
                    "modelName": "m", "storage": storage},
                "status": {"phase": "Running"}}))
            .unwrap()
        };
        let with = vs(json!({"pvcName": "models", "mountPath": "/models"}));
        let whole = with.expand().expect("a VLLMService");
        assert_eq!(whole.spec.storage.pvc_name.as_deref(), Some("models"));
        assert_eq!(claim_of(&with).as_deref(), Some("models"));
        let without = vs(json!({"mountPath": "/models"}));
        assert!(
            without
                .expand()
                .expect("a VLLMService")
                .spec
                .storage
                .pvc_name
                .is_none()
        );
        assert_eq!(claim_of(&without), None);
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
        let keep = |e| kept(e, is_managed::<Pod>);
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
