//! The write fence of a leader: the controller's client refuses every write
//! once this replica's lease may have passed to another, judged by the clock,
//! not by the lease task having noticed.
//!
//! A leader that stalls (a paused process, a starved runtime, a network
//! partition) resumes with reconciles in flight; until its lease task runs
//! and sees another holder, those reconciles would write from a stale cache
//! while the new leader writes too. The fence closes at the instant a
//! follower may take the lease over (the last renewal plus the lease
//! duration, less a margin for clock skew), so a resumed leader's writes are
//! refused before they leave the process. No I/O: the leader loop feeds it the
//! Lease it watches.
//!
//! The fence judges a write when it starts. A write that started just before
//! the stall (already past the fence, waiting for a connection or a socket
//! write) still leaves when the process resumes: only the API server could
//! refuse it, and Kubernetes has no fencing token for arbitrary writes. The
//! window is the reconciles in flight at the stall, each at most one write.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::client::Body;
use tower::{BoxError, filter::FilterLayer};

/// How long before the lease's expiry the fence closes: the follower judges
/// expiry by its own clock, which may run ahead of this one.
const SKEW_MARGIN: Duration = Duration::from_secs(1);

/// When (milliseconds since the Unix epoch) this replica's lease expires, as
/// far as it knows; 0: it holds none. Writes stop [`SKEW_MARGIN`] earlier.
#[derive(Clone, Default)]
pub struct Fence(Arc<AtomicI64>);

impl Fence {
    /// The lease is held until `expiry`: writes may leave until the margin before it.
    pub fn open_until(&self, expiry: SystemTime) {
        self.0.store(millis(expiry), Ordering::Release);
    }

    /// No write leaves.
    pub fn close(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Follows the Lease as the API server has it: open until its expiry
    /// while `identity` holds it, closed once another does. Returns, for a
    /// renewal, how much of the term before it was left.
    pub fn observe(&self, lease: &Lease, identity: &str) -> Option<Duration> {
        let spec = lease.spec.as_ref();
        let holder = spec.and_then(|s| s.holder_identity.as_deref());
        let expiry = spec.and_then(|s| {
            let renewed = s.renew_time.as_ref()?.0;
            let duration = u64::try_from(s.lease_duration_seconds?).ok()?;
            Some(SystemTime::from(renewed) + Duration::from_secs(duration))
        });
        match (holder, expiry) {
            (Some(h), Some(expiry)) if h == identity => {
                let before = self.0.load(Ordering::Acquire);
                self.open_until(expiry);
                let left = before - millis(SystemTime::now());
                (before > 0 && millis(expiry) > before)
                    .then(|| Duration::from_millis(u64::try_from(left).unwrap_or(0)))
            }
            _ => {
                self.close();
                None
            }
        }
    }

    /// Whether a write may leave now.
    pub fn allows_writes(&self) -> bool {
        millis(SystemTime::now() + SKEW_MARGIN) < self.0.load(Ordering::Acquire)
    }

    /// Returns once the lease has expired without a renewal seen (client-go's
    /// renew deadline); writes stopped a margin before. Checks at least every
    /// second, so that a renewal seen meanwhile counts.
    pub async fn expired(&self) {
        loop {
            let left = self.0.load(Ordering::Acquire) - millis(SystemTime::now());
            if left <= 0 {
                return;
            }
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
            tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        }
    }

    /// A layer for kube's client that fails every write while the fence is
    /// closed (reads pass: the caches may go on filling).
    pub fn layer(
        &self,
    ) -> FilterLayer<
        impl Fn(http::Request<Body>) -> Result<http::Request<Body>, BoxError> + Clone + use<>,
    > {
        let fence = self.clone();
        FilterLayer::new(move |req: http::Request<Body>| {
            let write = !matches!(
                *req.method(),
                http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
            );
            if write && !fence.allows_writes() {
                tracing::warn!(
                    method = %req.method(),
                    path = req.uri().path(),
                    "write refused: this replica's leader lease may have passed to another"
                );
                return Err(
                    "write refused: the leader lease may have passed to another replica".into(),
                );
            }
            Ok(req)
        })
    }
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{
        api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime,
    };
    use tower::{Layer, Service, ServiceExt};

    fn lease(holder: &str, renewed: SystemTime, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(
                    k8s_openapi::jiff::Timestamp::try_from(renewed).unwrap(),
                )),
                lease_duration_seconds: Some(duration),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn the_fence_follows_the_lease() {
        let fence = Fence::default();
        assert!(!fence.allows_writes(), "closed until a lease is held");
        let now = SystemTime::now();
        fence.observe(&lease("me", now, 15), "me");
        assert!(fence.allows_writes());
        // Renewed long ago: a follower may hold it by now.
        fence.observe(&lease("me", now - Duration::from_secs(16), 15), "me");
        assert!(!fence.allows_writes());
        // Within the skew margin of the expiry: already closed.
        fence.observe(&lease("me", now - Duration::from_millis(14_500), 15), "me");
        assert!(!fence.allows_writes());
        fence.observe(&lease("me", now, 15), "me");
        let left = fence
            .observe(&lease("me", now + Duration::from_secs(10), 15), "me")
            .expect("a renewal");
        assert!(
            left > Duration::from_secs(13) && left <= Duration::from_secs(15),
            "{left:?}"
        );
        fence.observe(&lease("other", now, 15), "me");
        assert!(!fence.allows_writes(), "another holder closes it at once");
        fence.open_until(now + Duration::from_secs(10));
        assert!(fence.allows_writes());
        fence.close();
        assert!(!fence.allows_writes());
    }

    #[tokio::test]
    async fn expired_waits_for_the_deadline_and_follows_renewals() {
        let fence = Fence::default();
        fence.open_until(SystemTime::now() + Duration::from_millis(300));
        let started = std::time::Instant::now();
        let renewer = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            fence.open_until(SystemTime::now() + Duration::from_millis(300));
        };
        tokio::join!(fence.expired(), renewer);
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "a renewal moves the deadline"
        );
        assert!(!fence.allows_writes(), "writes stopped a margin before");
        fence.close();
        tokio::time::timeout(Duration::from_secs(1), fence.expired())
            .await
            .expect("a closed fence has expired");
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_writes_and_passes_reads() {
        let fence = Fence::default();
        let (inner, mut handle) =
            tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let mut svc = fence.layer().layer(inner);
        let request = |m: http::Method| {
            http::Request::builder()
                .method(m)
                .uri("/apis/apps/v1/namespaces/a/deployments/x")
                .body(Body::empty())
                .unwrap()
        };
        let refused = svc
            .ready()
            .await
            .unwrap()
            .call(request(http::Method::PATCH))
            .await
            .expect_err("a write behind a closed fence fails");
        assert!(refused.to_string().contains("leader lease"), "{refused}");
        let read = svc.ready().await.unwrap().call(request(http::Method::GET));
        let (req, respond) = handle.next_request().await.expect("the read passes");
        assert_eq!(req.method(), http::Method::GET);
        respond.send_response(http::Response::new(Body::empty()));
        read.await.unwrap();

        fence.open_until(SystemTime::now() + Duration::from_secs(10));
        let write = svc
            .ready()
            .await
            .unwrap()
            .call(request(http::Method::PATCH));
        let (req, respond) = handle
            .next_request()
            .await
            .expect("an open fence passes writes");
        assert_eq!(req.method(), http::Method::PATCH);
        respond.send_response(http::Response::new(Body::empty()));
        write.await.unwrap();
    }
}
