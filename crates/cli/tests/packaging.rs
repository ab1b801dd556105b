//! Packaging: the generated RBAC and manifests are up to date with their
//! sources, the Helm chart lints and renders, and both the chart and
//! `deploy/install.yaml` are admitted by a namespace that enforces the
//! restricted Pod Security Standard on the local cluster.

use std::{process::Command, time::Duration};

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{Event, Pod},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{Api, api::ListParams, core::DynamicObject};
use testkit::{
    TestNamespace,
    pod_security::{assert_restricted, enforce_restricted},
    stdout_of,
};
use vllmservice_controller::rbac;

const BIN: &str = env!("CARGO_BIN_EXE_vllmservice-operator");
const CHART: &str = "charts/vllmservice-operator";

fn read(relative: &str) -> String {
    std::fs::read_to_string(testkit::repo_path(relative))
        .unwrap_or_else(|e| panic!("reading {relative}: {e}"))
}

fn operator(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run the binary");
    stdout_of(&format!("vllmservice-operator {}", args.join(" ")), out)
}

/// `hack/tools/helm.sh ARGS` (builds helm from its Go module once per machine).
fn helm(args: &[&str]) -> String {
    let out = testkit::helm()
        .args(args)
        .output()
        .expect("run hack/tools/helm.sh");
    stdout_of(&format!("helm {}", args.join(" ")), out)
}

/// The documents of a multi-document YAML stream that have a kind.
fn documents(yaml: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in yaml.lines() {
        if line == "---" {
            docs.push(String::new());
        } else {
            let doc = docs.last_mut().unwrap();
            doc.push_str(line);
            doc.push('\n');
        }
    }
    docs.into_iter()
        .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
        .collect()
}

fn kind_of(doc: &str) -> String {
    let obj: DynamicObject = serde_saphyr::from_str(doc).expect("a Kubernetes object");
    obj.types.expect("apiVersion and kind").kind
}

/// The one document of `kind` in `yaml`, parsed.
fn only<K: k8s_openapi::serde::de::DeserializeOwned>(yaml: &str, kind: &str) -> K {
    let docs: Vec<String> = documents(yaml)
        .into_iter()
        .filter(|d| kind_of(d) == kind)
        .collect();
    assert_eq!(docs.len(), 1, "expected one {kind}");
    serde_saphyr::from_str(&docs[0]).unwrap_or_else(|e| panic!("parsing the {kind}: {e}"))
}

fn kinds(yaml: &str) -> Vec<String> {
    documents(yaml).iter().map(|d| kind_of(d)).collect()
}

// ---- generated files --------------------------------------------------------

#[test]
fn checked_in_rbac_matches_generated() {
    const CHECKED_IN: &str = "config/rbac/role.yaml";
    let generated = operator(&["rbac"]);
    assert!(
        read(CHECKED_IN) == generated,
        "{CHECKED_IN} is out of date with crates/operator/src/rbac.rs; regenerate with \
         `hack/gen-install.sh` (or `cargo run -p vllmservice-operator -- rbac > {CHECKED_IN}`)"
    );
    // And it is what the library builds: the operator's ClusterRole, and the
    // one for scrapers of its /metrics.
    let roles: Vec<ClusterRole> = documents(&generated)
        .iter()
        .filter(|d| kind_of(d) == "ClusterRole")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            rbac::cluster_role(rbac::CLUSTER_ROLE_NAME, rbac::CLUSTER_RULES),
            rbac::metrics_reader_role()
        ]
    );
    let lease: Role = only(&generated, "Role");
    assert_eq!(
        lease,
        rbac::role(
            rbac::LEADER_ELECTION_ROLE_NAME,
            "vllmservice-system",
            rbac::LEADER_ELECTION_RULES
        )
    );
    let other: Role = only(&operator(&["rbac", "--namespace", "ops"]), "Role");
    assert_eq!(other.metadata.namespace.as_deref(), Some("ops"));

    // The watch-namespace example, and what it is made of.
    const WATCH: &str = "config/rbac/watch-namespace.yaml";
    let generated = operator(&["rbac", "--watch-namespace", "vllmservice-workloads"]);
    assert!(
        read(WATCH) == generated,
        "{WATCH} is out of date with crates/operator/src/rbac.rs; regenerate with `hack/gen-install.sh`"
    );
    // A list (a repeat is one namespace): a Role and RoleBinding in each.
    let w =
        vllmservice_controller::rbac::watch_namespace("ops", &["team-a".into(), "team-b".into()]);
    let printed = operator(&[
        "rbac",
        "--namespace",
        "ops",
        "--watch-namespace",
        "team-a,team-b",
        "--watch-namespace",
        "team-a",
    ]);
    assert_eq!(only::<ClusterRole>(&printed, "ClusterRole"), w.crd_role);
    assert_eq!(
        only::<ClusterRoleBinding>(&printed, "ClusterRoleBinding"),
        w.crd_binding
    );
    let roles: Vec<Role> = documents(&printed)
        .iter()
        .filter(|d| kind_of(d) == "Role")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let (mut want_roles, mut want_bindings): (Vec<_>, Vec<_>) = w.roles.into_iter().unzip();
    want_roles.push(w.lease_role);
    want_bindings.push(w.lease_binding);
    assert_eq!(roles, want_roles);
    let bindings: Vec<RoleBinding> = documents(&printed)
        .iter()
        .filter(|d| kind_of(d) == "RoleBinding")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    assert_eq!(bindings, want_bindings);
}

#[test]
fn checked_in_user_roles_match_generated() {
    const CHECKED_IN: &str = "config/rbac/user-roles.yaml";
    let generated = operator(&["rbac", "--user-roles"]);
    assert!(
        read(CHECKED_IN) == generated,
        "{CHECKED_IN} is out of date with crates/operator/src/rbac.rs; regenerate with `hack/gen-install.sh`"
    );
    let roles: Vec<ClusterRole> = documents(&generated)
        .iter()
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    assert_eq!(roles, rbac::user_roles());
}

#[test]
fn install_yaml_and_chart_are_generated_from_config() {
    let out = Command::new(testkit::repo_path("hack/gen-install.sh"))
        .arg("--check")
        .output()
        .expect("run hack/gen-install.sh");
    stdout_of("hack/gen-install.sh --check", out);
}

/// Every `--flag` the manifests pass to `run` is one the binary knows.
#[test]
fn manifest_args_are_flags_of_run() {
    let help = operator(&["run", "--help"]);
    let plain: Deployment = only(&read("config/manager/deployment.yaml"), "Deployment");
    let chart: Deployment = only(&helm(&["template", "t", CHART]), "Deployment");
    for (source, deployment) in [("config/manager", plain), ("the Helm chart", chart)] {
        let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
        let args = container.args.clone().unwrap_or_default();
        assert_eq!(args.first().map(String::as_str), Some("run"), "{source}");
        for arg in args.iter().filter(|a| a.starts_with("--")) {
            let flag = arg.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{source} passes {flag}, which `vllmservice-operator run` does not accept:\n{help}"
            );
        }
    }
}

/// The image's user is the one the manifests require.
#[test]
fn dockerfile_runs_as_the_manifests_user() {
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("FROM gcr.io/distroless/static-debian12:nonroot"));
    assert!(dockerfile.contains("\nUSER 65532:65532\n"));
    assert!(dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/vllmservice-operator\"]"));
    let deployment: Deployment = only(&read("deploy/install.yaml"), "Deployment");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.security_context.unwrap().run_as_user, Some(65532));
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("ghcr.io/example/vllmservice-operator:0.1.0")
    );
}

// ---- helm -------------------------------------------------------------------

#[test]
fn helm_lint_passes() {
    helm(&["lint", "--strict", CHART]);
    helm(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "serviceMonitor.enabled=true",
    ]);
}

#[test]
fn helm_template_renders_the_values() {
    let default = helm(&["template", "ops", CHART, "--namespace", "ops"]);
    let mut k = kinds(&default);
    k.sort();
    assert_eq!(
        k,
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    // One replica gets no disruption budget (it would only block a drain);
    // the admission policy and the NetworkPolicy are opt-in.
    let single = helm(&[
        "template",
        "ops",
        CHART,
        "--set",
        "replicaCount=1,leaderElection.enabled=false",
    ]);
    assert!(!kinds(&single).contains(&"PodDisruptionBudget".to_string()));
    let opted = helm(&[
        "template",
        "ops",
        CHART,
        "--set",
        "admissionPolicy.enabled=true,networkPolicy.enabled=true",
    ]);
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "NetworkPolicy",
    ] {
        assert!(
            !kinds(&default).contains(&kind.to_string()),
            "{kind} is opt-in"
        );
        assert!(
            kinds(&opted).contains(&kind.to_string()),
            "{kind} not rendered"
        );
    }
    // The RBAC rules are the generated ones; the user roles are shipped as generated.
    let cluster_roles: Vec<ClusterRole> = documents(&default)
        .iter()
        .filter(|d| kind_of(d) == "ClusterRole")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let (users, operator): (Vec<_>, Vec<_>) = cluster_roles.into_iter().partition(|r| {
        r.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.ends_with("-view") || n.ends_with("-edit"))
    });
    // The shipped roles, named after the release.
    let unnamed = |roles: &[ClusterRole]| -> Vec<_> {
        roles
            .iter()
            .map(|r| (r.metadata.labels.clone(), r.rules.clone()))
            .collect()
    };
    assert_eq!(unnamed(&users), unnamed(&rbac::user_roles()));
    let (reader, operator): (Vec<_>, Vec<_>) = operator.into_iter().partition(|r| {
        r.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.ends_with("-metrics-reader"))
    });
    assert_eq!(reader.len(), 1);
    assert_eq!(reader[0].rules, rbac::metrics_reader_role().rules);
    assert_eq!(operator.len(), 1);
    assert_eq!(
        operator[0].rules,
        rbac::cluster_role(rbac::CLUSTER_ROLE_NAME, rbac::CLUSTER_RULES).rules
    );
    let without = helm(&["template", "ops", CHART, "--set", "userRoles.enabled=false"]);
    assert_eq!(
        kinds(&without)
            .iter()
            .filter(|k| *k == "ClusterRole")
            .count(),
        2,
        "the operator's and the metrics reader"
    );
    let lease: Role = only(&default, "Role");
    assert_eq!(lease.metadata.namespace.as_deref(), Some("ops"));
    assert_eq!(
        lease.rules,
        rbac::role(
            rbac::LEADER_ELECTION_ROLE_NAME,
            "ops",
            rbac::LEADER_ELECTION_RULES
        )
        .rules
    );
    let deployment: Deployment = only(&default, "Deployment");
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let container = &spec.template.spec.unwrap().containers[0];
    let args = container.args.clone().unwrap();
    assert!(args.contains(&"--leader-election-namespace=$(POD_NAMESPACE)".to_string()));
    assert!(args.contains(&"--log-format=json".to_string()));
    assert!(!args.contains(&"--streaming-lists".to_string()));
    assert!(args.contains(&format!(
        "--prometheus-address={}",
        vllmservice_controller::reconcile::build::DEFAULT_PROMETHEUS_ADDRESS
    )));
    assert!(args.contains(&format!(
        "--download-deadline-seconds={}",
        vllmservice_controller::reconcile::build::DEFAULT_DOWNLOAD_DEADLINE_SECONDS
    )));
    assert!(args.contains(&"--status-settle-seconds=0".to_string()));
    assert_eq!(
        container.image.as_deref(),
        Some("ghcr.io/example/vllmservice-operator:0.1.0")
    );

    let custom = helm(&[
        "template",
        "ops",
        CHART,
        "--set",
        "image.repository=registry.local/op,image.tag=dev,image.pullPolicy=Always",
        "--set",
        "replicaCount=1,leaderElection.enabled=false,logFormat=human",
        "--set",
        "serviceMonitor.enabled=true,metrics.port=9090",
        "--set",
        "resources.limits.memory=1Gi",
        "--set",
        "prometheusAddress=https://prom.example.com",
        "--set",
        "streamingLists=true",
    ]);
    let k = kinds(&custom);
    assert!(!k.contains(&"Role".to_string()), "no lease Role: {k:?}");
    assert!(k.contains(&"ServiceMonitor".to_string()), "{k:?}");
    let deployment: Deployment = only(&custom, "Deployment");
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.local/op:dev"));
    assert_eq!(container.image_pull_policy.as_deref(), Some("Always"));
    let args = container.args.clone().unwrap();
    assert!(!args.iter().any(|a| a.starts_with("--leader-election")));
    assert!(args.contains(&"--streaming-lists".to_string()), "{args:?}");
    assert!(args.contains(&"--log-format=human".to_string()));
    assert!(args.contains(&"--metrics-addr=0.0.0.0:9090".to_string()));
    assert!(args.contains(&"--prometheus-address=https://prom.example.com".to_string()));
    let limits = container.resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["memory"].0, "1Gi");

    // watchNamespace: a Role in that namespace, cluster-wide only the CRDs.
    let watch = helm(&[
        "template",
        "ops",
        CHART,
        "--namespace",
        "ops",
        "--set",
        "watchNamespace=team-a,userRoles.enabled=false",
    ]);
    let mut k = kinds(&watch);
    k.sort();
    assert_eq!(
        k,
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    let crds: ClusterRole = documents(&watch)
        .iter()
        .filter(|d| kind_of(d) == "ClusterRole")
        .map(|d| serde_saphyr::from_str::<ClusterRole>(d).unwrap())
        .find(|r| {
            r.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-crds"))
        })
        .expect("the ClusterRole of the cluster-scoped rules");
    assert_eq!(
        crds.rules,
        rbac::cluster_role(
            rbac::CRD_CLUSTER_ROLE_NAME,
            rbac::scoped(rbac::CLUSTER_RULES, rbac::Scope::Cluster)
        )
        .rules
    );
    let roles: Vec<Role> = documents(&watch)
        .iter()
        .filter(|d| kind_of(d) == "Role")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let operator_role = roles
        .iter()
        .find(|r| r.metadata.namespace.as_deref() == Some("team-a"))
        .expect("a Role in the watched namespace");
    assert_eq!(
        operator_role.rules,
        rbac::role(
            rbac::CLUSTER_ROLE_NAME,
            "team-a",
            rbac::scoped(rbac::CLUSTER_RULES, rbac::Scope::Namespaced)
        )
        .rules
    );
    let bindings: Vec<RoleBinding> = documents(&watch)
        .iter()
        .filter(|d| kind_of(d) == "RoleBinding")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    assert!(bindings.iter().any(|b| {
        b.metadata.namespace.as_deref() == Some("team-a")
            && b.role_ref.name == operator_role.metadata.name.clone().unwrap()
            && b.subjects.as_ref().unwrap()[0].namespace.as_deref() == Some("ops")
    }));
    let binding: ClusterRoleBinding = only(&watch, "ClusterRoleBinding");
    assert_eq!(binding.role_ref.name, crds.metadata.name.unwrap());
    let deployment: Deployment = only(&watch, "Deployment");
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.contains(&"--watch-namespace=team-a".to_string()));

    // watchNamespaces (with watchNamespace, each once): a Role and RoleBinding in each.
    let list = helm(&[
        "template",
        "ops",
        CHART,
        "--namespace",
        "ops",
        "--set",
        "watchNamespace=team-a,watchNamespaces={team-b,team-a,team-c},userRoles.enabled=false",
    ]);
    let in_namespaces = |kind: &str| {
        let mut namespaces: Vec<String> = documents(&list)
            .iter()
            .filter(|d| kind_of(d) == kind)
            .map(|d| serde_saphyr::from_str::<serde_json::Value>(d).unwrap())
            .filter(|d| d["metadata"]["name"].as_str() == operator_role.metadata.name.as_deref())
            .filter_map(|d| Some(d["metadata"]["namespace"].as_str()?.to_string()))
            .collect();
        namespaces.sort();
        namespaces
    };
    assert_eq!(in_namespaces("Role"), ["team-a", "team-b", "team-c"]);
    assert_eq!(in_namespaces("RoleBinding"), ["team-a", "team-b", "team-c"]);
    let deployment: Deployment = only(&list, "Deployment");
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.contains(&"--watch-namespace=team-a,team-b,team-c".to_string()),
        "{args:?}"
    );
    // Still only the CRDs cluster-wide: no ClusterRole with the operator's rules.
    assert_eq!(
        documents(&list)
            .iter()
            .filter(|d| kind_of(d) == "ClusterRoleBinding")
            .count(),
        1
    );

    // Several replicas without leader election would all write: refused.
    let out = Command::new(testkit::repo_path("hack/tools/helm.sh"))
        .args([
            "template",
            "ops",
            CHART,
            "--set",
            "leaderElection.enabled=false",
        ])
        .current_dir(testkit::repo_root())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs leaderElection.enabled"));
}

// ---- restricted Pod Security admission ----------------------------------------

/// Waits until the Deployment `name` in `ns` has all its pods created, and
/// fails with the ReplicaSet's FailedCreate events (e.g. Pod Security) if not.
async fn assert_pods_admitted(client: &kube::Client, ns: &str, name: &str, replicas: usize) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = deployments.get(name).await.expect("the Deployment exists");
    let selector = deployment.spec.unwrap().selector.match_labels.unwrap();
    let selector = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let created = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .len();
        let failed: Vec<String> = events
            .list(&ListParams::default().fields("reason=FailedCreate"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.message)
            .collect();
        assert!(
            failed.is_empty(),
            "pods of {ns}/{name} were refused: {failed:#?}"
        );
        let replica_failure = sets
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .iter()
            .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
            .any(|c| c.type_ == "ReplicaFailure" && c.status == "True");
        assert!(
            !replica_failure,
            "{ns}/{name}'s ReplicaSet has ReplicaFailure"
        );
        if created >= replicas {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {created} of {replicas} pods of {ns}/{name} were created"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn kubectl_apply_stdin(args: &[&str], yaml: &str) -> String {
    stdout_of(
        &format!("kubectl {}", args.join(" ")),
        testkit::kubectl_stdin(args, yaml),
    )
}

/// Deletes the chart's cluster-scoped objects of one release when dropped.
struct ClusterScoped(String);

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        let _ = testkit::kubectl(&[
            "delete",
            "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding",
            "-l",
            &format!("app.kubernetes.io/instance={}", self.0),
            "--wait=false",
        ]);
    }
}

#[tokio::test]
async fn helm_chart_is_admitted_in_a_restricted_namespace() {
    testkit::install_crds();
    testkit::install_prometheus_crds();
    let client = testkit::client().await;
    let ns = TestNamespace::new(&client, "helm-psa").await;
    enforce_restricted(&ns.name);
    let release = format!("op-{}", testkit::random_suffix());
    let _cleanup = ClusterScoped(release.clone());
    let rendered = helm(&[
        "template",
        &release,
        CHART,
        "--namespace",
        &ns.name,
        "--set",
        "serviceMonitor.enabled=true",
    ]);
    let applied = kubectl_apply_stdin(&["apply", "-f", "-"], &rendered);
    for kind in [
        "serviceaccount",
        "clusterrole.rbac",
        "role.rbac",
        "deployment.apps",
        "service/",
        "servicemonitor.monitoring.coreos.com",
    ] {
        assert!(applied.contains(kind), "{kind} not applied:\n{applied}");
    }
    assert_pods_admitted(
        &client,
        &ns.name,
        &format!("{release}-vllmservice-operator"),
        2,
    )
    .await;
}

/// `kubectl apply -f deploy/install.yaml` installs everything, into the
/// restricted namespace `vllmservice-system`, and its pods are admitted.
#[tokio::test]
async fn install_yaml_installs_into_a_restricted_namespace() {
    const NS: &str = "vllmservice-system";
    testkit::install_crds();
    let client = testkit::client().await;
    // A previous run's namespace may still be terminating.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    testkit::eventually(Duration::from_secs(90), || async {
        namespaces
            .get_opt(NS)
            .await
            .unwrap()
            .is_none_or(|n| n.status.and_then(|s| s.phase).as_deref() != Some("Terminating"))
    })
    .await
    .expect("the old vllmservice-system namespace goes away");

    struct Uninstall;
    impl Drop for Uninstall {
        fn drop(&mut self) {
            // Everything but the CRD, which other tests use.
            let _ = testkit::kubectl(&[
                "delete",
                "clusterrole,clusterrolebinding",
                "vllmservice-operator",
                "--wait=false",
            ]);
            let _ = testkit::kubectl(&["delete", "namespace", NS, "--wait=false"]);
        }
    }
    let _uninstall = Uninstall;
    let install = read("deploy/install.yaml");
    let path = testkit::repo_path("deploy/install.yaml");
    let applied = stdout_of(
        "kubectl apply -f deploy/install.yaml",
        testkit::kubectl(&["apply", "-f", path.to_str().unwrap()]),
    );
    for kind in kinds(&install) {
        assert!(
            applied.to_lowercase().contains(&kind.to_lowercase()),
            "{kind} not applied:\n{applied}"
        );
    }
    assert_restricted(NS);
    assert_pods_admitted(&client, NS, "vllmservice-operator", 2).await;
}

// ---- the chart's ValidatingAdmissionPolicy -------------------------------------

/// A VLLMService in `ns`, with `extra` spec fields, as YAML.
fn service_yaml(ns: &str, name: &str, extra: &str) -> String {
    format!(
        "apiVersion: aiinfra.example.com/v1alpha1\nkind: VLLMService\n\
         metadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  image: vllm/vllm-openai:latest\n  modelPath: /models/m\n  modelName: m\n  \
         replicas: 1\n  storage: {{pvcName: models, mountPath: /models}}\n{extra}"
    )
}

/// `kubectl create --dry-run=server` of a service: admission runs in full, and
/// no operator of another test sees the object.
fn dry_run_create(yaml: &str) -> Result<(), String> {
    let out = testkit::kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], yaml);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// With `admissionPolicy.enabled`, the real API server refuses privileged and
/// hostIPC VLLMServices outside the allowed namespaces, naming the field, and
/// admits them inside; plain services pass everywhere. The policy's
/// expressions type-check against the CRD's schema (no warnings in its status).
#[tokio::test]
async fn admission_policy_keeps_privileged_services_to_allowed_namespaces() {
    testkit::install_crds();
    let client = testkit::client().await;
    let allowed = TestNamespace::new(&client, "vap-allowed").await;
    let checked = TestNamespace::new(&client, "vap-checked").await;
    // Only these two namespaces are checked: other tests' services stay out of it.
    // Digits only: `--set` makes a number of it, which the chart must still render as the
    // string a label value is (a suffix that happened to be all digits once failed here).
    let mark: String = testkit::random_suffix()
        .bytes()
        .map(|b| char::from(b'0' + b % 10))
        .collect();
    for ns in [&allowed.name, &checked.name] {
        testkit::kubectl_ok(&["label", "namespace", ns, &format!("vap-test={mark}")]);
    }
    let release = format!("vap-{mark}");
    let _cleanup = ClusterScoped(release.clone());
    let rendered = helm(&[
        "template",
        &release,
        CHART,
        "--show-only",
        "templates/admission-policy.yaml",
        "--set",
        "admissionPolicy.enabled=true",
        "--set",
        &format!("admissionPolicy.allowedNamespaces={{{}}}", allowed.name),
        "--set",
        &format!("admissionPolicy.namespaceLabels.vap-test={mark}"),
    ]);
    kubectl_apply_stdin(&["apply", "-f", "-"], &rendered);
    let policy = format!("{release}-vllmservice-operator-pod-privileges");

    let privileged = "  securityContext: {privileged: true}\n";
    let host_ipc = "  hostIPC: true\n";
    // The API server loads a new policy asynchronously: its first refusal is the signal.
    let refused = testkit::wait_until(Duration::from_secs(60), "the policy refuses", || async {
        dry_run_create(&service_yaml(&checked.name, "p", privileged)).err()
    })
    .await;
    for wanted in [
        "spec.securityContext.privileged: privileged vLLM pods are not allowed in namespace ",
        checked.name.as_str(),
        policy.as_str(),
        allowed.name.as_str(),
    ] {
        assert!(refused.contains(wanted), "{wanted:?} missing in: {refused}");
    }
    let refused = dry_run_create(&service_yaml(&checked.name, "h", host_ipc))
        .expect_err("hostIPC outside the allowed namespaces is refused");
    assert!(
        refused.contains("spec.hostIPC: vLLM pods in the host IPC namespace are not allowed"),
        "{refused}"
    );
    dry_run_create(&service_yaml(&checked.name, "plain", "")).expect("a plain service passes");
    dry_run_create(&service_yaml(
        &allowed.name,
        "both",
        &format!("{privileged}{host_ipc}"),
    ))
    .expect("privileged and hostIPC pass in an allowed namespace");

    let policies: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::erase::<
            k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
        >(&()),
    );
    // Type checking is done once the status has caught up with the spec.
    let status = testkit::wait_until(Duration::from_secs(30), "the policy's status", || async {
        let p = policies.get(&policy).await.unwrap();
        let status = p.data["status"].clone();
        (status["observedGeneration"].as_i64() == p.metadata.generation).then_some(status)
    })
    .await;
    assert_eq!(
        status["typeChecking"]["expressionWarnings"],
        serde_json::Value::Null,
        "the policy's expressions type-check against the CRD: {status}"
    );
}
