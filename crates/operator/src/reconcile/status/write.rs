//! The status step's write: the derived status through the status
//! subresource when it differs from what is stored, and the status of an
//! object the operator cannot use. I/O: the status write and the events it
//! announces.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    runtime::{controller::Action, events::EventType},
};
use serde_json::json;
use vllmservice_api::{VLLMService, VLLMServiceStatus};

use crate::{
    diagnosis::masking,
    error::Result,
    events,
    reconcile::{apply::FIELD_MANAGER, context::Context},
};

/// An object stored in a shape our types cannot read (validation bypassed or an
/// older schema): reported as InvalidSpec in status; a change of the object retries.
pub async fn unreadable(ctx: &Context, meta: &ObjectMeta, error: &str) -> Result<()> {
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let raw: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &ns,
        &ApiResource::erase::<VLLMService>(&()),
    );
    let Some(current) = raw.get_opt(&name).await? else {
        return Ok(());
    };
    // The status may still be readable when only the spec is broken.
    let previous = current
        .data
        .get("status")
        .and_then(|s| serde_json::from_value::<VLLMServiceStatus>(s.clone()).ok());
    // The reader's error may quote a value of the object, e.g. an env value.
    let env = current.data["spec"]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let literals = masking::secret_values(
        env.iter()
            .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?))),
    );
    let error = masking::mask_secrets(error, &literals);
    let message = format!("the object cannot be read as a VLLMService: {error}");
    let generation = meta.generation.unwrap_or_default();
    let next = super::invalid(
        previous.as_ref(),
        generation,
        "InvalidSpec",
        &message,
        Timestamp::now(),
    );
    if previous.as_ref() != Some(&next) {
        // Not server-side apply: it needs the live object to match the schema, which
        // this one does not (the API server answers 500). A merge patch of the status
        // subresource does not touch the broken spec.
        let api: Api<VLLMService> = Api::namespaced(ctx.client.clone(), &ns);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match api
            .patch_status(&name, &params, &Patch::Merge(json!({ "status": next })))
            .await
        {
            Ok(_) => {}
            // The API server evaluates the CRD's CEL rules over the whole stored
            // object on a status write too, and a rule cannot read a field of the
            // wrong type ("invalid data, expected a map ... evaluating rule"): no
            // status can be written. The event says it instead.
            Err(kube::Error::Api(e)) if e.code == 422 => {
                let reference = ObjectReference {
                    api_version: Some(VLLMService::api_version(&()).into()),
                    kind: Some(VLLMService::kind(&()).into()),
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    uid: meta.uid.clone(),
                    ..ObjectReference::default()
                };
                let note = format!(
                    "{message}; the API server refuses any status for this object until it is \
                     fixed ({})",
                    e.message
                );
                events::publish_about(
                    ctx,
                    &reference,
                    EventType::Warning,
                    "InvalidSpec",
                    &note,
                    None,
                )
                .await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Patches the status subresource unless `next` equals `previous`; true when it wrote.
async fn patch_status_if_changed(
    api: &Api<VLLMService>,
    name: &str,
    previous: Option<&VLLMServiceStatus>,
    next: &VLLMServiceStatus,
) -> Result<bool> {
    if previous == Some(next) {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": VLLMService::api_version(&()),
        "kind": VLLMService::kind(&()),
        "status": next,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(name, &params, &Patch::Apply(body)).await?;
    Ok(true)
}

/// The status step's write: `next` through the status subresource when it
/// differs from what is stored, announcing transitions of Degraded and Available.
pub async fn status(ctx: &Context, vs: &VLLMService, next: VLLMServiceStatus) -> Result<()> {
    let api: Api<VLLMService> =
        Api::namespaced(ctx.client.clone(), &vs.namespace().unwrap_or_default());
    let previous = vs.status.as_ref();
    if patch_status_if_changed(&api, &vs.name_any(), previous, &next).await? {
        ctx.wrote_status(vs, &next);
        events::announce_transitions(ctx, vs, previous, &next).await;
    }
    Ok(())
}

/// Reports a spec the operator cannot use; retried when the object changes.
pub async fn invalid(ctx: &Context, vs: &VLLMService, message: &str) -> Result<Action> {
    let generation = vs.metadata.generation.unwrap_or_default();
    // The API server's refusal quotes the offending value, which may be a secret.
    let message = masking::mask_for(message, vs);
    let next = super::invalid(
        vs.status.as_ref(),
        generation,
        "InvalidSpec",
        &message,
        Timestamp::now(),
    );
    status(ctx, vs, next).await?;
    Ok(Action::await_change())
}
