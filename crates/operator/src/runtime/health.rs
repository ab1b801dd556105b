//! What the operator's `/readyz` and `/healthz` report: whether the controller's
//! caches hold their first complete lists, and whether its loop still runs.
//! No I/O: the binary serves these flags.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// Shared between the controller (which sets it) and the health endpoints (which read it).
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    caches_synced: AtomicBool,
    running: AtomicBool,
    stopped: AtomicBool,
}

impl Health {
    /// True once every cache of the running controller holds a complete list.
    pub fn caches_synced(&self) -> bool {
        self.0.caches_synced.load(Ordering::Acquire)
    }

    /// True while the controller loop runs.
    pub fn running(&self) -> bool {
        self.0.running.load(Ordering::Acquire)
    }

    /// True when the controller loop has ended (it only ends on shutdown or on a bug).
    pub fn stopped(&self) -> bool {
        self.0.stopped.load(Ordering::Acquire)
    }

    pub(crate) fn set_caches_synced(&self, synced: bool) {
        self.0.caches_synced.store(synced, Ordering::Release);
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.0.running.store(running, Ordering::Release);
        if !running {
            self.0.stopped.store(true, Ordering::Release);
        }
    }
}
