//! The controller runtime around the reconcile pipeline: the run loop (one
//! incarnation of the watches per set of installed optional APIs), the watch
//! wiring, when reconciles may start, concurrency, and the per-object retry
//! policy. I/O: everything here talks to the API server or serves probes.

pub mod discovery;
pub mod health;
pub mod metrics;
pub mod metrics_auth;
pub mod namespaces;
pub mod optional_watches;
pub mod retry;
pub mod watches;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{Future, FutureExt, SinkExt, StreamExt};
use k8s_openapi::api::{
    autoscaling::v2::HorizontalPodAutoscaler, batch::v1::Job, policy::v1::PodDisruptionBudget,
};
use kube::{
    Client, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        events::{EventType, Reporter},
        predicates,
        reflector::ObjectRef,
        watcher,
    },
};
use tracing::Instrument;

use crate::{
    cache::{
        CachedClaim, CachedDeployment, CachedPod, CachedService, CachedVllmService, Caches,
        NameIndex, OptionalCaches, Placement, PodIndex, PodLogs, StatusEchoes, placement::NodeView,
    },
    diagnosis::masking,
    error::{self, Error},
    events, names,
    optional_apis::Apis,
    reconcile::{
        self,
        build::Defaults,
        context::{Context, Settings},
    },
};
use health::Health;
use metrics::Metrics;
use optional_watches::OptionalWatches;
use retry::Failures;
use watches::{Keep, ListStrategy, Select, Watches, ignore, meta_only};

/// Options of the controller loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many VLLMServices are reconciled at once.
    pub concurrency: u16,
    /// Re-check every object this often even without events (level-triggered safety net).
    pub resync: Duration,
    /// How long a new VLLMService's first status may wait for its pods to
    /// become ready, so that a quick start is written once; zero (the
    /// default) writes it at once.
    pub status_settle: Duration,
    /// Name reported as the source of events.
    pub reporter: String,
    /// This replica's identity (pod name), reported with events.
    pub instance: Option<String>,
    /// Watch only these namespaces (none, the default: every namespace).
    pub namespaces: Vec<String>,
    /// Where the controller reports cache sync and loop state (for `/readyz`, `/healthz`).
    pub health: Health,
    /// Watch every node and every pod of the cluster to count free GPUs
    /// (rollout strategy Auto decides before the rollout; a blocked rollout
    /// shows the numbers). Needs the cluster-wide node and pod rules; off by
    /// default, when the pods are watched by the operator's label only and
    /// Auto learns from an unschedulable surge pod instead.
    pub gpu_accounting: bool,
    /// What the operator's flags put into the objects it builds (the
    /// Prometheus KEDA queries, the download deadline).
    pub defaults: Defaults,
    /// Fill the caches from streamed lists (WatchList) when the API server
    /// offers them; otherwise, and by default, from lists in pages.
    pub streaming_lists: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 16,
            resync: Duration::from_secs(300),
            status_settle: Duration::ZERO,
            reporter: names::MANAGED_BY_VALUE.to_string(),
            instance: None,
            namespaces: vec![],
            health: Health::default(),
            gpu_accounting: false,
            defaults: Defaults::default(),
            streaming_lists: false,
        }
    }
}

/// A watch task ended: the controller stops (and the process exits), since
/// its cache would no longer change.
#[derive(Debug, thiserror::Error)]
#[error("{0}; the controller stops")]
pub struct WatchEnded(String);

/// Runs the controller until `shutdown` completes. When an optional API (Gateway
/// API, Prometheus Operator, KEDA) is installed or removed, its watches start or
/// stop and every VLLMService is reconciled again; no restart of the process is
/// needed. When the connection to the API server was lost (e.g. it restarted),
/// every watch is rebuilt. Every task it starts ends with it, also when the
/// returned future is dropped (the leader lease lost).
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), WatchEnded> {
    let shutdown = shutdown.shared();
    opts.health.set_running(true);
    let result = loop {
        let apis = tokio::select! {
            apis = discovery::discover_until_ok(&client) => apis,
            _ = shutdown.clone() => break Ok(()),
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
        let incarnation = run_watches(
            client.clone(),
            metrics.clone(),
            &opts,
            apis,
            lists,
            shutdown.clone(),
        );
        if let Err(e) = incarnation.await {
            tracing::error!(error = %e, "stopping");
            break Err(e);
        }
        if shutdown.clone().now_or_never().is_some() {
            break Ok(());
        }
        tracing::info!("rebuilding watches");
    };
    opts.health.set_running(false);
    result
}

/// The label KEDA puts on its HPAs (and ScaledObjects): the ScaledObject's name.
const SCALED_OBJECT_LABEL: &str = "scaledobject.keda.sh/name";

/// How long the controller waits for its caches before it starts anyway: a
/// cache whose watch is refused (e.g. a missing RBAC rule) never fills, and
/// the reconciles that need it then report why.
pub(crate) const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// One incarnation of the controller: until `shutdown`, or until the
/// connection to the API server was lost and is back. The optional APIs'
/// watches follow their CRDs, starting with `apis`.
async fn run_watches(
    client: Client,
    metrics: Arc<Metrics>,
    opts: &Options,
    apis: Apis,
    lists: ListStrategy,
    shutdown: impl Future<Output = ()> + Clone + Send + Sync + 'static,
) -> Result<(), WatchEnded> {
    let mut w = Watches::new(client.clone(), opts.namespaces.clone(), lists);
    opts.health.set_caches_synced(false);

    // The VLLMServices: a change of the spec (generation) or of the object's
    // identity triggers a reconcile; a status change does not, so the operator's
    // own status writes do not come back as work. A status edited by someone
    // else is corrected at the next child event or resync.
    // `claims`: which services mount each claim, for the PVC watch.
    let claims: NameIndex<CachedVllmService> = NameIndex::new(claim_of);
    // The statuses written that the cache does not show yet: each goes once
    // the cache holds a newer copy of its VLLMService.
    let echoes = StatusEchoes::default();
    let failures = Failures::default();
    let passed = Arc::new(vllmservice_api::Passed::default());
    let (vllm_cache, vllm_services) = {
        let (claims, echoes, failures, passed) = (
            claims.clone(),
            echoes.clone(),
            failures.clone(),
            passed.clone(),
        );
        w.cache::<CachedVllmService, _>(
            Select::All,
            Keep::Every,
            move |e| {
                claims.saw(e);
                if let Ok(watcher::Event::Delete(vs)) = e {
                    failures.forget(&ObjectRef::from_obj(vs));
                    if let Some(uid) = vs.uid() {
                        passed.forget(&uid);
                    }
                }
            },
            move |vs| {
                echoes.cached(&vs);
                vs
            },
        )
    };
    let store = vllm_cache.store.clone();
    let vllm_services = vllm_services.predicate_filter(predicates::generation, Default::default());
    let mut controller = Controller::for_stream(vllm_services, store.clone());

    let pod_index = PodIndex::default();
    let pod_logs = PodLogs::default();
    // Free GPUs are counted over the whole cluster: only an operator that may
    // see every namespace's pods can count them. Then one watch of every pod
    // feeds the count and, with the operator's own pods, the cache, so that
    // no pod is sent (and parsed) twice.
    let placement = opts.gpu_accounting.then(|| {
        let placement = Placement::default();
        let counted = placement.clone();
        w.index::<NodeView>(Select::Cluster, move |e| counted.saw_node(e));
        placement
    });
    let (pods, pod_events) = {
        let (index, logs, counted) = (pod_index.clone(), pod_logs.clone(), placement.clone());
        let select = match placement {
            Some(_) => Select::Cluster,
            None => Select::Managed,
        };
        w.cache::<CachedPod, _>(
            select,
            Keep::Only(names::is_managed),
            move |e| {
                if let Some(p) = &counted {
                    p.saw_pod(e);
                }
                index.saw(e);
                logs.saw(e);
            },
            meta_only,
        )
    };
    let (deployments, deployment_events) =
        w.cache::<CachedDeployment, _>(Select::Managed, Keep::Every, ignore, meta_only);
    let (services, service_events) =
        w.cache::<CachedService, _>(Select::Managed, Keep::Every, ignore, meta_only);
    let (pvcs, pvc_events) = w.cache::<CachedClaim, _>(Select::All, Keep::Every, ignore, meta_only);
    let (pdbs, pdb_events) =
        w.cache::<PodDisruptionBudget, _>(Select::Managed, Keep::Every, ignore, meta_only);
    let (jobs, job_events) = w.cache::<Job, _>(Select::Managed, Keep::Every, ignore, meta_only);
    // KEDA's HPAs, whose ScalingLimited the status reports: the HPA's owner is
    // the ScaledObject, named like the VLLMService (its label says which).
    let (hpas, hpa_events) = w.cache::<HorizontalPodAutoscaler, _>(
        Select::Labelled(SCALED_OBJECT_LABEL),
        Keep::Every,
        ignore,
        meta_only,
    );
    controller = controller
        .owns_stream(deployment_events)
        .owns_stream(service_events)
        .owns_stream(pdb_events)
        // Download Jobs may have several owners (services sharing a download),
        // none a controller: every owner hears of the Job.
        .watches_stream(job_events, |job| {
            let ns = job.namespace().unwrap_or_default();
            job.owner_references()
                .iter()
                .filter(|r| r.kind == "VLLMService")
                .map(|r| ObjectRef::<CachedVllmService>::new(&r.name).within(&ns))
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
                .names_of(&ns, &pvc.name_any())
                .into_iter()
                .map(|n| ObjectRef::new(&n).within(&ns))
                .collect::<Vec<_>>()
        });
    // The optional APIs' watches, started after the controller is built:
    // their changed objects, and a reconcile of everything when an API comes
    // or goes, reach it through these channels.
    let (triggers, triggered) = futures::channel::mpsc::channel(watches::TRIGGER_BUFFER);
    let (reconcile_all, all_triggered) = futures::channel::mpsc::channel(1);
    controller = controller
        .reconcile_on(triggered)
        .reconcile_all_on(all_triggered);
    let (published, optional_caches) = tokio::sync::watch::channel(OptionalCaches::default());
    let retry_failing = triggers.clone();
    let mut optional = OptionalWatches::new(
        client.clone(),
        opts.namespaces.clone(),
        lists,
        store.clone(),
        triggers,
        reconcile_all,
        published,
    );
    optional.set(apis);
    let caches = Caches {
        deployments,
        services,
        pods,
        pod_index,
        pod_logs,
        pvcs,
        pdbs,
        jobs,
        placement,
        hpas,
        optional: optional_caches,
    };

    // The CRD watch: which optional APIs are installed now. A lost
    // connection ends it, and this incarnation with it. It runs in a task of
    // its own (the stop future must be Sync), in a JoinSet so that it is
    // aborted with this future.
    let (mut api_changes_tx, mut api_changes) = futures::channel::mpsc::channel(1);
    let mut crd_watch = tokio::task::JoinSet::new();
    crd_watch.spawn({
        let client = client.clone();
        async move {
            let mut current = apis;
            while let discovery::Change::Apis(now) =
                discovery::changed(client.clone(), current).await
            {
                current = now;
                if api_changes_tx.send(now).await.is_err() {
                    break;
                }
            }
        }
    });
    let stop = {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! { _ = shutdown => {}, _ = crd_watch.join_next() => {} }
        }
    };

    // Reconciles start once every cache holds its first list, so that a start
    // does not take, say, a PVC for missing because its cache is still empty.
    // The controller itself runs from the start, taking the watches' events
    // (its queue keeps one entry per object), so that a watch never waits for it.
    let stop = stop.shared();
    let all_synced = {
        let (caches, vllm_cache) = (caches.clone(), vllm_cache.clone());
        move || {
            let (caches, vllm_cache) = (caches.clone(), vllm_cache.clone());
            async move {
                vllm_cache.synced().await;
                caches.synced().await;
                caches.optional().synced().await;
            }
        }
    };
    let (open, gate) = tokio::sync::watch::channel(false);
    let reconcile = move |obj, ctx| {
        let mut gate = gate.clone();
        async move {
            let _ = gate.wait_for(|open| *open).await;
            // Boxed: the reconcile's state lives on the heap, not on the stack
            // of whoever polls it (debug builds overflowed a 2 MiB thread).
            Box::pin(reconcile_guarded(obj, ctx)).await
        }
    };
    let reporter = Reporter {
        controller: opts.reporter.clone(),
        instance: opts.instance.clone(),
    };
    let settings = Settings {
        resync: opts.resync,
        status_settle: opts.status_settle,
        defaults: opts.defaults.clone(),
        namespaces: opts.namespaces.clone(),
    };
    let mut published = caches.optional.clone();
    let failing = failures.clone();
    let ctx = Arc::new(Context::new(
        client, metrics, reporter, settings, store, caches, echoes, failures, passed,
    ));
    let reconciling = controller
        .with_config(controller::Config::default().concurrency(opts.concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                let error = masking::mask_secrets(&e.to_string(), &[]).into_owned();
                tracing::debug!(error, "reconcile loop");
            }
        });
    let health = opts.health.clone();
    let ready = async move {
        // The optional APIs found at the start count once published (their
        // caches filled).
        let first = async {
            let _ = published.wait_for(|o| o.apis == apis).await;
            all_synced().await;
        };
        let timed_out = tokio::time::timeout(CACHE_SYNC_TIMEOUT, first)
            .await
            .is_err();
        if timed_out {
            tracing::warn!(timeout = ?CACHE_SYNC_TIMEOUT, "some watch caches are not filled; starting anyway");
        }
        open.send_replace(true);
        all_synced().await;
        health.set_caches_synced(true);
        if timed_out {
            // What failed meanwhile failed for want of a cache (e.g. a missing
            // RBAC rule, granted since); its backoff may have grown to
            // minutes, and a filled cache sends no event of its own.
            tracing::info!(
                failing = failing.len(),
                "every watch cache is filled; retrying what failed"
            );
            let mut retry = retry_failing;
            for obj in failing.objects() {
                let _ = retry.send(obj).await;
            }
        }
        std::future::pending::<()>().await
    };
    // Dropping `w` and `optional` (at the end of this incarnation) aborts the
    // watch tasks.
    let (mut reconciling, mut ready) = (std::pin::pin!(reconciling), std::pin::pin!(ready));
    loop {
        tokio::select! {
            _ = &mut reconciling => return Ok(()),
            ended = w.ended() => return Err(WatchEnded(ended)),
            ended = optional.ended() => return Err(WatchEnded(ended)),
            _ = &mut ready => {}
            Some(now) = api_changes.next() => optional.set(now),
        }
    }
}

/// The claim a VLLMService mounts (`spec.storage.pvcName`).
fn claim_of(vs: &CachedVllmService) -> Option<String> {
    vs.0.as_ref().ok()?.spec.storage.pvc_name.clone()
}

async fn reconcile_guarded(
    obj: Arc<CachedVllmService>,
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
    // A panic stays with its object: caught here, it fails this reconcile only,
    // instead of ending the controller (and crash-looping the operator).
    let reconciled =
        std::panic::AssertUnwindSafe(Box::pin(reconcile::reconcile(&obj, &ctx).instrument(span)))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(Error::Panicked(panic_message(panic.as_ref()))));
    let result = match reconciled {
        // The namespace is being deleted: the children go with it; nothing to retry.
        Err(e) if e.api_status().is_some_and(error::namespace_terminating) => {
            Ok(Action::await_change())
        }
        other => other,
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    let key = ObjectRef::from_obj(obj.as_ref());
    match &result {
        Ok(_) => ctx.failures.forget(&key),
        Err(err) => {
            // One event when an object starts failing, not one per retry. Sent
            // here, inside the reconcile, so that it ends with the controller
            // (e.g. when the leader lease is lost) instead of outliving it.
            if let (1, Ok(vs)) = (ctx.failures.failed(key), &obj.0) {
                let category = err.category().as_str();
                let note = format!("reconcile failed ({category}), retrying with backoff: {err}");
                events::publish(&ctx, vs, EventType::Warning, "ReconcileFailed", &note, None).await;
            }
        }
    }
    // Last: in flight covers every write of the reconcile, its failure event too.
    ctx.metrics.reconciles_in_flight.dec();
    result
}

/// What a panic said (its payload is a `&str` or a `String` when it has a message).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

fn error_policy(obj: Arc<CachedVllmService>, err: &Error, ctx: Arc<Context>) -> Action {
    let category = err.category().as_str();
    ctx.metrics
        .reconcile_errors
        .get_or_create(&metrics::ErrorLabels {
            category: category.to_string(),
        })
        .inc();
    let failures = ctx.failures.count(&ObjectRef::from_obj(obj.as_ref()));
    let delay = retry::backoff(failures);
    let text = err.to_string();
    let err = match &obj.0 {
        Ok(vs) => masking::mask_for(&text, vs),
        Err(_) => masking::mask_secrets(&text, &[]),
    };
    tracing::warn!(
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any(),
        category,
        failures,
        retry_in = ?delay,
        error = %err,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claim_of_a_service_is_its_pvc_name() {
        let vs = |storage: serde_json::Value| -> CachedVllmService {
            serde_json::from_value(json!({
                "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
                "metadata": {"name": "qwen", "namespace": "ns"},
                "spec": {"image": "vllm/vllm-openai:v0.18.0", "modelPath": "/models/m",
                    "modelName": "m", "storage": storage},
                "status": {"phase": "Running"}}))
            .unwrap()
        };
        let with = vs(json!({"pvcName": "models", "mountPath": "/models"}));
        assert_eq!(claim_of(&with).as_deref(), Some("models"));
        let without = vs(json!({"mountPath": "/models"}));
        assert_eq!(claim_of(&without), None);
        let unreadable: CachedVllmService = serde_json::from_value(json!({
            "metadata": {"name": "bad", "namespace": "ns"}, "spec": {"storage": 3}}))
        .unwrap();
        assert!(unreadable.0.is_err());
        assert_eq!(claim_of(&unreadable), None);
    }
}
