//! The operator's permissions, in one place: the ClusterRole and the
//! leader-election Role are generated from [`CLUSTER_RULES`] and
//! [`LEADER_ELECTION_RULES`] (`vllmservice-operator rbac` prints them; the
//! checked-in `config/rbac/role.yaml`, `deploy/install.yaml` and the Helm
//! chart are generated from that output). Each rule names only what the code
//! calls; the unit tests tie the group and resource names to the Rust types.

use k8s_openapi::{
    api::rbac::v1::{ClusterRole, PolicyRule, Role},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The name of the ClusterRole (and, by convention, its binding and the
/// operator's ServiceAccount).
pub const CLUSTER_ROLE_NAME: &str = "vllmservice-operator";

/// The name of the Role for leader-election Leases in the operator's namespace.
pub const LEADER_ELECTION_ROLE_NAME: &str = "vllmservice-operator-leader-election";

/// The namespace the plain manifests install the operator into.
pub const DEFAULT_NAMESPACE: &str = "vllmservice-system";

/// One RBAC rule: `verbs` on `resources` of API group `group` ("" = core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub group: &'static str,
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// Why the operator needs it (shown in the generated YAML's header).
    pub why: &'static str,
}

const READ: &[&str] = &["get", "list", "watch"];
/// Children the operator owns: read, watch, server-side apply (patch), and
/// delete when a feature is switched off.
const OWN: &[&str] = &[
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// Every cluster-wide permission the operator uses.
pub const CLUSTER_RULES: &[Rule] = &[
    Rule {
        group: "aiinfra.example.com",
        resources: &["vllmservices"],
        verbs: READ,
        why: "watch VLLMServices (the controller's primary resource)",
    },
    Rule {
        group: "aiinfra.example.com",
        resources: &["vllmservices/status"],
        verbs: &["get", "patch", "update"],
        why: "write conditions and phase through the status subresource",
    },
    Rule {
        group: "apps",
        resources: &["deployments"],
        verbs: OWN,
        why: "the vLLM Deployment of each VLLMService",
    },
    Rule {
        group: "",
        resources: &["services"],
        verbs: OWN,
        why: "the Service in front of each VLLMService",
    },
    Rule {
        group: "gateway.networking.k8s.io",
        resources: &["httproutes"],
        verbs: OWN,
        why: "the HTTPRoute made for spec.gatewayRef",
    },
    Rule {
        group: "monitoring.coreos.com",
        resources: &["servicemonitors", "prometheusrules"],
        verbs: OWN,
        why: "the ServiceMonitor and PrometheusRule made for spec.monitoring",
    },
    Rule {
        group: "",
        resources: &["pods", "persistentvolumeclaims"],
        verbs: READ,
        why: "diagnose pods (scheduling, image pulls, crashes) and check spec.storage's PVC",
    },
    Rule {
        group: "gateway.networking.k8s.io",
        resources: &["gateways"],
        verbs: READ,
        why: "resolve spec.gatewayRef's Gateway and listener",
    },
    Rule {
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        verbs: READ,
        why: "detect whether the Gateway API and Prometheus Operator CRDs are installed",
    },
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
        why: "publish events (kube's Recorder creates them and patches repeated ones)",
    },
];

/// The leader-election permissions, granted only in the operator's own namespace.
pub const LEADER_ELECTION_RULES: &[Rule] = &[Rule {
    group: "coordination.k8s.io",
    resources: &["leases"],
    verbs: &["get", "list", "watch", "create", "update", "patch"],
    why: "hold the leader-election Lease",
}];

fn policy_rules(rules: &[Rule]) -> Vec<PolicyRule> {
    rules
        .iter()
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

/// The ClusterRole `vllmservice-operator` with [`CLUSTER_RULES`].
pub fn cluster_role() -> ClusterRole {
    cluster_role_from(CLUSTER_ROLE_NAME, CLUSTER_RULES)
}

/// A ClusterRole named `name` with `rules` (tests use it to grant a subset).
pub fn cluster_role_from(name: &str, rules: &[Rule]) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels()),
            ..ObjectMeta::default()
        },
        rules: Some(policy_rules(rules)),
        ..ClusterRole::default()
    }
}

/// The Role for leader-election Leases in `namespace` (the operator's own).
pub fn leader_election_role(namespace: &str) -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(LEADER_ELECTION_ROLE_NAME.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels()),
            ..ObjectMeta::default()
        },
        rules: Some(policy_rules(LEADER_ELECTION_RULES)),
    }
}

/// A comment block listing why each rule is there, for the generated YAML.
pub fn rationale() -> String {
    CLUSTER_RULES
        .iter()
        .chain(LEADER_ELECTION_RULES)
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
        coordination::v1::Lease,
        core::v1::{PersistentVolumeClaim, Pod, Service},
        events::v1::Event,
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
        use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
        use vllmservice_api::VLLMService;
        let cases = [
            (gr::<VLLMService>(), READ),
            (gr::<Deployment>(), OWN),
            (gr::<Service>(), OWN),
            (gr::<HttpRoute>(), OWN),
            (gr::<Pod>(), READ),
            (gr::<PersistentVolumeClaim>(), READ),
            (gr::<Gateway>(), READ),
            (gr::<CustomResourceDefinition>(), READ),
            (gr::<Event>(), &["create", "patch"][..]),
        ];
        for ((group, plural), verbs) in cases {
            for verb in verbs {
                assert!(
                    granted(CLUSTER_RULES, &group, &plural, verb),
                    "{verb} {group}/{plural} is not granted"
                );
            }
        }
        let (group, plural) = gr::<VLLMService>();
        assert!(granted(
            CLUSTER_RULES,
            &group,
            &format!("{plural}/status"),
            "patch"
        ));
        let (group, plural) = gr::<Lease>();
        assert!(granted(LEADER_ELECTION_RULES, &group, &plural, "update"));
    }

    #[test]
    fn least_privilege() {
        // Nothing cluster-wide may touch Leases, Secrets or RBAC, and nothing
        // read-only may be written.
        for r in CLUSTER_RULES {
            assert!(!r.resources.iter().any(|x| x.contains('*')), "{r:?}");
            assert!(!r.verbs.contains(&"*") && !r.group.contains('*'), "{r:?}");
            for forbidden in ["leases", "secrets", "configmaps", "roles", "clusterroles"] {
                assert!(!r.resources.contains(&forbidden), "{r:?}");
            }
        }
        for (g, r) in [
            ("", "pods"),
            ("", "persistentvolumeclaims"),
            ("gateway.networking.k8s.io", "gateways"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("aiinfra.example.com", "vllmservices"),
        ] {
            for verb in ["create", "patch", "update", "delete"] {
                assert!(!granted(CLUSTER_RULES, g, r, verb), "{verb} {g}/{r}");
            }
        }
        let role = leader_election_role("ns");
        assert_eq!(role.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn cluster_role_has_one_policy_rule_per_rule() {
        let role = cluster_role();
        assert_eq!(role.metadata.name.as_deref(), Some(CLUSTER_ROLE_NAME));
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), CLUSTER_RULES.len());
        assert_eq!(
            rules[0].api_groups,
            Some(vec!["aiinfra.example.com".into()])
        );
        assert_eq!(rules[0].verbs, vec!["get", "list", "watch"]);
    }
}
