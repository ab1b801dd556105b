//! One reconcile of one VLLMService, as its pipeline: validate → read →
//! build → apply → status. Each step is a module; this one only chains them
//! and decides when to look again.
//! I/O through its steps (read, apply, status write).

pub mod apply;
pub mod build;
pub mod context;
pub mod done;
pub mod downloads;
pub mod gateway;
pub mod read;
pub mod seen;
pub mod status;

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;

use crate::{
    cache::CachedVllmService,
    error::{Error, Result},
};
use context::Context;
use gateway::Resolution;

pub async fn reconcile(obj: &CachedVllmService, ctx: &Context) -> Result<Action> {
    let vs = match &obj.0 {
        Ok(vs) => ctx.latest(vs),
        Err(unreadable) => {
            status::write::unreadable(ctx, &unreadable.metadata, &unreadable.error).await?;
            return Ok(Action::await_change());
        }
    };
    if vs.metadata.deletion_timestamp.is_some() {
        // Children go with their owner through garbage collection.
        return Ok(Action::await_change());
    }
    let spec = match ctx.passed.validate(&vs) {
        Ok(spec) => spec,
        Err(invalid) => return status::write::invalid(ctx, &vs, &invalid.to_string()).await,
    };
    let now = Timestamp::now();
    let seen = read::gather(&spec, ctx, now).await?;
    let want = build::all(&spec, &seen, &ctx.settings.defaults);
    let next = requeue(&want.resolution, seen.recheck_after(), ctx.settings.resync);
    let done = match apply::converge(ctx, &vs, want, &seen).await {
        Ok(done) => done,
        // The API server refused an object built from a spec the CRD accepted (e.g. a
        // toleration or affinity it does not allow): a spec problem, reported in
        // status; retried when the spec changes, not in a loop.
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 422 => {
            let message = format!(
                "the API server refused an object made from this spec: {}",
                e.message
            );
            return status::write::invalid(ctx, &vs, &message).await;
        }
        Err(e) => return Err(e),
    };
    let now = Timestamp::now();
    let next_status = status::derive(&spec, &seen, &done, now);
    let held = status::settle::hold(
        vs.status.as_ref(),
        &next_status,
        done.deployment.live(),
        ctx.settings.status_settle,
        now,
    );
    if let Some(left) = held {
        ctx.metrics.status_writes_held.inc();
        // A new service's first status waits for its pods; looked at again
        // when the window ends unless a pod's event comes first.
        return Ok(Action::requeue(left));
    }
    status::write::status(ctx, &vs, next_status).await?;
    Ok(next)
}

/// How long to wait before re-checking a missing Gateway or listener, which may
/// appear without an event the operator watches.
const GATEWAY_RETRY: Duration = Duration::from_secs(60);

/// When to look again without an event: the periodic safety net, sooner when
/// a Gateway or listener may appear by itself or a loading pod reaches its
/// startup budget (`recheck`), and only on a change when the gatewayRef is a
/// configuration error.
fn requeue(resolution: &Resolution, recheck: Option<Duration>, resync: Duration) -> Action {
    let resync = recheck.map_or(resync, |r| r.min(resync));
    match resolution {
        Resolution::Missing { .. } => Action::requeue(GATEWAY_RETRY.min(resync)),
        Resolution::WrongProtocol { .. } if recheck.is_none() => Action::await_change(),
        _ => Action::requeue(resync),
    }
}
