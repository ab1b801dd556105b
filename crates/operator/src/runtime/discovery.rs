//! Which optional APIs the cluster serves, read from their CRDs (a list by
//! name each: the operator may list and watch CRDs, nothing more), and a
//! watch of the CRDs that says when that changes, so that installing one
//! later needs no operator restart. I/O: reads and watches CRDs.

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};

use super::{retry::backoff, watches::watch_backoff};
use crate::optional_apis::{self, Apis, CrdConditions};

/// Reads the optional APIs' CRDs; an API counts as installed when all its
/// CRDs are Established.
pub async fn discover(client: &Client) -> kube::Result<Apis> {
    let crds: Api<CrdConditions> = Api::all(client.clone());
    let mut established = Vec::new();
    for name in optional_apis::all_crds() {
        let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
        let crd = crds.list(&by_name).await?.items.into_iter().next();
        if crd.is_some_and(|crd| crd.is_established()) {
            established.push(name.to_string());
        }
    }
    Ok(Apis::from_established(&established))
}

/// [`discover`], retried with backoff until it answers.
pub async fn discover_until_ok(client: &Client) -> Apis {
    let mut failures = 0;
    loop {
        match discover(client).await {
            Ok(apis) => return apis,
            Err(e) => {
                failures += 1;
                let delay = backoff(failures);
                tracing::warn!(error = %e, retry_in = ?delay, "reading CRDs failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// What [`changed`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The installed optional APIs are now these: their watches start or stop.
    Apis(Apis),
    /// The connection to the API server was lost and is back: every watch is rebuilt.
    Reconnected,
}

/// Completes when the set of installed optional APIs differs from `current`,
/// or when the connection to the API server was lost (e.g. it restarted) and
/// is back.
///
/// A single watch whose connection breaks lists again by itself
/// (`watches::relisting`); but after an API-server restart some watches resumed
/// from their old resourceVersion and were answered only after 1-4 minutes
/// (with 410 Gone), so changes made meanwhile went unseen (docs/reliability.md;
/// still so with per-watch relisting, 2026-12-07). Losing the CRD watch's
/// connection is taken as losing the API server: every watch is rebuilt,
/// which lists at once.
pub async fn changed(client: Client, current: Apis) -> Change {
    let crds = Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone());
    // A plain watcher: a lost connection ends this function (below), so it
    // never needs to list again by itself.
    let mut events = watcher(crds, watcher::Config::default())
        .backoff(watch_backoff())
        .boxed();
    // A (re-)list is checked once as a whole, not once per CRD in it: a CRD
    // installed between the discovery of `current` and the first list shows only there.
    while let Some(event) = events.next().await {
        let relevant = match event {
            // The API server answered (with an error status, e.g. 403): still connected.
            Err(
                watcher::Error::WatchError(_)
                | watcher::Error::InitialListFailed(kube::Error::Api(_))
                | watcher::Error::WatchStartFailed(kube::Error::Api(_))
                | watcher::Error::WatchFailed(kube::Error::Api(_)),
            ) => false,
            Err(e) => {
                tracing::warn!(error = %e, "lost the connection to the API server");
                while discover(&client).await.is_err() {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                tracing::info!("the API server is reachable again");
                return Change::Reconnected;
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
            Ok(watcher::Event::InitDone) => true,
            Ok(watcher::Event::Apply(crd) | watcher::Event::Delete(crd)) => {
                Apis::is_relevant(&crd.name_any())
            }
        };
        if relevant
            && let Ok(now) = discover(&client).await
            && now != current
        {
            tracing::info!(
                gateway_api = now.gateway,
                prometheus_operator = now.prometheus,
                keda = now.keda,
                "optional APIs changed"
            );
            return Change::Apis(now);
        }
    }
    // The watch never ends by itself (it retries every error).
    Change::Reconnected
}
