//! The objects a run creates, the watch that counts Available VLLMServices (or,
//! in the direct variant, Deployments), and (routed variant) a stand-in Gateway
//! controller that accepts HTTPRoutes.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Service, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    },
    runtime::watcher::{self, Event, watcher},
};
use serde_json::{Value, json};
use vllmservice_api::VLLMService;
use vllmservice_controller::reconcile::{build, seen::Seen};

pub const NAMESPACE: &str = "bench";
pub const GATEWAY: &str = "llm-gateway";
const GATEWAY_CONTROLLER: &str = "bench.example.com/gateway-controller";

pub fn vllm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("aiinfra.example.com", "v1alpha1", "VLLMService"),
        "vllmservices",
    )
}

fn gateway_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "Gateway"),
        "gateways",
    )
}

fn route_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    )
}

pub fn service_name(i: usize) -> String {
    format!("svc-{i:04}")
}

fn pvc_name(i: usize) -> String {
    format!("models-{i:04}")
}

/// Creates with retries: the API server under load may answer 429/5xx or time
/// out; AlreadyExists after a retry means an earlier attempt landed.
async fn create_retrying<F, Fut>(retries: &AtomicU64, mut op: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    let mut attempt = 0u32;
    loop {
        match op().await {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt > 0 => return Ok(()),
            Err(e) if attempt < 10 => {
                attempt += 1;
                retries.fetch_add(1, Ordering::Relaxed);
                if attempt == 1 {
                    eprintln!("bench: create failed, retrying: {e}");
                }
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The namespace (with its default ServiceAccount, which pods need) and, for the
/// routed variant, the Gateway with an HTTP listener.
pub async fn prepare_namespace(client: &Client, routed: bool) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sas.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            bail!("no default ServiceAccount in namespace {NAMESPACE} after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if routed {
        let ar = gateway_resource();
        let gw: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": GATEWAY, "namespace": NAMESPACE},
            "spec": {"gatewayClassName": "bench",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
        }))?;
        Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &ar)
            .create(&PostParams::default(), &gw)
            .await?;
    }
    Ok(())
}

/// M static PersistentVolumes pre-bound (claimRef) to M PVCs, then waits until
/// every PVC is Bound. Done before the clock starts: the run measures the operator,
/// not the PV controller.
pub async fn create_bound_pvcs(
    client: &Client,
    m: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let retries = AtomicU64::new(0);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    stream::iter(0..m)
        .map(|i| {
            let (pvs, pvcs, retries) = (&pvs, &pvcs, &retries);
            async move {
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": format!("{NAMESPACE}-{}", pvc_name(i))},
                    "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                             "storageClassName": "static-models", "hostPath": {"path": "/data/models"},
                             "persistentVolumeReclaimPolicy": "Delete",
                             "claimRef": {"namespace": NAMESPACE, "name": pvc_name(i)}}
                }))?;
                create_retrying(retries, || async {
                    pvs.create(&PostParams::default(), &pv).await.map(|_| ())
                })
                .await?;
                let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": {"name": pvc_name(i)},
                    "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                             "resources": {"requests": {"storage": "10Gi"}}}
                }))?;
                create_retrying(retries, || async {
                    pvcs.create(&PostParams::default(), &pvc).await.map(|_| ())
                })
                .await
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120 + m as u64 / 5);
    loop {
        let list = pvcs.list(&ListParams::default()).await?;
        let bound = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        if bound == m {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {bound}/{m} PVCs bound before the deadline");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// VLLMService number `i`: 1 replica, 1 GPU, its own PVC; routed: a gatewayRef
/// and monitoring on.
pub fn service_body(i: usize, routed: bool) -> Value {
    let mut spec = json!({
        "image": "vllm/vllm-openai:v0.11.0",
        "modelPath": "/data/models/Qwen2.5-1.5B-Instruct",
        "modelName": format!("qwen-{i:04}"),
        "replicas": 1,
        "resources": {"requests": {"cpu": "1", "memory": "8Gi", "nvidia.com/gpu": "1"},
                      "limits": {"cpu": "2", "memory": "16Gi", "nvidia.com/gpu": "1"}},
        "storage": {"pvcName": pvc_name(i), "mountPath": "/data/models"}
    });
    if routed {
        spec["gatewayRef"] = json!({"name": GATEWAY, "sectionName": "http",
                                    "host": format!("{}.llm.example.local", service_name(i))});
        spec["monitoring"] = json!({"enabled": true});
    }
    json!({
        "apiVersion": "aiinfra.example.com/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": service_name(i), "namespace": NAMESPACE},
        "spec": spec
    })
}

/// The Deployment and Service the operator makes for VLLMService `i`, from the
/// operator's own builders, without owner references: the direct variant has
/// no VLLMService, and the garbage collector deletes what an absent owner owns.
pub fn direct_children(i: usize) -> anyhow::Result<(Deployment, Service)> {
    let mut vs: VLLMService = serde_json::from_value(service_body(i, false))?;
    // What the API server adds on create; the builders' owner reference needs it.
    vs.metadata.uid = Some(format!("00000000-0000-0000-0000-{i:012}"));
    let (mut deployment, mut service) = owned_children(&vs)?;
    deployment.metadata.owner_references = None;
    service.metadata.owner_references = None;
    Ok((deployment, service))
}

/// Creates each of M services' Deployment and Service as the operator's
/// builders make them, with no operator, `concurrency` services in flight.
/// Direct variant: without owner references (there is no VLLMService); floor
/// variant: first the user's VLLMService, which then owns them. Each service
/// whose creates were all accepted increments `created`. Returns the number of
/// retried requests.
pub async fn create_without_operator(
    client: &Client,
    m: usize,
    floor: bool,
    concurrency: usize,
    created: &AtomicU64,
) -> anyhow::Result<u64> {
    let retries = AtomicU64::new(0);
    let vllm: Api<VLLMService> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    stream::iter(0..m)
        .map(|i| {
            let (vllm, deployments, services, retries) = (&vllm, &deployments, &services, &retries);
            async move {
                let (deployment, service) = match floor {
                    true => owned_children(&create_vllm(vllm, i, retries).await?)?,
                    false => direct_children(i)?,
                };
                create_retrying(retries, || async {
                    deployments
                        .create(&PostParams::default(), &deployment)
                        .await
                        .map(|_| ())
                })
                .await?;
                create_retrying(retries, || async {
                    services
                        .create(&PostParams::default(), &service)
                        .await
                        .map(|_| ())
                })
                .await?;
                created.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(retries.into_inner())
}

/// Creates VLLMService `i` as the user would; returns it as stored (with its uid).
async fn create_vllm(
    api: &Api<VLLMService>,
    i: usize,
    retries: &AtomicU64,
) -> anyhow::Result<VLLMService> {
    let body: VLLMService = serde_json::from_value(service_body(i, false))?;
    let made = Mutex::new(None);
    create_retrying(retries, || async {
        let vs = api.create(&PostParams::default(), &body).await?;
        *made.lock().expect("made lock") = Some(vs);
        Ok(())
    })
    .await?;
    // A retry answered AlreadyExists: the first create went through.
    Ok(match made.into_inner().expect("made lock") {
        Some(vs) => vs,
        None => api.get(&service_name(i)).await?,
    })
}

/// The Deployment and Service the operator makes for `vs`, owned by it.
fn owned_children(vs: &VLLMService) -> anyhow::Result<(Deployment, Service)> {
    let valid = vllmservice_api::validate(vs).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((
        build::deployment(&valid, &Seen::default()),
        build::service(&valid),
    ))
}

/// A status shaped like the one the operator writes for service `name` (its
/// fields, conditions and wording; `available`: a running service's, with what
/// vLLM's log says in `engine`, else one still waiting for its pod), `tag` in
/// a message so that each write differs. The floor variant writes it, and
/// `bench-writes` measures it.
pub fn operator_like_status(name: &str, available: bool, tag: &str) -> Value {
    let t = "2026-12-01T00:00:00Z";
    let c = |ty: &str, st: &str, reason: &str, msg: String| {
        json!({"type": ty, "status": st, "reason": reason, "message": msg,
               "lastTransitionTime": t, "observedGeneration": 1})
    };
    let (phase, ready, available_cond, progressing, deployment_ready) = if available {
        (
            "Running",
            1,
            c(
                "Available",
                "True",
                "Available",
                format!("1/1 replicas ready ({tag})"),
            ),
            c(
                "Progressing",
                "False",
                "Complete",
                "the rollout is complete".into(),
            ),
            c(
                "DeploymentReady",
                "True",
                "ReplicasReady",
                "1/1 pods run the current spec and are ready".into(),
            ),
        )
    } else {
        (
            "Pending",
            0,
            c(
                "Available",
                "False",
                "PodsNotReady",
                format!("waiting for 1 ready pod of Deployment {name} ({tag})"),
            ),
            c(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                format!("Deployment {name} is rolling out"),
            ),
            c(
                "DeploymentReady",
                "False",
                "PodsNotReady",
                "0/1 pods are ready".into(),
            ),
        )
    };
    let mut status = json!({
        "observedGeneration": 1,
        "phase": phase,
        "replicas": 1,
        "readyReplicas": ready,
        "ready": format!("{ready}/1"),
        "selector": format!("app.kubernetes.io/instance={name},app.kubernetes.io/name=vllmservice"),
        "deploymentName": name,
        "serviceName": name,
        "conditions": [
            available_cond,
            progressing,
            c("Degraded", "False", "AsExpected", "no failures observed".into()),
            deployment_ready,
            c("StorageReady", "True", "PVCBound",
              format!("PersistentVolumeClaim {NAMESPACE}/{name} is Bound")),
            c("RouteReady", "True", "RouteNotRequired", "spec.gatewayRef is not set".into()),
            c("MonitoringReady", "True", "MonitoringDisabled", "spec.monitoring.enabled is false".into()),
            c("AutoscalingReady", "True", "AutoscalingNotRequired", "spec.autoscaling is not set".into()),
        ],
    });
    if available {
        status["engine"] = json!({"revision": "5d8f7c9b6", "version": "0.18.0", "maxModelLen": 4096,
                                  "kvCacheTokens": 538320, "maxConcurrency": 131.43});
    }
    status
}

/// The operator's one event for a new service: what it created (events.k8s.io/v1).
pub fn created_event(event_name: &str, service: &str) -> Value {
    json!({
        "metadata": {"name": event_name},
        "eventTime": "2026-12-01T00:00:00.000000Z",
        "reportingController": "vllmservice-operator",
        "reportingInstance": "bench",
        "action": "Reconcile",
        "reason": "Created",
        "note": format!("created Deployment {service}, Service {service}"),
        "type": "Normal",
        "regarding": {"apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
                      "namespace": NAMESPACE, "name": service},
    })
}

/// The floor variant's status step: once a Deployment is Available, the
/// VLLMService of its name gets one status write (server-side apply, the
/// operator's final status) and one "created" event, `in_flight` services at a
/// time as the operator's workers would. Counts them in `written` (status
/// writes, events).
pub fn floor_status_writer(
    client: Client,
    in_flight: usize,
    written: Arc<(AtomicU64, AtomicU64)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let deployments: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            NAMESPACE,
            &ApiResource::erase::<Deployment>(&()),
        );
        let vllm: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NAMESPACE, &vllm_resource());
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), NAMESPACE);
        let slots = Arc::new(tokio::sync::Semaphore::new(in_flight));
        let mut done = std::collections::HashSet::new();
        let mut stream = watcher(deployments, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            let d = match ev {
                Ok(Event::Apply(d) | Event::InitApply(d)) => d,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("bench: Deployment watch error (the watcher retries): {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let name = d.name_any();
            if availability(&d).is_err() || !done.insert(name.clone()) {
                continue;
            }
            let permit = slots.clone().acquire_owned().await.expect("open semaphore");
            let (vllm, events, written) = (vllm.clone(), events.clone(), written.clone());
            tokio::spawn(async move {
                let body = json!({"apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
                                  "status": operator_like_status(&name, true, "floor")});
                let apply = PatchParams::apply("bench-floor").force();
                match vllm.patch_status(&name, &apply, &Patch::Apply(body)).await {
                    Ok(_) => written.0.fetch_add(1, Ordering::Relaxed),
                    Err(e) => return eprintln!("bench: status of {name}: {e}"),
                };
                let event =
                    serde_json::from_value(created_event(&format!("{name}.created"), &name))
                        .expect("an event");
                match events.create(&PostParams::default(), &event).await {
                    Ok(_) => written.1.fetch_add(1, Ordering::Relaxed),
                    Err(e) => return eprintln!("bench: event of {name}: {e}"),
                };
                drop(permit);
            });
        }
    })
}

/// Creates the M VLLMServices, `concurrency` requests in flight. Each accepted
/// create increments `created`. Returns the number of retried requests.
pub async fn create_services(
    client: &Client,
    m: usize,
    routed: bool,
    concurrency: usize,
    created: &AtomicU64,
) -> anyhow::Result<u64> {
    let retries = AtomicU64::new(0);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &vllm_resource());
    stream::iter(0..m)
        .map(|i| {
            let (api, retries) = (&api, &retries);
            async move {
                let obj: DynamicObject = serde_json::from_value(service_body(i, routed))?;
                create_retrying(retries, || async {
                    api.create(&PostParams::default(), &obj).await.map(|_| ())
                })
                .await?;
                created.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(retries.into_inner())
}

/// Available=True at the current generation (the condition's observedGeneration,
/// or the status's when the condition has none); else the Available reason.
pub fn availability(obj: &DynamicObject) -> Result<(), String> {
    let generation = obj.metadata.generation;
    let status = obj.data.get("status");
    let cond = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"));
    let Some(cond) = cond else {
        return Err("NoStatus".into());
    };
    let observed = cond
        .get("observedGeneration")
        .or_else(|| status.and_then(|s| s.get("observedGeneration")))
        .and_then(Value::as_i64);
    if cond["status"] != "True" {
        return Err(cond["reason"].as_str().unwrap_or("Unknown").to_string());
    }
    if observed != generation {
        return Err("StaleGeneration".into());
    }
    Ok(())
}

/// What the watch has seen: per VLLMService whether it is Available and why not.
#[derive(Default)]
pub struct Availability {
    state: HashMap<String, Result<(), String>>,
    /// When each service was first seen Available (from the watch event).
    pub first_available: HashMap<String, Instant>,
    last_status: HashMap<String, Value>,
    /// While set, status changes are described into `changes` (the steady window).
    pub record_changes: bool,
    pub changes: Vec<String>,
}

impl Availability {
    pub fn available(&self) -> usize {
        self.state.values().filter(|s| s.is_ok()).count()
    }

    /// Not-Available services by Available reason.
    pub fn reasons(&self) -> BTreeMap<String, usize> {
        let mut r = BTreeMap::new();
        for s in self.state.values() {
            if let Err(reason) = s {
                *r.entry(reason.clone()).or_default() += 1;
            }
        }
        r
    }

    fn observe(&mut self, obj: &DynamicObject) {
        let a = availability(obj);
        let name = obj.name_any();
        let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
        if let Some(before) = self.last_status.get(&name)
            && self.record_changes
            && *before != status
            && self.changes.len() < 50
        {
            self.changes
                .push(format!("{name}: {}", describe_change(before, &status)));
        }
        self.last_status.insert(name.clone(), status);
        if a.is_ok() {
            self.first_available
                .entry(name.clone())
                .or_insert_with(Instant::now);
        }
        self.state.insert(name, a);
    }
}

/// When the pipeline's stages happened, from the objects' own timestamps (1 s
/// resolution), in seconds after `t0`: for each stage the (50%, 100%) times over
/// the M services. Shows where the time goes: operator (Deployment/Service created),
/// controller-manager (Pod created), scheduler (Pod scheduled), kwok (Pod Ready).
/// Events in every namespace by "reporting component: reason" (objects, not their
/// repeat counts: what `POST events` counted).
pub async fn events_by_reason(client: &Client) -> anyhow::Result<BTreeMap<String, u64>> {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    let mut out = BTreeMap::new();
    let api = Api::<CoreEvent>::all(client.clone());
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api.list(&lp).await?;
        for e in &page.items {
            let who = e
                .reporting_component
                .as_deref()
                .filter(|c| !c.is_empty())
                .or(e.source.as_ref().and_then(|s| s.component.as_deref()))
                .unwrap_or("?");
            let reason = e.reason.as_deref().unwrap_or("?");
            *out.entry(format!("{who}: {reason}")).or_insert(0) += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    Ok(out)
}

pub async fn stage_times(
    client: &Client,
    t0: k8s_openapi::jiff::Timestamp,
) -> anyhow::Result<BTreeMap<String, (f64, f64)>> {
    use k8s_openapi::api::{
        apps::v1::Deployment,
        core::v1::{Pod, Service},
    };
    let lp = ListParams::default();
    // Object timestamps are whole seconds: compare with t0 truncated the same way.
    let t0 = k8s_openapi::jiff::Timestamp::from_second(t0.as_second())?;
    let since = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
        t.0.duration_since(t0).as_secs_f64()
    };
    let mut stages: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for d in Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await?
    {
        if let Some(t) = &d.metadata.creation_timestamp {
            stages
                .entry("2 Deployment created")
                .or_default()
                .push(since(t));
        }
    }
    for svc in Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await?
    {
        if let Some(t) = &svc.metadata.creation_timestamp {
            stages
                .entry("3 Service created")
                .or_default()
                .push(since(t));
        }
    }
    for pod in Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await?
    {
        if let Some(t) = &pod.metadata.creation_timestamp {
            stages.entry("4 Pod created").or_default().push(since(t));
        }
        for c in pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            let stage = match c.type_.as_str() {
                "PodScheduled" => "5 Pod scheduled",
                "Ready" => "6 Pod Ready",
                _ => continue,
            };
            if c.status == "True"
                && let Some(t) = &c.last_transition_time
            {
                stages.entry(stage).or_default().push(since(t));
            }
        }
    }
    let vs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &vllm_resource());
    for o in vs.list(&lp).await? {
        if let Some(t) = &o.metadata.creation_timestamp {
            stages
                .entry("1 VLLMService created")
                .or_default()
                .push(since(t));
        }
    }
    Ok(stages
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.total_cmp(b));
            let p50 = v[(v.len().saturating_sub(1)) / 2];
            (k.to_string(), (p50, *v.last().expect("non-empty")))
        })
        .collect())
}

/// What differs between two statuses: top-level fields and conditions by type.
pub fn describe_change(before: &Value, after: &Value) -> String {
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    let (b, a) = (
        before.as_object().unwrap_or(&empty),
        after.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if k == "conditions" || b.get(k) == a.get(k) {
            continue;
        }
        out.push(format!(
            "{k} {} → {}",
            b.get(k).unwrap_or(&Value::Null),
            a.get(k).unwrap_or(&Value::Null)
        ));
    }
    let conds = |v: &serde_json::Map<String, Value>| -> BTreeMap<String, Value> {
        v.get("conditions")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| (c["type"].as_str().unwrap_or("").to_string(), c.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (cb, ca) = (conds(b), conds(a));
    for (t, c) in &ca {
        let old = cb.get(t);
        if old == Some(c) {
            continue;
        }
        let show = |c: Option<&Value>| {
            c.map_or("absent".to_string(), |c| {
                format!(
                    "{}/{} {:?}",
                    c["status"].as_str().unwrap_or(""),
                    c["reason"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                )
            })
        };
        out.push(format!("{t} {} → {}", show(old), show(Some(c))));
    }
    out.join("; ")
}

/// Watches the namespace's VLLMServices into `state` until the task is aborted.
/// Resolves once the initial list is done.
pub async fn watch_availability(
    client: Client,
    state: Arc<Mutex<Availability>>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    watch_availability_of(client, state, vllm_resource()).await
}

/// The same for objects of `resource` with an Available condition (Deployments
/// in the direct variant: Available=True at their observedGeneration).
pub async fn watch_availability_of(
    client: Client,
    state: Arc<Mutex<Availability>>,
    resource: ApiResource,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let kind = resource.kind.clone();
    let task_kind = kind.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &resource);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    state.lock().expect("availability lock").observe(&o)
                }
                Ok(Event::Delete(o)) => {
                    state
                        .lock()
                        .expect("availability lock")
                        .state
                        .remove(&o.name_any());
                }
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Init) => {}
                Err(e) => {
                    eprintln!("bench: {task_kind} watch error (the watcher retries): {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(60), ready_rx)
        .await
        .with_context(|| format!("the {kind} watch did not list within 60 s"))??;
    Ok(task)
}

/// Plays the Gateway controller for the routed variant: every HTTPRoute in the
/// namespace gets Accepted=True and ResolvedRefs=True for each of its parentRefs
/// at its current generation, as a real controller (Envoy Gateway, Istio…) would.
/// Counts the status writes it sends.
pub fn fake_gateway_controller(
    client: Client,
    writes: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &route_resource());
    tokio::spawn(async move {
        watcher(api.clone(), watcher::Config::default())
            .for_each_concurrent(16, |ev| {
                let (api, writes) = (api.clone(), writes.clone());
                async move {
                    let route = match ev {
                        Ok(Event::Apply(r) | Event::InitApply(r)) => r,
                        Ok(_) => return,
                        Err(e) => {
                            eprintln!("bench: HTTPRoute watch error (the watcher retries): {e}");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            return;
                        }
                    };
                    let Some(body) = route_status(&route) else {
                        return;
                    };
                    writes.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = api
                        .patch_status(
                            &route.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(body),
                        )
                        .await
                    {
                        eprintln!(
                            "bench: accepting HTTPRoute {} failed: {e}",
                            route.name_any()
                        );
                    }
                }
            })
            .await
    })
}

/// The status a Gateway controller would write, or None when it is already there.
fn route_status(route: &DynamicObject) -> Option<Value> {
    let generation = route.metadata.generation?;
    let ns = route.namespace().unwrap_or_default();
    let already = route.data["status"]["parents"]
        .as_array()
        .is_some_and(|ps| {
            ps.iter().any(|p| {
                p["controllerName"] == GATEWAY_CONTROLLER
                    && p["conditions"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"] == generation))
            })
        });
    if already {
        return None;
    }
    let cond = |t: &str| {
        json!({"type": t, "status": "True", "reason": t, "message": format!("{t} by the bench"),
               "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let parents: Vec<Value> = route.data["spec"]["parentRefs"]
        .as_array()?
        .iter()
        .map(|r| {
            let mut parent_ref = r.clone();
            if parent_ref.get("namespace").is_none() {
                parent_ref["namespace"] = json!(ns);
            }
            json!({"controllerName": GATEWAY_CONTROLLER, "parentRef": parent_ref,
                   "conditions": [cond("Accepted"), cond("ResolvedRefs")]})
        })
        .collect();
    Some(json!({"status": {"parents": parents}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    /// The direct variant creates exactly what the operator builds for the same
    /// service, less the owner reference (which would name an absent owner).
    #[test]
    fn direct_children_are_the_operators_objects_without_an_owner() {
        let (d, s) = direct_children(7).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some(service_name(7).as_str()));
        assert_eq!(s.metadata.name.as_deref(), Some(service_name(7).as_str()));
        assert!(d.metadata.owner_references.is_none() && s.metadata.owner_references.is_none());
        let mut vs: VLLMService = serde_json::from_value(service_body(7, false)).unwrap();
        vs.metadata.uid = Some("x".into());
        let valid = vllmservice_api::validate(&vs).unwrap();
        let mut operators = build::deployment(&valid, &Seen::default());
        operators.metadata.owner_references = None;
        assert_eq!(d, operators);
        let claim = d.spec.unwrap().template.spec.unwrap().volumes.unwrap()[0]
            .persistent_volume_claim
            .clone()
            .unwrap()
            .claim_name;
        assert_eq!(claim, pvc_name(7));
    }

    #[test]
    fn available_means_true_at_the_current_generation() {
        let with = |status: &str, g: i64| {
            obj(
                json!({"apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
                "metadata": {"name": "a", "generation": 2},
                "status": {"conditions": [{"type": "Available", "status": status,
                    "reason": "R", "observedGeneration": g}]}}),
            )
        };
        assert_eq!(availability(&with("True", 2)), Ok(()));
        assert_eq!(
            availability(&with("True", 1)),
            Err("StaleGeneration".into())
        );
        assert_eq!(availability(&with("False", 2)), Err("R".into()));
        let fresh = obj(json!({"apiVersion": "aiinfra.example.com/v1alpha1",
            "kind": "VLLMService", "metadata": {"name": "a", "generation": 1}}));
        assert_eq!(availability(&fresh), Err("NoStatus".into()));
    }

    #[test]
    fn status_changes_are_described_by_field_and_condition() {
        let before = json!({"phase": "Pending", "conditions": [
            {"type": "Available", "status": "False", "reason": "ReplicasNotReady", "message": "0/1"}]});
        let after = json!({"phase": "Running", "conditions": [
            {"type": "Available", "status": "True", "reason": "Available", "message": "1/1"}]});
        let d = describe_change(&before, &after);
        assert!(d.contains("phase \"Pending\" → \"Running\""), "{d}");
        assert!(
            d.contains("Available False/ReplicasNotReady \"0/1\" → True/Available \"1/1\""),
            "{d}"
        );
    }

    #[test]
    fn routes_are_accepted_once_per_generation() {
        let route = obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "svc-0001", "namespace": "bench", "generation": 1},
            "spec": {"parentRefs": [{"name": GATEWAY, "sectionName": "http"}]}}),
        );
        let body = route_status(&route).unwrap();
        let parent = &body["status"]["parents"][0];
        assert_eq!(parent["parentRef"]["namespace"], "bench");
        assert_eq!(parent["conditions"][1]["type"], "ResolvedRefs");
        let mut done = route.clone();
        done.data["status"] = body["status"].clone();
        assert_eq!(route_status(&done), None);
        done.metadata.generation = Some(2);
        assert!(route_status(&done).is_some());
    }

    #[test]
    fn bodies_differ_by_variant() {
        let plain = service_body(7, false);
        assert_eq!(plain["metadata"]["name"], "svc-0007");
        assert_eq!(plain["spec"]["storage"]["pvcName"], "models-0007");
        assert!(plain["spec"].get("gatewayRef").is_none());
        let routed = service_body(7, true);
        assert_eq!(routed["spec"]["gatewayRef"]["name"], GATEWAY);
        assert_eq!(routed["spec"]["monitoring"]["enabled"], true);
    }
}
