//! The VLLMService controller: read → validate → build → apply → status.

pub mod apply;
pub mod build;
pub mod conditions;
pub mod controller;
pub mod diagnose;
pub mod error;
pub mod metrics;
pub mod names;
pub mod optional;
pub mod prometheus;
pub mod rbac;
pub mod reconcile;
pub mod route;
pub mod status;
