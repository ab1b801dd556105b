//! Routing through a Gateway: resolve `spec.gatewayRef` against the Gateway
//! the read step saw (missing Gateway or listener, a listener that is not
//! HTTP or HTTPS, one outside the watched namespace), and read the Gateway
//! controller's verdict back from the route's status. Pure.

use gateway_api::apis::standard::httproutes::HttpRoute;
use kube::ResourceExt;
use vllmservice_api::{GatewayRef, VLLMService};

use crate::{
    cache::CachedGateway,
    optional_apis,
    reconcile::{
        seen::{GatewaySeen, Seen},
        status::conditions::{Feature, Status},
    },
};

/// Where `spec.gatewayRef` points, with the namespace defaulted to the VLLMService's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub section_name: String,
}

impl Target {
    pub fn of(vs: &VLLMService, r: &GatewayRef) -> Target {
        Target {
            namespace: r
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| vs.namespace().unwrap_or_default()),
            name: r.name.clone(),
            section_name: r.section_name.clone(),
        }
    }
}

/// The outcome of resolving a gatewayRef before any write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Resolution {
    /// No gatewayRef: no route is wanted.
    #[default]
    NotRequested,
    /// A gatewayRef, but the Gateway API is not installed: nothing is touched.
    ApiMissing,
    /// The Gateway exists and has an HTTP or HTTPS listener of that name.
    Resolved(Target),
    /// The Gateway or the listener is missing: may appear later; retried.
    Missing {
        reason: &'static str,
        message: String,
    },
    /// The listener is not HTTP/HTTPS: a configuration error; not retried on a timer.
    WrongProtocol { message: String },
}

impl Resolution {
    /// The Gateway listener the route attaches to, or RouteReady saying why
    /// there is none (once resolved, only the Gateway controller's verdict counts).
    pub fn target(&self) -> Result<&Target, Feature> {
        let unresolved = |reason: &str, message: &str| Feature {
            status: Status::False,
            reason: reason.into(),
            message: message.into(),
        };
        match self {
            Resolution::NotRequested => Err(Feature::ready(
                "RouteNotRequired",
                "spec.gatewayRef is not set",
            )),
            Resolution::ApiMissing => Err(unresolved(
                "APINotInstalled",
                &optional_apis::not_installed("Gateway API", &optional_apis::GATEWAY_CRDS),
            )),
            Resolution::Resolved(target) => Ok(target),
            Resolution::Missing { reason, message } => Err(unresolved(reason, message)),
            Resolution::WrongProtocol { message } => {
                Err(unresolved("UnsupportedProtocol", message))
            }
        }
    }
}

/// Resolves `vs`'s gatewayRef against what the read step saw: the Gateway's
/// namespace defaults to the VLLMService's, and the listener must exist and
/// speak HTTP or HTTPS.
pub fn resolve(vs: &VLLMService, seen: &Seen) -> Resolution {
    let Some(r) = &vs.spec.gateway_ref else {
        return Resolution::NotRequested;
    };
    if !seen.apis.gateway {
        return Resolution::ApiMissing;
    }
    let target = Target::of(vs, r);
    match &seen.gateway {
        GatewaySeen::Found(gateway) => check_listener(gateway, target),
        GatewaySeen::OutsideWatchedNamespace { watched } => Resolution::Missing {
            reason: "GatewayNotWatched",
            message: match watched.as_slice() {
                [one] => format!(
                    "Gateway {}/{} (spec.gatewayRef) is outside the namespace {one} that the \
                     operator watches; use a Gateway in {one} or run the operator for all namespaces",
                    target.namespace, target.name
                ),
                many => format!(
                    "Gateway {}/{} (spec.gatewayRef) is outside the namespaces the operator \
                     watches ({}); use a Gateway in one of them or add {} to the operator's \
                     --watch-namespace",
                    target.namespace,
                    target.name,
                    many.join(", "),
                    target.namespace
                ),
            },
        },
        GatewaySeen::Missing | GatewaySeen::NotLooked => Resolution::Missing {
            reason: "GatewayNotFound",
            message: format!(
                "Gateway {}/{} (spec.gatewayRef) does not exist",
                target.namespace, target.name
            ),
        },
    }
}

/// The listener check of [`resolve`].
pub fn check_listener(gateway: &CachedGateway, target: Target) -> Resolution {
    let Some(listener) = gateway
        .spec
        .listeners
        .iter()
        .find(|l| l.name == target.section_name)
    else {
        return Resolution::Missing {
            reason: "ListenerNotFound",
            message: format!(
                "Gateway {}/{} has no listener named {:?} (spec.gatewayRef.sectionName)",
                target.namespace, target.name, target.section_name
            ),
        };
    };
    if listener.protocol != "HTTP" && listener.protocol != "HTTPS" {
        return Resolution::WrongProtocol {
            message: format!(
                "listener {:?} of Gateway {}/{} has protocol {}; an HTTPRoute needs an HTTP or HTTPS listener",
                target.section_name, target.namespace, target.name, listener.protocol
            ),
        };
    }
    Resolution::Resolved(target)
}

/// RouteReady from the route's own status: True only when the Gateway
/// controller's entry for our parentRef says Accepted=True and
/// ResolvedRefs=True, observed at the route's current generation.
pub fn route_readiness(route: &HttpRoute, target: &Target) -> Feature {
    let generation = route.metadata.generation;
    let route_ns = route.namespace().unwrap_or_default();
    let entry = route.status.iter().flat_map(|s| &s.parents).find(|p| {
        let r = &p.parent_ref;
        r.name == target.name
            && r.namespace.clone().unwrap_or_else(|| route_ns.clone()) == target.namespace
            && r.section_name.as_deref() == Some(target.section_name.as_str())
    });
    let pending = |message: &str| Feature {
        status: Status::Unknown,
        reason: "RoutePending".into(),
        message: message.into(),
    };
    let Some(entry) = entry else {
        return pending(&format!(
            "waiting for the controller of Gateway {}/{} to accept HTTPRoute {}",
            target.namespace,
            target.name,
            route.name_any()
        ));
    };
    let current = |t: &str| {
        entry
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .filter(|c| generation.is_none() || c.observed_generation == generation)
    };
    let (Some(accepted), Some(resolved)) = (current("Accepted"), current("ResolvedRefs")) else {
        return pending(&format!(
            "the Gateway controller {} has not yet reported on the latest HTTPRoute {}",
            entry.controller_name,
            route.name_any()
        ));
    };
    for c in [accepted, resolved] {
        if c.status != "True" {
            return Feature {
                status: if c.status == "False" {
                    Status::False
                } else {
                    Status::Unknown
                },
                reason: c.reason.clone(),
                message: format!("{}={}: {}", c.type_, c.status, c.message),
            };
        }
    }
    Feature::ready(
        "Accepted",
        &format!(
            "HTTPRoute {} is accepted by Gateway {}/{} listener {}",
            route.name_any(),
            target.namespace,
            target.name,
            target.section_name
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target() -> Target {
        Target {
            namespace: "gw".into(),
            name: "llm-gateway".into(),
            section_name: "http".into(),
        }
    }

    fn gateway(protocol: &str) -> CachedGateway {
        serde_json::from_value(json!({
            "metadata": {"name": "llm-gateway", "namespace": "gw"},
            "spec": {"gatewayClassName": "eg", "listeners": [
                {"name": "http", "port": 80, "protocol": protocol}]}
        }))
        .unwrap()
    }

    fn route(generation: i64, conds: serde_json::Value) -> HttpRoute {
        serde_json::from_value(json!({
            "metadata": {"name": "qwen", "namespace": "ai", "generation": generation},
            "spec": {},
            "status": {"parents": [{
                "controllerName": "example.com/gw",
                "parentRef": {"name": "llm-gateway", "namespace": "gw", "sectionName": "http"},
                "conditions": conds}]}
        }))
        .unwrap()
    }

    fn cond(t: &str, s: &str, reason: &str, g: i64) -> serde_json::Value {
        json!({"type": t, "status": s, "reason": reason, "message": "m",
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": g})
    }

    #[test]
    fn listeners_are_checked_by_name_and_protocol() {
        assert_eq!(
            check_listener(&gateway("HTTPS"), target()),
            Resolution::Resolved(target())
        );
        let tcp = check_listener(&gateway("TCP"), target());
        assert!(
            matches!(&tcp, Resolution::WrongProtocol { message } if message.contains("protocol TCP"))
        );
        let other = Target {
            section_name: "grpc".into(),
            ..target()
        };
        assert!(matches!(
            check_listener(&gateway("HTTP"), other),
            Resolution::Missing {
                reason: "ListenerNotFound",
                ..
            }
        ));
    }

    #[test]
    fn route_is_ready_only_when_accepted_and_resolved_at_its_generation() {
        let ok = route(
            2,
            json!([
                cond("Accepted", "True", "Accepted", 2),
                cond("ResolvedRefs", "True", "ResolvedRefs", 2)
            ]),
        );
        assert_eq!(route_readiness(&ok, &target()).status, Status::True);

        let stale = route(
            3,
            json!([
                cond("Accepted", "True", "Accepted", 2),
                cond("ResolvedRefs", "True", "ResolvedRefs", 2)
            ]),
        );
        let f = route_readiness(&stale, &target());
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::Unknown, "RoutePending")
        );

        let refused = route(
            2,
            json!([
                cond("Accepted", "False", "NotAllowedByListeners", 2),
                cond("ResolvedRefs", "True", "ResolvedRefs", 2)
            ]),
        );
        let f = route_readiness(&refused, &target());
        assert_eq!(
            (f.status, f.reason.as_str()),
            (Status::False, "NotAllowedByListeners")
        );

        let other_parent = Target {
            section_name: "https".into(),
            ..target()
        };
        assert_eq!(route_readiness(&ok, &other_parent).status, Status::Unknown);
    }
}
