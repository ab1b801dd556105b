//! KEDA's `ScaledObject` (`keda.sh/v1alpha1`), as much of it as the operator
//! writes, and the conditions of its status the operator reads (see
//! [`crate::kinds`]).

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerBehavior;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// What KEDA scales, between which bounds, on which triggers.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "ScaledObject",
    plural = "scaledobjects",
    namespaced,
    status = "ScaledObjectStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ScaledObjectSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advanced: Option<Advanced>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_period: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_cooldown_period: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replica_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replica_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polling_interval: Option<i32>,
    pub scale_target_ref: ScaleTargetRef,
    pub triggers: Vec<Trigger>,
}

/// `spec.advanced`: the HPA KEDA makes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Advanced {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizontal_pod_autoscaler_config: Option<HorizontalPodAutoscalerConfig>,
}

/// The name and behavior of the HPA KEDA makes (the behavior is the HPA's own type).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HorizontalPodAutoscalerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The object KEDA scales, through its scale subresource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
}

/// One scaler and its metric.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    /// The scaler's settings (for `prometheus`: serverAddress, query, threshold, ...).
    pub metadata: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The scaler (`prometheus`).
    pub r#type: String,
}

/// What KEDA reports: its conditions (Ready, Active, Fallback, Paused).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaledObjectStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// One of KEDA's conditions (its own type: no lastTransitionTime).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// True, False or Unknown.
    pub status: String,
    pub r#type: String,
}
