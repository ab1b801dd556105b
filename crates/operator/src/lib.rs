//! The VLLMService controller: read → validate → build → apply → status.
//!
//! Layers, one folder each: [`runtime`] runs the controller (watch wiring,
//! discovery of optional APIs, health, metrics); [`cache`] keeps what the
//! watches saw (indexes, GPU accounting, pod logs already read); [`reconcile`]
//! is the pipeline of one VLLMService (`read`, `build`, `apply`, `status`);
//! [`diagnosis`] reads vLLM and Hugging Face logs and masks secrets. Pure
//! modules (no I/O): `reconcile::build`, `reconcile::status` (except its
//! `write`), `diagnosis`, `names`, `cache::placement`. [`kinds`] holds the
//! third-party kinds the operator writes.

pub mod cache;
pub mod diagnosis;
pub mod error;
pub mod events;
pub mod kinds;
pub mod names;
pub mod optional_apis;
pub mod rbac;
pub mod reconcile;
pub mod runtime;
