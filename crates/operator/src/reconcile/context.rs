//! What every reconcile shares: the client, the caches, the event recorder,
//! metrics, the operator's settings, and per-object memory (retry counts, the
//! statuses written that the cache does not show yet). No I/O of its own.

use std::{borrow::Cow, sync::Arc, time::Duration};

use kube::{
    Client, Resource,
    runtime::{
        events::{Recorder, Reporter},
        reflector::Store,
    },
};
use vllmservice_api::{VLLMService, VLLMServiceStatus};

use crate::{
    cache::{CachedVllmService, Caches, StatusEchoes},
    reconcile::build::Defaults,
    runtime::{metrics::Metrics, retry::Failures},
};

/// The operator's settings that the reconciles read.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Re-check every object this often even without events.
    pub resync: Duration,
    /// How long a new VLLMService's first status may wait for its pods
    /// (`status::settle`); zero writes it at once.
    pub status_settle: Duration,
    /// What the operator's flags put into the objects it builds.
    pub defaults: Defaults,
    /// The namespaces the controller watches (none: all).
    pub namespaces: Vec<String>,
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// The controller's cache of VLLMServices.
    pub services: Store<CachedVllmService>,
    /// The controller's caches of children and of the objects they depend on.
    pub caches: Caches,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub settings: Settings,
    /// Consecutive failures per object, for exponential backoff.
    pub failures: Failures,
    /// The generation of each VLLMService that passed validation.
    pub passed: Arc<vllmservice_api::Passed>,
    /// The statuses written that the cache does not show yet.
    written: StatusEchoes,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        reporter: Reporter,
        settings: Settings,
        services: Store<CachedVllmService>,
        caches: Caches,
        written: StatusEchoes,
        failures: Failures,
        passed: Arc<vllmservice_api::Passed>,
    ) -> Self {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            services,
            caches,
            metrics,
            settings,
            failures,
            passed,
            written,
        }
    }

    /// `vs` with the status it has now: the cached copy, unless this operator has
    /// written a status the cache does not show yet.
    pub fn latest<'a>(&self, vs: &'a VLLMService) -> Cow<'a, VLLMService> {
        self.written.latest(vs)
    }

    /// Remembers a status written for `vs` (the copy the write was based on).
    pub fn wrote_status(&self, vs: &VLLMService, status: &VLLMServiceStatus) {
        self.written.wrote(vs, status, |key| {
            self.services
                .get(key)
                .map(|c| c.meta().resource_version.clone())
        });
    }
}
