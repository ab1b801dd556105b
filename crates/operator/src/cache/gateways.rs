//! Gateways as the cache keeps them: the listeners' names and protocols, the
//! only fields the routing reads. A Gateway is another party's object, and
//! Gateway API adds values over time: a fully typed Gateway holding a value
//! newer than the gateway-api crate knows fails to parse, and one such object
//! fails the watch's whole list, every retry. This projection reads any
//! Gateway. No I/O.

use gateway_api::apis::standard::gateways::Gateway;
use kube::{Resource, api::ObjectMeta};
use serde::Deserialize;

/// A Gateway with only what `spec.gatewayRef`'s resolution reads.
#[derive(Resource, Clone, Debug, Deserialize)]
#[resource(inherit = "Gateway")]
pub struct CachedGateway {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CachedGatewaySpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedGatewaySpec {
    #[serde(default)]
    pub listeners: Vec<CachedListener>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedListener {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub protocol: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_gateway_with_values_the_typed_kind_refuses_is_read() {
        let gateway = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "ns"},
            "spec": {"gatewayClassName": "eg", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP",
                 "allowedRoutes": {"namespaces": {"from": "SomeFutureValue"}}}]}
        });
        // The typed Gateway refuses the new enum value: its watch would never list.
        assert!(serde_json::from_value::<Gateway>(gateway.clone()).is_err());
        let cached: CachedGateway = serde_json::from_value(gateway).unwrap();
        assert_eq!(cached.spec.listeners[0].name, "http");
        assert_eq!(cached.spec.listeners[0].protocol, "HTTP");
    }
}
