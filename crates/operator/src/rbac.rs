//! The operator's permissions, in one place: every Role and ClusterRole is
//! generated from [`CLUSTER_RULES`] and [`LEADER_ELECTION_RULES`]
//! (`vllmservice-operator rbac` prints them; the checked-in
//! `config/rbac/role.yaml`, `config/rbac/watch-namespace.yaml`,
//! `deploy/install.yaml` and the Helm chart are generated from that output).
//! Each rule names only the verbs the code sends; `crates/operator/tests/rbac.rs`
//! removes each verb in turn and shows a scenario that then gets a 403, and the
//! unit tests tie the group and resource names to the Rust types.
//!
//! Two ways to grant them:
//! - cluster-wide (all namespaces): a [`cluster_role`] of every rule, bound by
//!   a ClusterRoleBinding;
//! - some watched namespaces (`run --watch-namespace NS[,NS…]`): a [`role`]
//!   in each `NS` with the [`Scope::Namespaced`] rules, and a small ClusterRole
//!   ([`CRD_CLUSTER_ROLE_NAME`]) with the [`Scope::Cluster`] ones (CRDs are
//!   cluster-scoped); see [`watch_namespace`].
//!
//! Leader election always needs a [`role`] of [`LEADER_ELECTION_RULES`] in the
//! operator's own namespace; `run --gpu-accounting` (cluster-wide only) also
//! needs the ClusterRole of [`GPU_ACCOUNTING_RULES`].
//! Pure: data and its rendering as Role and ClusterRole objects.

use k8s_openapi::{
    api::rbac::v1::{
        ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The name of the ClusterRole (and, by convention, its binding and the
/// operator's ServiceAccount); in watch-namespace mode, of the Role in the
/// watched namespace.
pub const CLUSTER_ROLE_NAME: &str = "vllmservice-operator";

/// The name of the operator's ServiceAccount in the plain manifests.
pub const SERVICE_ACCOUNT_NAME: &str = "vllmservice-operator";

/// The name of the ClusterRole with only the cluster-scoped rules (CRDs and
/// the reviews of /metrics scrapers), used in watch-namespace mode.
pub const CRD_CLUSTER_ROLE_NAME: &str = "vllmservice-operator-crds";

/// The name of the Role for leader-election Leases in the operator's namespace.
pub const LEADER_ELECTION_ROLE_NAME: &str = "vllmservice-operator-leader-election";

/// The namespace the plain manifests install the operator into.
pub const DEFAULT_NAMESPACE: &str = "vllmservice-system";

/// Whether a rule's resources live in a namespace or in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

/// One RBAC rule: `verbs` on `resources` of API group `group` ("" = core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub group: &'static str,
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub scope: Scope,
    /// Why the operator needs it, verb by verb (shown in the generated YAML's header).
    pub why: &'static str,
}

/// Children the operator owns and deletes when a feature is switched off
/// (routes, monitors, rules, scaled objects): a list-type schema makes hand edits of their
/// lists revertible by server-side apply, so they never need a full replace.
const OWN_OPTIONAL: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];
/// The Deployment and Service: never deleted (garbage collection follows the
/// owner reference); a full replace when apply cannot remove a hand-added
/// duplicate list entry.
const OWN_CORE: &[&str] = &["get", "list", "watch", "create", "patch", "update"];
/// Watched into caches, never read one by one.
const WATCH: &[&str] = &["list", "watch"];

/// Every permission the operator's controller uses, cluster-wide or (with
/// `--watch-namespace`) the [`Scope::Namespaced`] ones in one namespace.
pub const CLUSTER_RULES: &[Rule] = &[
    Rule {
        group: "aiinfra.example.com",
        resources: &["vllmservices"],
        verbs: &["get", "list", "watch"],
        scope: Scope::Namespaced,
        why: "list/watch: the controller's cache; get: an object the typed cache cannot read, as raw JSON",
    },
    Rule {
        group: "aiinfra.example.com",
        resources: &["vllmservices/status"],
        verbs: &["patch"],
        scope: Scope::Namespaced,
        why: "conditions and phase (server-side apply; merge patch for an unreadable object)",
    },
    Rule {
        group: "apps",
        resources: &["deployments"],
        verbs: OWN_CORE,
        scope: Scope::Namespaced,
        why: "the vLLM Deployment: list/watch cache, create, patch (apply), update (replace after a 422), get (after a create answered AlreadyExists)",
    },
    Rule {
        group: "",
        resources: &["services"],
        verbs: OWN_CORE,
        scope: Scope::Namespaced,
        why: "the Service: list/watch cache, create, patch (apply), update (replace after a 422), get (after a create answered AlreadyExists)",
    },
    Rule {
        group: "gateway.networking.k8s.io",
        resources: &["httproutes"],
        verbs: OWN_OPTIONAL,
        scope: Scope::Namespaced,
        why: "the HTTPRoute for spec.gatewayRef: list/watch cache, create, patch (apply), get (after AlreadyExists), delete (gatewayRef removed)",
    },
    Rule {
        group: "monitoring.coreos.com",
        resources: &["servicemonitors", "prometheusrules"],
        verbs: OWN_OPTIONAL,
        scope: Scope::Namespaced,
        why: "the ServiceMonitor and PrometheusRule for spec.monitoring: as the HTTPRoute (delete: monitoring or alerts switched off)",
    },
    Rule {
        group: "keda.sh",
        resources: &["scaledobjects"],
        verbs: OWN_OPTIONAL,
        scope: Scope::Namespaced,
        why: "the KEDA ScaledObject for spec.autoscaling: as the HTTPRoute (delete: autoscaling removed)",
    },
    Rule {
        group: "autoscaling",
        resources: &["horizontalpodautoscalers"],
        verbs: WATCH,
        scope: Scope::Namespaced,
        why: "cache: the HorizontalPodAutoscalers KEDA makes (label scaledobject.keda.sh/name), whose ScalingLimited AutoscalingReady reports; never written",
    },
    Rule {
        group: "policy",
        resources: &["poddisruptionbudgets"],
        verbs: OWN_OPTIONAL,
        scope: Scope::Namespaced,
        why: "the PodDisruptionBudget when replicas > 1: as the HTTPRoute (delete: replicas down to 1 or spec.disruptionBudget.enabled false)",
    },
    Rule {
        group: "batch",
        resources: &["jobs"],
        verbs: OWN_OPTIONAL,
        scope: Scope::Namespaced,
        why: "the model download Jobs of spec.modelSource.huggingFace and loraAdapters: list/watch cache, create, get (after AlreadyExists), patch (an owner reference added or removed when services share a download), delete (a failed download run again, or one no longer needed)",
    },
    Rule {
        group: "",
        resources: &["pods", "persistentvolumeclaims"],
        verbs: WATCH,
        scope: Scope::Namespaced,
        why: "caches: diagnose pods (scheduling, image pulls, crashes; the operator's own pods, by label) and check spec.storage's PVC; with run --gpu-accounting, the GPUs every pod of the cluster holds",
    },
    Rule {
        group: "",
        resources: &["pods/log"],
        verbs: &["get"],
        scope: Scope::Namespaced,
        why: "the log of a vLLM container that failed, restarts or overran its startup budget (once per container instance), and of a Ready pod once per revision: why it did not start, what it runs with",
    },
    Rule {
        group: "gateway.networking.k8s.io",
        resources: &["gateways"],
        verbs: WATCH,
        scope: Scope::Namespaced,
        why: "cache: resolve spec.gatewayRef's Gateway and listener",
    },
    Rule {
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        verbs: WATCH,
        scope: Scope::Cluster,
        why: "whether the Gateway API, the Prometheus Operator and KEDA are installed (a list by name at start, a watch for their installation later)",
    },
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
        scope: Scope::Namespaced,
        why: "events (the recorder creates them and patches a repeated one's series)",
    },
    Rule {
        group: "authentication.k8s.io",
        resources: &["tokenreviews"],
        verbs: &["create"],
        scope: Scope::Cluster,
        why: "/metrics over HTTPS: who a scraper's bearer token belongs to",
    },
    Rule {
        group: "authorization.k8s.io",
        resources: &["subjectaccessreviews"],
        verbs: &["create"],
        scope: Scope::Cluster,
        why: "/metrics over HTTPS: whether that user may get /metrics",
    },
];

/// The name of the ClusterRole a scraper of the operator's `/metrics` needs
/// (bind it to your Prometheus' ServiceAccount).
pub const METRICS_READER_ROLE_NAME: &str = "vllmservice-operator-metrics-reader";

/// The ClusterRole that lets a scraper read the operator's `/metrics`.
pub fn metrics_reader_role() -> ClusterRole {
    ClusterRole {
        metadata: meta(METRICS_READER_ROLE_NAME, None),
        rules: Some(vec![PolicyRule {
            non_resource_urls: Some(vec![crate::runtime::metrics_auth::METRICS_PATH.to_string()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    }
}

/// What `run --gpu-accounting` adds to a cluster-wide grant: counting the free
/// GPUs of the cluster needs every node (and every namespace's pods, which the
/// cluster-wide [`CLUSTER_RULES`] already grant). Its own ClusterRole
/// ([`GPU_ACCOUNTING_ROLE_NAME`]), so that the default install holds no rule on nodes.
pub const GPU_ACCOUNTING_RULES: &[Rule] = &[Rule {
    group: "",
    resources: &["nodes"],
    verbs: WATCH,
    scope: Scope::Cluster,
    why: "cache: the nodes' allocatable GPUs, labels and taints, for rollout strategy Auto's choice before a rollout and the numbers of a blocked rollout (only with run --gpu-accounting)",
}];

/// The name of the ClusterRole of [`GPU_ACCOUNTING_RULES`] (and of its binding).
pub const GPU_ACCOUNTING_ROLE_NAME: &str = "vllmservice-operator-gpu-accounting";

/// The leader-election permissions, granted only in the operator's own namespace.
pub const LEADER_ELECTION_RULES: &[Rule] = &[Rule {
    group: "coordination.k8s.io",
    resources: &["leases"],
    verbs: &["get", "list", "watch", "create", "patch"],
    scope: Scope::Namespaced,
    why: "the leader Lease: get, create (when absent), patch (acquire, renew, release: kube-lease-manager), list/watch (a follower sees a release at once)",
}];

fn policy_rules<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Vec<PolicyRule> {
    rules
        .into_iter()
        .map(|r| PolicyRule {
            api_groups: Some(vec![r.group.to_string()]),
            resources: Some(r.resources.iter().map(|s| s.to_string()).collect()),
            verbs: r.verbs.iter().map(|s| s.to_string()).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

fn labels() -> std::collections::BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name", "vllmservice-operator"),
        ("app.kubernetes.io/component", "rbac"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels()),
        ..ObjectMeta::default()
    }
}

/// A ClusterRole named `name` with `rules` (tests grant subsets this way).
pub fn cluster_role<'a>(name: &str, rules: impl IntoIterator<Item = &'a Rule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None),
        rules: Some(policy_rules(rules)),
        ..ClusterRole::default()
    }
}

/// A Role named `name` in `namespace` with `rules`.
pub fn role<'a>(name: &str, namespace: &str, rules: impl IntoIterator<Item = &'a Rule>) -> Role {
    Role {
        metadata: meta(name, Some(namespace)),
        rules: Some(policy_rules(rules)),
    }
}

/// The ClusterRole that lets users read VLLMServices, aggregated into
/// Kubernetes' `view`, `edit` and `admin` roles.
pub const USER_VIEW_ROLE_NAME: &str = "vllmservice-operator-view";
/// The ClusterRole that lets users create and change VLLMServices,
/// aggregated into `edit` and `admin`.
pub const USER_EDIT_ROLE_NAME: &str = "vllmservice-operator-edit";

/// The ClusterRoles for people (not the operator): whoever holds Kubernetes'
/// `view` role in a namespace may read its VLLMServices, whoever holds `edit`
/// or `admin` may also create, change and delete them. The built-in roles pick
/// these up by their `aggregate-to-*` labels, so no binding is needed. The
/// status stays the operator's: `edit` changes the spec, never the status.
pub fn user_roles() -> [ClusterRole; 2] {
    let group = <vllmservice_api::VLLMService as kube::Resource>::group(&());
    let role = |name: &str, aggregate_to: &[&str], resources: &[&str], verbs: &[&str]| {
        let mut metadata = meta(name, None);
        let labels = metadata.labels.get_or_insert_with(Default::default);
        for to in aggregate_to {
            labels.insert(
                format!("rbac.authorization.k8s.io/aggregate-to-{to}"),
                "true".into(),
            );
        }
        ClusterRole {
            metadata,
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![group.to_string()]),
                resources: Some(resources.iter().map(|r| r.to_string()).collect()),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                ..PolicyRule::default()
            }]),
            ..ClusterRole::default()
        }
    };
    [
        role(
            USER_VIEW_ROLE_NAME,
            &["view", "edit", "admin"],
            &["vllmservices", "vllmservices/status"],
            &["get", "list", "watch"],
        ),
        role(
            USER_EDIT_ROLE_NAME,
            &["edit", "admin"],
            &["vllmservices"],
            &["create", "update", "patch", "delete", "deletecollection"],
        ),
    ]
}

/// The rules of `rules` whose grant has this `scope`.
pub fn scoped(rules: &[Rule], scope: Scope) -> impl Iterator<Item = &Rule> {
    rules.iter().filter(move |r| r.scope == scope)
}

fn subject(service_account: &str, namespace: &str) -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".into(),
        name: service_account.into(),
        namespace: Some(namespace.into()),
        ..Subject::default()
    }]
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
    }
}

/// A RoleBinding named `name` in `namespace` of the Role `role` to the
/// ServiceAccount `service_account` in `sa_namespace`.
pub fn role_binding(
    name: &str,
    namespace: &str,
    role: &str,
    service_account: &str,
    sa_namespace: &str,
) -> RoleBinding {
    RoleBinding {
        metadata: meta(name, Some(namespace)),
        role_ref: role_ref("Role", role),
        subjects: Some(subject(service_account, sa_namespace)),
    }
}

/// A ClusterRoleBinding named `name` of the ClusterRole `role` to the
/// ServiceAccount `service_account` in `sa_namespace`.
pub fn cluster_role_binding(
    name: &str,
    role: &str,
    service_account: &str,
    sa_namespace: &str,
) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name, None),
        role_ref: role_ref("ClusterRole", role),
        subjects: Some(subject(service_account, sa_namespace)),
    }
}

/// Everything the operator needs to run in `operator_namespace` with
/// `--watch-namespace NS[,NS…]` and leader election: no cluster-wide rights
/// but listing and watching CRDs and reviewing /metrics scrapers.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchNamespace {
    /// [`Scope::Cluster`] rules only.
    pub crd_role: ClusterRole,
    /// Binds `crd_role`; named `vllmservice-operator-crds-<operator namespace>`.
    pub crd_binding: ClusterRoleBinding,
    /// [`Scope::Namespaced`] rules, in each watched namespace, with its binding.
    pub roles: Vec<(Role, RoleBinding)>,
    /// Leases, in the operator's namespace.
    pub lease_role: Role,
    pub lease_binding: RoleBinding,
}

/// The RBAC of watch-namespace mode for the ServiceAccount
/// [`SERVICE_ACCOUNT_NAME`] in `operator_namespace`.
pub fn watch_namespace(operator_namespace: &str, watched: &[String]) -> WatchNamespace {
    let crd_binding_name = format!("{CRD_CLUSTER_ROLE_NAME}-{operator_namespace}");
    WatchNamespace {
        crd_role: cluster_role(CRD_CLUSTER_ROLE_NAME, scoped(CLUSTER_RULES, Scope::Cluster)),
        crd_binding: cluster_role_binding(
            &crd_binding_name,
            CRD_CLUSTER_ROLE_NAME,
            SERVICE_ACCOUNT_NAME,
            operator_namespace,
        ),
        roles: watched
            .iter()
            .map(|ns| {
                let r = role(
                    CLUSTER_ROLE_NAME,
                    ns,
                    scoped(CLUSTER_RULES, Scope::Namespaced),
                );
                let binding = role_binding(
                    CLUSTER_ROLE_NAME,
                    ns,
                    CLUSTER_ROLE_NAME,
                    SERVICE_ACCOUNT_NAME,
                    operator_namespace,
                );
                (r, binding)
            })
            .collect(),
        lease_role: role(
            LEADER_ELECTION_ROLE_NAME,
            operator_namespace,
            LEADER_ELECTION_RULES,
        ),
        lease_binding: role_binding(
            LEADER_ELECTION_ROLE_NAME,
            operator_namespace,
            LEADER_ELECTION_ROLE_NAME,
            SERVICE_ACCOUNT_NAME,
            operator_namespace,
        ),
    }
}

/// A comment block listing why each of `rules` is there, for the generated YAML.
pub fn rationale<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> String {
    rules
        .into_iter()
        .map(|r| {
            let group = if r.group.is_empty() { "core" } else { r.group };
            format!(
                "#   {group} {}: {} — {}\n",
                r.resources.join(", "),
                r.verbs.join(", "),
                r.why
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{
        apps::v1::Deployment,
        autoscaling::v2::HorizontalPodAutoscaler,
        coordination::v1::Lease,
        core::v1::{Node, PersistentVolumeClaim, Pod, Service},
        events::v1::Event,
        policy::v1::PodDisruptionBudget,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Resource;

    fn granted(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
        rules
            .iter()
            .any(|r| r.group == group && r.resources.contains(&resource) && r.verbs.contains(&verb))
    }

    /// Group and plural of a kube resource type, as RBAC names them.
    fn gr<K: Resource<DynamicType = ()>>() -> (String, String) {
        (K::group(&()).into_owned(), K::plural(&()).into_owned())
    }

    #[test]
    fn names_match_the_rust_types() {
        use crate::kinds::keda::ScaledObject;
        use crate::kinds::prometheus::{PrometheusRule, ServiceMonitor};
        use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
        use vllmservice_api::VLLMService;
        let cases = [
            (
                gr::<VLLMService>(),
                &["get", "list", "watch"][..],
                Scope::Namespaced,
            ),
            (gr::<Deployment>(), OWN_CORE, Scope::Namespaced),
            (gr::<Service>(), OWN_CORE, Scope::Namespaced),
            (gr::<HttpRoute>(), OWN_OPTIONAL, Scope::Namespaced),
            (gr::<ServiceMonitor>(), OWN_OPTIONAL, Scope::Namespaced),
            (gr::<PrometheusRule>(), OWN_OPTIONAL, Scope::Namespaced),
            (gr::<PodDisruptionBudget>(), OWN_OPTIONAL, Scope::Namespaced),
            (gr::<ScaledObject>(), OWN_OPTIONAL, Scope::Namespaced),
            (gr::<HorizontalPodAutoscaler>(), WATCH, Scope::Namespaced),
            (gr::<Pod>(), WATCH, Scope::Namespaced),
            (gr::<PersistentVolumeClaim>(), WATCH, Scope::Namespaced),
            (gr::<Gateway>(), WATCH, Scope::Namespaced),
            (gr::<CustomResourceDefinition>(), WATCH, Scope::Cluster),
            (gr::<Event>(), &["create", "patch"][..], Scope::Namespaced),
        ];
        for ((group, plural), verbs, scope) in cases {
            for verb in verbs {
                assert!(
                    granted(CLUSTER_RULES, &group, &plural, verb),
                    "{verb} {group}/{plural} is not granted"
                );
            }
            let rule = CLUSTER_RULES
                .iter()
                .find(|r| r.group == group && r.resources.contains(&plural.as_str()))
                .unwrap();
            assert_eq!(rule.scope, scope, "{group}/{plural}");
        }
        let (group, plural) = gr::<VLLMService>();
        assert!(granted(
            CLUSTER_RULES,
            &group,
            &format!("{plural}/status"),
            "patch"
        ));
        let (group, plural) = gr::<Pod>();
        assert!(granted(
            CLUSTER_RULES,
            &group,
            &format!("{plural}/log"),
            "get"
        ));
        let (group, plural) = gr::<Lease>();
        for verb in ["get", "create", "patch", "list", "watch"] {
            assert!(granted(LEADER_ELECTION_RULES, &group, &plural, verb));
        }
        let (group, plural) = gr::<Node>();
        for verb in WATCH {
            assert!(granted(GPU_ACCOUNTING_RULES, &group, &plural, verb));
            // The default install holds no rule on nodes.
            assert!(!granted(CLUSTER_RULES, &group, &plural, verb));
        }
    }

    #[test]
    fn least_privilege() {
        // Nothing may touch Leases cluster-wide, Secrets or RBAC; nothing watched
        // only may be read one by one or written; the status is only patched.
        for r in CLUSTER_RULES {
            assert!(!r.resources.iter().any(|x| x.contains('*')), "{r:?}");
            assert!(!r.verbs.contains(&"*") && !r.group.contains('*'), "{r:?}");
            for forbidden in ["leases", "secrets", "configmaps", "roles", "clusterroles"] {
                assert!(!r.resources.contains(&forbidden), "{r:?}");
            }
        }
        // Read one by one or written: what a watched-only resource must not be.
        const RW: &[&str] = &["get", "create", "patch", "update", "delete"];
        for (g, r, not) in [
            ("", "pods", RW),
            ("", "nodes", RW),
            ("policy", "poddisruptionbudgets", &["update"]),
            ("", "persistentvolumeclaims", RW),
            ("gateway.networking.k8s.io", "gateways", RW),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                &RW[1..],
            ),
            ("aiinfra.example.com", "vllmservices", &RW[1..]),
            (
                "aiinfra.example.com",
                "vllmservices/status",
                &["get", "update"],
            ),
            (
                "",
                "pods/log",
                &["list", "watch", "create", "patch", "update", "delete"],
            ),
            ("", "pods/exec", &["get", "create"]),
            ("", "pods/proxy", &["get", "create"]),
            ("apps", "deployments", &["delete"]),
            ("", "services", &["delete"]),
            ("gateway.networking.k8s.io", "httproutes", &["update"]),
            ("keda.sh", "scaledobjects", &["update"]),
            ("autoscaling", "horizontalpodautoscalers", RW),
            ("coordination.k8s.io", "leases", &["update", "delete"]),
        ] {
            for verb in not {
                assert!(!granted(CLUSTER_RULES, g, r, verb), "{verb} {g}/{r}");
                assert!(!granted(GPU_ACCOUNTING_RULES, g, r, verb), "{verb} {g}/{r}");
                assert!(
                    !granted(LEADER_ELECTION_RULES, g, r, verb),
                    "{verb} {g}/{r}"
                );
            }
        }
        let role = role(LEADER_ELECTION_ROLE_NAME, "ns", LEADER_ELECTION_RULES);
        assert_eq!(role.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn cluster_role_has_one_policy_rule_per_rule() {
        let role = cluster_role(CLUSTER_ROLE_NAME, CLUSTER_RULES);
        assert_eq!(role.metadata.name.as_deref(), Some(CLUSTER_ROLE_NAME));
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), CLUSTER_RULES.len());
        assert_eq!(
            rules[0].api_groups,
            Some(vec!["aiinfra.example.com".into()])
        );
        assert_eq!(rules[0].verbs, vec!["get", "list", "watch"]);
    }

    #[test]
    fn watch_namespace_mode_splits_the_rules_by_scope() {
        let w = watch_namespace("ops", &["team-a".into(), "team-b".into()]);
        let crd = w.crd_role.rules.unwrap();
        let cluster: Vec<_> = crd.iter().map(|r| r.resources.clone().unwrap()).collect();
        assert_eq!(
            cluster,
            [
                vec!["customresourcedefinitions".to_string()],
                vec!["tokenreviews".to_string()],
                vec!["subjectaccessreviews".to_string()]
            ]
        );
        let [(role_a, binding_a), (role_b, binding_b)] = &w.roles[..] else {
            panic!("a Role and RoleBinding in each namespace: {:?}", w.roles);
        };
        assert_eq!(role_a.rules, role_b.rules);
        let role = role_a.rules.clone().unwrap();
        // Less the cluster-scoped rules.
        assert_eq!(role.len(), CLUSTER_RULES.len() - 3);
        assert!(
            !role
                .iter()
                .any(|r| r.api_groups.as_deref() == Some(&["apiextensions.k8s.io".to_string()][..]))
        );
        assert_eq!(role_a.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(binding_a.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(role_b.metadata.namespace.as_deref(), Some("team-b"));
        assert_eq!(binding_b.metadata.namespace.as_deref(), Some("team-b"));
        assert_eq!(w.lease_role.metadata.namespace.as_deref(), Some("ops"));
        for subjects in [
            &w.crd_binding.subjects,
            &binding_a.subjects,
            &binding_b.subjects,
            &w.lease_binding.subjects,
        ] {
            let s = &subjects.as_ref().unwrap()[0];
            assert_eq!(
                (s.name.as_str(), s.namespace.as_deref()),
                (SERVICE_ACCOUNT_NAME, Some("ops"))
            );
        }
        assert_eq!(w.crd_binding.role_ref.name, CRD_CLUSTER_ROLE_NAME);
        assert_eq!(binding_b.role_ref.kind, "Role");
    }
}
