//! The controller runtime around the reconcile pipeline: what is watched, how
//! events map to VLLMServices, concurrency, and the per-object retry policy.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Future, FutureExt, Stream, StreamExt};
use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{PersistentVolumeClaim, Pod, Service},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Resource, ResourceExt,
    core::{DeserializeGuard, PartialObjectMeta},
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        events::{EventType, Recorder, Reporter},
        predicates,
        reflector::{self, ObjectRef, Store},
        watcher::{self, watcher},
    },
};
use serde::de::DeserializeOwned;
use tracing::Instrument;
use vllmservice_api::{VLLMService, VLLMServiceStatus};

use crate::prometheus::{prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor};
use crate::{error::Error, metrics::Metrics, names, optional::Apis, reconcile, route::Target};

/// Options of the controller loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many VLLMServices are reconciled at once.
    pub concurrency: u16,
    /// Re-check every object this often even without events (level-triggered safety net).
    pub resync: Duration,
    /// Name reported as the source of events.
    pub reporter: String,
    /// This replica's identity (pod name), reported with events.
    pub instance: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    pub namespace: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 16,
            resync: Duration::from_secs(300),
            reporter: names::MANAGED_BY_VALUE.to_string(),
            instance: None,
            namespace: None,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// The optional APIs installed when this controller's watches were set up.
    pub apis: Apis,
    /// The controller's cache of VLLMServices.
    pub services: Store<DeserializeGuard<VLLMService>>,
    /// The controller's caches of children and of the objects they depend on.
    pub caches: Caches,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub resync: Duration,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<ObjectRef<DeserializeGuard<VLLMService>>, u32>>,
    /// The last status this operator wrote per VLLMService, until the watch shows it.
    written: Mutex<HashMap<ObjectRef<DeserializeGuard<VLLMService>>, Written>>,
}

/// A status write the cache may not have seen yet.
struct Written {
    uid: String,
    /// The resourceVersion of the copy the write was based on.
    based_on: Option<String>,
    status: VLLMServiceStatus,
}

/// The controller's caches, filled by its watches (see [`run_watches`]). Children
/// are label-selected (`app.kubernetes.io/managed-by`), Pods keep only metadata
/// and status, PVCs only metadata and status; `managedFields` are dropped from all.
#[derive(Clone)]
pub struct Caches {
    pub deployments: Cache<Deployment>,
    pub services: Cache<Service>,
    pub pods: Cache<Pod>,
    pub pvcs: Cache<PersistentVolumeClaim>,
    /// Present when the Gateway API is installed.
    pub routes: Option<Cache<HttpRoute>>,
    pub gateways: Option<Cache<Gateway>>,
    /// Present when the Prometheus Operator's CRDs are installed.
    pub monitors: Option<Cache<ServiceMonitor>>,
    pub rules: Option<Cache<PrometheusRule>>,
    started: Instant,
}

/// How long reconciles wait, after the watches start, for every cache's first list.
const CACHE_FILL_WAIT: Duration = Duration::from_secs(5);

impl Caches {
    fn all_ready(&self) -> bool {
        fn ready<K>(c: &Option<Cache<K>>) -> bool
        where
            K: Resource + Clone + 'static,
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            c.as_ref().is_none_or(Cache::is_ready)
        }
        self.deployments.is_ready()
            && self.services.is_ready()
            && self.pods.is_ready()
            && self.pvcs.is_ready()
            && ready(&self.routes)
            && ready(&self.gateways)
            && ready(&self.monitors)
            && ready(&self.rules)
    }

    /// Right after the watches start, waits (at most [`CACHE_FILL_WAIT`]) until
    /// every cache holds its first complete list, so that a restart does not
    /// report, say, a PVC as missing because its cache is still empty. A cache
    /// that cannot be filled (its watch fails, e.g. a missing RBAC rule) is not
    /// waited for: reads of its kind go to the API server, which reports the error.
    pub async fn settle(&self) {
        while !self.all_ready() && self.started.elapsed() < CACHE_FILL_WAIT {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One watch cache: the store, and whether it holds a complete list yet.
/// (Tracked here rather than with `Store::wait_until_ready`, which in
/// kube-runtime 4.2 wakes only the last of several concurrent waiters.)
#[derive(Clone)]
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    ready: Arc<AtomicBool>,
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The store, once it holds a complete list; `None` until then (read from the API server).
    pub fn store(&self) -> Option<&Store<K>> {
        self.is_ready().then_some(&self.store)
    }
}

/// The object `name` in `namespace` from `store`.
pub fn cached<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .get(&ObjectRef::new(name).within(namespace))
        .map(|o| (*o).clone())
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        opts: &Options,
        apis: Apis,
        services: Store<DeserializeGuard<VLLMService>>,
        caches: Caches,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: opts.reporter.clone(),
                instance: opts.instance.clone(),
            },
        );
        Context {
            client,
            apis,
            services,
            caches,
            metrics,
            recorder,
            resync: opts.resync,
            failures: Mutex::default(),
            written: Mutex::default(),
        }
    }

    /// `vs` with the status it has now: the cached copy, unless this operator has
    /// written a status the cache does not show yet (the watch event of its own
    /// write can arrive after the next reconcile started). Comparing with the stale
    /// copy would write the same status again and repeat its events.
    pub fn latest<'a>(&self, vs: &'a VLLMService) -> std::borrow::Cow<'a, VLLMService> {
        let key = ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default());
        let mut written = self.written.lock().expect("written lock");
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

    /// Remembers a status written for `vs` (the copy the write was based on).
    pub fn wrote_status(&self, vs: &VLLMService, status: &VLLMServiceStatus) {
        let key = ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default());
        let mut written = self.written.lock().expect("written lock");
        // Entries of deleted objects are dropped now and then.
        if written.len() > 2 * self.services.state().len() + 64 {
            written.retain(|k, _| self.services.get(k).is_some());
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

    fn failed(&self, obj: ObjectRef<DeserializeGuard<VLLMService>>) -> u32 {
        let mut f = self.failures.lock().expect("failures lock");
        let n = f.entry(obj).or_default();
        *n = n.saturating_add(1);
        *n
    }

    fn succeeded(&self, obj: &ObjectRef<DeserializeGuard<VLLMService>>) {
        self.failures.lock().expect("failures lock").remove(obj);
    }
}

/// Exponential backoff: 1s, 2s, 4s ... capped at 256s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

/// Runs the controller until `shutdown` completes. When an optional API (Gateway
/// API, Prometheus Operator) is installed or removed, the watches are rebuilt
/// and every VLLMService is reconciled again; no restart of the process is needed.
pub async fn run(
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
        tracing::info!(
            gateway_api = apis.gateway,
            prometheus_operator = apis.prometheus,
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
        run_watches(client.clone(), metrics.clone(), &opts, apis, stop).await;
        watch_crds.abort();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        tracing::info!("rebuilding watches");
    }
}

async fn discover_until_ok(client: &Client) -> Apis {
    let mut failures = 0;
    loop {
        match Apis::discover(client).await {
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
        .touched_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let crd = match event {
            // The API server answered (with an error status, e.g. 403): still connected.
            Err(
                watcher::Error::WatchError(_)
                | watcher::Error::InitialListFailed(kube::Error::Api(_))
                | watcher::Error::WatchStartFailed(kube::Error::Api(_))
                | watcher::Error::WatchFailed(kube::Error::Api(_)),
            ) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "lost the connection to the API server");
                while Apis::discover(&client).await.is_err() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                tracing::info!("the API server is reachable again");
                return;
            }
            Ok(crd) => crd,
        };
        if !Apis::is_relevant(&crd.name_any()) {
            continue;
        }
        if let Ok(now) = Apis::discover(&client).await
            && now != current
        {
            tracing::info!("optional APIs changed");
            return;
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

/// A watch whose objects are kept in a cache, slimmed by `slim` and without
/// `managedFields`; the stream yields every changed object.
fn cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    slim: fn(&mut K),
) -> (
    Cache<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let ready = Arc::new(AtomicBool::new(false));
    let filled = ready.clone();
    let stream = watcher(api, config)
        .backoff(watch_backoff())
        .modify(move |obj: &mut K| {
            obj.meta_mut().managed_fields = None;
            slim(obj);
        })
        .inspect(move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                filled.store(true, Ordering::Release);
            }
        })
        .reflect(writer)
        .touched_objects();
    (Cache { store, ready }, stream)
}

fn keep_all<K>(_: &mut K) {}

/// Pods: the reconcile reads only their metadata and status.
fn slim_pod(pod: &mut Pod) {
    pod.spec = None;
}

/// PVCs: the reconcile reads only their phase.
fn slim_pvc(pvc: &mut PersistentVolumeClaim) {
    pvc.spec = None;
}

/// One incarnation of the controller, with the watches `apis` allows.
async fn run_watches(
    client: Client,
    metrics: Arc<Metrics>,
    opts: &Options,
    apis: Apis,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let scope = ScopedApis(client.clone(), opts.namespace.clone());
    let managed = watcher::Config::default().labels(&names::managed_selector());

    // The VLLMServices: a change of the spec (generation) or of the object's
    // identity triggers a reconcile; a status change does not, so the operator's
    // own status writes do not come back as work. A status edited by someone
    // else is corrected at the next child event or resync.
    let (vllm_cache, vllm_services) = cached_watch(
        scope.api::<DeserializeGuard<VLLMService>>(),
        watcher::Config::default().any_semantic(),
        keep_all,
    );
    let store = vllm_cache.store;
    let vllm_services = vllm_services.predicate_filter(predicates::generation, Default::default());
    let mut controller = Controller::for_stream(vllm_services, store.clone());

    let (deployments, deployment_events) =
        cached_watch(scope.api::<Deployment>(), managed.clone(), keep_all);
    let (services, service_events) =
        cached_watch(scope.api::<Service>(), managed.clone(), keep_all);
    let (pods, pod_events) = cached_watch(scope.api::<Pod>(), managed.clone(), slim_pod);
    let (pvcs, pvc_events) = cached_watch(
        scope.api::<PersistentVolumeClaim>(),
        watcher::Config::default(),
        slim_pvc,
    );
    let pvc_store = store.clone();
    controller = controller
        .owns_stream(deployment_events)
        .owns_stream(service_events)
        .watches_stream(pod_events, |pod| {
            let ns = pod.namespace()?;
            names::instance_of(pod.labels()).map(|n| ObjectRef::new(n).within(&ns))
        })
        .watches_stream(pvc_events, move |pvc| {
            let ns = pvc.namespace();
            services_referencing(&pvc_store, &pvc, |vs| {
                vs.namespace() == ns && &vs.spec.storage.pvc_name == name_of(&pvc)
            })
        });
    let mut caches = Caches {
        deployments,
        services,
        pods,
        pvcs,
        routes: None,
        gateways: None,
        monitors: None,
        rules: None,
        started: Instant::now(),
    };
    if apis.gateway {
        let (routes, route_events) =
            cached_watch(scope.api::<HttpRoute>(), managed.clone(), keep_all);
        let (gateways, gateway_events) =
            cached_watch(scope.api::<Gateway>(), watcher::Config::default(), keep_all);
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
        let (monitors, monitor_events) =
            cached_watch(scope.api::<ServiceMonitor>(), managed.clone(), keep_all);
        let (rules, rule_events) =
            cached_watch(scope.api::<PrometheusRule>(), managed.clone(), keep_all);
        controller = controller
            .owns_stream(monitor_events)
            .owns_stream(rule_events);
        (caches.monitors, caches.rules) = (Some(monitors), Some(rules));
    }
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        opts,
        apis,
        store,
        caches,
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
    store: &Store<DeserializeGuard<VLLMService>>,
    obj: &K,
    uses: impl Fn(&VLLMService) -> bool,
) -> Vec<ObjectRef<DeserializeGuard<VLLMService>>> {
    if obj.meta().namespace.is_none() {
        return vec![];
    }
    store
        .state()
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|vs| uses(vs))
        .map(|vs| ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default()))
        .collect()
}

async fn reconcile_guarded(
    obj: Arc<DeserializeGuard<VLLMService>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    ctx.metrics
        .managed_objects
        .set(ctx.services.state().len() as i64);
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
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(obj.as_ref()));
    }
    result
}

fn error_policy(obj: Arc<DeserializeGuard<VLLMService>>, err: &Error, ctx: Arc<Context>) -> Action {
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
    if let (1, Ok(vs)) = (failures, &obj.0) {
        let (vs, ctx) = (vs.clone(), ctx.clone());
        let note = format!("reconcile failed ({category}), retrying with backoff: {err}");
        tokio::spawn(async move {
            reconcile::publish(
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
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(40), Duration::from_secs(256));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(256));
    }
}
