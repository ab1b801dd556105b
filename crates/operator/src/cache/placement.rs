//! Where the pods of a VLLMService may run and how many more fit there, from
//! the node and pod caches: the input of rollout strategy Auto (surge only
//! when a new pod fits beside the old ones) and of the numbers a blocked
//! rollout reports. Pure: node facts and per-node usage in, counts out.
//!
//! Only extended resources (nvidia.com/gpu, volcano.sh/vgpu-number, ...) are
//! counted: they are what a surge pod of an inference server waits for. A
//! node is one the pods may use when its labels satisfy `nodeSelector` and the
//! required node affinity, and the pods tolerate its NoSchedule and NoExecute
//! taints, as the scheduler decides.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Resource, api::ObjectMeta};
use kube_quantity::ParsedQuantity;
use serde::Deserialize;
use vllmservice_api::{VLLMServiceSpec, rules};

use super::pods::CachedPod;

/// What the GPU count reads of a node (its labels, taints, whether it is
/// cordoned and what it can allocate): the node watch parses nothing else,
/// e.g. not the image list a node's status carries.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "Node")]
pub struct NodeView {
    pub metadata: ObjectMeta,
    pub spec: Option<NodeViewSpec>,
    pub status: Option<NodeViewStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeViewSpec {
    pub taints: Option<Vec<Taint>>,
    pub unschedulable: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeViewStatus {
    pub allocatable: Option<BTreeMap<String, Quantity>>,
}

/// Amounts of extended resources, by name.
pub type Amounts = BTreeMap<String, i64>;

/// What placement needs to know of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    /// Allocatable extended resources.
    pub allocatable: Amounts,
}

impl NodeFacts {
    pub fn of(node: &NodeView) -> NodeFacts {
        let spec = node.spec.clone().unwrap_or_default();
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| {
                a.iter()
                    .filter(|(name, _)| rules::is_extended_resource(name))
                    .filter_map(|(name, q)| Some((name.clone(), integer(&q.0)?)))
                    .collect()
            })
            .unwrap_or_default();
        NodeFacts {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec.taints.unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            allocatable,
        }
    }
}

/// A quantity that is a whole number (GPUs are counted, never split). Counts far below 2^53, so
/// f64 holds them exactly.
fn integer(q: &str) -> Option<i64> {
    let value = ParsedQuantity::try_from(q).ok()?.to_bytes_f64()?;
    (value.fract() == 0.0 && value.abs() < 9e15).then_some(value as i64)
}

/// The extended resources one container asks for: its requests, or its
/// limits where no request is set (the API server defaults one to the other).
fn container_demand(resources: Option<&ResourceRequirements>) -> Amounts {
    let Some(r) = resources else {
        return Amounts::new();
    };
    let mut out = Amounts::new();
    for list in [&r.limits, &r.requests].into_iter().flatten() {
        for (name, q) in list {
            if rules::is_extended_resource(name)
                && let Some(n) = integer(&q.0)
            {
                // Requests (read second) win over limits.
                out.insert(name.clone(), n);
            }
        }
    }
    out
}

/// The extended resources a pod holds on its node, as the scheduler counts
/// them: the sum over its containers, or the largest init container's if larger.
pub fn pod_demand(pod: &CachedPod) -> Amounts {
    let Some(spec) = &pod.spec else {
        return Amounts::new();
    };
    let mut out = Amounts::new();
    for c in &spec.containers {
        for (name, n) in container_demand(c.resources.as_ref()) {
            *out.entry(name).or_default() += n;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (name, n) in container_demand(c.resources.as_ref()) {
            let e = out.entry(name).or_default();
            *e = (*e).max(n);
        }
    }
    out.retain(|_, n| *n > 0);
    out
}

/// The extended resources each pod of a VLLMService asks for.
pub fn spec_demand(spec: &VLLMServiceSpec) -> Amounts {
    let mut out = container_demand(spec.resources.as_ref());
    out.retain(|_, n| *n > 0);
    out
}

/// Where the pods of one VLLMService may run, and what is free there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// The extended resources one pod needs, e.g. nvidia.com/gpu: 1.
    pub per_pod: Amounts,
    /// How many nodes the pods may run on.
    pub nodes: usize,
    /// What is free of each resource on those nodes, in all.
    pub free: Amounts,
    /// How many more pods fit on those nodes now (each pod on one node).
    pub pods_that_fit: i64,
}

impl Capacity {
    /// Whether `pods` more pods fit now.
    pub fn fits(&self, pods: i64) -> bool {
        self.pods_that_fit >= pods
    }

    /// The resource that runs out first (the first one without a pod's worth free).
    pub fn scarce(&self) -> (&str, i64, i64) {
        let pick = self
            .per_pod
            .iter()
            .find(|(name, need)| self.free.get(*name).copied().unwrap_or(0) < **need)
            .or_else(|| self.per_pod.iter().next());
        match pick {
            Some((name, need)) => (
                name.as_str(),
                *need,
                self.free.get(name).copied().unwrap_or(0),
            ),
            None => ("", 0, 0),
        }
    }

    /// E.g. "a pod needs 1 nvidia.com/gpu; 0 are free on the 2 nodes its
    /// nodeSelector, tolerations and affinity allow".
    pub fn describe(&self) -> String {
        let (name, need, free) = self.scarce();
        let nodes = match self.nodes {
            1 => "the 1 node".to_string(),
            n => format!("the {n} nodes"),
        };
        let verb = if free == 1 { "is" } else { "are" };
        format!(
            "a pod needs {need} {name}; {free} {verb} free on {nodes} its nodeSelector, \
             tolerations and affinity allow"
        )
    }
}

/// The capacity for the pods of `spec` on `nodes`, given what pods already
/// hold on each node (`used`). None when the pods ask for no extended resource.
pub fn capacity<'a>(
    spec: &VLLMServiceSpec,
    nodes: impl IntoIterator<Item = &'a NodeFacts>,
    used: impl Fn(&str) -> Option<&'a Amounts>,
) -> Option<Capacity> {
    let per_pod = spec_demand(spec);
    if per_pod.is_empty() {
        return None;
    }
    let mut out = Capacity {
        per_pod: per_pod.clone(),
        nodes: 0,
        free: per_pod.keys().map(|k| (k.clone(), 0)).collect(),
        pods_that_fit: 0,
    };
    for node in nodes.into_iter().filter(|n| allows(spec, n)) {
        out.nodes += 1;
        let used = used(&node.name);
        let mut fit = i64::MAX;
        for (name, need) in &per_pod {
            let held = used.and_then(|u| u.get(name)).copied().unwrap_or(0);
            let free = (node.allocatable.get(name).copied().unwrap_or(0) - held).max(0);
            if let Some(total) = out.free.get_mut(name) {
                *total += free;
            }
            fit = fit.min(free / need);
        }
        out.pods_that_fit += fit;
    }
    Some(out)
}

/// Whether the pods of `spec` may run on `node`.
pub fn allows(spec: &VLLMServiceSpec, node: &NodeFacts) -> bool {
    if node.unschedulable {
        return false;
    }
    let selected = spec
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let tolerated = node
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| spec.tolerations.iter().any(|tol| tolerates(tol, t)));
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    let affine = match terms {
        None => true,
        Some(terms) => terms.iter().any(|t| term_matches(t, node)),
    };
    selected && tolerated && affine
}

/// Kubernetes' toleration matching.
fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    let effect = tol.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" => {
            key == taint.key
                && tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// A node selector term: every expression holds (a term with none matches no node).
fn term_matches(term: &NodeSelectorTerm, node: &NodeFacts) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|e| requirement_holds(e, node.labels.get(&e.key).map(String::as_str)))
        && fields.iter().all(|e| {
            let value = (e.key == "metadata.name").then_some(node.name.as_str());
            requirement_holds(e, value)
        })
}

fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (
            value.and_then(number),
            values.first().and_then(|x| number(x)),
        ) {
            (Some(v), Some(bound)) if r.operator == "Gt" => v > bound,
            (Some(v), Some(bound)) => v < bound,
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> VLLMServiceSpec {
        let mut base = json!({"image": "i", "modelPath": "/m", "modelName": "m",
            "storage": {"pvcName": "p", "mountPath": "/data"},
            "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}});
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn node(v: serde_json::Value) -> NodeFacts {
        NodeFacts::of(&serde_json::from_value(v).unwrap())
    }

    fn gpu_node(name: &str, gpus: &str, labels: serde_json::Value) -> NodeFacts {
        node(json!({"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "8"}}}))
    }

    #[test]
    fn counts_free_gpus_on_the_nodes_the_pods_may_use() {
        let nodes = [
            gpu_node("a", "2", json!({"pool": "gpu"})),
            gpu_node("b", "8", json!({"pool": "gpu"})),
            gpu_node("c", "8", json!({"pool": "cpu"})),
        ];
        let (two, seven, eight) = (
            Amounts::from([("nvidia.com/gpu".into(), 2)]),
            Amounts::from([("nvidia.com/gpu".into(), 7)]),
            Amounts::from([("nvidia.com/gpu".into(), 8)]),
        );
        let used = |n: &str| match n {
            "a" => Some(&two),
            "b" => Some(&seven),
            _ => None,
        };
        let s = spec(json!({"nodeSelector": {"pool": "gpu"}}));
        let c = capacity(&s, &nodes, used).unwrap();
        assert_eq!(c.nodes, 2);
        assert_eq!(c.free["nvidia.com/gpu"], 1);
        assert_eq!(c.pods_that_fit, 1);
        assert!(c.fits(1) && !c.fits(2));
        let full = capacity(&s, &nodes, |_| Some(&eight)).unwrap();
        assert!(!full.fits(1));
        assert_eq!(
            full.describe(),
            "a pod needs 1 nvidia.com/gpu; 0 are free on the 2 nodes its nodeSelector, \
             tolerations and affinity allow"
        );
    }

    #[test]
    fn a_pod_that_needs_two_gpus_does_not_fit_on_two_nodes_with_one_each() {
        let s = spec(json!({"resources": {"limits": {"nvidia.com/gpu": "2"}}}));
        let nodes = [gpu_node("a", "1", json!({})), gpu_node("b", "1", json!({}))];
        let c = capacity(&s, &nodes, |_| None).unwrap();
        assert_eq!(c.free["nvidia.com/gpu"], 2);
        assert_eq!(c.pods_that_fit, 0);
    }

    #[test]
    fn no_extended_resource_means_no_capacity_question() {
        let s = spec(json!({"resources": {"limits": {"memory": "1Gi"}}}));
        assert_eq!(capacity(&s, &[], |_| None), None);
    }

    #[test]
    fn taints_need_tolerations_and_unschedulable_nodes_are_skipped() {
        let tainted = node(json!({"metadata": {"name": "t"},
            "spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"},
                                {"key": "soft", "effect": "PreferNoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}));
        let cordoned = node(
            json!({"metadata": {"name": "c"}, "spec": {"unschedulable": true},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}),
        );
        assert!(!allows(&spec(json!({})), &tainted));
        let equal = spec(json!({"tolerations": [{"key": "gpu", "operator": "Equal",
            "value": "a100", "effect": "NoSchedule"}]}));
        assert!(allows(&equal, &tainted));
        let wrong_value = spec(json!({"tolerations": [{"key": "gpu", "value": "h100"}]}));
        assert!(!allows(&wrong_value, &tainted));
        let exists_all = spec(json!({"tolerations": [{"operator": "Exists"}]}));
        assert!(allows(&exists_all, &tainted));
        assert!(!allows(&exists_all, &cordoned));
    }

    #[test]
    fn required_node_affinity_is_honoured() {
        let n = gpu_node("n1", "1", json!({"gpu.type": "a100", "zone": "3"}));
        let aff = |terms: serde_json::Value| {
            spec(json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
        };
        assert!(allows(
            &aff(
                json!([{"matchExpressions": [{"key": "gpu.type", "operator": "In", "values": ["a100"]}]}])
            ),
            &n
        ));
        assert!(!allows(
            &aff(
                json!([{"matchExpressions": [{"key": "gpu.type", "operator": "NotIn", "values": ["a100"]}]}])
            ),
            &n
        ));
        // Terms are ORed.
        assert!(allows(
            &aff(
                json!([{"matchExpressions": [{"key": "x", "operator": "Exists"}]},
                        {"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["2"]}]}])
            ),
            &n
        ));
        assert!(allows(
            &aff(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
            ),
            &n
        ));
        assert!(
            !allows(&aff(json!([{}])), &n),
            "an empty term matches no node"
        );
    }

    #[test]
    fn pod_demand_sums_containers_and_takes_the_larger_init_container() {
        let p: CachedPod = serde_json::from_value(json!({"metadata": {}, "spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}},
                {"name": "c", "resources": {"limits": {"cpu": "1"}}}],
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}))
        .unwrap();
        assert_eq!(
            pod_demand(&p),
            Amounts::from([("nvidia.com/gpu".into(), 4)])
        );
    }
}
