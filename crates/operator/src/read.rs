//! The read step: everything one reconcile looks at, gathered once from the
//! controller's watch caches (no request to the API server). A cache that
//! holds no complete list yet is an error that names it, so a missing RBAC
//! rule is reported instead of a child being taken for absent.

use kube::ResourceExt;
use vllmservice_api::VLLMService;

use crate::{
    context::{Cache, Context, cached},
    error::{Error, Result},
    names,
    route::Target,
    seen::{GatewaySeen, Seen, Storage},
};

/// What `vs` depends on and what exists of its children.
pub fn gather(vs: &VLLMService, ctx: &Context) -> Result<Seen> {
    let ns = vs.namespace().unwrap_or_default();
    let name = names::child_name(vs);
    let caches = &ctx.caches;
    let pvc = cached(caches.pvcs.store()?, &ns, &vs.spec.storage.pvc_name);
    let storage = match pvc.and_then(|p| p.status).and_then(|s| s.phase) {
        None => Storage::Missing,
        Some(phase) if phase == "Bound" => Storage::Bound,
        Some(phase) => Storage::NotBound(phase),
    };
    let pod_store = caches.pods.store()?;
    let pods = caches
        .pod_index
        .pods_of(&ns, &name)
        .iter()
        .filter_map(|p| cached(pod_store, &ns, p))
        .collect();
    let gateway = match (&vs.spec.gateway_ref, &caches.gateways) {
        (Some(r), Some(gateways)) => {
            let target = Target::of(vs, r);
            match &ctx.namespace {
                Some(watched) if *watched != target.namespace => {
                    GatewaySeen::OutsideWatchedNamespace {
                        watched: watched.clone(),
                    }
                }
                _ => match cached(gateways.store()?, &target.namespace, &target.name) {
                    Some(gw) => GatewaySeen::Found(Box::new(gw)),
                    None => GatewaySeen::Missing,
                },
            }
        }
        _ => GatewaySeen::NotLooked,
    };
    Ok(Seen {
        apis: ctx.apis,
        deployment: child(Some(&caches.deployments), &ns, &name)?,
        service: child(Some(&caches.services), &ns, &name)?,
        route: child(caches.routes.as_ref(), &ns, &name)?,
        monitor: child(caches.monitors.as_ref(), &ns, &name)?,
        rule: child(caches.rules.as_ref(), &ns, &name)?,
        pdb: child(Some(&caches.pdbs), &ns, &name)?,
        capacity: caches.placement.as_ref().and_then(|p| p.capacity(&vs.spec)),
        gateway,
        storage,
        pods,
    })
}

/// The object `name` from `cache` (None when the kind's API is not installed).
fn child<K>(cache: Option<&Cache<K>>, ns: &str, name: &str) -> Result<Option<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    match cache {
        Some(c) => Ok(cached(c.store()?, ns, name)),
        None => Ok(None),
    }
}

impl From<crate::context::NotSynced> for Error {
    fn from(e: crate::context::NotSynced) -> Self {
        Error::CacheNotSynced(e)
    }
}
