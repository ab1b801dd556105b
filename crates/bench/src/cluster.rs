//! The bench's own local cluster (hack/cluster/cluster.sh with
//! VLLM_CLUSTER_DIR=target/cluster-bench), the CRDs, and the API server's view.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, bail};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{procfs, prom};

pub struct Cluster {
    pub repo: PathBuf,
    pub dir: PathBuf,
    pub nodes: usize,
    pub gpus_per_node: usize,
}

impl Cluster {
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    fn script(&self, args: &[&str]) -> anyhow::Result<()> {
        let status = Command::new(self.repo.join("hack/cluster/cluster.sh"))
            .args(args)
            .env("VLLM_CLUSTER_DIR", &self.dir)
            .env("VLLM_CLUSTER_NODES", self.nodes.to_string())
            .env("VLLM_CLUSTER_GPUS", self.gpus_per_node.to_string())
            .status()
            .context("running hack/cluster/cluster.sh")?;
        if !status.success() {
            bail!(
                "hack/cluster/cluster.sh {} failed ({status})",
                args.join(" ")
            );
        }
        Ok(())
    }

    /// A fresh cluster: whatever ran in this directory is stopped first.
    pub fn up_fresh(&self) -> anyhow::Result<()> {
        self.down()?;
        self.script(&["up", "--nodes", &self.nodes.to_string()])
    }

    pub fn down(&self) -> anyhow::Result<()> {
        self.script(&["down"])
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(self.kubeconfig())?;
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        // Lists of a thousand objects and /metrics of a busy API server take a while.
        config.read_timeout = Some(Duration::from_secs(120));
        Ok(Client::try_from(config)?)
    }

    /// `kubectl apply --server-side` of each file, then waits until every CRD is Established.
    pub fn install_crds(&self, files: &[PathBuf]) -> anyhow::Result<()> {
        let kubectl = |args: &[&str]| -> anyhow::Result<()> {
            let mut cmd = Command::new("kubectl");
            cmd.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
            for f in files {
                cmd.arg("-f").arg(f);
            }
            let out = cmd.output().context("running kubectl")?;
            if !out.status.success() {
                bail!(
                    "kubectl {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(())
        };
        kubectl(&["apply", "--server-side", "--force-conflicts"])?;
        // `kubectl wait` gives up at once instead of waiting when a CRD just
        // created has no conditions yet (".status.conditions accessor error:
        // <nil>"): ask again then, a bounded number of times.
        let mut attempt = 1;
        loop {
            match kubectl(&["wait", "--for=condition=Established", "--timeout=120s"]) {
                Err(e) if attempt < 20 && e.to_string().contains("accessor error") => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(250));
                }
                other => return other,
            }
        }
    }

    /// CPU seconds so far of each control-plane component (from its pids file).
    pub fn component_cpu(&self) -> BTreeMap<String, f64> {
        let pids = std::fs::read_to_string(self.dir.join("pids")).unwrap_or_default();
        pids.lines()
            .filter_map(|l| {
                let (name, pid) = l.split_once(' ')?;
                let cpu = procfs::cpu_seconds(pid.trim().parse().ok()?)?;
                Some((name.to_string(), cpu))
            })
            .collect()
    }
}

/// The CRD files a variant needs: ours, and for the routed variant the Gateway
/// API and Prometheus Operator CRDs that hack/cluster/crds.sh prints.
pub fn crd_files(repo: &Path, routed: bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = vec![repo.join("config/crd/vllmservice.yaml")];
    if routed {
        for which in ["gateway", "prometheus"] {
            let out = Command::new(repo.join("hack/cluster/crds.sh"))
                .arg(which)
                .output()
                .context("running hack/cluster/crds.sh")?;
            if !out.status.success() {
                bail!(
                    "hack/cluster/crds.sh {which} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            files.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(PathBuf::from),
            );
        }
    }
    Ok(files)
}

/// The API server's `apiserver_request_total`, summed over codes, by "VERB resource[/sub]",
/// its `apiserver_request_duration_seconds` buckets by the same key, and the ClusterIP
/// allocator's time (seconds, allocations): kube-apiserver allocates one ClusterIP at a
/// time, so its busy share says whether Service creates wait for it.
#[derive(Debug, Clone, Default)]
pub struct ApiRequests(
    pub BTreeMap<String, f64>,
    pub BTreeMap<String, Vec<(f64, f64)>>,
    pub (f64, f64),
);

fn request_key(s: &prom::Sample) -> String {
    let mut resource = s.label("resource").to_string();
    if !s.label("subresource").is_empty() {
        resource = format!("{resource}/{}", s.label("subresource"));
    }
    format!("{} {resource}", s.label("verb"))
}

pub const READ_VERBS: [&str; 4] = ["GET", "LIST", "WATCH", "WATCHLIST"];
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// kube-apiserver's CPU profile over `seconds` (its Go pprof endpoint, on by default),
/// written to `path`.
pub async fn apiserver_profile(client: &Client, seconds: u64, path: &Path) -> anyhow::Result<()> {
    use futures::AsyncReadExt as _;
    let req =
        http::Request::get(format!("/debug/pprof/profile?seconds={seconds}")).body(Vec::new())?;
    let mut body = Box::pin(
        client
            .request_stream(req)
            .await
            .context("GET /debug/pprof/profile")?,
    );
    let mut bytes = Vec::new();
    body.read_to_end(&mut bytes)
        .await
        .context("reading the profile")?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

impl ApiRequests {
    pub async fn scrape(client: &Client) -> anyhow::Result<ApiRequests> {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await
            .context("reading the API server's /metrics")?;
        Ok(Self::from_samples(&prom::parse(&text)))
    }

    fn from_samples(samples: &[prom::Sample]) -> ApiRequests {
        let mut by = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == "apiserver_request_total")
        {
            *by.entry(request_key(s)).or_insert(0.0) += s.value;
        }
        // Buckets summed over the other labels (group, version, scope, component).
        let mut buckets: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == "apiserver_request_duration_seconds_bucket")
        {
            *buckets
                .entry(request_key(s))
                .or_default()
                .entry(s.label("le").to_string())
                .or_insert(0.0) += s.value;
        }
        let buckets = buckets
            .into_iter()
            .map(|(k, b)| {
                let mut v: Vec<(f64, f64)> = b
                    .into_iter()
                    .filter_map(|(le, n)| {
                        let le = if le == "+Inf" {
                            f64::INFINITY
                        } else {
                            le.parse().ok()?
                        };
                        Some((le, n))
                    })
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (k, v)
            })
            .collect();
        let sum = |name: &str| {
            samples
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.value)
                .sum::<f64>()
        };
        let allocator = (
            sum("kube_apiserver_clusterip_allocator_allocation_duration_seconds_sum"),
            sum("kube_apiserver_clusterip_allocator_allocation_duration_seconds_count"),
        );
        ApiRequests(by, buckets, allocator)
    }

    /// Server-side latency (p50, p99, count) of one "VERB resource" since `before`.
    pub fn latency_since(&self, before: &ApiRequests, key: &str) -> Option<(f64, f64, f64)> {
        let now = self.1.get(key)?;
        let then = before.1.get(key);
        let delta: Vec<(f64, f64)> = now
            .iter()
            .map(|&(le, n)| {
                let old = then
                    .and_then(|t| t.iter().find(|(l, _)| *l == le))
                    .map_or(0.0, |(_, n)| *n);
                (le, n - old)
            })
            .collect();
        let count = delta.last()?.1;
        Some((
            prom::quantile(&delta, 0.5)?,
            prom::quantile(&delta, 0.99)?,
            count,
        ))
    }

    /// Requests since `before`, zeros dropped.
    pub fn since(&self, before: &ApiRequests) -> ApiRequests {
        ApiRequests(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
            BTreeMap::new(),
            (self.2.0 - before.2.0, self.2.1 - before.2.1),
        )
    }

    pub fn total(&self, verbs: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| verbs.iter().any(|v| k.split(' ').next() == Some(v)))
            .map(|(_, v)| v)
            .sum()
    }

    pub fn get(&self, key: &str) -> f64 {
        self.0.get(key).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_requests_sum_codes_and_split_reads_and_writes() {
        let text = r#"apiserver_request_total{code="200",resource="deployments",subresource="",verb="GET"} 5
apiserver_request_total{code="404",resource="deployments",subresource="",verb="GET"} 2
apiserver_request_total{code="201",resource="vllmservices",subresource="status",verb="APPLY"} 3
apiserver_request_total{code="200",resource="pods",subresource="",verb="LIST"} 1
apiserver_request_duration_seconds_bucket{group="apps",resource="deployments",subresource="",verb="GET",le="0.01"} 6
apiserver_request_duration_seconds_bucket{group="apps",resource="deployments",subresource="",verb="GET",le="0.1"} 7
apiserver_request_duration_seconds_bucket{group="apps",resource="deployments",subresource="",verb="GET",le="+Inf"} 7
kube_apiserver_clusterip_allocator_allocation_duration_seconds_sum{cidr="198.19.0.0/16"} 1.5
kube_apiserver_clusterip_allocator_allocation_duration_seconds_count{cidr="198.19.0.0/16"} 30
"#;
        let r = ApiRequests::from_samples(&prom::parse(text));
        assert_eq!(r.2, (1.5, 30.0));
        assert_eq!(r.get("GET deployments"), 7.0);
        assert_eq!(r.get("APPLY vllmservices/status"), 3.0);
        assert_eq!(r.total(&READ_VERBS), 8.0);
        assert_eq!(r.total(&WRITE_VERBS), 3.0);
        let (p50, p99, n) = r
            .latency_since(&ApiRequests::default(), "GET deployments")
            .unwrap();
        assert_eq!(n, 7.0);
        assert!(p50 < 0.01 && p99 > 0.01);
        let later = ApiRequests(
            [("GET deployments".to_string(), 10.0)]
                .into_iter()
                .chain(
                    r.0.clone()
                        .into_iter()
                        .filter(|(k, _)| k != "GET deployments"),
                )
                .collect(),
            BTreeMap::new(),
            (2.0, 40.0),
        );
        let d = later.since(&r);
        assert_eq!(d.2, (0.5, 10.0));
        assert_eq!(d.0.len(), 1);
        assert_eq!(d.get("GET deployments"), 3.0);
    }
}
