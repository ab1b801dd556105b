//! Third-party CRDs (Gateway API, Prometheus Operator) from the Go module
//! cache: a private cluster starts without them and gets them on request, and
//! installing them on the shared cluster is safe from many tests at once.

use testkit::PrivateCluster;

fn has_crd(kubectl: std::process::Command, name: &str) -> bool {
    let mut kubectl = kubectl;
    kubectl
        .args(["get", "crd", name])
        .output()
        .expect("kubectl runs")
        .status
        .success()
}

#[test]
fn private_cluster_has_no_third_party_crds_until_they_are_installed() {
    let cluster = PrivateCluster::start("testkit-crds");
    let httproutes = "httproutes.gateway.networking.k8s.io";
    let servicemonitors = "servicemonitors.monitoring.coreos.com";
    assert!(!has_crd(cluster.kubectl(), httproutes));
    assert!(!has_crd(cluster.kubectl(), servicemonitors));

    cluster.install_gateway_api_crds();
    for crd in [
        httproutes,
        "gateways.gateway.networking.k8s.io",
        "gatewayclasses.gateway.networking.k8s.io",
    ] {
        assert!(has_crd(cluster.kubectl(), crd), "{crd} not installed");
    }
    assert!(!has_crd(cluster.kubectl(), servicemonitors));

    cluster.install_prometheus_crds();
    for crd in [servicemonitors, "prometheusrules.monitoring.coreos.com"] {
        assert!(has_crd(cluster.kubectl(), crd), "{crd} not installed");
    }

    // Idempotent: a second install changes nothing and succeeds.
    cluster.install_gateway_api_crds();
    cluster.install_prometheus_crds();
    cluster.install_crds();
    assert!(has_crd(
        cluster.kubectl(),
        "vllmservices.aiinfra.example.com"
    ));
}

#[test]
fn shared_cluster_installs_third_party_crds_from_concurrent_tests() {
    let threads: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                if i % 2 == 0 {
                    testkit::install_gateway_api_crds();
                } else {
                    testkit::install_prometheus_crds();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("install succeeded");
    }
    for crd in [
        "httproutes.gateway.networking.k8s.io",
        "servicemonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
    ] {
        testkit::kubectl_ok(&["get", "crd", crd]);
    }
}
