//! Leader election (`run --leader-election-namespace NS`): of several
//! replicas, only the one holding the leader Lease reconciles; the others wait,
//! ready to take over when it stops or its lease expires.
//!
//! I/O: creates, renews and releases the Lease in NS (through
//! kube-lease-manager) and watches it; reads the hostname from /proc for a
//! default identity. The controller itself is the caller's: this module only
//! decides when it runs.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use futures::StreamExt as _;
use vllmservice_controller::runtime::metrics::Metrics;

use crate::fence::Fence;

/// Which part this replica plays, for `/readyz`.
#[derive(Clone)]
pub struct Role(Arc<AtomicU8>);

impl Role {
    /// No leader election: this replica reconciles.
    pub const SINGLE: u8 = 0;
    /// Waiting for the leader lease: ready (it can take over), not reconciling.
    pub const FOLLOWER: u8 = 1;
    /// Holds the lease and reconciles.
    pub const LEADER: u8 = 2;

    pub fn new(role: u8) -> Role {
        Role(Arc::new(AtomicU8::new(role)))
    }

    pub fn set(&self, role: u8) {
        self.0.store(role, Ordering::Release);
    }

    pub fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}

/// The leader Lease a replica competes for, from `run`'s flags.
pub struct Lease {
    /// `--leader-election-namespace`.
    pub namespace: String,
    /// `--leader-election-lease-name`.
    pub name: String,
    /// `--instance`; unset, `<hostname>-<pid>`.
    pub instance: Option<String>,
    /// `--leader-election-lease-duration-seconds`.
    pub duration_seconds: u64,
    /// `--leader-election-renew-grace-seconds`.
    pub renew_grace_seconds: u64,
}

/// Waits for the leader Lease, then runs `controller()` while holding it.
/// Losing the lease stops every write at once (the controller future is
/// dropped) and ends the process; before the lease task even notices, `fence`
/// (which the controller's client writes through) closes when the lease may
/// have expired, so a stalled leader that resumes cannot write either.
/// `shutdown` (SIGTERM) releases the lease so the next replica takes over
/// without waiting for it to expire.
pub async fn run_as_leader<C, E>(
    client: kube::Client,
    metrics: Arc<Metrics>,
    lease: Lease,
    role: Role,
    fence: Fence,
    shutdown: impl Future<Output = ()>,
    mut controller: impl FnMut() -> C,
) -> anyhow::Result<()>
where
    C: Future<Output = Result<(), E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let Lease {
        namespace,
        name,
        instance,
        duration_seconds,
        renew_grace_seconds,
    } = lease;
    let identity = instance.unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let manager = || async {
        kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &name)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_field_manager(vllmservice_controller::reconcile::apply::FIELD_MANAGER)
            .with_duration(duration_seconds)
            .with_grace(renew_grace_seconds)
            .build()
            .await
            .with_context(|| format!("setting up the leader Lease in namespace {namespace}"))
    };
    let (mut leading, mut lease_task) = manager().await?.watch().await;
    // kube-lease-manager lets a follower sleep until the lease it saw would expire;
    // a leader that stops releases the lease, and this watch sees that at once.
    let leases = lease_changes(&client, &namespace, &name);
    tokio::pin!(leases);
    tokio::pin!(shutdown);
    tracing::info!(
        identity,
        namespace,
        lease = name,
        "waiting for the leader lease"
    );
    let lost = loop {
        tokio::select! {
            _ = &mut shutdown => break Lost::No,
            changed = leading.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the leader lease task ended: {:?}", lease_task.await);
                }
            }
            Some(seen) = leases.next() => {
                let _ = fence.observe(&seen, &identity);
                let free = seen
                    .spec
                    .and_then(|s| s.holder_identity)
                    .is_none_or(|h| h.is_empty());
                if free && !*leading.borrow() {
                    // Compete now: a fresh manager tries to take a free lease first thing.
                    tracing::info!(identity, "the leader lease was released; competing for it");
                    lease_task.abort();
                    let _ = lease_task.await;
                    (leading, lease_task) = manager().await?.watch().await;
                }
                continue;
            }
        }
        if !*leading.borrow_and_update() {
            continue;
        }
        tracing::info!(identity, "became the leader; controller starting");
        // The lease manager has just written the lease; the watch below
        // brings its exact renewal time.
        fence.open_until(SystemTime::now() + Duration::from_secs(duration_seconds));
        metrics.leader.set(1);
        role.set(Role::LEADER);
        let reconciling = controller();
        let lost_lease = async {
            while leading.changed().await.is_ok() {
                if !*leading.borrow_and_update() {
                    return;
                }
            }
        };
        tokio::select! {
            stopped = reconciling => {
                // The controller stopped by itself (a watch ended): give the
                // lease back and exit, so that a fresh process takes over.
                if let Err(e) = stopped {
                    break Lost::Failed(e.into());
                }
                break Lost::No;
            }
            _ = lost_lease => break Lost::Lease,
            // kube-lease-manager retries a failing renewal and keeps saying
            // "leading" meanwhile, even after the lease expired and another
            // replica took it: stop at the deadline, as client-go does.
            () = fence.expired() => break Lost::NotRenewed,
            () = follow_renewals(&mut leases, &fence, &identity, &metrics) => {
                break Lost::Failed(anyhow::anyhow!("the watch of the leader Lease ended"));
            }
            _ = &mut shutdown => break Lost::No,
        }
    };
    fence.close();
    metrics.leader.set(0);
    role.set(Role::FOLLOWER);
    // Closing the channel makes the lease task release the lease and end.
    drop(leading);
    match lease_task.await {
        Ok(Ok(_)) => {}
        other => {
            tracing::warn!(result = ?other.map(|r| r.map(|_| ())), "releasing the leader lease failed")
        }
    }
    match lost {
        Lost::No => {}
        Lost::Lease => anyhow::bail!(
            "lost the leader lease: stopped reconciling; exiting so that a fresh start can compete again"
        ),
        Lost::NotRenewed => anyhow::bail!(
            "the leader lease was not renewed before it expired: stopped reconciling; exiting so that a fresh start can compete again"
        ),
        Lost::Failed(e) => return Err(e),
    }
    tracing::info!("stopped and released the leader lease");
    Ok(())
}

/// How leading ended.
enum Lost {
    /// Shutdown, or the controller ended cleanly.
    No,
    /// Another replica holds the lease now.
    Lease,
    /// The lease expired without a renewal this replica saw.
    NotRenewed,
    /// The controller stopped with this error.
    Failed(anyhow::Error),
}

/// Keeps `fence` on the Lease's renewals while leading; returns if the
/// watch ends.
async fn follow_renewals(
    leases: &mut (impl futures::Stream<Item = k8s_openapi::api::coordination::v1::Lease> + Unpin),
    fence: &Fence,
    identity: &str,
    metrics: &Metrics,
) {
    while let Some(seen) = leases.next().await {
        if let Some(left) = fence.observe(&seen, identity) {
            metrics.lease_renewal_slack.observe(left.as_secs_f64());
            tracing::debug!(left_ms = left.as_millis() as u64, "leader lease renewed");
        }
    }
}

/// The Lease `name` each time it changes (renewals, a new holder, a release).
fn lease_changes(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> impl futures::Stream<Item = k8s_openapi::api::coordination::v1::Lease> + Send + 'static {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|lease| {
            if let Err(e) = &lease {
                // E.g. a missing RBAC verb: the takeover then waits for the lease to expire.
                tracing::warn!(error = %e, "watching the leader Lease failed; retrying");
            }
            std::future::ready(lease.ok())
        })
}

/// The kernel's hostname (the pod name in a cluster), for the default identity.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "vllmservice-operator".into())
}
