//! Changing a serving model without dropping a request, on the local cluster's
//! real node (docs/local-cluster.md): the kubelet runs the simulator
//! (crates/vllm-sim, vLLM's shutdown behaviour), kube-proxy routes the
//! Service's ClusterIP, and a load generator (testkit::load) keeps streaming
//! chat completions on it while the pods are replaced.
//!
//! - With drain (`shutdown: {drainSeconds: 10, preStopSeconds: 3}`): a rolling
//!   update, an eviction through the Eviction API and a scale-down from 3 to 1
//!   replica lose **no** request.
//! - Without (`drainSeconds: 0, preStopSeconds: 0`, vLLM's default): the same
//!   steps fail requests (the proof that the first test can fail).
//! - The PodDisruptionBudget lets one eviction through and refuses a second
//!   one at once with 429, and goes away with one replica.
//!
//! The operator runs in-process (tests/common), watching the test's namespace.
//! The pods request no GPU (the real node's GPUs are shared with other tests),
//! so `Auto` surges. A missing real node fails the tests with the reason.

mod common;

use std::time::Duration;

use common::{
    Env, is_available,
    sim::{MODEL, START, cluster_ip, describe_pod, model_pvc, pods_of, sim_service},
};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod, policy::v1::PodDisruptionBudget};
use kube::ResourceExt;
use serde_json::{Value, json};
use testkit::{
    load::{Load, LoadSpec, Report},
    wait_until,
};
use vllmservice_api::VLLMService;

/// Requests in flight at once, on the Service.
const CONCURRENCY: usize = 6;
/// Tokens per request; with TOKEN_DELAY_MS a request takes about 0.65 s, so a
/// pod stopped without drain always has requests in flight.
const MAX_TOKENS: u32 = 16;
const TOKEN_DELAY_MS: u32 = 40;
/// Each phase must have sent at least this many requests (that the load really
/// ran through the change; a count, not a speed).
const MIN_SENT: u64 = 3 * CONCURRENCY as u64;

/// `spec.shutdown` of a test.
#[derive(Clone, Copy)]
struct Shutdown {
    drain_seconds: i32,
    pre_stop_seconds: i32,
}

const DRAIN: Shutdown = Shutdown {
    drain_seconds: 10,
    pre_stop_seconds: 3,
};
const NO_DRAIN: Shutdown = Shutdown {
    drain_seconds: 0,
    pre_stop_seconds: 0,
};

/// The simulator on the real node with 3 replicas, no GPU, 1 s of loading,
/// TOKEN_DELAY_MS per token, and `shutdown`.
fn service(name: &str, pvc: &str, shutdown: Shutdown) -> Value {
    let mut body = sim_service(
        name,
        pvc,
        json!([{"name": "VLLM_SIM_TOKEN_DELAY_MS", "value": TOKEN_DELAY_MS.to_string()}]),
    );
    body["spec"]["env"][0]["value"] = json!("1");
    body["spec"]["resources"]["limits"]
        .as_object_mut()
        .unwrap()
        .remove("nvidia.com/gpu");
    body["spec"]["replicas"] = json!(3);
    body["spec"]["shutdown"] = json!({"drainSeconds": shutdown.drain_seconds,
                                      "preStopSeconds": shutdown.pre_stop_seconds});
    body["spec"]["rollout"] = json!({"strategy": "Auto"});
    body
}

/// Steady load on `addr`, once it flows (CONCURRENCY requests answered).
async fn start_load(addr: &str) -> Load {
    let spec = LoadSpec {
        concurrency: CONCURRENCY,
        max_tokens: MAX_TOKENS,
        max_requests: 20_000,
        max_duration: Duration::from_secs(240),
        request_timeout: Duration::from_secs(20),
        ..LoadSpec::new(addr.parse().expect("ip:port"), MODEL)
    };
    let load = Load::start(spec);
    wait_until(Duration::from_secs(30), "the load's first answers", || {
        let r = load.report();
        let flowing = r.ok >= CONCURRENCY as u64;
        assert!(
            flowing || r.failed == 0 || r.sent < 100,
            "the load fails before any change: {}",
            r.summary()
        );
        async move { flowing.then_some(()) }
    })
    .await;
    load
}

/// What a test waited for, and everything that helps to see why it did not happen.
async fn diagnosis(env: &Env, name: &str) -> String {
    let vs = env.api::<VLLMService>().get_opt(name).await.ok().flatten();
    let deploy = env.api::<Deployment>().get_opt(name).await.ok().flatten();
    format!(
        "VLLMService status:\n{}\nDeployment status:\n{}\npods:\n{}",
        serde_json::to_string_pretty(&vs.and_then(|v| v.status)).unwrap(),
        serde_json::to_string_pretty(&deploy.and_then(|d| d.status)).unwrap(),
        describe_pod(env, name)
    )
}

/// Waits until the Deployment `name` has rolled out its current template to
/// exactly `replicas` ready pods, no other pod is left (terminating ones
/// included: their drain is part of the phase), and the VLLMService is
/// Available for its current generation.
async fn settled(env: &Env, name: &str, replicas: i32, what: &str) {
    let deployments = env.api::<Deployment>();
    let done = tokio::time::timeout(START, async {
        loop {
            let Some(d) = deployments.get_opt(name).await.expect("get the Deployment") else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let s = d.status.clone().unwrap_or_default();
            let rolled_out = d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas)
                && s.observed_generation == d.metadata.generation
                && s.updated_replicas == Some(replicas)
                && s.ready_replicas == Some(replicas)
                && s.available_replicas == Some(replicas)
                && s.replicas == Some(replicas);
            let pods = pods_of(env, name).await;
            let all_ready = pods.len() == replicas as usize
                && pods.iter().all(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .is_some_and(|c| c.iter().all(|c| c.ready))
                });
            let vs = env.api::<VLLMService>().get(name).await.unwrap();
            if rolled_out && all_ready && is_available(&vs) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if done.is_err() {
        panic!(
            "{what}: not settled at {replicas} ready pods within {START:?}\n{}",
            diagnosis(env, name).await
        );
    }
}

/// The budget's status once the disruption controller lets `allowed` pods go.
async fn budget_allows(env: &Env, pdb: &str, allowed: i32) -> PodDisruptionBudget {
    let api = env.api::<PodDisruptionBudget>();
    let found = tokio::time::timeout(START, async {
        loop {
            if let Some(b) = api.get_opt(pdb).await.unwrap() {
                let s = b.status.as_ref();
                if s.is_some_and(|s| {
                    s.disruptions_allowed == Some(allowed)
                        && s.observed_generation == b.metadata.generation
                }) {
                    return b;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    match found {
        Ok(b) => b,
        Err(_) => panic!(
            "the PodDisruptionBudget {pdb} never allowed {allowed} disruption(s): {:?}\n{}",
            api.get_opt(pdb).await.ok().flatten().and_then(|b| b.status),
            diagnosis(env, pdb).await
        ),
    }
}

fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pods of the test's namespace through a client that does not retry:
/// kube's default client retries 429 answers (kube::Config::default_retry),
/// so a refused eviction would be sent again until the budget allows it and
/// look like a success.
async fn pods_without_retry(env: &Env) -> kube::Api<Pod> {
    let mut config = testkit::config().await;
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client");
    kube::Api::namespaced(client, &env.ns.name)
}

/// Evicts `pod` through the Eviction API (`POST pods/<pod>/eviction` with a
/// policy/v1 Eviction), once.
async fn evict(pods: &kube::Api<Pod>, pod: &str) -> Result<kube::core::Status, kube::Error> {
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}});
    pods.create_subresource("eviction", pod, &kube::api::PostParams::default(), &body)
        .await
}

/// A ready pod of `name`.
async fn a_ready_pod(env: &Env, name: &str, except: &[String]) -> String {
    pods_of(env, name)
        .await
        .into_iter()
        .filter(|p| is_ready(p) && !except.contains(&p.name_any()))
        .map(|p| p.name_any())
        .next()
        .unwrap_or_else(|| panic!("no ready pod of {name} besides {except:?}"))
}

/// Waits until the operator has applied a Deployment whose spec satisfies `check`.
async fn deployment_applied(
    env: &Env,
    name: &str,
    what: &str,
    check: impl Fn(&Deployment) -> bool,
) {
    let api = env.api::<Deployment>();
    wait_until(START, what, || async {
        api.get(name).await.ok().filter(|d| check(d)).map(|_| ())
    })
    .await;
}

fn has_env(d: &Deployment, name: &str, value: &str) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| &s.containers[0])
        .and_then(|c| c.env.as_ref())
        .is_some_and(|e| {
            e.iter()
                .any(|v| v.name == name && v.value.as_deref() == Some(value))
        })
}

/// The three phases under steady load: (1) a rolling update (an env change),
/// (2) one pod evicted through the Eviction API, (3) replicas 3 → 1. The
/// eviction comes before the scale-down: with one replica an eviction is an
/// outage whatever the drain. Returns each phase's report.
async fn three_phases(env: &Env, shutdown: Shutdown, label: &str) -> Vec<(&'static str, Report)> {
    let name = "qwen";
    let _model = model_pvc(env, "models").await;
    env.create(service(name, "models", shutdown)).await;
    settled(env, name, 3, "the first rollout").await;

    // The Deployment carries the drain settings.
    let d = env.api::<Deployment>().get(name).await.unwrap();
    let pod_spec = d.spec.unwrap().template.spec.unwrap();
    let c = &pod_spec.containers[0];
    let args = c.args.clone().unwrap_or_default();
    let pre_stop = c
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|p| p.sleep.as_ref())
        .map(|s| s.seconds);
    if shutdown.drain_seconds > 0 {
        let i = args.iter().position(|a| a == "--shutdown-timeout");
        assert_eq!(
            i.and_then(|i| args.get(i + 1)).map(String::as_str),
            Some(shutdown.drain_seconds.to_string().as_str()),
            "{args:?}"
        );
        assert_eq!(pre_stop, Some(shutdown.pre_stop_seconds.into()));
    } else {
        assert!(!args.iter().any(|a| a == "--shutdown-timeout"), "{args:?}");
        assert_eq!(pre_stop, None, "{:?}", c.lifecycle);
    }
    assert_eq!(
        pod_spec.termination_grace_period_seconds,
        Some((shutdown.pre_stop_seconds + shutdown.drain_seconds + 10).into())
    );
    let vs = env.api::<VLLMService>().get(name).await.unwrap();
    assert_eq!(
        vs.status
            .as_ref()
            .and_then(|s| s.rollout_strategy.as_deref()),
        Some("Surge"),
        "Auto surges when the pods need no GPU: {:?}",
        vs.status
    );

    let addr = cluster_ip(env, name).await;
    let mut reports = Vec::new();

    // 1. A rolling update: a new pod template.
    let load = start_load(&addr).await;
    let mut new_env = service(name, "models", shutdown)["spec"]["env"].clone();
    new_env
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "VLLM_SIM_REVISION", "value": "2"}));
    env.patch_spec(name, json!({"env": new_env})).await;
    deployment_applied(env, name, "the new template", |d| {
        has_env(d, "VLLM_SIM_REVISION", "2")
    })
    .await;
    settled(env, name, 3, "the rolling update").await;
    reports.push(("rolling update", load.stop_async().await));

    // 2. An eviction, once the budget allows one.
    let vs = env.api::<VLLMService>().get(name).await.unwrap();
    let pdb = vs
        .status
        .and_then(|s| s.disruption_budget_name)
        .unwrap_or_else(|| panic!("3 replicas and no disruption budget in status"));
    budget_allows(env, &pdb, 1).await;
    let load = start_load(&addr).await;
    let victim = a_ready_pod(env, name, &[]).await;
    evict(&pods_without_retry(env).await, &victim)
        .await
        .unwrap_or_else(|e| panic!("evicting {victim}: {e}"));
    let pods = env.api::<Pod>();
    wait_until(START, "the evicted pod gone", || async {
        pods.get_opt(&victim)
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await;
    settled(env, name, 3, "the eviction").await;
    reports.push(("eviction", load.stop_async().await));

    // 3. Replicas 3 → 1.
    let load = start_load(&addr).await;
    env.patch_spec(name, json!({"replicas": 1})).await;
    deployment_applied(env, name, "replicas 1", |d| {
        d.spec.as_ref().and_then(|s| s.replicas) == Some(1)
    })
    .await;
    settled(env, name, 1, "the scale-down").await;
    reports.push(("replicas 3 → 1", load.stop_async().await));

    for (phase, r) in &reports {
        println!("{label}, {phase}: {}", r.summary());
    }
    reports
}

/// With drain, not one request fails through a rolling update, an eviction
/// and a scale-down, and every phase really sent requests.
#[tokio::test]
async fn with_drain_no_request_fails_through_a_rolling_update_an_eviction_and_a_scale_down() {
    let env = Env::new("rollout-drain").await;
    let reports = three_phases(&env, DRAIN, "drain on (drainSeconds 10, preStopSeconds 3)").await;
    for (phase, r) in &reports {
        assert_eq!(r.failed, 0, "{phase} with drain: {}", r.summary());
        assert!(
            r.sent >= MIN_SENT,
            "{phase}: only {} requests sent, fewer than {MIN_SENT}: {}",
            r.sent,
            r.summary()
        );
    }
}

/// Without drain (vLLM's default: in-flight requests aborted on SIGTERM, and
/// no preStop so the endpoint is still routed for a moment), the same steps
/// fail requests: the test above can fail.
#[tokio::test]
async fn without_drain_the_same_steps_fail_requests() {
    let env = Env::new("rollout-nodrain").await;
    let reports = three_phases(
        &env,
        NO_DRAIN,
        "drain off (drainSeconds 0, preStopSeconds 0)",
    )
    .await;
    let failed: u64 = reports.iter().map(|(_, r)| r.failed).sum();
    let sent: u64 = reports.iter().map(|(_, r)| r.sent).sum();
    println!("drain off, all phases: sent {sent}, failed {failed}");
    assert!(
        failed > 0,
        "no request failed without drain: {:?}",
        reports
            .iter()
            .map(|(p, r)| format!("{p}: {}", r.summary()))
            .collect::<Vec<_>>()
    );
}

/// With 3 replicas the default budget lets one pod be evicted, and a second
/// eviction right after is refused with 429 naming the budget; with one
/// replica the budget is gone.
#[tokio::test]
async fn the_disruption_budget_refuses_a_second_eviction_and_goes_with_one_replica() {
    let env = Env::new("rollout-pdb").await;
    let name = "qwen";
    let _model = model_pvc(&env, "models").await;
    let mut body = service(name, "models", DRAIN);
    body["spec"].as_object_mut().unwrap().remove("shutdown");
    body["spec"].as_object_mut().unwrap().remove("rollout");
    env.create(body).await;
    settled(&env, name, 3, "the first rollout").await;

    let vs = env
        .wait_for(name, "status.disruptionsAllowed 1", |vs| {
            vs.status.as_ref().is_some_and(|s| {
                s.disruption_budget_name.as_deref() == Some(name)
                    && s.disruptions_allowed == Some(1)
            })
        })
        .await;
    let pdb_name = vs.status.unwrap().disruption_budget_name.unwrap();
    let pdb = budget_allows(&env, &pdb_name, 1).await;
    let spec = pdb.spec.clone().unwrap();
    assert_eq!(
        spec.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert_eq!(
        spec.unhealthy_pod_eviction_policy.as_deref(),
        Some("AlwaysAllow")
    );
    assert_eq!(pdb.status.as_ref().unwrap().current_healthy, Some(3));

    // One eviction is allowed; a second one right after, while the first pod
    // is still stopping and its replacement not ready, is refused.
    let pods = pods_without_retry(&env).await;
    let first = a_ready_pod(&env, name, &[]).await;
    let second = a_ready_pod(&env, name, std::slice::from_ref(&first)).await;
    let evicted = &first;
    let kept = &second;
    evict(&pods, &first)
        .await
        .unwrap_or_else(|e| panic!("the first eviction ({first}) is allowed: {e}"));
    let status = match evict(&pods, &second).await {
        Err(kube::Error::Api(status)) => status,
        other => {
            let now = env
                .api::<PodDisruptionBudget>()
                .get_opt(&pdb_name)
                .await
                .unwrap();
            panic!(
                "the second eviction ({second}) was not refused: {other:?}\n\
                 the budget before: {:?}\nthe budget now: {:?}\n{}",
                pdb.status,
                now.and_then(|b| b.status),
                diagnosis(&env, name).await
            )
        }
    };
    println!(
        "evicted {evicted}; the eviction of {kept} right after: {} {}: {} {:?}",
        status.code,
        status.reason,
        status.message,
        status.details.as_ref().map(|d| &d.causes)
    );
    assert_eq!(status.code, 429, "{status:?}");
    assert_eq!(status.reason, "TooManyRequests", "{status:?}");
    assert!(status.message.contains("disruption budget"), "{status:?}");
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c.reason == "DisruptionBudget" && c.message.contains(&pdb_name)),
        "the refusal names the budget {pdb_name}: {status:?}"
    );
    assert!(
        pods.get_opt(kept)
            .await
            .unwrap()
            .is_some_and(|p| is_ready(&p)),
        "{kept} was refused and still serves"
    );

    // One replica: no budget (it would only block node drains).
    env.patch_spec(name, json!({"replicas": 1})).await;
    let budgets = env.api::<PodDisruptionBudget>();
    wait_until(START, "the budget deleted with one replica", || async {
        budgets
            .get_opt(&pdb_name)
            .await
            .ok()
            .and_then(|b| b.is_none().then_some(()))
    })
    .await;
    env.wait_for(name, "no status.disruptionBudgetName", |vs| {
        vs.status.as_ref().is_some_and(|s| {
            s.disruption_budget_name.is_none()
                && vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
        })
    })
    .await;
}
