//! The apply step for the download Jobs: create those that do not exist,
//! join the owners of those another VLLMService created, run a failed one
//! again, and let go of those the spec no longer needs. I/O: writes Jobs.

use k8s_openapi::api::batch::v1::Job;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use vllmservice_api::VLLMService;

use super::{FIELD_MANAGER, Tally, owned::delete_this};
use crate::{
    error::Result,
    events,
    reconcile::{build::Download, context::Context, downloads, seen::Seen},
};

/// Creates the download Jobs that do not exist, joins the owners of those that
/// another VLLMService created, runs a failed one again once the spec asks
/// for a different Job (e.g. a token was added), and lets go of those the spec
/// no longer needs (deleted when this VLLMService was their only owner).
/// Returns the names of same-named Jobs that are not the operator's.
pub(super) async fn converge(
    ctx: &Context,
    vs: &VLLMService,
    want: &[Download],
    seen: &Seen,
    tally: &mut Tally,
) -> Result<Vec<String>> {
    let mut foreign = Vec::new();
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &vs.namespace().unwrap_or_default());
    let uid = vs.uid().unwrap_or_default();
    for d in want {
        let live = seen
            .downloads
            .iter()
            .find(|s| s.name == d.want.name)
            .and_then(|s| s.job.clone());
        let live = match live {
            Some(job) => job,
            None => {
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match api.create(&params, &d.job).await {
                    Ok(_) => {
                        tally
                            .created
                            .push(events::child_ref::<Job>(vs, &d.want.name));
                        continue;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        match api.get_opt(&d.want.name).await? {
                            Some(job) => job,
                            None => continue,
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if !downloads::is_download_job(&live) {
            // Someone else's Job of that name: reported by the status, never touched.
            foreign.push(d.want.name.clone());
            continue;
        }
        if live.metadata.deletion_timestamp.is_some() {
            // Being deleted (to run again, or by its last owner): created anew
            // once it is gone (its watch event brings the next reconcile).
            continue;
        }
        let failed = live
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        let hash = |j: &Job| j.annotations().get(downloads::JOB_HASH_ANNOTATION).cloned();
        if failed && hash(&live) != hash(&d.job) {
            delete_this(&api, &live).await?;
            events::child_written::<Job>(ctx, vs, &d.want.name, "Deleted", "deleted to run again")
                .await;
            continue;
        }
        if !downloads::is_owned_by(&live, vs) {
            let owner = serde_json::to_value(downloads::owner(vs)).expect("serializes");
            let patch = json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": live.resource_version()},
                {"op": "add", "path": "/metadata/ownerReferences/-", "value": owner},
            ]);
            patch_owners(&api, &d.want.name, patch).await?;
        }
    }
    for job in &seen.stale_jobs {
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let owners = job.owner_references();
        let Some(index) = owners.iter().position(|r| r.uid == uid) else {
            continue;
        };
        if owners.len() == 1 {
            delete_this(&api, job).await?;
            events::child_written::<Job>(
                ctx,
                vs,
                &job.name_any(),
                "Deleted",
                "deleted: no longer needed",
            )
            .await;
            continue;
        }
        let patch = json!([
            {"op": "test", "path": format!("/metadata/ownerReferences/{index}/uid"), "value": uid},
            {"op": "remove", "path": format!("/metadata/ownerReferences/{index}")},
        ]);
        patch_owners(&api, &job.name_any(), patch).await?;
    }
    Ok(foreign)
}

/// Applies a JSON patch to the owner references of a download Job; a refused
/// `test` (409/422) or a Job gone (404) means it changed meanwhile, and its
/// watch event brings the next reconcile, which decides again.
async fn patch_owners(api: &Api<Job>, name: &str, patch: Value) -> Result<()> {
    let patch = Patch::Json::<()>(serde_json::from_value(patch).expect("a JSON patch"));
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 || e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
