//! The apply step: write each child that differs from what should exist,
//! after an ownership check; delete the optional children no longer wanted.
//!
//! "Differs" means either the desired object changed since we last applied it
//! (an annotation carries a hash of what we applied, so removed fields are
//! noticed) or someone edited a field we set (the desired object is no longer
//! a subset of the live one). Fields other parties added are not our business.
//!
//! Never a takeover: an absent child is created with a create (POST), so if
//! someone else created it meanwhile the create fails with AlreadyExists and
//! their object is left alone; every update carries the resourceVersion it
//! was decided on, so a stale decision fails with 409 and is made again.
//! I/O: every write of a child goes through here.

mod downloads;
mod drift;
mod owned;

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Api, Resource, ResourceExt};
use serde::{Serialize, de::DeserializeOwned};
use vllmservice_api::VLLMService;

pub use drift::is_subset;
pub use owned::{Applied, Deleted, apply_owned, delete_owned, is_controlled_by};

pub use crate::reconcile::done::{Done, Outcome};
use crate::{
    error::{Error, Result},
    events,
    reconcile::{
        build::{Desired, Want},
        context::Context,
        seen::Seen,
    },
};

/// The one field manager every write of this operator uses.
pub const FIELD_MANAGER: &str = "vllmservice-operator";
/// Hash of the desired object this operator last applied to a child.
pub const APPLIED_HASH_ANNOTATION: &str = "aiinfra.example.com/applied-hash";

/// Writes every child of `vs` that differs from `want`, deletes the optional
/// children no longer wanted, and announces the writes as events: one for all
/// the children this reconcile created (even when a later child failed), one
/// per update or deletion.
pub async fn converge(ctx: &Context, vs: &VLLMService, want: Desired, seen: &Seen) -> Result<Done> {
    let mut tally = Tally::default();
    let done = async {
        let c = &mut tally;
        let foreign_jobs = downloads::converge(ctx, vs, &want.downloads, seen, c).await?;
        let uid = vs.uid().unwrap_or_default();
        let deployment = match (want.hold_deployment, seen.deployment.clone()) {
            // Until the files are there: no pods yet, or the running ones left as they are.
            (true, None) => Outcome::Absent,
            (true, Some(d)) if is_controlled_by(&d, &uid) => Outcome::Live(d),
            (true, Some(_)) => Outcome::Foreign,
            (false, live) => child(ctx, vs, Want::Present(want.deployment), live, c).await?,
        };
        Ok(Done {
            resolution: want.resolution,
            deployment,
            service: child(
                ctx,
                vs,
                Want::Present(want.service),
                seen.service.clone(),
                c,
            )
            .await?,
            route: child(ctx, vs, want.route, seen.route.clone(), c).await?,
            monitor: child(ctx, vs, want.monitor, seen.monitor.clone(), c).await?,
            rule: child(ctx, vs, want.rule, seen.rule.clone(), c).await?,
            pdb: child(ctx, vs, want.pdb, seen.pdb.clone(), c).await?,
            scaled_object: refused_by_webhook(
                child(ctx, vs, want.scaled_object, seen.scaled_object.clone(), c).await,
            )?,
            foreign_jobs,
        })
    }
    .await;
    events::children_created(ctx, vs, &tally.created).await;
    done
}

/// A write an admission webhook refused, as an outcome the status reports
/// (KEDA's webhook refuses a second autoscaler of the same target, which only
/// a change elsewhere resolves), instead of a reconcile error that would stop
/// every other status update. The API server marks a webhook's refusal only
/// in its message (`admission webhook "<name>" denied the request: ...`; the
/// code and reason are whatever the webhook chose), so the message decides.
fn refused_by_webhook<K>(result: Result<Outcome<K>>) -> Result<Outcome<K>> {
    match result {
        Err(Error::Kube(kube::Error::Api(e)))
            if (400..500).contains(&e.code) && e.message.contains("admission webhook") =>
        {
            Ok(Outcome::Refused(e.message.clone()))
        }
        other => other,
    }
}

/// What one converge collects besides its outcomes: the children it created
/// (for the one event).
#[derive(Default)]
struct Tally {
    created: Vec<ObjectReference>,
}

/// Brings one child to `want`, starting from the cached copy `seen`.
async fn child<K>(
    ctx: &Context,
    vs: &VLLMService,
    want: Want<K>,
    seen: Option<K>,
    tally: &mut Tally,
) -> Result<Outcome<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug
        + 'static,
{
    let ns = vs.namespace().unwrap_or_default();
    let uid = vs.uid().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    match want {
        Want::Untouched => Ok(Outcome::Untouched),
        Want::Present(desired) => {
            let name = desired.name_any();
            let (applied, live) = apply_owned(&api, seen, &desired, &uid).await?;
            match applied {
                Applied::Created => tally.created.push(events::child_ref::<K>(vs, &name)),
                Applied::Updated => {
                    events::child_written::<K>(ctx, vs, &name, "Updated", "updated").await
                }
                Applied::Unchanged | Applied::Foreign => {}
            }
            Ok(live.map_or(Outcome::Foreign, Outcome::Live))
        }
        Want::Absent => {
            let name = seen.as_ref().map(|s| s.name_any());
            match delete_owned(&api, seen, &uid).await? {
                Deleted::Deleted => {
                    let name = name.unwrap_or_default();
                    events::child_written::<K>(ctx, vs, &name, "Deleted", "deleted").await;
                    Ok(Outcome::Absent)
                }
                Deleted::Absent => Ok(Outcome::Absent),
                Deleted::Foreign => Ok(Outcome::Foreign),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_webhook_refusals_become_outcomes() {
        let api = |code: u16, message: &str| -> Result<Outcome<()>> {
            Err(Error::Kube(kube::Error::Api(
                kube::core::Status::failure(message, "Forbidden")
                    .with_code(code)
                    .boxed(),
            )))
        };
        let denied = "admission webhook \"vscaledobject.kb.io\" denied the request: the \
                      workload 'qwen' of type 'aiinfra.example.com/VLLMService' is already \
                      managed by the hpa 'mine'";
        assert_eq!(
            refused_by_webhook(api(403, denied)).unwrap(),
            Outcome::Refused(denied.into())
        );
        assert_eq!(
            refused_by_webhook(api(400, denied)).unwrap(),
            Outcome::Refused(denied.into())
        );
        // RBAC's 403 and the API server's own errors stay errors.
        let rbac = "scaledobjects.keda.sh is forbidden: User \"x\" cannot create resource";
        assert!(refused_by_webhook(api(403, rbac)).is_err());
        assert!(refused_by_webhook(api(500, denied)).is_err());
        assert_eq!(
            refused_by_webhook(Ok(Outcome::<()>::Absent)).unwrap(),
            Outcome::Absent
        );
    }
}
