//! What the real-node figures (bench-rollout, bench-autoscaling) share: a
//! namespace of the run's own with model claims bound to hostPath volumes of
//! the fake model, removed again when the run's [`Cleanup`] is dropped.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ServiceAccount,
};
use kube::{
    Api, Client,
    api::{ApiResource, GroupVersionKind, PostParams},
};
use serde_json::json;

pub const MODEL: &str = "qwen-sim";
pub const MOUNT: &str = "/data/models";

/// The VLLMService resource, for untyped access.
pub fn vllm() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("aiinfra.example.com", "v1alpha1", "VLLMService"),
        "vllmservices",
    )
}

/// Deletes the namespace and the PersistentVolumes of a run when dropped.
pub struct Cleanup {
    kubeconfig: PathBuf,
    pub ns: String,
    pvs: Vec<String>,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let kubectl = |args: &[&str]| {
            let _ = std::process::Command::new("kubectl")
                .env("KUBECONFIG", &self.kubeconfig)
                .args(args)
                .output();
        };
        kubectl(&["delete", "namespace", &self.ns, "--wait=false"]);
        for pv in &self.pvs {
            kubectl(&["delete", "pv", pv, "--wait=false"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh namespace `<prefix>-<random>` with `claims` bound PVCs `models-<i>`
/// (ReadOnlyMany, hostPath copies of the fake model at `<MOUNT>/<MODEL>`).
pub async fn namespace_with_models(
    client: &Client,
    kubeconfig: &Path,
    repo: &Path,
    prefix: &str,
    claims: usize,
) -> anyhow::Result<Cleanup> {
    let ns = format!("{prefix}-{}", testkit::random_suffix());
    let dir = repo.join("target/real-node-models").join(&ns);
    let mut cleanup = Cleanup {
        kubeconfig: kubeconfig.to_path_buf(),
        ns: ns.clone(),
        pvs: Vec::new(),
        dir: dir.clone(),
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    while sa.get_opt("default").await?.is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    testkit::fake_model_dir(&dir, MODEL);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    for i in 0..claims {
        let pv_name = format!("{ns}-models-{i}");
        pvs.create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": pv_name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                     "storageClassName": "static-models", "hostPath": {"path": dir.to_str().unwrap()},
                     "persistentVolumeReclaimPolicy": "Retain",
                     "claimRef": {"namespace": ns, "name": format!("models-{i}")}}
        }))?)
        .await?;
        cleanup.pvs.push(pv_name);
        pvcs.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("models-{i}")},
                "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                         "resources": {"requests": {"storage": "1Gi"}}}
            }))?,
        )
        .await?;
    }
    Ok(cleanup)
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The machine line of a figure.
pub fn machine() -> String {
    let m = crate::procfs::Machine::read();
    format!(
        "{} cores ({}), {} GiB, kernel {}, load average at start {}",
        m.cores, m.cpu_model, m.mem_total_gib, m.kernel, m.loadavg_at_start
    )
}

/// A figure's start: run from the repository root (returned) with the operator
/// binary built, `out_dir` made, and a client for the cluster of `kubeconfig`.
pub async fn prepare(
    operator_bin: &Path,
    kubeconfig: &Path,
    out_dir: &Path,
) -> anyhow::Result<(PathBuf, Client)> {
    use anyhow::Context as _;
    let repo = std::env::current_dir()?;
    anyhow::ensure!(
        repo.join("hack/cluster/cluster.sh").exists(),
        "run from the repository root"
    );
    anyhow::ensure!(
        repo.join(operator_bin).exists(),
        "{operator_bin:?} is missing"
    );
    std::fs::create_dir_all(out_dir)?;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {kubeconfig:?}"))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok((repo, Client::try_from(config)?))
}

/// Appends a figure's section to the markdown file and prints it.
pub fn append_markdown(markdown: &Path, section: &str) -> anyhow::Result<()> {
    let mut text = std::fs::read_to_string(markdown).unwrap_or_default();
    text.push_str(section);
    std::fs::write(markdown, text)?;
    print!("{section}");
    Ok(())
}
