//! The HTTPRoute that attaches the Service to the referenced Gateway listener
//! (`spec.gatewayRef`: Gateway, namespace, listener), built only when `spec.gatewayRef` is set.
//! Pure.

use gateway_api::apis::standard::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteSpec,
};
use vllmservice_api::Valid;

use crate::{names, reconcile::gateway::Target};

/// The HTTPRoute for `vs`, or None without a gatewayRef.
pub fn httproute(vs: &Valid<'_>) -> Option<HttpRoute> {
    let r = vs.spec.gateway_ref.as_ref()?;
    let target = Target::of(vs, r);
    Some(HttpRoute {
        metadata: names::child_meta(vs),
        spec: HttpRouteSpec {
            parent_refs: Some(vec![HttpRouteParentRefs {
                name: target.name,
                namespace: Some(target.namespace),
                section_name: Some(target.section_name),
                ..HttpRouteParentRefs::default()
            }]),
            hostnames: Some(vec![r.host.clone()]),
            rules: Some(vec![HttpRouteRules {
                backend_refs: Some(vec![HttpRouteRulesBackendRefs {
                    name: names::child_name(vs),
                    port: Some(vs.spec.port),
                    ..HttpRouteRulesBackendRefs::default()
                }]),
                ..HttpRouteRules::default()
            }]),
        },
        status: None,
    })
}
