//! What the vLLM pods and the download pods share: the security settings
//! the operator defaults, and how optional spec fields become pod fields. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};
use vllmservice_api::Valid;

pub fn non_empty<K: Ord, V>(m: &BTreeMap<K, V>) -> Option<BTreeMap<K, V>>
where
    BTreeMap<K, V>: Clone,
{
    (!m.is_empty()).then(|| m.clone())
}

/// An optional string field, where "" means unset (as in the Go operator).
pub fn set(v: &Option<String>) -> Option<String> {
    v.clone().filter(|s| !s.is_empty())
}

pub fn non_empty_vec<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    (!v.is_empty()).then(|| v.to_vec())
}

/// What every pod of a service has, serving or downloading: where it may run,
/// its pull secrets and identity, and the pod security settings. Neither needs
/// the Kubernetes API, and service links would inject `VLLM_PORT=tcp://...`
/// for any Service named vllm*, which collides with vLLM's own `VLLM_*`
/// settings (vLLM refuses to start).
pub fn pod_base(vs: &Valid<'_>) -> PodSpec {
    let s = &vs.spec;
    PodSpec {
        node_selector: non_empty(&s.node_selector),
        tolerations: non_empty_vec(&s.tolerations),
        affinity: s.affinity.clone(),
        image_pull_secrets: non_empty_vec(&s.image_pull_secrets),
        service_account_name: set(&s.service_account_name),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(pod_security(vs)),
        ..PodSpec::default()
    }
}

/// The container's security settings: the user's, with what they leave unset
/// defaulted so that the pod passes the baseline and restricted Pod Security
/// Standards (no privilege escalation, no capabilities).
pub fn container_security(vs: &Valid<'_>) -> SecurityContext {
    let mut sc = vs.spec.security_context.clone().unwrap_or_default();
    // A privileged container escalates by definition; the API server refuses both together.
    if sc.privileged != Some(true) {
        sc.allow_privilege_escalation.get_or_insert(false);
    }
    sc.capabilities.get_or_insert_with(|| Capabilities {
        drop: Some(vec!["ALL".into()]),
        ..Capabilities::default()
    });
    sc
}

/// The pod's security settings: the user's, with the RuntimeDefault seccomp
/// profile unless the pod or the container chose one.
pub fn pod_security(vs: &Valid<'_>) -> PodSecurityContext {
    let mut psc = vs.spec.pod_security_context.clone().unwrap_or_default();
    let container_chose = vs
        .spec
        .security_context
        .as_ref()
        .is_some_and(|c| c.seccomp_profile.is_some());
    if !container_chose {
        psc.seccomp_profile.get_or_insert_with(|| SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        });
    }
    psc
}
