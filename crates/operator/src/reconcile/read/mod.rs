//! The read step: everything one reconcile looks at, gathered once before
//! anything is built or written. The objects come from the controller's
//! caches (no request); a cache that holds no complete list yet is an error
//! that names it, so a missing RBAC rule is reported instead of a child being
//! taken for absent. The logs of failing vLLM containers and of download pods
//! are read through the API server (`pods/log`), at most once per container
//! instance. I/O: those log reads.

mod downloads;
mod logs;

use std::time::Duration;

use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::ResourceExt;
use vllmservice_api::Valid;

pub use logs::{LOG_LIMIT_BYTES, facts_of};

use crate::{
    cache::{Cache, NotSynced},
    error::{Error, Result},
    names,
    reconcile::{
        context::Context,
        gateway::Target,
        seen::{GatewaySeen, Seen, Storage, Unplaced},
    },
};

/// What `vs` depends on and what exists of its children.
pub async fn gather(vs: &Valid<'_>, ctx: &Context, now: Timestamp) -> Result<Seen> {
    let ns = vs.namespace().unwrap_or_default();
    let name = names::child_name(vs);
    let caches = &ctx.caches;
    let storage = match &vs.spec.storage.pvc_name {
        None => Storage::Image,
        Some(claim) => match caches.pvcs.get(&ns, claim)?.and_then(|p| p.status?.phase) {
            None => Storage::Missing,
            Some(phase) if phase == "Bound" => Storage::Bound,
            Some(phase) => Storage::NotBound(phase),
        },
    };
    let pod_store = caches.pods.store()?;
    let pods: Vec<_> = caches
        .pod_index
        .names_of(&ns, &name)
        .iter()
        .filter_map(|p| pod_store.get(&kube::runtime::reflector::ObjectRef::new(p).within(&ns)))
        .map(|p| p.to_pod())
        .collect();
    let optional = caches.optional();
    let gateway = match (&vs.spec.gateway_ref, &optional.gateways) {
        (Some(r), Some(gateways)) => {
            let target = Target::of(vs, r);
            let watched = &ctx.settings.namespaces;
            match watched.is_empty() || watched.contains(&target.namespace) {
                false => GatewaySeen::OutsideWatchedNamespace {
                    watched: watched.clone(),
                },
                true => match gateways.get(&target.namespace, &target.name)? {
                    Some(gw) => GatewaySeen::Found(Box::new(gw)),
                    None => GatewaySeen::Missing,
                },
            }
        }
        _ => GatewaySeen::NotLooked,
    };
    let (downloads, stale_jobs) = downloads::gather(vs, ctx).await?;
    let logs = logs::gather(vs, &pods, ctx, now).await;
    let patience = Duration::from_secs(ctx.settings.defaults.surge_unschedulable_seconds);
    Ok(Seen {
        unplaced: unplaced(&pods, now, patience),
        pod_removed_ago: caches.pod_index.removed_ago(&ns, &name),
        apis: optional.apis,
        deployment: caches
            .deployments
            .get(&ns, &name)?
            .map(|d| d.typed())
            .transpose()?,
        service: caches
            .services
            .get(&ns, &name)?
            .map(|s| s.typed())
            .transpose()?,
        route: child(optional.routes.as_ref(), &ns, &name)?,
        monitor: child(optional.monitors.as_ref(), &ns, &name)?,
        rule: child(optional.rules.as_ref(), &ns, &name)?,
        pdb: caches.pdbs.get(&ns, &name)?,
        scaled_object: child(optional.scaled_objects.as_ref(), &ns, &name)?,
        // Only a service that asks for autoscaling needs (the RBAC of) this cache.
        hpa: match &vs.spec.autoscaling {
            Some(_) => caches.hpas.get(&ns, &names::hpa_name(vs))?,
            None => None,
        },
        capacity: caches.placement.as_ref().and_then(|p| p.capacity(&vs.spec)),
        gateway,
        storage,
        pods,
        logs,
        downloads,
        stale_jobs,
    })
}

/// The pod the scheduler has refused longest, if any.
fn unplaced(pods: &[Pod], now: Timestamp, patience: Duration) -> Option<Unplaced> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })?;
            let since = c.last_transition_time.as_ref()?.0;
            let waited = now
                .duration_since(since)
                .try_into()
                .unwrap_or(Duration::ZERO);
            Some(Unplaced {
                pod: p.name_any(),
                message: c.message.clone().unwrap_or_default(),
                waited,
                patience,
            })
        })
        .max_by_key(|u| u.waited)
}

/// The object `name` from `cache` (None when the kind's API is not installed).
fn child<K>(cache: Option<&Cache<K>>, ns: &str, name: &str) -> Result<Option<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    match cache {
        Some(c) => Ok(c.get(ns, name)?),
        None => Ok(None),
    }
}

impl From<NotSynced> for Error {
    fn from(e: NotSynced) -> Self {
        Error::CacheNotSynced(e)
    }
}
