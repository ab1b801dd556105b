//! What logs and objects say about a service that does not serve, pure: the
//! vLLM container's log, the Hugging Face download log, the Deployment's and
//! Pods' own account, and the masking of secrets in what the operator writes.

pub mod hf_log;
pub mod masking;
pub mod vllm_log;
pub mod workload;
