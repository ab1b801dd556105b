//! The operator's HTTP endpoints, on two listeners as controller-runtime has
//! them: `/healthz` (is the controller loop alive) and `/readyz` (can this
//! replica serve: caches synced, or a follower ready to take over) in plain
//! HTTP for the kubelet's probes, and `/metrics` (Prometheus text) over HTTPS
//! for scrapers whose bearer token the API server accepts and allows to get
//! `/metrics` (`runtime::metrics_auth`), or in plain HTTP without any check
//! only behind `--metrics-insecure`.
//!
//! I/O: binds both TCP listeners and serves them from spawned tasks; reads
//! the TLS certificate from `--metrics-cert-dir` or makes a self-signed one;
//! the metrics check asks the API server. The probe handlers only read the
//! shared health and role.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, header::AUTHORIZATION},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use vllmservice_controller::runtime::{
    health::Health,
    metrics::Metrics,
    metrics_auth::{Authorizer, Verdict},
};

use crate::leader::Role;

/// How `/metrics` is served.
pub enum MetricsServing {
    /// Plain HTTP, no authentication (`--metrics-insecure`).
    Insecure,
    /// HTTPS with the certificate in `cert_dir` (tls.crt, tls.key) or a
    /// self-signed one; every request's bearer token checked by `authorizer`.
    Secure {
        cert_dir: Option<PathBuf>,
        authorizer: Authorizer,
    },
}

/// Binds both addresses and serves them in spawned tasks.
pub async fn start(
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    serving: MetricsServing,
    metrics: Arc<Metrics>,
    health: Health,
    role: Role,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(health_addr)
        .await
        .with_context(|| format!("binding the health address {health_addr}"))?;
    tracing::info!(addr = %listener.local_addr().unwrap_or(health_addr), "serving /healthz, /readyz");
    let probes = health_router(health, role);
    tokio::spawn(async move { axum::serve(listener, probes).await });

    let scrape = Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move { m.encode() }),
        )
        .with_state(metrics);
    match serving {
        MetricsServing::Insecure => {
            let listener = tokio::net::TcpListener::bind(metrics_addr)
                .await
                .with_context(|| format!("binding the metrics address {metrics_addr}"))?;
            tracing::warn!(
                addr = %listener.local_addr().unwrap_or(metrics_addr),
                "serving /metrics over plain HTTP without authentication (--metrics-insecure)"
            );
            tokio::spawn(async move { axum::serve(listener, scrape).await });
        }
        MetricsServing::Secure {
            cert_dir,
            authorizer,
        } => {
            let tls = tls_config(cert_dir.as_deref()).await?;
            let listener = std::net::TcpListener::bind(metrics_addr)
                .with_context(|| format!("binding the metrics address {metrics_addr}"))?;
            listener.set_nonblocking(true)?;
            tracing::info!(
                addr = %listener.local_addr().unwrap_or(metrics_addr),
                "serving /metrics over HTTPS to scrapers allowed to get /metrics"
            );
            let app = scrape.layer(middleware::from_fn_with_state(
                Arc::new(authorizer),
                authenticate,
            ));
            let server = axum_server::from_tcp_rustls(listener, tls)?;
            tokio::spawn(async move { server.serve(app.into_make_service()).await });
        }
    }
    Ok(())
}

/// The certificate of `cert_dir`, or a self-signed one (a scraper then skips
/// verification, as with controller-runtime's default).
async fn tls_config(
    cert_dir: Option<&std::path::Path>,
) -> anyhow::Result<axum_server::tls_rustls::RustlsConfig> {
    use axum_server::tls_rustls::RustlsConfig;
    // rustls needs a process-wide crypto provider; kube's client uses ring too.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cert_dir {
        Some(dir) => RustlsConfig::from_pem_file(dir.join("tls.crt"), dir.join("tls.key"))
            .await
            .with_context(|| format!("reading tls.crt and tls.key in {}", dir.display())),
        None => {
            let names = vec!["localhost".to_string(), crate::leader::hostname()];
            let made = rcgen::generate_simple_self_signed(names)
                .context("making a self-signed certificate for /metrics")?;
            RustlsConfig::from_pem(
                made.cert.pem().into_bytes(),
                made.signing_key.serialize_pem().into_bytes(),
            )
            .await
            .context("loading the self-signed certificate for /metrics")
        }
    }
}

/// Lets a request through only with a bearer token allowed to get /metrics.
async fn authenticate(
    State(authorizer): State<Arc<Authorizer>>,
    request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match authorizer.check(header).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated(why)) => {
            (StatusCode::UNAUTHORIZED, format!("{why}\n")).into_response()
        }
        Ok(Verdict::Forbidden(why)) => (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "checking a /metrics scraper's token failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("checking the token with the API server failed: {e}\n"),
            )
                .into_response()
        }
    }
}

/// `/healthz`: 200 "ok" unless the controller loop has stopped (503);
/// `/readyz`: 200 "ok" once the controller's caches hold their first
/// complete lists, 200 "ok: follower, …" on a replica waiting for the leader
/// lease, 503 with the reason otherwise.
fn health_router(health: Health, role: Role) -> Router {
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
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
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
        let app = health_router(health, role);
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
            namespaces: vec!["none".into()],
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
