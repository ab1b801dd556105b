//! Proof that the generated RBAC is enough, and only just:
//!
//! - the operator runs authenticated as a ServiceAccount bound to
//!   `rbac::cluster_role()` only and brings a VLLMService to Available without a
//!   single 403 response; with one rule removed, the failure is counted as
//!   `forbidden`, names what is missing, and the controller keeps running;
//! - `every_granted_verb_is_needed`: for every verb of every resource of every
//!   rule in `rbac::CLUSTER_RULES` (data-driven: a new verb without a scenario
//!   fails it), an operator bound to the rules without exactly that verb runs
//!   the scenario that needs it and gets a 403 for exactly that verb and
//!   resource; with all the rules, every scenario reaches its goal with 0 403s.
//!   Each run has its own namespace, ServiceAccount, Role (watch-namespace mode:
//!   the namespaced rules) and ClusterRole (the CRD rule), and its own operator.
//!   (The Lease verbs need leader election, i.e. the binary: see
//!   crates/cli/tests/least_privilege.rs.)

mod common;

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use common::{Env, Operator};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Service, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{Api, api::PostParams};
use testkit::TestNamespace;
use vllmservice_controller::{
    rbac::{self, Rule, Scope},
    runtime::metrics::{ErrorLabels, Metrics, count_writes},
};

/// Every response the operator received with status 403, as "METHOD path",
/// and every request with its status code.
#[derive(Clone, Default)]
struct Forbidden(
    Arc<Mutex<Vec<String>>>,
    Arc<Mutex<Vec<(String, u16)>>>,
    Arc<Mutex<Vec<String>>>,
);

impl Forbidden {
    fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Every request answered so far as ("METHOD uri", status).
    fn requests(&self) -> Vec<(String, u16)> {
        self.1.lock().unwrap().clone()
    }

    /// Every request sent so far, answered or not (a watch's response headers
    /// may come only with its first event).
    fn sent(&self) -> Vec<String> {
        self.2.lock().unwrap().clone()
    }
}

impl<S> tower::Layer<S> for Forbidden {
    type Service = RecordForbidden<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RecordForbidden {
            inner,
            seen: self.clone(),
        }
    }
}

#[derive(Clone)]
struct RecordForbidden<S> {
    inner: S,
    seen: Forbidden,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<http::Request<B>> for RecordForbidden<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let what = format!("{} {}", req.method(), req.uri());
        let seen = self.seen.clone();
        seen.2.lock().unwrap().push(what.clone());
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            if response.status() == http::StatusCode::FORBIDDEN {
                seen.0.lock().unwrap().push(what.clone());
            }
            seen.1
                .lock()
                .unwrap()
                .push((what, response.status().as_u16()));
            Ok(response)
        })
    }
}

/// How the test's ServiceAccount is granted `rules`.
#[derive(Clone, Copy)]
enum Grant<'a> {
    /// One ClusterRole with every rule, bound cluster-wide (deploy/install.yaml).
    ClusterWide(&'a [Rule]),
    /// As `ClusterWide`, for `run --gpu-accounting` (the rules should include
    /// `rbac::GPU_ACCOUNTING_RULES`).
    GpuAccounting(&'a [Rule]),
    /// Watch-namespace mode: a Role in the test namespace with the namespaced
    /// rules, and a ClusterRole with the cluster-scoped ones (the CRDs).
    WatchNamespace(&'a [Rule]),
}

/// A ServiceAccount in a fresh namespace, granted rules as `grant` says (its
/// cluster-scoped objects named uniquely for this run), and an operator running
/// as it, watching that namespace. Cluster-scoped objects are deleted on drop.
struct RbacEnv {
    env: Env,
    forbidden: Forbidden,
    role_name: String,
    /// The operator's client: its ServiceAccount, requests recorded.
    client: kube::Client,
}

/// "resource.group" as kubectl names it.
fn kubectl_resource(group: &str, resource: &str) -> String {
    let resource = resource.split('/').next().unwrap();
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl RbacEnv {
    async fn new(prefix: &str, grant: Grant<'_>) -> RbacEnv {
        testkit::install_crds();
        let admin = testkit::client().await;
        let ns = TestNamespace::new(&admin, prefix).await;
        let sa = "vllmservice-operator";
        let account: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": sa}})).unwrap();
        Api::<ServiceAccount>::namespaced(admin.clone(), &ns.name)
            .create(&PostParams::default(), &account)
            .await
            .expect("create the ServiceAccount");

        let role_name = format!("{}-test-{}", rbac::CLUSTER_ROLE_NAME, ns.name);
        let gpu_accounting = matches!(grant, Grant::GpuAccounting(_));
        let rules = match grant {
            Grant::ClusterWide(rules) | Grant::GpuAccounting(rules) => {
                let role = rbac::cluster_role(&role_name, rules);
                Api::<ClusterRole>::all(admin.clone())
                    .create(&PostParams::default(), &role)
                    .await
                    .expect("create the ClusterRole");
                rules
            }
            Grant::WatchNamespace(rules) => {
                let role = rbac::role(&role_name, &ns.name, rbac::scoped(rules, Scope::Namespaced));
                Api::<Role>::namespaced(admin.clone(), &ns.name)
                    .create(&PostParams::default(), &role)
                    .await
                    .expect("create the Role");
                let binding = rbac::role_binding(&role_name, &ns.name, &role_name, sa, &ns.name);
                Api::<RoleBinding>::namespaced(admin.clone(), &ns.name)
                    .create(&PostParams::default(), &binding)
                    .await
                    .expect("create the RoleBinding");
                let crds = rbac::cluster_role(&role_name, rbac::scoped(rules, Scope::Cluster));
                Api::<ClusterRole>::all(admin.clone())
                    .create(&PostParams::default(), &crds)
                    .await
                    .expect("create the CRD ClusterRole");
                rules
            }
        };
        let binding = rbac::cluster_role_binding(&role_name, &role_name, sa, &ns.name);
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("create the ClusterRoleBinding");
        // The authorizer sees new bindings through an informer: wait until it
        // grants the first verb of every rule the grant still has.
        let user = format!("system:serviceaccount:{}:{sa}", ns.name);
        // (One rule of each scope: a Role and a ClusterRole are seen as wholes.)
        let namespaced = rules.iter().find(|r| r.scope == Scope::Namespaced);
        let cluster = rules.iter().find(|r| r.scope == Scope::Cluster);
        for rule in namespaced.into_iter().chain(cluster) {
            let (Some(resource), Some(verb)) = (rule.resources.first(), rule.verbs.first()) else {
                continue;
            };
            let what = kubectl_resource(rule.group, resource);
            let mut args = vec!["auth", "can-i", verb, &what, "--as", &user];
            if let Some((_, sub)) = resource.split_once('/') {
                args.extend(["--subresource", sub]);
            }
            if rule.scope == Scope::Namespaced {
                args.extend(["-n", &ns.name]);
            }
            testkit::eventually(Duration::from_secs(30), || async {
                testkit::kubectl(&args).status.success()
            })
            .await
            .unwrap_or_else(|_| panic!("the binding takes effect: {verb} {what}"));
        }

        let kubeconfig = testkit::service_account_kubeconfig(&ns.name, sa);
        let metrics = Arc::new(Metrics::default());
        let forbidden = Forbidden::default();
        let client = kube::client::ClientBuilder::try_from(testkit::config_for(&kubeconfig).await)
            .expect("client builder")
            .with_layer(&count_writes(metrics.clone()))
            .with_layer(&forbidden)
            .build();
        // Authenticated as the ServiceAccount, not as the admin.
        let whoami = Api::<ServiceAccount>::namespaced(client.clone(), &ns.name)
            .get(sa)
            .await;
        assert!(
            whoami.is_err(),
            "the role must not grant reading ServiceAccounts"
        );

        let operator = Operator::start_with(client.clone(), metrics, &ns.name, gpu_accounting);
        RbacEnv {
            env: Env {
                client: admin,
                ns,
                operator,
            },
            forbidden,
            role_name,
            client,
        }
    }

    fn forbidden_errors(&self) -> u64 {
        self.env
            .operator
            .metrics
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                category: "forbidden".into(),
            })
            .get()
    }

    /// The 403 responses the operator got (not the test's identity check).
    fn operator_forbidden(&self) -> Vec<String> {
        self.forbidden
            .seen()
            .into_iter()
            .filter(|f| !f.contains("/serviceaccounts/"))
            .collect()
    }
}

impl Drop for RbacEnv {
    fn drop(&mut self) {
        let _ = testkit::kubectl(&[
            "delete",
            "clusterrolebinding,clusterrole",
            &self.role_name,
            &format!("{}-scraper", self.role_name),
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

fn user_forbidden_count(forbidden: &[String]) -> usize {
    // The one read the test itself makes to prove the identity.
    forbidden
        .iter()
        .filter(|f| !f.contains("/serviceaccounts/"))
        .count()
}

#[tokio::test]
async fn generated_cluster_role_is_enough_for_the_whole_flow() {
    let t = RbacEnv::new("rbac-full", Grant::ClusterWide(rbac::CLUSTER_RULES)).await;
    let env = &t.env;
    env.bound_pvc("models").await;
    env.create(common::gpu_service("qwen", "models")).await;
    let vs = env
        .wait_for(
            "qwen",
            "Available as the ServiceAccount",
            common::is_available,
        )
        .await;
    assert_eq!(
        vs.status.as_ref().and_then(|s| s.phase),
        Some(vllmservice_api::Phase::Running)
    );
    // The children really were written by the ServiceAccount.
    env.api::<Deployment>()
        .get("qwen")
        .await
        .expect("Deployment");
    env.api::<Service>().get("qwen").await.expect("Service");
    assert!(t.env.operator.metrics.write_total() > 0);

    // A spec change: the update path of every child and the status.
    env.patch_spec("qwen", serde_json::json!({"replicas": 2}))
        .await;
    env.wait_for("qwen", "Available with 2 replicas", |vs| {
        common::is_available(vs)
            && vs.status.as_ref().and_then(|s| s.ready.as_deref()) == Some("2/2")
    })
    .await;

    assert_eq!(t.forbidden_errors(), 0, "reconciles failed as forbidden");
    let forbidden = t.forbidden.seen();
    assert_eq!(
        user_forbidden_count(&forbidden),
        0,
        "the operator got 403 responses: {forbidden:#?}"
    );
    // As installed by default: no node is read, pods are watched by the
    // operator's label only.
    let sent = t.forbidden.sent();
    assert!(
        !sent.iter().any(|r| r.contains("/nodes")),
        "a node request without --gpu-accounting: {sent:#?}"
    );
    let pod_watches: Vec<_> = sent
        .iter()
        .filter(|r| {
            rbac_verb(r).is_some_and(|(g, res, v)| g.is_empty() && res == "pods" && v != "get")
        })
        .collect();
    assert!(!pod_watches.is_empty(), "never listed pods: {sent:#?}");
    for r in &pod_watches {
        assert!(
            r.contains("labelSelector="),
            "pods read without the operator's label: {r}"
        );
    }
    assert!(t.env.operator.is_running());
}

/// With `--gpu-accounting` and its ClusterRole, the free-GPU count watches
/// every node and every namespace's pods, and nothing is refused.
#[tokio::test]
async fn the_gpu_accounting_role_is_enough_for_the_gpu_count() {
    let rules: Vec<Rule> = rbac::CLUSTER_RULES
        .iter()
        .chain(rbac::GPU_ACCOUNTING_RULES)
        .copied()
        .collect();
    let t = RbacEnv::new("rbac-gpus", Grant::GpuAccounting(&rules)).await;
    let env = &t.env;
    env.bound_pvc("models").await;
    env.create(common::gpu_service("qwen", "models")).await;
    env.wait_for(
        "qwen",
        "Available with GPU accounting",
        common::is_available,
    )
    .await;
    let sent: Vec<_> = t
        .forbidden
        .sent()
        .iter()
        .filter_map(|r| rbac_verb(r))
        .collect();
    for verb in ["list", "watch"] {
        for resource in ["nodes", "pods"] {
            let wanted = (String::new(), resource.to_string(), verb.to_string());
            assert!(
                sent.contains(&wanted),
                "never sent {verb} {resource}: {sent:?}"
            );
        }
    }
    let forbidden = t.forbidden.seen();
    assert_eq!(user_forbidden_count(&forbidden), 0, "{forbidden:#?}");
    assert!(t.env.operator.is_running());
}

/// The node rule is what the free-GPU count needs (not part of
/// `every_granted_verb_is_needed`, which runs without `--gpu-accounting`):
/// with `--gpu-accounting` but without its ClusterRole the node watch is
/// refused, the operator keeps running, and the service still becomes
/// Available (Auto then surges, as when the capacity is unknown).
#[tokio::test]
async fn without_the_node_rule_the_gpu_count_is_refused_and_serving_goes_on() {
    let t = RbacEnv::new("rbac-nodes", Grant::GpuAccounting(rbac::CLUSTER_RULES)).await;
    let env = &t.env;
    env.bound_pvc("models").await;
    env.create(common::gpu_service("qwen", "models")).await;
    env.wait_for(
        "qwen",
        "Available without the node rule",
        common::is_available,
    )
    .await;
    testkit::wait_until(Duration::from_secs(30), "a 403 on nodes", || async {
        let refused = verbs_with(&t.forbidden.requests(), |s| s == 403);
        refused
            .iter()
            .any(|(g, r, v)| g.is_empty() && r == "nodes" && (v == "list" || v == "watch"))
            .then_some(())
    })
    .await;
    let others: Vec<_> = verbs_with(&t.forbidden.requests(), |s| s == 403)
        .into_iter()
        .filter(|(_, r, _)| r != "nodes" && r != "serviceaccounts")
        .collect();
    assert!(others.is_empty(), "only nodes are refused: {others:?}");
    assert_eq!(t.forbidden_errors(), 0, "no reconcile failed");
    assert!(t.env.operator.is_running());
}

#[tokio::test]
async fn a_missing_rule_is_reported_as_forbidden_without_a_crash() {
    let without_services: Vec<Rule> = rbac::CLUSTER_RULES
        .iter()
        .filter(|r| !(r.group.is_empty() && r.resources == ["services"]))
        .copied()
        .collect();
    assert_eq!(without_services.len(), rbac::CLUSTER_RULES.len() - 1);
    let t = RbacEnv::new("rbac-missing", Grant::ClusterWide(&without_services)).await;
    let env = &t.env;
    env.bound_pvc("models").await;
    env.create(common::gpu_service("qwen", "models")).await;

    testkit::wait_until(
        Duration::from_secs(60),
        "a reconcile error counted as forbidden",
        || async { (t.forbidden_errors() > 0).then_some(()) },
    )
    .await;
    let forbidden = t.forbidden.seen();
    assert!(
        forbidden.iter().any(|f| f.contains("/services")),
        "the 403s name services: {forbidden:#?}"
    );
    assert!(
        forbidden
            .iter()
            .filter(|f| !f.contains("/serviceaccounts/"))
            .all(|f| f.contains("/services")),
        "only the removed rule is refused: {forbidden:#?}"
    );

    // Not a crash loop: the controller keeps running and retries with backoff
    // (1 s, 2 s, 4 s ...), so errors grow slowly, not in a tight loop.
    let before = t.forbidden_errors();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = t.forbidden_errors();
    eprintln!(
        "forbidden reconcile errors: {before} -> {after} in 8 s; 403 responses: {}",
        t.forbidden.seen().len()
    );
    assert!(t.env.operator.is_running(), "the controller task ended");
    assert!(
        after > before,
        "the reconcile is retried ({before} -> {after})"
    );
    assert!(
        after - before < 40,
        "retries are backed off, not a tight loop ({before} -> {after} in 8 s)"
    );
    // The Service was not written (the reconcile stops at the cache it cannot fill).
    assert!(
        env.api::<Service>()
            .get_opt("qwen")
            .await
            .unwrap()
            .is_none()
    );

    // Granting the missing rule heals it without touching the VLLMService:
    // the failed reconcile is retried when the Services cache fills (its
    // backoff alone may be past this test's wait by then).
    let full = rbac::cluster_role(&t.role_name, rbac::CLUSTER_RULES);
    Api::<ClusterRole>::all(env.client.clone())
        .replace(&t.role_name, &PostParams::default(), &full)
        .await
        .expect("replace the ClusterRole");
    env.wait_for(
        "qwen",
        "Available once the rule is granted",
        common::is_available,
    )
    .await;
    assert!(t.env.operator.is_running());
}

// ---- every granted verb is needed ------------------------------------------

/// (group, resource, verb) of a request as RBAC authorizes it, from "METHOD uri".
fn rbac_verb(request: &str) -> Option<(String, String, String)> {
    let (method, uri) = request.split_once(' ')?;
    let uri: http::Uri = uri.parse().ok()?;
    let query = uri.query().unwrap_or_default();
    let segs: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segs.first() {
        Some(&"api") => ("", segs.get(2..)?),
        Some(&"apis") => (*segs.get(1)?, segs.get(3..)?),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, name) = match rest {
        [resource] => (resource.to_string(), None),
        [resource, name] => (resource.to_string(), Some(*name)),
        [resource, name, sub, ..] => (format!("{resource}/{sub}"), Some(*name)),
        [] => return None,
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, name) {
        ("GET", Some(_)) => "get",
        ("GET", None) if watch => "watch",
        ("GET", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        _ => return None,
    };
    Some((group.to_string(), resource, verb.to_string()))
}

#[test]
fn requests_are_classified_as_rbac_verbs() {
    let c = |r: &str| rbac_verb(r).map(|(g, res, v)| format!("{v} {g}/{res}"));
    for (request, want) in [
        (
            "GET /apis/apps/v1/namespaces/a/deployments?labelSelector=x&watch=true&timeoutSeconds=290",
            "watch apps/deployments",
        ),
        (
            "GET /apis/apps/v1/namespaces/a/deployments?labelSelector=x",
            "list apps/deployments",
        ),
        (
            "GET https://127.0.0.1:6443/api/v1/namespaces/a/services/x",
            "get /services",
        ),
        (
            "POST /apis/events.k8s.io/v1/namespaces/a/events?",
            "create events.k8s.io/events",
        ),
        (
            "PATCH /apis/aiinfra.example.com/v1alpha1/namespaces/a/vllmservices/x/status?fieldManager=m",
            "patch aiinfra.example.com/vllmservices/status",
        ),
        ("PUT /api/v1/namespaces/a/services/x", "update /services"),
        (
            "DELETE /apis/gateway.networking.k8s.io/v1/namespaces/a/httproutes/x",
            "delete gateway.networking.k8s.io/httproutes",
        ),
        (
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/x",
            "get apiextensions.k8s.io/customresourcedefinitions",
        ),
        (
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions?watch=1",
            "watch apiextensions.k8s.io/customresourcedefinitions",
        ),
    ] {
        assert_eq!(c(request).as_deref(), Some(want), "{request}");
    }
}

/// What an operator does that needs a given verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Scenario {
    /// A plain VLLMService to Available: every cache, creating the Deployment
    /// and the Service, the status, an event.
    Plain,
    /// Two spec changes (port, then replicas): children patched; the second
    /// "updated" event of the Deployment repeats, so the recorder patches its series.
    Changes,
    /// A same-named Deployment and Service exist that are not ours: create
    /// answers AlreadyExists, the operator reads them and reports ResourceConflict.
    Foreign,
    /// Same for the HTTPRoute, ServiceMonitor, PrometheusRule and ScaledObject.
    ForeignOptional,
    /// A hand edit (second Service port named "http" by another field manager)
    /// that apply cannot undo: the 422 full-replace fallback.
    ReplaceService,
    /// The same for the Deployment's container port.
    ReplaceDeployment,
    /// gatewayRef set (route created), host changed (patched), removed (deleted).
    Route,
    /// monitoring on (created), interval and alert threshold changed (patched), off (deleted).
    Monitoring,
    /// A VLLMService whose stored status the typed cache cannot read: read as raw JSON.
    Unreadable,
    /// replicas 2 (PodDisruptionBudget created), a label added (patched), replicas 1 (deleted).
    Budget,
    /// autoscaling set (KEDA ScaledObject created), its target changed (patched), removed (deleted).
    Autoscaling,
    /// Model downloads (kwok completes the Jobs): a Job created, joined by a
    /// second service (patched), left by it (patched), left by the last owner
    /// (deleted); a foreign Job of a download's name (create answers
    /// AlreadyExists, read, reported).
    Download,
    /// A crash-looping pod (played by kwok): the operator reads its vLLM container's
    /// previous log to say why.
    CrashLoop,
    /// A scraper with the metrics-reader ClusterRole asks for /metrics: its
    /// token is reviewed (TokenReview), then its access (SubjectAccessReview).
    MetricsScrape,
}

/// The scenario that needs `verb` on `group`/`resource`; None: no scenario
/// proves the verb is needed (the test fails: remove the verb or add one).
fn scenario_for(group: &str, resource: &str, verb: &str) -> Option<Scenario> {
    use Scenario::*;
    Some(match (group, resource, verb) {
        ("aiinfra.example.com", "vllmservices", "list" | "watch") => Plain,
        ("aiinfra.example.com", "vllmservices", "get") => Unreadable,
        ("aiinfra.example.com", "vllmservices/status", "patch") => Plain,
        ("apps", "deployments", v) | ("", "services", v) => match v {
            "list" | "watch" | "create" => Plain,
            "patch" => Changes,
            "get" => Foreign,
            "update" if group == "apps" => ReplaceDeployment,
            "update" => ReplaceService,
            _ => return None,
        },
        ("gateway.networking.k8s.io", "httproutes", v) => match v {
            "list" | "watch" => Plain,
            "create" | "patch" | "delete" => Route,
            "get" => ForeignOptional,
            _ => return None,
        },
        ("monitoring.coreos.com", "servicemonitors" | "prometheusrules", v) => match v {
            "list" | "watch" => Plain,
            "create" | "patch" | "delete" => Monitoring,
            "get" => ForeignOptional,
            _ => return None,
        },
        ("keda.sh", "scaledobjects", v) => match v {
            "list" | "watch" => Plain,
            "create" | "patch" | "delete" => Autoscaling,
            "get" => ForeignOptional,
            _ => return None,
        },
        ("autoscaling", "horizontalpodautoscalers", "list" | "watch") => Plain,
        ("", "pods" | "persistentvolumeclaims", "list" | "watch") => Plain,
        ("policy", "poddisruptionbudgets", v) => match v {
            "list" | "watch" => Plain,
            "create" | "patch" | "delete" => Budget,
            "get" => ForeignOptional,
            _ => return None,
        },
        ("", "pods/log", "get") => CrashLoop,
        ("batch", "jobs", "list" | "watch" | "create" | "patch" | "delete" | "get") => Download,
        ("gateway.networking.k8s.io", "gateways", "list" | "watch") => Plain,
        ("apiextensions.k8s.io", "customresourcedefinitions", "list" | "watch") => Plain,
        ("events.k8s.io", "events", "create") => Plain,
        ("events.k8s.io", "events", "patch") => Changes,
        ("authentication.k8s.io", "tokenreviews", "create")
        | ("authorization.k8s.io", "subjectaccessreviews", "create") => MetricsScrape,
        _ => return None,
    })
}

/// One permission taken away: `verb` on `group`/`resource`.
#[derive(Debug, Clone)]
struct Variant {
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    scenario: Scenario,
}

impl Variant {
    fn label(&self) -> String {
        format!("{} {}/{}", self.verb, self.group, self.resource)
    }

    /// CLUSTER_RULES without exactly this verb on exactly this resource.
    fn rules(&self) -> &'static [Rule] {
        let mut out = Vec::new();
        for rule in rbac::CLUSTER_RULES {
            if rule.group != self.group || !rule.resources.contains(&self.resource) {
                out.push(*rule);
                continue;
            }
            let others: Vec<&'static str> = rule
                .resources
                .iter()
                .copied()
                .filter(|r| *r != self.resource)
                .collect();
            if !others.is_empty() {
                out.push(Rule {
                    resources: others.leak(),
                    ..*rule
                });
            }
            let verbs: Vec<&'static str> = rule
                .verbs
                .iter()
                .copied()
                .filter(|v| *v != self.verb)
                .collect();
            if !verbs.is_empty() {
                out.push(Rule {
                    resources: vec![self.resource].leak(),
                    verbs: verbs.leak(),
                    ..*rule
                });
            }
        }
        out.leak()
    }
}

/// Every verb of every resource of every rule, with its scenario; panics
/// naming each verb no scenario proves.
fn variants() -> Vec<Variant> {
    let mut out = Vec::new();
    let mut unproven = Vec::new();
    // The node rule of `--gpu-accounting` is not among them:
    // `without_the_node_rule_...` proves that one.
    for rule in rbac::CLUSTER_RULES {
        for resource in rule.resources {
            for verb in rule.verbs {
                match scenario_for(rule.group, resource, verb) {
                    Some(scenario) => out.push(Variant {
                        group: rule.group,
                        resource,
                        verb,
                        scenario,
                    }),
                    None => unproven.push(format!("{verb} {}/{resource}", rule.group)),
                }
            }
        }
    }
    assert!(
        unproven.is_empty(),
        "granted in rbac::CLUSTER_RULES without a scenario that needs them: {unproven:?}"
    );
    out
}

/// A VLLMService that fits the fake nodes without GPUs.
fn small_service(name: &str) -> serde_json::Value {
    let mut vs = common::gpu_service(name, "models");
    vs["spec"]["resources"] = serde_json::json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
    vs
}

fn kubectl_apply(ns: &str, yaml: &str) {
    let out = testkit::kubectl_stdin(&["apply", "-n", ns, "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: llm-gateway}
spec:
  gatewayClassName: example
  listeners: [{name: http, port: 80, protocol: HTTP}]
";

fn route_ref(host: &str) -> serde_json::Value {
    serde_json::json!({"name": "llm-gateway", "sectionName": "http", "host": host})
}

/// The object `name` of `kind` ("deployment", "httproute", ...) as JSON, if it exists.
fn kubectl_get(ns: &str, kind: &str, name: &str) -> Option<serde_json::Value> {
    let out = testkit::kubectl(&[
        "get",
        "-n",
        ns,
        kind,
        name,
        "-o",
        "json",
        "--ignore-not-found",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.trim().is_empty() {
        return None;
    }
    serde_json::from_str(&text).ok()
}

/// How long a scenario waits for one of its objects: the every-verb test runs
/// 16 variants (each its own controller) at once on two cores, where a child's
/// first appearance took longer than `common::WAIT` in CI runs; within the
/// variant's deadline (180 s).
const STEP_WAIT: Duration = Duration::from_secs(150);

async fn wait_object(
    ns: &str,
    kind: &str,
    name: &str,
    what: &str,
    check: impl Fn(Option<&serde_json::Value>) -> bool,
) {
    testkit::wait_until(STEP_WAIT, what, || async {
        check(kubectl_get(ns, kind, name).as_ref()).then_some(())
    })
    .await;
}

async fn wait_reason(env: &Env, condition: &str, reason: &str) {
    env.wait_for("qwen", &format!("{condition} reason {reason}"), |vs| {
        common::condition(vs, condition).is_some_and(|c| c.1 == reason)
    })
    .await;
}

/// Runs `scenario` to its goal (with every rule granted, it must reach it).
async fn run_scenario(scenario: Scenario, t: &RbacEnv) {
    use serde_json::json;
    let env = &t.env;
    let ns = env.ns.name.clone();
    env.bound_pvc("models").await;
    match scenario {
        Scenario::Plain => {
            env.create(small_service("qwen")).await;
            env.wait_for("qwen", "Available", common::is_available)
                .await;
        }
        Scenario::Changes => {
            env.create(small_service("qwen")).await;
            env.wait_for("qwen", "Available", common::is_available)
                .await;
            env.patch_spec("qwen", json!({"port": 8001})).await;
            env.wait_for("qwen", "Available on port 8001", common::is_available)
                .await;
            wait_object(&ns, "service", "qwen", "the Service on port 8001", |s| {
                s.is_some_and(|s| s["spec"]["ports"][0]["port"] == 8001)
            })
            .await;
            env.patch_spec("qwen", json!({"replicas": 2})).await;
            env.wait_for("qwen", "Available with 2/2", |vs| {
                common::is_available(vs)
                    && vs.status.as_ref().and_then(|s| s.ready.as_deref()) == Some("2/2")
            })
            .await;
        }
        Scenario::Foreign => {
            kubectl_apply(
                &ns,
                "apiVersion: apps/v1
kind: Deployment
metadata: {name: qwen}
spec:
  selector: {matchLabels: {app: foreign}}
  template:
    metadata: {labels: {app: foreign}}
    spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: qwen}
spec: {ports: [{port: 80}]}
",
            );
            env.create(small_service("qwen")).await;
            env.wait_for("qwen", "Degraded/ResourceConflict naming both", |vs| {
                common::condition(vs, "Degraded").is_some_and(|c| {
                    c.1 == "ResourceConflict"
                        && c.2.contains("Deployment")
                        && c.2.contains("Service")
                })
            })
            .await;
        }
        Scenario::ForeignOptional => {
            kubectl_apply(&ns, GATEWAY);
            kubectl_apply(
                &ns,
                "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: qwen}
spec: {hostnames: [foreign.example.local]}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: qwen}
spec: {selector: {matchLabels: {app: foreign}}, endpoints: [{port: web}]}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: qwen}
spec: {groups: [{name: foreign, rules: [{alert: Foreign, expr: vector(1)}]}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: qwen}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: foreign}}}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: qwen}
spec:
  scaleTargetRef: {name: foreign}
  triggers: [{type: cron, metadata: {timezone: UTC, start: '0 6 * * *', end: '0 7 * * *', desiredReplicas: '1'}}]
",
            );
            let mut vs = small_service("qwen");
            vs["spec"]["replicas"] = json!(2);
            vs["spec"]["gatewayRef"] = route_ref("llm.example.local");
            vs["spec"]["monitoring"] = json!({"enabled": true});
            vs["spec"]["autoscaling"] = json!({"minReplicas": 2, "maxReplicas": 3, "target": "5"});
            env.create(vs).await;
            wait_reason(env, "RouteReady", "ResourceConflict").await;
            wait_reason(env, "MonitoringReady", "ResourceConflict").await;
            wait_reason(env, "AutoscalingReady", "ResourceConflict").await;
            env.wait_for("qwen", "Degraded naming the PodDisruptionBudget", |vs| {
                common::condition(vs, "Degraded")
                    .is_some_and(|c| c.2.contains("PodDisruptionBudget"))
            })
            .await;
        }
        Scenario::ReplaceService | Scenario::ReplaceDeployment => {
            env.create(small_service("qwen")).await;
            env.wait_for("qwen", "Available", common::is_available)
                .await;
            let (kind, patch) = if scenario == Scenario::ReplaceService {
                (
                    "service",
                    json!({"spec": {"ports": [
                    {"name": "http", "port": 9999, "targetPort": "http", "protocol": "TCP"}]}}),
                )
            } else {
                (
                    "deployment",
                    json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                     "ports": [{"name": "http", "containerPort": 9999, "protocol": "TCP"}]}]}}}}),
                )
            };
            let out = testkit::kubectl(&[
                "patch",
                "-n",
                &ns,
                kind,
                "qwen",
                "--type=merge",
                "--field-manager=hand-edit",
                "-p",
                &patch.to_string(),
            ]);
            assert!(
                out.status.success(),
                "hand edit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // Bump the generation so that the edit is looked at now, not at the resync.
            env.patch_spec("qwen", json!({"engineArgs": {"maxNumSeqs": 9}}))
                .await;
            wait_object(&ns, kind, "qwen", "the hand edit reverted", |o| {
                let ports = if kind == "service" {
                    &o.unwrap()["spec"]["ports"]
                } else {
                    &o.unwrap()["spec"]["template"]["spec"]["containers"][0]["ports"]
                };
                ports.as_array().is_some_and(|p| {
                    p.len() == 1 && (p[0]["port"] == 8000 || p[0]["containerPort"] == 8000)
                })
            })
            .await;
        }
        Scenario::Route => {
            kubectl_apply(&ns, GATEWAY);
            let mut vs = small_service("qwen");
            vs["spec"]["gatewayRef"] = route_ref("a.example.local");
            env.create(vs).await;
            wait_object(&ns, "httproute", "qwen", "the HTTPRoute", |r| {
                r.is_some_and(|r| r["spec"]["hostnames"][0] == "a.example.local")
            })
            .await;
            env.patch_spec("qwen", json!({"gatewayRef": route_ref("b.example.local")}))
                .await;
            wait_object(&ns, "httproute", "qwen", "the HTTPRoute's new host", |r| {
                r.is_some_and(|r| r["spec"]["hostnames"][0] == "b.example.local")
            })
            .await;
            env.patch_spec("qwen", json!({"gatewayRef": null})).await;
            wait_object(&ns, "httproute", "qwen", "the HTTPRoute deleted", |r| {
                r.is_none()
            })
            .await;
        }
        Scenario::Download => {
            let fetching = |name: &str, revision: &str| {
                let mut vs = small_service(name);
                vs["spec"]["modelName"] = json!(name);
                vs["spec"]["modelSource"] = json!({"huggingFace": {"repo": "Qwen/Qwen2.5-1.5B-Instruct", "revision": revision}});
                vs
            };
            let job_of = |vs: &serde_json::Value| {
                let mut vs: vllmservice_api::VLLMService =
                    serde_json::from_value(vs.clone()).unwrap();
                vs.metadata.namespace = Some(ns.clone());
                // The Job's name does not depend on the owner; the builder needs one.
                vs.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
                let valid = vllmservice_api::validate(&vs).unwrap();
                vllmservice_controller::reconcile::downloads::wanted(&valid)[0]
                    .name
                    .clone()
            };
            let main = job_of(&fetching("a", "main"));
            env.create(fetching("a", "main")).await;
            env.create(fetching("b", "main")).await;
            let owners = |j: Option<&serde_json::Value>| -> Vec<String> {
                j.and_then(|j| j["metadata"]["ownerReferences"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|r| r["name"].as_str().map(String::from))
                    .collect()
            };
            wait_object(&ns, "job", &main, "the shared Job with two owners", |j| {
                owners(j).len() == 2
            })
            .await;
            env.patch_spec(
                "b",
                json!({"modelSource": {"huggingFace": {"revision": "v2"}}}),
            )
            .await;
            wait_object(&ns, "job", &main, "b no longer an owner", |j| {
                owners(j) == ["a"]
            })
            .await;
            env.patch_spec(
                "a",
                json!({"modelSource": {"huggingFace": {"revision": "v2"}}}),
            )
            .await;
            wait_object(&ns, "job", &main, "the Job of main deleted", |j| {
                j.is_none_or(|j| !j["metadata"]["deletionTimestamp"].is_null())
            })
            .await;
            // A Job that is not the operator's where c's download would be.
            let c = fetching("c", "v3");
            kubectl_apply(
                &ns,
                &format!(
                    "apiVersion: batch/v1
kind: Job
metadata: {{name: {}}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: localhost/busybox:dev}}]
",
                    job_of(&c)
                ),
            );
            env.create(c).await;
            env.wait_for("c", "Degraded naming the foreign Job", |vs| {
                common::condition(vs, "Degraded")
                    .is_some_and(|c| c.1 == "ResourceConflict" && c.2.contains("Job"))
            })
            .await;
        }
        Scenario::Budget => {
            let mut vs = small_service("qwen");
            vs["spec"]["replicas"] = json!(2);
            env.create(vs).await;
            wait_object(&ns, "pdb", "qwen", "the PodDisruptionBudget", |p| {
                p.is_some()
            })
            .await;
            env.patch_spec("qwen", json!({"labels": {"team": "inference"}}))
                .await;
            wait_object(&ns, "pdb", "qwen", "the budget's new label", |p| {
                p.is_some_and(|p| p["metadata"]["labels"]["team"] == "inference")
            })
            .await;
            env.patch_spec("qwen", json!({"replicas": 1})).await;
            wait_object(&ns, "pdb", "qwen", "the budget deleted", |p| p.is_none()).await;
        }
        Scenario::Autoscaling => {
            let mut vs = small_service("qwen");
            vs["spec"]["autoscaling"] = json!({"maxReplicas": 2, "target": "5"});
            env.create(vs).await;
            let threshold = |o: Option<&serde_json::Value>| {
                o.and_then(|o| o["spec"]["triggers"][0]["metadata"]["threshold"].as_str())
                    .map(String::from)
            };
            wait_object(&ns, "scaledobject", "qwen", "the ScaledObject", |o| {
                threshold(o).as_deref() == Some("5")
            })
            .await;
            env.patch_spec("qwen", json!({"autoscaling": {"target": "7"}}))
                .await;
            wait_object(&ns, "scaledobject", "qwen", "the new target", |o| {
                threshold(o).as_deref() == Some("7")
            })
            .await;
            env.patch_spec("qwen", json!({"autoscaling": null})).await;
            // (KEDA, when it runs, holds it with its finalizer until its HPA is gone.)
            wait_object(
                &ns,
                "scaledobject",
                "qwen",
                "the ScaledObject deleted",
                |o| o.is_none_or(|o| !o["metadata"]["deletionTimestamp"].is_null()),
            )
            .await;
        }
        Scenario::Monitoring => {
            let mut vs = small_service("qwen");
            vs["spec"]["monitoring"] = json!({"enabled": true, "interval": "15s"});
            env.create(vs).await;
            wait_object(&ns, "servicemonitor", "qwen", "the ServiceMonitor", |m| {
                m.is_some()
            })
            .await;
            wait_object(&ns, "prometheusrule", "qwen", "the PrometheusRule", |m| {
                m.is_some()
            })
            .await;
            env.patch_spec(
                "qwen",
                json!({"monitoring": {"interval": "20s", "alerts": {"requestsWaiting": 25}}}),
            )
            .await;
            wait_object(&ns, "servicemonitor", "qwen", "the new interval", |m| {
                m.is_some_and(|m| m["spec"]["endpoints"][0]["interval"] == "20s")
            })
            .await;
            wait_object(&ns, "prometheusrule", "qwen", "the new threshold", |m| {
                m.is_some_and(|m| m.to_string().contains("> 25"))
            })
            .await;
            env.patch_spec("qwen", json!({"monitoring": {"enabled": false}}))
                .await;
            wait_object(
                &ns,
                "servicemonitor",
                "qwen",
                "the ServiceMonitor deleted",
                |m| m.is_none(),
            )
            .await;
            wait_object(
                &ns,
                "prometheusrule",
                "qwen",
                "the PrometheusRule deleted",
                |m| m.is_none(),
            )
            .await;
        }
        Scenario::MetricsScrape => {
            use vllmservice_controller::runtime::metrics_auth::{Authorizer, Verdict};
            let scraper = format!("{}-scraper", t.role_name);
            let mut reader = rbac::metrics_reader_role();
            reader.metadata.name = Some(scraper.clone());
            Api::<ClusterRole>::all(env.client.clone())
                .create(&PostParams::default(), &reader)
                .await
                .unwrap();
            testkit::kubectl_ok(&["-n", &ns, "create", "serviceaccount", "scraper"]);
            Api::<ClusterRoleBinding>::all(env.client.clone())
                .create(
                    &PostParams::default(),
                    &rbac::cluster_role_binding(&scraper, &scraper, "scraper", &ns),
                )
                .await
                .unwrap();
            let token = testkit::kubectl_ok(&["-n", &ns, "create", "token", "scraper"]);
            let header = format!("Bearer {}", token.trim());
            // The binding reaches the authorizer through an informer. A fresh
            // authorizer each look: a verdict is remembered for a minute.
            testkit::wait_until(
                common::WAIT,
                "the scraper allowed to get /metrics",
                || async {
                    let verdict = Authorizer::new(t.client.clone()).check(Some(&header)).await;
                    (verdict.ok() == Some(Verdict::Allowed)).then_some(())
                },
            )
            .await;
        }
        Scenario::CrashLoop => {
            let mut vs = small_service("qwen");
            vs["spec"]["podAnnotations"] = json!({
                "sim.vllm.example.com/waiting-reason": "CrashLoopBackOff",
                "sim.vllm.example.com/last-terminated-reason": "Error",
                "sim.vllm.example.com/last-terminated-exit-code": "1"});
            env.create(vs).await;
            // Whether or not the fake node can serve the log, Degraded says the pod fails.
            env.wait_for("qwen", "Degraded=True", |vs| {
                common::condition(vs, "Degraded").is_some_and(|c| c.0 == "True")
            })
            .await;
            testkit::wait_until(common::WAIT, "a pods/log request", || async {
                t.forbidden
                    .sent()
                    .iter()
                    .any(|r| r.contains("/log?") || r.ends_with("/log"))
                    .then_some(())
            })
            .await;
        }
        Scenario::Unreadable => {
            env.create(small_service("qwen")).await;
            // Settled first: a reconcile still busy with the new pods could apply
            // its status over the edit below before the cache sees the edit.
            env.wait_for("qwen", "Available", common::is_available)
                .await;
            // A timestamp the API server's date-time format accepts and the typed
            // client refuses (more than nanosecond precision).
            const BAD: &str = "2024-01-01T00:00:00.1234567891Z";
            let status = json!({"status": {"conditions": [{"type": "Available", "status": "False",
                "reason": "Edited", "message": "by hand", "lastTransitionTime": BAD}]}});
            let out = testkit::kubectl(&[
                "patch",
                "-n",
                &ns,
                "vllmservice",
                "qwen",
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ]);
            assert!(
                out.status.success(),
                "status edit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // A spec change: the operator reconciles now (status changes do not trigger).
            let out = testkit::kubectl(&[
                "patch",
                "-n",
                &ns,
                "vllmservice",
                "qwen",
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":2}}"#,
            ]);
            assert!(
                out.status.success(),
                "spec edit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            wait_object(
                &ns,
                "vllmservice",
                "qwen",
                "the unreadable status rewritten",
                |o| o.is_some_and(|o| !o["status"].to_string().contains(BAD)),
            )
            .await;
        }
    }
}

/// The (group, resource, verb)s of `requests` with `status`.
fn verbs_with(
    requests: &[(String, u16)],
    status: impl Fn(u16) -> bool,
) -> Vec<(String, String, String)> {
    requests
        .iter()
        .filter(|(_, s)| status(*s))
        .filter_map(|(r, _)| rbac_verb(r))
        .collect()
}

#[tokio::test]
async fn every_granted_verb_is_needed() {
    use futures::StreamExt as _;
    let started = std::time::Instant::now();
    testkit::install_crds();
    testkit::install_gateway_api_crds();
    testkit::install_prometheus_crds();
    testkit::install_keda_crds();
    let mut variants = variants();
    // VLLM_RBAC_ONLY=Route,Monitoring runs only those scenarios (for debugging).
    if let Ok(only) = std::env::var("VLLM_RBAC_ONLY") {
        variants.retain(|v| only.split(',').any(|s| s == format!("{:?}", v.scenario)));
    }
    let mut scenarios: Vec<Scenario> = variants.iter().map(|v| v.scenario).collect();
    scenarios.sort();
    scenarios.dedup();

    // 1. With every rule: each scenario reaches its goal, without a single 403,
    //    and sends every request its variants take away.
    let full = futures::stream::iter(scenarios.clone())
        .map(|scenario| {
            let variants = variants.clone();
            async move {
                let t = RbacEnv::new("rbac-all", Grant::WatchNamespace(rbac::CLUSTER_RULES)).await;
                let outcome = tokio::time::timeout(
                    Duration::from_secs(90),
                    run_scenario(scenario, &t),
                )
                .await;
                let mut failures = Vec::new();
                if outcome.is_err() {
                    failures.push(format!("{scenario:?}: timed out with every rule granted"));
                }
                let forbidden = t.operator_forbidden();
                if !forbidden.is_empty() || t.forbidden_errors() > 0 {
                    failures.push(format!(
                        "{scenario:?}: 403s with every rule granted ({} forbidden reconcile errors): {forbidden:#?}",
                        t.forbidden_errors()
                    ));
                }
                // Every request the scenario's variants take away was sent (and,
                // above, none refused): some, like the CRD watch, start just after the goal.
                let wanted: Vec<_> = variants
                    .iter()
                    .filter(|v| v.scenario == scenario)
                    .map(|v| (v.group.to_string(), v.resource.to_string(), v.verb.to_string()))
                    .collect();
                let missing = || {
                    let sent: Vec<_> = t.forbidden.sent().iter().filter_map(|r| rbac_verb(r)).collect();
                    wanted.iter().filter(|w| !sent.contains(w)).cloned().collect::<Vec<_>>()
                };
                let _ = testkit::eventually(Duration::from_secs(30), || async { missing().is_empty() })
                    .await;
                for (group, resource, verb) in missing() {
                    failures.push(format!("{scenario:?} never sent {verb} {group}/{resource}"));
                }
                if std::env::var_os("VLLM_RBAC_DEBUG").is_some() {
                    eprintln!("{scenario:?} requests: {:#?}", t.forbidden.requests());
                }
                failures
            }
        })
        .buffer_unordered(10)
        .collect::<Vec<_>>()
        .await;
    let full_time = started.elapsed();

    // 2. Without one verb: that scenario gets a 403 for exactly that verb (and
    //    for nothing else).
    let missing = futures::stream::iter(variants.clone())
        .map(|variant| async move {
            let t = Arc::new(RbacEnv::new("rbac-minus", Grant::WatchNamespace(variant.rules())).await);
            let wanted = (
                variant.group.to_string(),
                variant.resource.to_string(),
                variant.verb.to_string(),
            );
            let refused = || {
                let mut r = verbs_with(&t.forbidden.requests(), |s| s == 403);
                // The test's own identity check.
                r.retain(|(_, resource, _)| resource != "serviceaccounts");
                r
            };
            // In a task: a scenario step that times out (it cannot get further
            // without the verb) ends the scenario, not the test.
            let mut scenario = tokio::spawn({
                let t = t.clone();
                async move { run_scenario(variant.scenario, &t).await }
            });
            // Generous: a variant that sees its 403 stops at once; one whose verb is used
            // only at its scenario's end (the deletes) needs the whole scenario, and 16 of
            // them share two cores with the control plane and KEDA.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
            let mut scenario_done = None;
            let seen = loop {
                if refused().contains(&wanted) {
                    break true;
                }
                if tokio::time::Instant::now() >= deadline {
                    break false;
                }
                if scenario_done.is_some() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                tokio::select! {
                    done = &mut scenario => scenario_done = Some(match done {
                        Ok(()) => "reached its goal".to_string(),
                        Err(e) => format!("stopped: {e}"),
                    }),
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            };
            scenario.abort();
            let scenario_done = scenario_done.unwrap_or_else(|| "still running".into());
            let mut failures = Vec::new();
            if !seen {
                failures.push(format!(
                    "without {}: {:?} got no 403 for it (the scenario {scenario_done}): the verb looks unneeded",
                    variant.label(),
                    variant.scenario
                ));
            }
            let others: Vec<_> = refused().into_iter().filter(|r| *r != wanted).collect();
            if !others.is_empty() {
                failures.push(format!("without {}: other 403s: {others:?}", variant.label()));
            }
            eprintln!("without {}: {:?} -> 403 seen: {seen}", variant.label(), variant.scenario);
            failures
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;

    let failures: Vec<String> = full.into_iter().chain(missing).flatten().collect();
    eprintln!(
        "every_granted_verb_is_needed: {} scenarios with every rule in {:.1} s, {} variants without one verb; {:.1} s in all",
        scenarios.len(),
        full_time.as_secs_f64(),
        variants.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Deletes these ClusterRoles when dropped.
struct DeleteOnDrop(Vec<String>);

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = testkit::kubectl(&["delete", "clusterrole", name, "--wait=false"]);
        }
    }
}

/// `kubectl auth can-i VERB vllmservices[/SUB] -n NS --as USER`: the API
/// server's own answer (a SubjectAccessReview as that user).
fn can_i(ns: &str, user: &str, verb: &str, subresource: Option<&str>) -> bool {
    let mut args = vec![
        "auth",
        "can-i",
        verb,
        "vllmservices.aiinfra.example.com",
        "-n",
        ns,
        "--as",
        user,
    ];
    if let Some(sub) = subresource {
        args.extend(["--subresource", sub]);
    }
    let out = testkit::kubectl(&args);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i: {answer} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

/// The shipped user roles reach Kubernetes' own `view`, `edit` and `admin`
/// through aggregation (kube-controller-manager's aggregation controller):
/// a viewer reads VLLMServices and cannot write them, an editor writes them
/// but never their status, and nobody else gets anything.
#[tokio::test]
async fn user_roles_aggregate_into_view_edit_and_admin() {
    let client = testkit::client().await;
    let ns = TestNamespace::new(&client, "user-roles").await;
    // The shipped roles under names of this test's own (the Helm test installs
    // the chart's, which Helm must own), aggregated by their labels all the same.
    let shipped = std::fs::read_to_string(testkit::repo_path("config/rbac/user-roles.yaml"))
        .expect("config/rbac/user-roles.yaml");
    let suffix = format!("-{}", ns.name);
    let renamed = shipped
        .replace(
            "name: vllmservice-operator-view",
            &format!("name: vllmservice-operator-view{suffix}"),
        )
        .replace(
            "name: vllmservice-operator-edit",
            &format!("name: vllmservice-operator-edit{suffix}"),
        );
    assert_ne!(renamed, shipped);
    let applied = testkit::kubectl_stdin(&["apply", "-f", "-"], &renamed);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let _cleanup = DeleteOnDrop(vec![
        format!("vllmservice-operator-view{suffix}"),
        format!("vllmservice-operator-edit{suffix}"),
    ]);
    for (binding, role, user) in [
        ("viewer", "view", "alice"),
        ("editor", "edit", "bob"),
        ("owner", "admin", "carol"),
    ] {
        testkit::kubectl_ok(&[
            "create",
            "rolebinding",
            binding,
            "-n",
            &ns.name,
            &format!("--clusterrole={role}"),
            &format!("--user={user}"),
        ]);
    }
    // Aggregation is asynchronous: wait until the built-in roles carry the rules.
    testkit::wait_until(
        Duration::from_secs(30),
        "the view, edit and admin roles to aggregate the VLLMService rules",
        || async {
            (can_i(&ns.name, "alice", "list", None)
                && can_i(&ns.name, "bob", "create", None)
                && can_i(&ns.name, "carol", "delete", None))
            .then_some(())
        },
    )
    .await;
    assert!(can_i(&ns.name, "alice", "watch", None));
    assert!(can_i(&ns.name, "alice", "get", Some("status")));
    assert!(!can_i(&ns.name, "alice", "create", None));
    assert!(!can_i(&ns.name, "alice", "delete", None));
    for user in ["bob", "carol"] {
        for verb in ["get", "create", "patch", "update", "delete"] {
            assert!(can_i(&ns.name, user, verb, None), "{user} {verb}");
        }
        assert!(!can_i(&ns.name, user, "patch", Some("status")), "{user}");
    }
    assert!(!can_i(&ns.name, "mallory", "list", None));
}
