//! The watches of the optional APIs (the Gateway API, the Prometheus
//! Operator, KEDA): an API's watches start when its CRDs appear and stop when
//! they go, while every other watch runs on. An API's caches are handed to
//! the reconciles (published) only once they hold their first lists, so a
//! reconcile never takes an empty cache for "no children"; then every
//! VLLMService is reconciled again. I/O: the watches.

use futures::channel::mpsc;
use gateway_api::apis::standard::httproutes::HttpRoute;
use kube::{
    Client, Resource, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use tokio::sync::watch;

use super::{
    CACHE_SYNC_TIMEOUT,
    watches::{Keep, ListStrategy, Select, Watches},
};
use crate::{
    cache::{CachedGateway, CachedVllmService, OptionalCaches},
    kinds::{
        keda::ScaledObject,
        prometheus::{PrometheusRule, ServiceMonitor},
    },
    optional_apis::Apis,
    reconcile::gateway::Target,
};

/// A reconcile of these VLLMServices.
pub type Triggers = mpsc::Sender<ObjectRef<CachedVllmService>>;

/// The running watches of each optional API, and where they publish.
pub struct OptionalWatches {
    client: Client,
    namespaces: Vec<String>,
    lists: ListStrategy,
    /// The VLLMServices, to find those that name a changed Gateway.
    services: Store<CachedVllmService>,
    /// The controller's inputs for watches started after it.
    triggers: Triggers,
    reconcile_all: mpsc::Sender<()>,
    published: watch::Sender<OptionalCaches>,
    gateway: Option<Watches>,
    prometheus: Option<Watches>,
    keda: Option<Watches>,
}

impl OptionalWatches {
    /// No watches yet: [`OptionalWatches::set`] starts them. `published` is
    /// where the reconciles find the caches.
    pub fn new(
        client: Client,
        namespaces: Vec<String>,
        lists: ListStrategy,
        services: Store<CachedVllmService>,
        triggers: Triggers,
        reconcile_all: mpsc::Sender<()>,
        published: watch::Sender<OptionalCaches>,
    ) -> Self {
        OptionalWatches {
            client,
            namespaces,
            lists,
            services,
            triggers,
            reconcile_all,
            published,
            gateway: None,
            prometheus: None,
            keda: None,
        }
    }

    /// Runs the watches of the APIs in `apis` and no others. An API that went
    /// is withdrawn from the reconciles before its watches stop.
    pub fn set(&mut self, apis: Apis) {
        let mut withdrawn = false;
        if !apis.gateway && self.gateway.take().is_some() {
            self.published.send_modify(|o| {
                (o.apis.gateway, o.routes, o.gateways) = (false, None, None);
            });
            withdrawn = true;
        }
        if !apis.prometheus && self.prometheus.take().is_some() {
            self.published.send_modify(|o| {
                (o.apis.prometheus, o.monitors, o.rules) = (false, None, None);
            });
            withdrawn = true;
        }
        if !apis.keda && self.keda.take().is_some() {
            self.published.send_modify(|o| {
                (o.apis.keda, o.scaled_objects) = (false, None);
            });
            withdrawn = true;
        }
        if withdrawn {
            let _ = self.reconcile_all.try_send(());
        }
        if apis.gateway && self.gateway.is_none() {
            self.gateway = Some(self.start_gateway());
        }
        if apis.prometheus && self.prometheus.is_none() {
            self.prometheus = Some(self.start_prometheus());
        }
        if apis.keda && self.keda.is_none() {
            self.keda = Some(self.start_keda());
        }
    }

    /// Completes when a watch task of an optional API ends, as [`Watches::ended`].
    pub async fn ended(&mut self) -> String {
        let running: Vec<_> = [&mut self.gateway, &mut self.prometheus, &mut self.keda]
            .into_iter()
            .flatten()
            .map(|w| Box::pin(w.ended()))
            .collect();
        if running.is_empty() {
            return std::future::pending().await;
        }
        futures::future::select_all(running).await.0
    }

    fn watches(&self) -> Watches {
        Watches::new(self.client.clone(), self.namespaces.clone(), self.lists)
    }

    fn start_gateway(&self) -> Watches {
        let mut w = self.watches();
        let routes = w.cache_triggering::<HttpRoute>(
            Select::Managed,
            Keep::Every,
            owners,
            self.triggers.clone(),
        );
        let services = self.services.clone();
        let gateways = w.cache_triggering::<CachedGateway>(
            Select::All,
            Keep::Every,
            move |gw| services_using_gateway(&services, gw),
            self.triggers.clone(),
        );
        let caches = OptionalCaches {
            routes: Some(routes),
            gateways: Some(gateways),
            ..OptionalCaches::default()
        };
        self.publish_when_synced(&mut w, caches, |o, c| {
            (o.apis.gateway, o.routes, o.gateways) = (true, c.routes, c.gateways);
        });
        w
    }

    fn start_prometheus(&self) -> Watches {
        let mut w = self.watches();
        let monitors = w.cache_triggering::<ServiceMonitor>(
            Select::Managed,
            Keep::Every,
            owners,
            self.triggers.clone(),
        );
        let rules = w.cache_triggering::<PrometheusRule>(
            Select::Managed,
            Keep::Every,
            owners,
            self.triggers.clone(),
        );
        let caches = OptionalCaches {
            monitors: Some(monitors),
            rules: Some(rules),
            ..OptionalCaches::default()
        };
        self.publish_when_synced(&mut w, caches, |o, c| {
            (o.apis.prometheus, o.monitors, o.rules) = (true, c.monitors, c.rules);
        });
        w
    }

    fn start_keda(&self) -> Watches {
        let mut w = self.watches();
        let scaled_objects = w.cache_triggering::<ScaledObject>(
            Select::Managed,
            Keep::Every,
            owners,
            self.triggers.clone(),
        );
        let caches = OptionalCaches {
            scaled_objects: Some(scaled_objects),
            ..OptionalCaches::default()
        };
        self.publish_when_synced(&mut w, caches, |o, c| {
            (o.apis.keda, o.scaled_objects) = (true, c.scaled_objects);
        });
        w
    }

    /// Once `caches` hold their first lists (or after [`CACHE_SYNC_TIMEOUT`]:
    /// a watch that is refused never fills, and the reconciles then say why),
    /// puts them where the reconciles look (`publish`) and reconciles every
    /// VLLMService. Runs with the watches of `w`, and stops with them.
    fn publish_when_synced(
        &self,
        w: &mut Watches,
        caches: OptionalCaches,
        publish: impl FnOnce(&mut OptionalCaches, OptionalCaches) + Send + 'static,
    ) {
        let (published, mut reconcile_all) = (self.published.clone(), self.reconcile_all.clone());
        w.spawn_helper(async move {
            if tokio::time::timeout(CACHE_SYNC_TIMEOUT, caches.synced())
                .await
                .is_err()
            {
                tracing::warn!(timeout = ?CACHE_SYNC_TIMEOUT, "some watch caches of an optional API are not filled; using them anyway");
            }
            published.send_modify(|o| publish(o, caches));
            let _ = reconcile_all.try_send(());
        });
    }
}

/// The VLLMServices that own `child`.
fn owners<K: Resource>(child: &K) -> Vec<ObjectRef<CachedVllmService>> {
    let ns = child.meta().namespace.as_deref();
    child
        .owner_references()
        .iter()
        .filter_map(|o| ObjectRef::from_owner_ref(ns, o, ()))
        .collect()
}

/// The VLLMServices in the cache whose `gatewayRef` names `gw`, to reconcile
/// when it changes.
pub fn services_using_gateway(
    store: &Store<CachedVllmService>,
    gw: &impl Resource,
) -> Vec<ObjectRef<CachedVllmService>> {
    let (Some(ns), Some(name)) = (&gw.meta().namespace, &gw.meta().name) else {
        return vec![];
    };
    store
        .state()
        .iter()
        .filter_map(|c| c.0.as_ref().ok())
        .filter(|vs| {
            vs.spec.gateway_ref.as_ref().is_some_and(|r| {
                let t = Target::of(vs, r);
                &t.namespace == ns && &t.name == name
            })
        })
        .map(|vs| ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_child_triggers_the_vllmservice_that_owns_it_and_nothing_else() {
        let route: HttpRoute = serde_json::from_value(json!({
            "metadata": {"name": "chat", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
                 "name": "chat", "uid": "u", "controller": true},
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other", "uid": "d"}]},
            "spec": {}
        }))
        .unwrap();
        assert_eq!(
            owners(&route),
            [ObjectRef::<CachedVllmService>::new("chat").within("ns")]
        );
    }
}
