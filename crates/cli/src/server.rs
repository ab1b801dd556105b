//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`
//! (is the controller loop alive) and `/readyz` (can this replica serve:
//! caches synced, or a follower ready to take over).
//!
//! I/O: binds the `--metrics-addr` TCP listener and serves it from a spawned
//! task; the handlers only read the shared metrics, health and role.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use axum::{Router, extract::State, routing::get};
use vllmservice_controller::runtime::{health::Health, metrics::Metrics};

use crate::leader::Role;

/// Binds `addr` and serves [`health_router`] on it in a spawned task.
pub async fn start(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Health,
    role: Role,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "serving /metrics, /healthz, /readyz");
    let app = health_router(metrics, health, role);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

/// `/metrics`; `/healthz`: 200 "ok" unless the controller loop has stopped
/// (503); `/readyz`: 200 "ok" once the controller's caches hold their first
/// complete lists, 200 "ok: follower, …" on a replica waiting for the leader
/// lease, 503 with the reason otherwise.
fn health_router(metrics: Arc<Metrics>, health: Health, role: Role) -> Router {
    use axum::http::StatusCode;
    let healthz = {
        let health = health.clone();
        move || async move {
            if health.stopped() {
                (StatusCode::SERVICE_UNAVAILABLE, "controller loop stopped\n")
            } else {
                (StatusCode::OK, "ok\n")
            }
        }
    };
    let readyz = move || async move {
        if health.stopped() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the controller loop stopped\n",
            )
        } else if role.get() == Role::FOLLOWER {
            (
                StatusCode::OK,
                "ok: follower, waiting for the leader lease\n",
            )
        } else if !health.running() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the controller is starting\n",
            )
        } else if !health.caches_synced() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the controller's caches are not synced yet (waiting for the first list of every watched resource)\n",
            )
        } else {
            (StatusCode::OK, "ok\n")
        }
    };
    Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move { m.encode() }),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vllmservice_controller::runtime;

    use super::*;

    /// `GET path` on `addr`: (status code, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let path = path.to_string();
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            let (head, body) = response.split_once("\r\n\r\n").unwrap();
            let code = head.split(' ').nth(1).unwrap().parse().unwrap();
            (code, body.to_string())
        })
        .await
        .unwrap()
    }

    async fn serve(health: Health, role: Role) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = health_router(Arc::new(Metrics::default()), health, role);
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    /// Waits (at most 10 s) until `check` holds.
    async fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A controller that cannot reach its API server runs but never syncs:
    /// not ready (503) yet healthy; once its loop has stopped, /healthz fails.
    #[tokio::test]
    async fn readyz_waits_for_the_caches_and_healthz_fails_once_the_loop_stops() {
        // Nothing listens on port 1: every request fails to connect.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let health = Health::default();
        let addr = serve(health.clone(), Role::new(Role::SINGLE)).await;
        assert_eq!(
            get(addr, "/readyz").await.0,
            503,
            "before the controller starts"
        );

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let opts = runtime::Options {
            namespace: Some("none".into()),
            gpu_accounting: false,
            health: health.clone(),
            ..runtime::Options::default()
        };
        let task = tokio::spawn(runtime::run(
            client,
            Arc::new(Metrics::default()),
            opts,
            async {
                let _ = stopped.await;
            },
        ));
        until("the controller runs", || health.running()).await;
        let (code, body) = get(addr, "/readyz").await;
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("not synced"), "{body}");
        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_string()));

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the controller stops")
            .unwrap()
            .unwrap();
        let (code, body) = get(addr, "/healthz").await;
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("stopped"), "{body}");
        assert_eq!(get(addr, "/readyz").await.0, 503);
    }

    #[tokio::test]
    async fn a_follower_is_ready_and_says_so() {
        let role = Role::new(Role::FOLLOWER);
        let addr = serve(Health::default(), role.clone()).await;
        let (code, body) = get(addr, "/readyz").await;
        assert_eq!(code, 200);
        assert!(body.starts_with("ok: follower"), "{body}");
        assert_eq!(get(addr, "/healthz").await.0, 200);
        // Once it leads, it is ready only when its caches are synced.
        role.set(Role::LEADER);
        assert_eq!(get(addr, "/readyz").await.0, 503);
    }
}
