//! Errors of a reconcile, each with a category that decides the retry policy
//! and appears in metrics and events. (Problems of the spec, missing
//! dependencies and foreign objects are not errors: they are reported in
//! status and the reconcile succeeds.)
//! No I/O.

use crate::cache::NotSynced;

/// Why a reconcile failed; every failure is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A watch cache holds no complete list (its watch failed, e.g. a missing RBAC rule).
    #[error("the operator cannot read {}: its watch has not listed them yet{}", .0.resource,
        .0.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    CacheNotSynced(NotSynced),
    /// A cached child's spec no longer parses as its type (a value newer than
    /// the operator's Kubernetes types); retried with backoff.
    #[error(transparent)]
    UnreadableSpec(#[from] crate::cache::children::UnreadableSpec),
    /// The reconcile panicked (a bug): reported on this object and retried
    /// with backoff; the other objects go on.
    #[error("the reconcile panicked (a bug in the operator; please report it): {0}")]
    Panicked(String),
}

/// The category of an error, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// The operator lacks RBAC permission: fixing RBAC fixes it without touching the object.
    Forbidden,
    /// Anything the API server may answer differently next time.
    Transient,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Forbidden => "forbidden",
            Category::Transient => "transient",
        }
    }
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::Kube(kube::Error::Api(e)) if e.code == 403 => Category::Forbidden,
            Error::CacheNotSynced(NotSynced {
                forbidden: true, ..
            }) => Category::Forbidden,
            _ => Category::Transient,
        }
    }

    /// The API server's answer, when the error is one.
    pub fn api_status(&self) -> Option<&kube::core::Status> {
        match self {
            Error::Kube(kube::Error::Api(s)) => Some(s),
            _ => None,
        }
    }
}

/// Whether the API server said why with this cause (`details.causes[].reason`,
/// e.g. `FieldValueDuplicate`, `NamespaceTerminating`): the structured
/// answer, which does not change with the wording of the message.
pub fn has_cause(status: &kube::core::Status, reason: &str) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == reason))
}

/// The namespace is being deleted: the API server's namespace lifecycle
/// admission refuses new objects in it (403 with cause `NamespaceTerminating`).
pub fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403 && has_cause(status, "NamespaceTerminating")
}

/// Whether a watch failed because RBAC refused it.
pub fn watch_forbidden(e: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error as W;
    match e {
        W::InitialListFailed(kube::Error::Api(s))
        | W::WatchStartFailed(kube::Error::Api(s))
        | W::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        W::WatchError(s) => s.code == 403,
        _ => false,
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
