//! The offline commands' output: the CRD (`crd`), the RBAC (`rbac`) and the
//! objects for a VLLMService (`render`), each built as YAML text from the
//! operator's library, so that what is printed is what `run` applies.
//!
//! I/O: `render` reads its manifest (a file, or stdin for `-`); nothing here
//! talks to a cluster or writes: `dispatch` in main.rs prints the text.

use anyhow::Context as _;

/// The VLLMService CustomResourceDefinition.
pub fn crd_yaml() -> String {
    vllmservice_api::crd_yaml()
}

/// The ClusterRole and the leader-election Role, as checked in at `config/rbac/role.yaml`.
pub fn rbac_yaml(namespace: &str) -> anyhow::Result<String> {
    use vllmservice_controller::rbac;
    let cluster_role = serde_saphyr::to_string(&rbac::cluster_role(
        rbac::CLUSTER_ROLE_NAME,
        rbac::CLUSTER_RULES,
    ))?;
    let role = serde_saphyr::to_string(&rbac::role(
        rbac::LEADER_ELECTION_ROLE_NAME,
        namespace,
        rbac::LEADER_ELECTION_RULES,
    ))?;
    let reader = serde_saphyr::to_string(&rbac::metrics_reader_role())?;
    Ok(format!(
        "# Generated from crates/operator/src/rbac.rs by vllmservice-operator; do not edit.\n\
         # Regenerate with: cargo run -p vllmservice-operator -- rbac > config/rbac/role.yaml\n\
         # The last ClusterRole is for scrapers of the operator's /metrics (HTTPS, bearer token):\n\
         # bind it to your Prometheus' ServiceAccount.\n\
         # What each rule is for:\n{}{cluster_role}---\n{role}---\n{reader}",
        rbac::rationale(
            rbac::CLUSTER_RULES
                .iter()
                .chain(rbac::LEADER_ELECTION_RULES)
        )
    ))
}

/// The ClusterRole and binding that `run --gpu-accounting` adds, as checked in
/// at `config/rbac/gpu-accounting.yaml`.
pub fn gpu_accounting_rbac_yaml(namespace: &str) -> anyhow::Result<String> {
    use vllmservice_controller::rbac;
    let name = rbac::GPU_ACCOUNTING_ROLE_NAME;
    let role = serde_saphyr::to_string(&rbac::cluster_role(name, rbac::GPU_ACCOUNTING_RULES))?;
    let binding = serde_saphyr::to_string(&rbac::cluster_role_binding(
        name,
        name,
        rbac::SERVICE_ACCOUNT_NAME,
        namespace,
    ))?;
    Ok(format!(
        "# Generated from crates/operator/src/rbac.rs by vllmservice-operator; do not edit.\n\
         # Regenerate with: cargo run -p vllmservice-operator -- rbac --gpu-accounting > config/rbac/gpu-accounting.yaml\n\
         # Only for `vllmservice-operator run --gpu-accounting` (cluster-wide): the free-GPU count\n\
         # watches every node. Apply it next to deploy/install.yaml and set the operator's\n\
         # VLLM_OPERATOR_GPU_ACCOUNTING=true, or set gpuAccounting=true in the Helm chart.\n\
         # What each rule is for:\n{}{role}---\n{binding}",
        rbac::rationale(rbac::GPU_ACCOUNTING_RULES)
    ))
}

/// The ClusterRoles for people, as checked in at `config/rbac/user-roles.yaml`.
pub fn user_roles_yaml() -> anyhow::Result<String> {
    use vllmservice_controller::rbac;
    let docs = rbac::user_roles()
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!(
        "# Generated from crates/operator/src/rbac.rs by vllmservice-operator; do not edit.\n\
         # Regenerate with: cargo run -p vllmservice-operator -- rbac --user-roles > config/rbac/user-roles.yaml\n\
         # For people, not the operator: Kubernetes' view role (in a namespace) reads VLLMServices,\n\
         # edit and admin also create, change and delete them (never their status).\n{}",
        docs.join("---\n")
    ))
}

/// Every RBAC object of watch-namespace mode, as checked in (for the example
/// namespaces) at `config/rbac/watch-namespace.yaml`.
pub fn watch_namespace_rbac_yaml(namespace: &str, watched: &[String]) -> anyhow::Result<String> {
    use vllmservice_controller::rbac;
    let w = rbac::watch_namespace(namespace, watched);
    let mut docs = vec![
        serde_saphyr::to_string(&w.crd_role)?,
        serde_saphyr::to_string(&w.crd_binding)?,
    ];
    for (role, binding) in &w.roles {
        docs.push(serde_saphyr::to_string(role)?);
        docs.push(serde_saphyr::to_string(binding)?);
    }
    docs.push(serde_saphyr::to_string(&w.lease_role)?);
    docs.push(serde_saphyr::to_string(&w.lease_binding)?);
    let list = watched.join(",");
    Ok(format!(
        "# Generated from crates/operator/src/rbac.rs by vllmservice-operator; do not edit.\n\
         # The RBAC of `vllmservice-operator run --watch-namespace {list}` with its ServiceAccount\n\
         # {sa} in namespace {namespace}: the operator's rights in {list} only (a Role and\n\
         # RoleBinding in each), list/watch of CRDs cluster-wide, Leases in {namespace}.\n\
         # Instead of deploy/install.yaml's cluster-wide RBAC:\n\
         #   kubectl apply -f deploy/install.yaml\n\
         #   vllmservice-operator rbac --namespace {namespace} --watch-namespace {list} | kubectl apply -f -\n\
         #   kubectl delete clusterrolebinding,clusterrole {cluster_role}\n\
         #   kubectl -n {namespace} set env deployment/vllmservice-operator VLLM_OPERATOR_NAMESPACE={list}\n\
         # (the Helm chart does the same with --set watchNamespaces={{{list}}}).\n\
         # What each rule is for:\n{}{}",
        rbac::rationale(
            rbac::CLUSTER_RULES
                .iter()
                .chain(rbac::LEADER_ELECTION_RULES)
        ),
        docs.join("---\n"),
        sa = rbac::SERVICE_ACCOUNT_NAME,
        cluster_role = rbac::CLUSTER_ROLE_NAME,
    ))
}

/// The objects for one VLLMService manifest, as a multi-document YAML stream.
pub fn render(
    file: &std::path::Path,
    namespace: &str,
    defaults: &vllmservice_controller::reconcile::build::Defaults,
) -> anyhow::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let stdin = file.as_os_str() == "-";
    let source = if stdin {
        "<stdin>".into()
    } else {
        file.display().to_string()
    };
    if stdin {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    }
    let mut vs: vllmservice_api::VLLMService = serde_saphyr::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{source} is not a valid VLLMService: {e}"))?;
    vs.metadata
        .namespace
        .get_or_insert_with(|| namespace.to_string());
    // The owner reference needs the UID the API server assigns; without one, say so.
    let unknown_uid = vs.metadata.uid.is_none();
    vs.metadata.uid.get_or_insert_with(String::new);
    let valid = vllmservice_api::validate(&vs).map_err(|invalid| {
        let lines: Vec<String> = invalid
            .errors
            .iter()
            .map(|e| format!("  {}: {}", e.field, e.message))
            .collect();
        anyhow::anyhow!("{source} is invalid:\n{}", lines.join("\n"))
    })?;
    let mut out = String::new();
    if unknown_uid {
        out.push_str(
            "# ownerReferences[].uid is left empty: the API server assigns the VLLMService's UID.\n",
        );
    }
    for object in vllmservice_controller::reconcile::build::objects(&valid, defaults) {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object)?);
    }
    Ok(out)
}
