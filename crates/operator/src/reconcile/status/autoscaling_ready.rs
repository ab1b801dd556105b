//! AutoscalingReady, pure: what the spec asks of KEDA, whether the
//! ScaledObject is ours, and what KEDA (its Ready, Active and Fallback
//! conditions) and the HorizontalPodAutoscaler it made (ScalingLimited) say.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use vllmservice_api::{Autoscaling, Valid};

use crate::{
    kinds::keda::{Condition, ScaledObject},
    names, optional_apis,
    reconcile::{
        build::scaledobject::scales_to_zero,
        done::{Done, Outcome},
        seen::Seen,
        status::conditions::{Feature, Status},
    },
};

/// Reason of a ScaledObject KEDA has not reported on yet.
pub const PENDING: &str = "Pending";
/// Reason of `minReplicas: 0` without `activationQuery`.
pub const ACTIVATION_QUERY_MISSING: &str = "ActivationQueryMissing";

/// AutoscalingReady from the spec, what the read step saw and what the apply step did.
pub fn feature(vs: &Valid<'_>, seen: &Seen, done: &Done) -> Feature {
    let Some(a) = &vs.spec.autoscaling else {
        return Feature::ready("AutoscalingNotRequired", "spec.autoscaling is not set");
    };
    let not = |reason: &str, message: String| Feature {
        status: Status::False,
        reason: reason.into(),
        message,
    };
    if !seen.apis.keda {
        return not(
            "APINotInstalled",
            optional_apis::not_installed("KEDA autoscaler", &optional_apis::KEDA_CRDS),
        );
    }
    let name = names::child_name(vs);
    let scaled_object = match &done.scaled_object {
        Outcome::Live(so) => so,
        Outcome::Foreign => {
            return not(
                "ResourceConflict",
                format!("ScaledObject {name} exists and is not controlled by this VLLMService"),
            );
        }
        Outcome::Refused(message) => {
            return not(
                "ScaledObjectRefused",
                format!("the API server refused ScaledObject {name}: {message}"),
            );
        }
        Outcome::Absent | Outcome::Untouched => {
            return Feature {
                status: Status::Unknown,
                reason: PENDING.into(),
                message: format!("ScaledObject {name} has not been created yet"),
            };
        }
    };
    if a.min_replicas == 0 && a.activation_query().is_none() {
        return not(
            ACTIVATION_QUERY_MISSING,
            "spec.autoscaling.minReplicas is 0 but spec.autoscaling.activationQuery is not set: \
             vLLM exports no metrics at zero replicas, so nothing could scale the service back \
             up; it scales down to 1 only until activationQuery is set"
                .into(),
        );
    }
    let condition = |type_: &str| keda_condition(scaled_object, type_);
    let ready = condition("Ready").filter(|c| c.status != "Unknown");
    let Some(ready) = ready else {
        return Feature {
            status: Status::Unknown,
            reason: PENDING.into(),
            message: format!(
                "KEDA has not reported on ScaledObject {name} yet (is the KEDA operator running?)"
            ),
        };
    };
    if ready.status != "True" {
        let reason = ready
            .reason
            .as_deref()
            .filter(|r| is_reason(r))
            .unwrap_or("ScaledObjectNotReady");
        return not(
            reason,
            format!(
                "KEDA reports ScaledObject {name} not ready: {}",
                ready.message.as_deref().unwrap_or("no message")
            ),
        );
    }
    if let Some(fallback) = condition("Fallback").filter(|c| c.status == "True") {
        return not(
            "Fallback",
            format!(
                "KEDA cannot read the metric and holds ScaledObject {name} at its fallback \
                 replicas: {}",
                fallback.message.as_deref().unwrap_or("no message")
            ),
        );
    }
    let scope = scope(a);
    if let Some(limited) = scaling_limited(seen.hpa.as_ref()) {
        return Feature::ready(
            "ScalingLimited",
            &format!(
                "{scope}; HorizontalPodAutoscaler {}: {limited}",
                names::hpa_name(vs)
            ),
        );
    }
    match condition("Active").filter(|c| c.status == "True") {
        Some(_) => Feature::ready("Active", &format!("{scope}; now active")),
        None => Feature::ready("Idle", &format!("{scope}; now idle")),
    }
}

/// "KEDA scales 1–3 replicas on requestsWaiting, target 2 per replica".
fn scope(a: &Autoscaling) -> String {
    let min = if a.min_replicas == 0 && !scales_to_zero(a) {
        1
    } else {
        a.min_replicas
    };
    let on = match a.query() {
        Some(_) => format!("spec.autoscaling.prometheus.query (for {})", a.metric),
        None => a.metric.to_string(),
    };
    let from_zero = if scales_to_zero(a) {
        " (from 0 when the activation signal rises)"
    } else {
        ""
    };
    format!(
        "KEDA scales {min}–{} replicas on {on}, target {} per replica{from_zero}",
        a.max_replicas, a.target
    )
}

fn keda_condition<'a>(so: &'a ScaledObject, type_: &str) -> Option<&'a Condition> {
    so.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.r#type == type_)
}

/// The HPA's message when it cannot reach what the metric asks for: the
/// maximum, or a rate limit of its behavior. Held at the minimum
/// (TooFewReplicas) is where an idle service rests, not a limit.
fn scaling_limited(hpa: Option<&HorizontalPodAutoscaler>) -> Option<String> {
    let c = hpa?
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "ScalingLimited" && c.status == "True")?;
    if c.reason.as_deref() == Some("TooFewReplicas") {
        return None;
    }
    Some(
        c.message
            .clone()
            .or_else(|| c.reason.clone())
            .unwrap_or_else(|| "scaling is limited".into()),
    )
}

/// A condition reason as the API server accepts it (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`).
fn is_reason(r: &str) -> bool {
    r.len() <= 1024
        && r.starts_with(|c: char| c.is_ascii_alphabetic())
        && r.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && r.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optional_apis::Apis;
    use serde_json::{Value, json};
    use vllmservice_api::VLLMService;

    fn service(autoscaling: Option<Value>) -> VLLMService {
        let mut spec = json!({
            "image": "vllm/vllm-openai:latest", "modelPath": "/m", "modelName": "m",
            "storage": {"pvcName": "p", "mountPath": "/data"},
        });
        if let Some(a) = autoscaling {
            spec["autoscaling"] = a;
        }
        serde_json::from_value(json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "ns", "uid": "u"}, "spec": spec,
        }))
        .unwrap()
    }

    /// A ScaledObject with KEDA's conditions as (type, status, reason, message).
    fn reported(conditions: &[(&str, &str, &str, &str)]) -> Outcome<ScaledObject> {
        let conditions: Vec<Value> = conditions
            .iter()
            .map(|(t, s, r, m)| json!({"type": t, "status": s, "reason": r, "message": m}))
            .collect();
        Outcome::Live(
            serde_json::from_value(json!({
                "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                "metadata": {"name": "qwen", "namespace": "ns"},
                "spec": {"scaleTargetRef": {"name": "qwen"}, "triggers": []},
                "status": {"conditions": conditions},
            }))
            .unwrap(),
        )
    }

    fn hpa(reason: &str, message: &str) -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({
            "metadata": {"name": "keda-hpa-qwen", "namespace": "ns"},
            "spec": {"maxReplicas": 3, "scaleTargetRef": {"kind": "VLLMService", "name": "qwen"}},
            "status": {"desiredReplicas": 3, "conditions": [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
                {"type": "ScalingLimited", "status": "True", "reason": reason, "message": message},
            ]},
        }))
        .unwrap()
    }

    const RANGE: &str = r#"{"minReplicas": 1, "maxReplicas": 3, "target": "2"}"#;

    fn keda() -> Seen {
        Seen {
            apis: Apis {
                keda: true,
                ..Apis::default()
            },
            ..Seen::default()
        }
    }

    fn derive(autoscaling: Option<&str>, seen: &Seen, so: Outcome<ScaledObject>) -> Feature {
        let vs = service(autoscaling.map(|a| serde_json::from_str(a).unwrap()));
        let valid = vllmservice_api::validate(&vs).unwrap();
        let done = Done {
            scaled_object: so,
            ..Done::default()
        };
        feature(&valid, seen, &done)
    }

    const READY: (&str, &str, &str, &str) = (
        "Ready",
        "True",
        "ScaledObjectReady",
        "ScaledObject is defined correctly and is ready for scaling",
    );

    #[test]
    fn not_asked_for() {
        let f = derive(None, &Seen::default(), Outcome::Untouched);
        assert_eq!(
            (f.status, f.reason.as_str(), f.message.as_str()),
            (
                Status::True,
                "AutoscalingNotRequired",
                "spec.autoscaling is not set"
            )
        );
    }

    #[test]
    fn keda_not_installed() {
        let f = derive(Some(RANGE), &Seen::default(), Outcome::Untouched);
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::False, "APINotInstalled")
        );
        assert!(
            f.message.contains("KEDA") && f.message.contains("scaledobjects.keda.sh"),
            "{}",
            f.message
        );
    }

    #[test]
    fn someone_elses_scaled_object() {
        let f = derive(Some(RANGE), &keda(), Outcome::Foreign);
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::False, "ResourceConflict")
        );
        assert!(f.message.contains("ScaledObject qwen"), "{}", f.message);
    }

    #[test]
    fn refused_by_kedas_webhook() {
        let denied = "admission webhook \"vscaledobject.kb.io\" denied the request: the \
                      workload 'qwen' of type 'aiinfra.example.com/VLLMService' is already \
                      managed by the hpa 'mine'";
        let f = derive(Some(RANGE), &keda(), Outcome::Refused(denied.into()));
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::False, "ScaledObjectRefused")
        );
        assert!(
            f.message.ends_with("managed by the hpa 'mine'"),
            "{}",
            f.message
        );
    }

    #[test]
    fn scale_to_zero_without_an_activation_query() {
        let a = r#"{"minReplicas": 0, "maxReplicas": 3, "target": "2"}"#;
        let f = derive(Some(a), &keda(), reported(&[READY]));
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::False, ACTIVATION_QUERY_MISSING)
        );
        for words in [
            "vLLM exports no metrics at zero replicas",
            "spec.autoscaling.activationQuery",
            "scales down to 1 only until",
        ] {
            assert!(f.message.contains(words), "{words}: {}", f.message);
        }
    }

    #[test]
    fn pending_until_keda_reports() {
        for so in [
            reported(&[]),
            reported(&[("Ready", "Unknown", "", ""), ("Active", "Unknown", "", "")]),
        ] {
            let f = derive(Some(RANGE), &keda(), so);
            assert_eq!((f.status, f.reason.as_str()), (Status::Unknown, PENDING));
            assert!(f.message.contains("KEDA"), "{}", f.message);
        }
    }

    #[test]
    fn not_ready_with_kedas_reason_and_message() {
        let f = derive(
            Some(RANGE),
            &keda(),
            reported(&[(
                "Ready",
                "False",
                "ScaledObjectCheckFailed",
                "Target resource doesn't exist",
            )]),
        );
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::False, "ScaledObjectCheckFailed")
        );
        assert_eq!(
            f.message,
            "KEDA reports ScaledObject qwen not ready: Target resource doesn't exist"
        );
        // A reason the API server would refuse is replaced.
        let f = derive(
            Some(RANGE),
            &keda(),
            reported(&[("Ready", "False", "bad reason!", "m")]),
        );
        assert_eq!(f.reason, "ScaledObjectNotReady");
    }

    #[test]
    fn fallback() {
        let f = derive(
            Some(RANGE),
            &keda(),
            reported(&[
                READY,
                (
                    "Fallback",
                    "True",
                    "FallbackExists",
                    "At least one trigger is falling back on this scaled object",
                ),
            ]),
        );
        assert_eq!((f.status, f.reason.as_str()), (Status::False, "Fallback"));
        assert!(f.message.contains("falling back"), "{}", f.message);
    }

    #[test]
    fn active_idle_and_limited() {
        let active = (
            "Active",
            "True",
            "ScalerActive",
            "Scaling is performed because triggers are active",
        );
        let f = derive(Some(RANGE), &keda(), reported(&[READY, active]));
        assert_eq!(
            (f.status, f.reason.as_str(), f.message.as_str()),
            (
                Status::True,
                "Active",
                "KEDA scales 1–3 replicas on requestsWaiting, target 2 per replica; now active"
            )
        );
        let idle = (
            "Active",
            "False",
            "ScalerNotActive",
            "triggers are not active",
        );
        let f = derive(Some(RANGE), &keda(), reported(&[READY, idle]));
        assert_eq!((f.status, f.reason.as_str()), (Status::True, "Idle"));
        assert!(f.message.ends_with("now idle"), "{}", f.message);

        let limited = Seen {
            hpa: Some(hpa(
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            )),
            ..keda()
        };
        let f = derive(Some(RANGE), &limited, reported(&[READY, active]));
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::True, "ScalingLimited")
        );
        assert!(
            f.message.ends_with(
                "HorizontalPodAutoscaler keda-hpa-qwen: the desired replica count is more than \
                 the maximum replica count"
            ),
            "{}",
            f.message
        );
        // Resting at the minimum is not a limit.
        let resting = Seen {
            hpa: Some(hpa(
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )),
            ..keda()
        };
        let f = derive(Some(RANGE), &resting, reported(&[READY, idle]));
        assert_eq!(f.reason, "Idle");
    }

    #[test]
    fn the_message_names_a_custom_query_and_scaling_from_zero() {
        let a = r#"{"minReplicas": 0, "maxReplicas": 4, "metric": "kvCacheUsage", "target": "0.8",
            "activationQuery": "sum(queue)", "prometheus": {"query": "sum(x)"}}"#;
        let f = derive(Some(a), &keda(), reported(&[READY]));
        assert_eq!(
            f.message,
            "KEDA scales 0–4 replicas on spec.autoscaling.prometheus.query (for kvCacheUsage), \
             target 0.8 per replica (from 0 when the activation signal rises); now idle"
        );
    }
}
