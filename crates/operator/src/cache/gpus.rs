//! The free-GPU count: the nodes and the extended resources every pod holds
//! on each, kept up to date by the node watch and the watch of all pods, so
//! that a reconcile can ask how many more pods of a VLLMService fit without
//! listing anything. No I/O.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use kube::{ResourceExt, runtime::watcher};

use super::{
    placement::{self, Amounts, Capacity, NodeFacts, NodeView},
    pods::CachedPod,
    relist,
};

/// The nodes and what every pod holds on them.
#[derive(Clone, Default)]
pub struct Placement(Arc<RwLock<PlacementState>>);

#[derive(Default)]
struct PlacementState {
    nodes: HashMap<String, NodeFacts>,
    nodes_relisting: Option<HashMap<String, NodeFacts>>,
    nodes_synced: bool,
    /// Per pod with a node and extended resources: its node and amounts.
    pods: HashMap<(String, String), (String, Amounts)>,
    pods_relisting: Option<HashMap<(String, String), (String, Amounts)>>,
    pods_synced: bool,
    /// The sums of `pods` per node.
    used: HashMap<String, Amounts>,
}

/// A pod's key and what it holds on its node, if anything: a finished pod
/// (Succeeded, Failed) holds nothing.
fn holding(pod: &CachedPod) -> Option<((String, String), (String, Amounts))> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let demand = placement::pod_demand(pod);
    let key = (pod.namespace()?, pod.name_any());
    (!demand.is_empty()).then_some((key, (node, demand)))
}

fn sum_by_node(pods: &HashMap<(String, String), (String, Amounts)>) -> HashMap<String, Amounts> {
    let mut used: HashMap<String, Amounts> = HashMap::new();
    for (node, amounts) in pods.values() {
        let total = used.entry(node.clone()).or_default();
        for (name, n) in amounts {
            *total.entry(name.clone()).or_default() += n;
        }
    }
    used
}

impl PlacementState {
    fn set_pod(&mut self, key: (String, String), held: Option<(String, Amounts)>) {
        let adjust = |used: &mut HashMap<String, Amounts>,
                      (node, amounts): &(String, Amounts),
                      sign: i64| {
            let total = used.entry(node.clone()).or_default();
            for (name, n) in amounts {
                *total.entry(name.clone()).or_default() += sign * n;
            }
            total.retain(|_, n| *n != 0);
            if total.is_empty() {
                used.remove(node);
            }
        };
        if let Some(old) = self.pods.remove(&key) {
            adjust(&mut self.used, &old, -1);
        }
        if let Some(new) = held {
            adjust(&mut self.used, &new, 1);
            self.pods.insert(key, new);
        }
    }
}

impl Placement {
    /// Applies one event of the node watch.
    pub fn saw_node(&self, event: &Result<watcher::Event<NodeView>, watcher::Error>) {
        let Ok(event) = event else { return };
        let mut s = self.0.write().expect("placement lock");
        match event {
            watcher::Event::Apply(n) => {
                s.nodes.insert(n.name_any(), NodeFacts::of(n));
            }
            watcher::Event::Delete(n) => {
                s.nodes.remove(&n.name_any());
            }
            watcher::Event::Init => s.nodes_relisting = Some(HashMap::new()),
            watcher::Event::InitApply(n) => {
                relist(&mut s.nodes_relisting).insert(n.name_any(), NodeFacts::of(n));
            }
            watcher::Event::InitDone => {
                s.nodes = s.nodes_relisting.take().unwrap_or_default();
                s.nodes_synced = true;
            }
        }
    }

    /// Applies one event of the watch of all pods.
    pub fn saw_pod(&self, event: &Result<watcher::Event<CachedPod>, watcher::Error>) {
        let Ok(event) = event else { return };
        let mut s = self.0.write().expect("placement lock");
        let key = |p: &CachedPod| (p.namespace().unwrap_or_default(), p.name_any());
        match event {
            watcher::Event::Apply(p) => {
                let held = holding(p).map(|(_, h)| h);
                s.set_pod(key(p), held);
            }
            watcher::Event::Delete(p) => s.set_pod(key(p), None),
            watcher::Event::Init => s.pods_relisting = Some(HashMap::new()),
            watcher::Event::InitApply(p) => {
                let next = relist(&mut s.pods_relisting);
                if let Some((k, h)) = holding(p) {
                    next.insert(k, h);
                }
            }
            watcher::Event::InitDone => {
                let next = s.pods_relisting.take().unwrap_or_default();
                s.used = sum_by_node(&next);
                s.pods = next;
                s.pods_synced = true;
            }
        }
    }

    /// Where the pods of `spec` may run and how many more fit; None until both
    /// watches have listed, or when the pods ask for no extended resource.
    pub fn capacity(&self, spec: &vllmservice_api::VLLMServiceSpec) -> Option<Capacity> {
        let s = self.0.read().expect("placement lock");
        if !(s.nodes_synced && s.pods_synced) {
            return None;
        }
        placement::capacity(spec, s.nodes.values(), |node| s.used.get(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gpu_pod(phase: &str) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase}}))
        .unwrap()
    }

    #[test]
    fn a_finished_pod_holds_nothing_on_its_node() {
        assert!(holding(&gpu_pod("Running")).is_some());
        assert!(holding(&gpu_pod("Pending")).is_some());
        assert!(holding(&gpu_pod("Succeeded")).is_none());
        assert!(holding(&gpu_pod("Failed")).is_none());
        let placement = Placement::default();
        placement.saw_pod(&Ok(watcher::Event::InitApply(gpu_pod("Running"))));
        placement.saw_pod(&Ok(watcher::Event::InitDone));
        let held = |p: &Placement| p.0.read().unwrap().used.get("n1").cloned();
        assert_eq!(held(&placement).unwrap()["nvidia.com/gpu"], 1);
        placement.saw_pod(&Ok(watcher::Event::Apply(gpu_pod("Succeeded"))));
        assert_eq!(held(&placement), None);
    }

    #[test]
    fn a_streamed_node_list_without_init_is_kept() {
        let placement = Placement::default();
        let node: NodeView = serde_json::from_value(json!({"metadata": {"name": "n1"},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}))
        .unwrap();
        placement.saw_node(&Ok(watcher::Event::InitApply(node)));
        placement.saw_node(&Ok(watcher::Event::InitDone));
        let s = placement.0.read().unwrap();
        assert!(s.nodes_synced);
        assert_eq!(s.nodes.len(), 1, "the streamed node is kept");
    }

    #[test]
    fn a_nodes_facts_come_from_its_projection() {
        let node: NodeView = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"gpu": "a100"}, "annotations": {"a": "b"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                     "unschedulable": true, "podCIDR": "198.18.0.0/24"},
            "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"},
                       "nodeInfo": {"kubeletVersion": "v1.36.0"}}}))
        .unwrap();
        let facts = NodeFacts::of(&node);
        assert_eq!(facts.labels["gpu"], "a100");
        assert!(facts.unschedulable);
        assert_eq!(facts.taints.len(), 1);
        assert_eq!(facts.allocatable["nvidia.com/gpu"], 4);
        assert!(
            !facts.allocatable.contains_key("cpu"),
            "only extended resources"
        );
    }
}
