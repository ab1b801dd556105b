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
            Error::CacheNotSynced(NotSynced { error: Some(e), .. })
                if e.contains("403") || e.to_lowercase().contains("forbidden") =>
            {
                Category::Forbidden
            }
            _ => Category::Transient,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
