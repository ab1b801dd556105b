//! Real clients against a VLLMService on the local cluster's real node
//! (docs/local-cluster.md): the kubelet runs the vLLM simulator in the
//! Deployment the operator builds, and the official openai Python SDK and
//! guidellm (crates/vllm-sim/tests/clients, from the venv in
//! `VLLM_PY_CLIENTS`, `hack/tools/py-clients.sh`) talk to it through the
//! Service's ClusterIP, as an application in the cluster would.
//!
//! The same script and the same bounded guidellm run as
//! crates/vllm-sim/tests/real_clients.rs, whose helper module this test
//! includes. A missing venv or real node fails the test with the reason.

#[path = "../../vllm-sim/tests/clients/mod.rs"]
mod clients;
mod common;

use common::{
    Env, is_available,
    sim::{MODEL, START, cluster_ip, model_pvc, sim_service},
};
use serde_json::json;

/// The server's count of requests finished with `reason`, from its /metrics
/// through the Service.
fn finished(addr: &str, reason: &str) -> f64 {
    let (code, text) = testkit::http_request(addr, "GET", "/metrics", None)
        .unwrap_or_else(|e| panic!("GET http://{addr}/metrics: {e}"));
    assert_eq!(code, 200, "{text}");
    let prefix = format!("vllm:request_success_total{{engine=\"0\",finished_reason=\"{reason}\"");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{text}"))
}

/// Once the VLLMService is Available, the openai SDK's models.list(), chat,
/// streamed chat, completion and unknown-model 404 through the ClusterIP have
/// the shapes an application expects, and guidellm's 20-request benchmark
/// completes every request with none errored; the server counted the same.
#[tokio::test]
async fn openai_sdk_and_guidellm_through_the_service_cluster_ip() {
    const REQUESTS: u32 = 20;
    // The clients first: without them nothing is worth creating on the cluster.
    clients::venv();
    let env = Env::new("real-clients").await;
    let _model = model_pvc(&env, "models").await;
    env.create(sim_service(
        "qwen",
        "models",
        json!([{"name": "VLLM_SIM_TOKEN_DELAY_MS", "value": "1"}]),
    ))
    .await;
    env.wait_for_within("qwen", "Available", START, is_available)
        .await;
    let addr = cluster_ip(&env, "qwen").await;
    let base_url = format!("http://{addr}/v1");

    // The clients block for seconds: off the runtime, whose threads also run
    // the in-process operator.
    let (url, seen) = tokio::task::spawn_blocking(move || {
        let seen = clients::openai_check(&base_url, MODEL);
        (base_url, seen)
    })
    .await
    .unwrap();
    assert_eq!(seen["models"], json!([MODEL]), "{seen}");
    assert_eq!(seen["unknown_model"], 404, "{seen}");
    assert_eq!(finished(&addr, "length"), 3.0);

    let report = tokio::task::spawn_blocking(move || clients::guidellm(&url, MODEL, REQUESTS, 10))
        .await
        .unwrap();
    clients::assert_all_completed(&report, REQUESTS);
    // One pod behind the Service: it answered all of them.
    assert_eq!(finished(&addr, "length"), f64::from(3 + REQUESTS));
}
