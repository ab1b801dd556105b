//! Errors of a reconcile, each with a category that decides the retry policy
//! and appears in metrics, events and condition reasons.

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request; retried with backoff.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The operator lacks a permission it needs; retried with backoff, and
    /// reported, because fixing RBAC fixes it without touching the object.
    #[error("the operator is not allowed to {verb} {resource}: {message}")]
    Forbidden {
        verb: String,
        resource: String,
        message: String,
    },
}

/// The category of an error, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// The spec breaks a rule; waits for the next change of the object.
    InvalidSpec,
    /// Something the spec refers to is missing (PVC, Gateway, CRD); re-checked on its events.
    DependencyMissing,
    /// A same-named object that this VLLMService does not control; left alone.
    Conflict,
    /// The operator lacks RBAC permission.
    Forbidden,
    /// Anything the API server may answer differently next time.
    Transient,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::InvalidSpec => "invalid_spec",
            Category::DependencyMissing => "dependency_missing",
            Category::Conflict => "conflict",
            Category::Forbidden => "forbidden",
            Category::Transient => "transient",
        }
    }
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::Kube(kube::Error::Api(e)) if e.code == 403 => Category::Forbidden,
            Error::Forbidden { .. } => Category::Forbidden,
            Error::Kube(_) => Category::Transient,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
