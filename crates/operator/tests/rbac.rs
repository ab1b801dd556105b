//! Proof that the generated RBAC is enough, and only just: the operator runs
//! authenticated as a ServiceAccount bound to `rbac::cluster_role()` only and
//! brings a VLLMService to Available without a single 403 response; with one
//! rule removed, the failure is counted as `forbidden`, names what is missing,
//! and the controller keeps running (retrying with backoff) instead of dying.

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
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{Api, api::PostParams};
use testkit::TestNamespace;
use vllmservice_controller::{
    metrics::{CountWritesLayer, ErrorLabels, Metrics},
    rbac::{self, Rule},
};

/// Every response the operator received with status 403, as "METHOD path".
#[derive(Clone, Default)]
struct Forbidden(Arc<Mutex<Vec<String>>>);

impl Forbidden {
    fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
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
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            if response.status() == http::StatusCode::FORBIDDEN {
                seen.0.lock().unwrap().push(what);
            }
            Ok(response)
        })
    }
}

/// A ServiceAccount in a fresh namespace, bound cluster-wide to a ClusterRole
/// made from `rules` (named uniquely for this run), and an operator running as
/// it, watching that namespace. The ClusterRole and binding are deleted on drop.
struct RbacEnv {
    env: Env,
    forbidden: Forbidden,
    role_name: String,
}

impl RbacEnv {
    async fn new(prefix: &str, rules: &[Rule]) -> RbacEnv {
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
        let role = rbac::cluster_role_from(&role_name, rules);
        Api::<ClusterRole>::all(admin.clone())
            .create(&PostParams::default(), &role)
            .await
            .expect("create the ClusterRole");
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": role_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns.name}]
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("create the ClusterRoleBinding");
        // The authorizer sees new bindings through an informer: wait until it does.
        let user = format!("system:serviceaccount:{}:{sa}", ns.name);
        testkit::eventually(Duration::from_secs(30), || async {
            testkit::kubectl(&[
                "auth",
                "can-i",
                "list",
                "vllmservices.aiinfra.example.com",
                "-n",
                &ns.name,
                "--as",
                &user,
            ])
            .status
            .success()
        })
        .await
        .expect("the binding takes effect");

        let kubeconfig = testkit::service_account_kubeconfig(&ns.name, sa);
        let metrics = Arc::new(Metrics::default());
        let forbidden = Forbidden::default();
        let client = kube::client::ClientBuilder::try_from(testkit::config_for(&kubeconfig).await)
            .expect("client builder")
            .with_layer(&CountWritesLayer(metrics.clone()))
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

        let operator = Operator::start_with_client(client, metrics, &ns.name);
        RbacEnv {
            env: Env {
                client: admin,
                ns,
                operator,
            },
            forbidden,
            role_name,
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
}

impl Drop for RbacEnv {
    fn drop(&mut self) {
        for kind in ["clusterrolebinding", "clusterrole"] {
            let _ = testkit::kubectl(&["delete", kind, &self.role_name, "--wait=false"]);
        }
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
    let t = RbacEnv::new("rbac-full", rbac::CLUSTER_RULES).await;
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
    let t = RbacEnv::new("rbac-missing", &without_services).await;
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
    // What it could do, it did: the Deployment exists; the Service does not.
    assert!(
        env.api::<Deployment>()
            .get_opt("qwen")
            .await
            .unwrap()
            .is_some(),
        "the Deployment was still written"
    );
    assert!(
        env.api::<Service>()
            .get_opt("qwen")
            .await
            .unwrap()
            .is_none()
    );

    // Granting the missing rule heals it without touching the VLLMService.
    let full = rbac::cluster_role_from(&t.role_name, rbac::CLUSTER_RULES);
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
