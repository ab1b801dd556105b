//! The VLLMService controller: read → validate → build → apply → status.
//!
//! The pipeline of one reconcile is [`reconcile`]; [`controller`] wires the
//! watches and caches around it. Pure modules (no I/O): `build`, `status`,
//! `route`, `conditions`, `diagnose`, `enginelog`, `done`, `names`, `placement`,
//! `seen`, `settle`, `text`, `autoscaling`.

pub mod apply;
pub mod autoscaling;
pub mod build;
pub mod compact;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod cputime;
pub mod diagnose;
pub mod done;
pub mod enginelog;
pub mod error;
pub mod events;
pub mod health;
pub mod hflog;
pub mod keda;
pub mod lean;
pub mod metrics;
pub mod modelready;
pub mod names;
pub mod optional;
pub mod placement;
pub mod prometheus;
pub mod rbac;
pub mod read;
pub mod reconcile;
pub mod recorder;
pub mod route;
pub mod seen;
pub mod settle;
pub mod slim;
pub mod status;
pub mod text;
pub mod wakeup;
