//! Proves the local control plane is a real one: the scheduler places GPU
//! pods on kwok's fake GPU nodes, the garbage collector follows owner
//! references, RBAC is enforced, and the PV binder binds claims.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;
use testkit::{TestNamespace, client, client_for, service_account_kubeconfig, wait_until};

const WAIT: Duration = Duration::from_secs(60);

fn gpu_pod_template(name: &str, gpus: u32) -> serde_json::Value {
    json!({
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{
            "name": "main", "image": "registry.invalid/gpu:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
        }]}
    })
}

#[tokio::test]
async fn gpu_pod_is_scheduled_on_a_fake_gpu_node_and_becomes_ready() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-gpu").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "one-gpu"}},
                 "template": gpu_pod_template("one-gpu", 1)}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod = wait_until(WAIT, "a Ready pod of the one-gpu Deployment", || async {
        let list = pods
            .list(&ListParams::default().labels("app=one-gpu"))
            .await
            .ok()?;
        list.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;
    let node = pod.spec.and_then(|s| s.node_name).expect("scheduled");
    assert!(node.starts_with("gpu-node-"), "scheduled onto {node}");
    let ready = wait_until(WAIT, "Deployment one-gpu availableReplicas=1", || async {
        let d = deployments.get("one-gpu").await.ok()?;
        (d.status?.available_replicas? == 1).then_some(true)
    })
    .await;
    assert!(ready);
}

#[tokio::test]
async fn pod_wanting_more_gpus_than_any_node_has_stays_pending_with_scheduler_reason() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-nogpu").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut p: Pod = serde_json::from_value(gpu_pod_template("greedy", 9)).unwrap();
    p.metadata.name = Some("greedy".into());
    pods.create(&PostParams::default(), &p).await.unwrap();

    let message = wait_until(WAIT, "PodScheduled=False on pod greedy", || async {
        let p = pods.get("greedy").await.ok()?;
        let c = p
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled")?;
        (c.status == "False" && c.reason.as_deref() == Some("Unschedulable")).then_some(c.message?)
    })
    .await;
    assert!(
        message.contains("Insufficient nvidia.com/gpu"),
        "scheduler said: {message}"
    );
    let p = pods.get("greedy").await.unwrap();
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
}

#[tokio::test]
async fn dependents_are_garbage_collected_after_their_owner_is_deleted() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = cms.create(&PostParams::default(), &owner).await.unwrap();
    let dependent: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner.uid().unwrap(), "controller": true}]
    }}))
    .unwrap();
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    wait_until(
        WAIT,
        "the garbage collector to delete ConfigMap dependent",
        || async { cms.get_opt("dependent").await.ok()?.is_none().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn rbac_refuses_a_service_account_until_a_role_binding_grants_it() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-rbac").await;
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let sa_client = client_for(&service_account_kubeconfig(&ns.name, "reader")).await;
    let as_reader: Api<ConfigMap> = Api::namespaced(sa_client, &ns.name);

    match as_reader.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("expected 403 Forbidden before the RoleBinding, got {other:?}"),
    }

    testkit::kubectl_ok(&[
        "-n",
        &ns.name,
        "create",
        "role",
        "read-cm",
        "--verb=list",
        "--resource=configmaps",
    ]);
    testkit::kubectl_ok(&[
        "-n",
        &ns.name,
        "create",
        "rolebinding",
        "read-cm",
        "--role=read-cm",
        &format!("--serviceaccount={}:reader", ns.name),
    ]);
    wait_until(WAIT, "the RoleBinding to take effect", || async {
        as_reader.list(&ListParams::default()).await.ok()
    })
    .await;
}

#[tokio::test]
async fn claim_binds_to_a_matching_static_volume() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-pv").await;
    let pv_name = format!("{}-models", ns.name);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                 "storageClassName": "static-models", "hostPath": {"path": "/data/models"},
                 "claimRef": {"namespace": ns.name, "name": "models"}}
    }))
    .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(&PostParams::default(), &pv).await.unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "models"},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                 "resources": {"requests": {"storage": "5Gi"}}}
    }))
    .unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    pvcs.create(&PostParams::default(), &pvc).await.unwrap();

    let volume = wait_until(WAIT, "PVC models to be Bound", || async {
        let c = pvcs.get("models").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c.spec?.volume_name?)
    })
    .await;
    assert_eq!(volume, pv_name);
    pvs.delete(&pv_name, &DeleteParams::default())
        .await
        .unwrap();
}
