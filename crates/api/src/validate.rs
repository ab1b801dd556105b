//! Controller-side validation: the rules the API server enforces through the CRD schema,
//! checked again in Rust.
//!
//! The API server rejects invalid objects at `kubectl apply`, but the controller can still read
//! one: an object stored before a schema change, one created while validation was off, or a
//! file given to the offline `render` command. Those are reported, never acted on.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::rules::{self, RESERVED_FLAGS, limits, messages};
use crate::v1alpha1::{
    Autoscaling, AutoscalingMetric, EngineArgs, GatewayRef, HuggingFace, Monitoring, Probe,
    ProbeKind, Rollout, RolloutStrategy, Storage, VLLMService, VLLMServiceSpec,
};

/// One rule broken by one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Path of the field, as the API server names it: `spec.engineArgs.gpuMemoryUtilization`,
    /// `spec.engineArgs.extraArgs[0]` for a list item, `spec.labels.team` for a map entry.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// A VLLMService that breaks at least one rule; every broken rule is listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec {
    /// The broken rules, in the order of the fields. Never empty.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid VLLMService: ")?;
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// A VLLMService that passed [`validate`]: the only input the operator's builders take, so
/// nothing is built from a spec that breaks a rule.
#[derive(Debug, Clone, Copy)]
pub struct Valid<'a>(&'a VLLMService);

impl std::ops::Deref for Valid<'_> {
    type Target = VLLMService;
    fn deref(&self) -> &VLLMService {
        self.0
    }
}

/// Checks a whole VLLMService: its name (which names the Service, so must be a DNS-1035
/// label) and its spec.
pub fn validate(vllm: &VLLMService) -> Result<Valid<'_>, InvalidSpec> {
    check(vllm).map(|()| Valid(vllm))
}

fn check(vllm: &VLLMService) -> Result<(), InvalidSpec> {
    let mut errors = Errors::default();
    match vllm.metadata.name.as_deref() {
        None | Some("") => errors.push("metadata.name", "must be set"),
        Some(name) if !is_dns1035_label(name) => errors.push(
            "metadata.name",
            messages::NAME
                .strip_prefix("metadata.name ")
                .expect("the message names the field"),
        ),
        Some(_) => {}
    }
    check_spec(&vllm.spec, &mut errors);
    errors.into_result()
}

/// Checks a spec against every rule of the CRD schema.
pub fn validate_spec(spec: &VLLMServiceSpec) -> Result<(), InvalidSpec> {
    let mut errors = Errors::default();
    check_spec(spec, &mut errors);
    errors.into_result()
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    fn into_result(self) -> Result<(), InvalidSpec> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(InvalidSpec { errors: self.0 })
        }
    }

    /// `minLength`/`maxLength`, counted in characters as the API server counts them.
    fn length(&mut self, field: &str, value: &str, min: usize, max: usize) -> bool {
        let len = value.chars().count();
        if len < min {
            self.push(field, "must not be empty");
            false
        } else if len > max {
            self.push(field, format!("must be at most {max} characters"));
            false
        } else {
            true
        }
    }

    fn required(&mut self, field: &str, value: &str) {
        if value.is_empty() {
            self.push(field, "must not be empty");
        }
    }

    fn at_least(&mut self, field: &str, value: i32, min: i32) {
        if value < min {
            self.push(field, format!("must be at least {min}"));
        }
    }

    fn quantity(&mut self, field: &str, value: &str) {
        if !rules::is_quantity(value) {
            self.push(field, "must be a quantity such as 2, 500m or 16Gi");
        }
    }

    /// `maxItems`/`maxProperties`.
    fn at_most_entries(&mut self, field: &str, len: usize, max: usize, what: &str) {
        if len > max {
            self.push(field, format!("must have at most {max} {what}"));
        }
    }

    /// An optional object name where empty means unset (`runtimeClassName`).
    fn optional_dns_subdomain(&mut self, field: &str, value: Option<&str>, message: &str) {
        if let Some(value) = value
            && self.length(field, value, 0, limits::DNS_SUBDOMAIN)
            && !value.is_empty()
            && !rules::is_dns_subdomain(value)
        {
            self.push(field, message);
        }
    }

    fn label_map(&mut self, field: &str, name: &str, map: &BTreeMap<String, String>) {
        if map.len() > limits::MAP_ENTRIES {
            self.push(
                field,
                format!("must have at most {} entries", limits::MAP_ENTRIES),
            );
        }
        if !map.keys().all(|k| rules::is_label_key(k)) {
            self.push(field, messages::label_keys(name));
        }
        for (key, value) in map {
            if !rules::is_label_value(value) {
                self.push(
                    format!("{field}.{key}"),
                    "must be a valid label value: at most 63 alphanumerics, '-', '_' or '.', \
                     starting and ending with an alphanumeric (or empty)",
                );
            }
        }
    }
}

fn check_spec(spec: &VLLMServiceSpec, errors: &mut Errors) {
    let field = "spec.image";
    if errors.length(field, &spec.image, 1, limits::IMAGE) && !rules::is_trimmed(&spec.image) {
        errors.push(field, messages::IMAGE);
    }
    errors.length("spec.modelPath", &spec.model_path, 1, limits::PATH);
    errors.required("spec.modelName", &spec.model_name);
    errors.at_least("spec.replicas", spec.replicas, 0);
    if !(1..=65535).contains(&spec.port) {
        errors.push("spec.port", "must be between 1 and 65535");
    }
    errors.optional_dns_subdomain(
        "spec.runtimeClassName",
        spec.runtime_class_name.as_deref(),
        messages::RUNTIME_CLASS_NAME,
    );
    errors.optional_dns_subdomain(
        "spec.serviceAccountName",
        spec.service_account_name.as_deref(),
        messages::SERVICE_ACCOUNT_NAME,
    );
    errors.label_map("spec.nodeSelector", "nodeSelector", &spec.node_selector);
    errors.label_map("spec.labels", "labels", &spec.labels);
    if let Some(resources) = &spec.resources {
        check_resources(resources, errors);
    }
    check_env(&spec.env, errors);
    if let Some(size) = &spec.shm_size
        && !rules::is_size(&size.0)
    {
        errors.push(
            "spec.shmSize",
            "must be a non-negative quantity such as 16Gi",
        );
    }
    check_storage(&spec.storage, errors);
    check_model_source(spec, errors);
    check_lora_adapters(spec, errors);
    if let Some(gateway) = &spec.gateway_ref {
        check_gateway_ref(gateway, errors);
    }
    check_engine_args(&spec.engine_args, errors);
    check_probe(&spec.startup_probe, errors);
    check_probe(&spec.liveness_probe, errors);
    check_probe(&spec.readiness_probe, errors);
    check_monitoring(&spec.monitoring, errors);
    check_shutdown(spec, errors);
    check_rollout(&spec.rollout, errors);
    if let Some(autoscaling) = &spec.autoscaling {
        check_autoscaling(autoscaling, errors);
    }
    if spec.pod_annotations.len() > limits::MAP_ENTRIES {
        errors.push(
            "spec.podAnnotations",
            format!("must have at most {} entries", limits::MAP_ENTRIES),
        );
    }
    if !spec
        .pod_annotations
        .keys()
        .all(|k| rules::is_annotation_key(k))
    {
        errors.push(
            "spec.podAnnotations",
            messages::annotation_keys("podAnnotations"),
        );
    }
}

/// The container's resources, as the API server checks them (`validateResourceRequirements`).
fn check_resources(resources: &ResourceRequirements, errors: &mut Errors) {
    let none = BTreeMap::new();
    let requests: &BTreeMap<String, Quantity> = resources.requests.as_ref().unwrap_or(&none);
    let limit_map: &BTreeMap<String, Quantity> = resources.limits.as_ref().unwrap_or(&none);
    for (list, map) in [("limits", limit_map), ("requests", requests)] {
        let field = format!("spec.resources.{list}");
        errors.at_most_entries(&field, map.len(), limits::RESOURCES, "entries");
        if !map.keys().all(|name| rules::is_resource_name(name)) {
            errors.push(&field, messages::resource_names(list));
        }
        for (name, quantity) in map {
            let entry = format!("{field}.{name}");
            if errors.length(&entry, &quantity.0, 0, limits::QUANTITY)
                && !rules::is_size(&quantity.0)
            {
                errors.push(
                    entry,
                    "must be a non-negative quantity such as 2, 500m or 16Gi",
                );
            }
        }
        if !map
            .iter()
            .all(|(name, quantity)| rules::is_resource_integer_ok(name, &quantity.0))
        {
            errors.push(&field, messages::resource_integers(list));
        }
        if !map
            .iter()
            .all(|(name, quantity)| rules::is_hugepages_value_ok(name, &quantity.0))
        {
            errors.push(&field, messages::resource_hugepages(list));
        }
    }
    if resources
        .claims
        .as_ref()
        .is_some_and(|claims| !claims.is_empty())
    {
        errors.push("spec.resources.claims", messages::CLAIMS);
    }
    let field = "spec.resources.requests";
    let within = requests.iter().all(|(name, request)| {
        limit_map
            .get(name)
            .is_none_or(|limit| rules::is_request_within_limit(name, &request.0, &limit.0))
    });
    if !within {
        errors.push(field, messages::REQUESTS_WITHIN_LIMITS);
    }
    let equal = requests.iter().all(|(name, request)| {
        rules::is_request_equal_to_limit(
            name,
            &request.0,
            limit_map.get(name).map(|limit| limit.0.as_str()),
        )
    });
    if !equal {
        errors.push(field, messages::REQUESTS_EQUAL_LIMITS);
    }
    let names = requests.keys().chain(limit_map.keys()).map(String::as_str);
    if !rules::hugepages_have_cpu_or_memory(names) {
        errors.push("spec.resources", messages::HUGEPAGES_NEED_CPU_OR_MEMORY);
    }
}

/// The container's environment, as the API server checks it (`ValidateEnv`).
fn check_env(env: &[EnvVar], errors: &mut Errors) {
    errors.at_most_entries("spec.env", env.len(), limits::ENV, "items");
    for (i, var) in env.iter().enumerate() {
        let prefix = format!("spec.env[{i}]");
        let field = format!("{prefix}.name");
        if errors.length(&field, &var.name, 0, limits::ENV_NAME)
            && !rules::is_env_var_name(&var.name)
        {
            errors.push(field, messages::ENV_NAME);
        }
        let Some(from) = &var.value_from else {
            continue;
        };
        let field = format!("{prefix}.valueFrom");
        if var.value.as_ref().is_some_and(|value| !value.is_empty()) {
            errors.push(&field, messages::ENV_VALUE_FROM_WITH_VALUE);
        }
        let sources = [
            from.field_ref.is_some(),
            from.resource_field_ref.is_some(),
            from.config_map_key_ref.is_some(),
            from.secret_key_ref.is_some(),
        ];
        if sources.iter().filter(|set| **set).count() != 1 {
            errors.push(&field, messages::ENV_SOURCES);
        }
        if from.file_key_ref.is_some() {
            errors.push(format!("{field}.fileKeyRef"), messages::ENV_FILE_KEY_REF);
        }
        let key_refs = [
            from.secret_key_ref
                .as_ref()
                .map(|r| ("secretKeyRef", &r.name, &r.key)),
            from.config_map_key_ref
                .as_ref()
                .map(|r| ("configMapKeyRef", &r.name, &r.key)),
        ];
        for (source, name, key) in key_refs.into_iter().flatten() {
            let name_field = format!("{field}.{source}.name");
            if errors.length(&name_field, name, 0, limits::DNS_SUBDOMAIN)
                && !rules::is_dns_subdomain(name)
            {
                errors.push(name_field, messages::env_source_name(source));
            }
            let key_field = format!("{field}.{source}.key");
            if errors.length(&key_field, key, 0, limits::DNS_SUBDOMAIN)
                && !rules::is_config_key(key)
            {
                errors.push(key_field, messages::env_source_key(source));
            }
        }
        if let Some(divisor) = from
            .resource_field_ref
            .as_ref()
            .and_then(|r| r.divisor.as_ref())
        {
            errors.quantity(&format!("{field}.resourceFieldRef.divisor"), &divisor.0);
        }
    }
}

fn check_storage(storage: &Storage, errors: &mut Errors) {
    if let Some(pvc) = &storage.pvc_name {
        errors.length("spec.storage.pvcName", pvc, 1, limits::DNS_SUBDOMAIN);
    }
    let field = "spec.storage.mountPath";
    if errors.length(field, &storage.mount_path, 1, limits::PATH) {
        if !storage.mount_path.starts_with('/') {
            errors.push(field, messages::MOUNT_PATH);
        }
        if storage.mount_path == "/dev/shm" {
            errors.push(field, messages::MOUNT_PATH_SHM);
        }
    }
    if let Some(sub_path) = &storage.sub_path {
        let field = "spec.storage.subPath";
        if errors.length(field, sub_path, 0, limits::PATH) && !rules::is_relative_path(sub_path) {
            errors.push(field, messages::SUB_PATH);
        }
    }
}

fn check_model_source(spec: &VLLMServiceSpec, errors: &mut Errors) {
    let source = spec.model_source.as_ref();
    let image = source.and_then(|s| s.image.as_ref());
    if !rules::one_model_volume(spec.storage.pvc_name.is_some(), image.is_some()) {
        errors.push("spec.storage.pvcName", messages::ONE_MODEL_VOLUME);
    }
    let Some(source) = source else { return };
    if source.hugging_face.is_some() == source.image.is_some() {
        errors.push("spec.modelSource", messages::ONE_MODEL_SOURCE);
    }
    if let Some(hf) = &source.hugging_face {
        check_hugging_face("spec.modelSource.huggingFace", hf, errors);
        if !rules::is_on_volume(&spec.model_path, &spec.storage.mount_path) {
            errors.push("spec.modelPath", messages::DOWNLOAD_PATH);
        }
    }
    if let Some(image) = image {
        let field = "spec.modelSource.image.reference";
        if errors.length(field, &image.reference, 1, limits::IMAGE)
            && !rules::is_trimmed(&image.reference)
        {
            errors.push(field, messages::IMAGE);
        }
    }
}

fn check_hugging_face(prefix: &str, hf: &HuggingFace, errors: &mut Errors) {
    let field = format!("{prefix}.repo");
    if errors.length(&field, &hf.repo, 1, limits::HF_REPO) && !rules::is_hf_repo(&hf.repo) {
        errors.push(field, messages::HF_REPO);
    }
    let field = format!("{prefix}.revision");
    if errors.length(&field, &hf.revision, 1, limits::HF_REVISION)
        && !rules::is_hf_revision(&hf.revision)
    {
        errors.push(field, messages::HF_REVISION);
    }
    if let Some(secret) = &hf.token_secret_ref {
        let field = format!("{prefix}.tokenSecretRef.name");
        if errors.length(&field, &secret.name, 1, limits::DNS_SUBDOMAIN)
            && !rules::is_dns_subdomain(&secret.name)
        {
            errors.push(field, messages::TOKEN_SECRET_NAME);
        }
        let field = format!("{prefix}.tokenSecretRef.key");
        if errors.length(&field, &secret.key, 1, limits::DNS_SUBDOMAIN)
            && !rules::is_config_key(&secret.key)
        {
            errors.push(field, messages::TOKEN_SECRET_KEY);
        }
    }
    if let Some(image) = &hf.downloader_image {
        let field = format!("{prefix}.downloaderImage");
        if errors.length(&field, image, 1, limits::IMAGE) && !rules::is_trimmed(image) {
            errors.push(field, messages::IMAGE);
        }
    }
}

fn check_lora_adapters(spec: &VLLMServiceSpec, errors: &mut Errors) {
    let adapters = &spec.lora_adapters;
    if adapters.len() > limits::LORA_ADAPTERS {
        errors.push(
            "spec.loraAdapters",
            format!("must have at most {} items", limits::LORA_ADAPTERS),
        );
    }
    for (i, adapter) in adapters.iter().enumerate() {
        let prefix = format!("spec.loraAdapters[{i}]");
        let field = format!("{prefix}.name");
        if errors.length(&field, &adapter.name, 1, limits::LABEL_NAME)
            && !rules::is_lora_name(&adapter.name)
        {
            errors.push(field, messages::LORA_NAME);
        }
        if adapters[..i].iter().any(|a| a.name == adapter.name) {
            errors.push(
                format!("spec.loraAdapters[{i}]"),
                format!("Duplicate value: {{\"name\":\"{}\"}}", adapter.name),
            );
        }
        if adapter.path.is_some() == adapter.hugging_face.is_some() {
            errors.push(prefix.clone(), messages::ONE_LORA_SOURCE);
        }
        if let Some(path) = &adapter.path {
            let field = format!("{prefix}.path");
            if errors.length(&field, path, 1, limits::PATH) && !path.starts_with('/') {
                errors.push(field, messages::LORA_PATH);
            }
        }
        if let Some(hf) = &adapter.hugging_face {
            check_hugging_face(&format!("{prefix}.huggingFace"), hf, errors);
        }
    }
    if adapters.iter().any(|a| a.hugging_face.is_some()) && spec.storage.pvc_name.is_none() {
        errors.push("spec.loraAdapters", messages::LORA_DOWNLOAD_NEEDS_PVC);
    }
    if adapters.iter().any(|a| a.name == spec.model_name) {
        errors.push("spec.loraAdapters", messages::LORA_NAME_NOT_MODEL);
    }
    if !adapters.is_empty() {
        for flag in rules::LORA_FLAGS {
            if spec
                .engine_args
                .extra_args
                .iter()
                .any(|a| flag.is_set_by(a))
            {
                errors.push("spec.engineArgs.extraArgs", flag.lora_message());
            }
        }
    }
}

fn check_gateway_ref(gateway: &GatewayRef, errors: &mut Errors) {
    errors.length(
        "spec.gatewayRef.name",
        &gateway.name,
        1,
        limits::DNS_SUBDOMAIN,
    );
    if let Some(namespace) = &gateway.namespace {
        let field = "spec.gatewayRef.namespace";
        if errors.length(field, namespace, 1, limits::LABEL_NAME) && !rules::is_dns_label(namespace)
        {
            errors.push(field, messages::GATEWAY_NAMESPACE);
        }
    }
    let field = "spec.gatewayRef.sectionName";
    if errors.length(field, &gateway.section_name, 1, limits::DNS_SUBDOMAIN)
        && !rules::is_dns_subdomain(&gateway.section_name)
    {
        errors.push(field, messages::SECTION_NAME);
    }
    let field = "spec.gatewayRef.host";
    if errors.length(field, &gateway.host, 1, limits::DNS_SUBDOMAIN)
        && !rules::is_hostname(&gateway.host)
    {
        errors.push(field, messages::HOST);
    }
}

fn check_engine_args(args: &EngineArgs, errors: &mut Errors) {
    errors.at_least("spec.engineArgs.maxModelLen", args.max_model_len, 1);
    let field = "spec.engineArgs.gpuMemoryUtilization";
    if errors.length(field, &args.gpu_memory_utilization, 1, limits::DECIMAL)
        && !rules::is_fraction(&args.gpu_memory_utilization)
    {
        errors.push(field, messages::GPU_MEMORY_UTILIZATION);
    }
    errors.at_least("spec.engineArgs.maxNumSeqs", args.max_num_seqs, 1);
    if let Some(tp) = args.tensor_parallel_size {
        errors.at_least("spec.engineArgs.tensorParallelSize", tp, 1);
    }
    if let Some(n) = args.max_loras {
        errors.at_least("spec.engineArgs.maxLoras", n, 1);
    }
    if let Some(rank) = args.max_lora_rank
        && !rules::LORA_RANKS.contains(&rank)
    {
        errors.push("spec.engineArgs.maxLoraRank", messages::LORA_RANK);
    }
    let field = "spec.engineArgs.extraArgs";
    if args.extra_args.len() > limits::EXTRA_ARGS {
        errors.push(
            field,
            format!("must have at most {} items", limits::EXTRA_ARGS),
        );
    }
    for (i, arg) in args.extra_args.iter().enumerate() {
        errors.length(&format!("{field}[{i}]"), arg, 0, limits::EXTRA_ARG);
    }
    for flag in RESERVED_FLAGS {
        if args.extra_args.iter().any(|arg| flag.is_set_by(arg)) {
            errors.push(field, flag.message());
        }
    }
}

fn check_probe<K: ProbeKind>(probe: &Probe<K>, errors: &mut Errors) {
    let prefix = format!("spec.{}", K::FIELD);
    let field = format!("{prefix}.path");
    if errors.length(&field, &probe.path, 1, limits::PATH) && !probe.path.starts_with('/') {
        errors.push(field, messages::probe_path(K::FIELD));
    }
    errors.at_least(
        &format!("{prefix}.initialDelaySeconds"),
        probe.initial_delay_seconds,
        0,
    );
    errors.at_least(&format!("{prefix}.periodSeconds"), probe.period_seconds, 1);
    errors.at_least(
        &format!("{prefix}.timeoutSeconds"),
        probe.timeout_seconds,
        1,
    );
    errors.at_least(
        &format!("{prefix}.failureThreshold"),
        probe.failure_threshold,
        1,
    );
}

fn check_monitoring(monitoring: &Monitoring, errors: &mut Errors) {
    let field = "spec.monitoring.path";
    if errors.length(field, &monitoring.path, 1, limits::PATH) && !monitoring.path.starts_with('/')
    {
        errors.push(field, messages::MONITORING_PATH);
    }
    let field = "spec.monitoring.interval";
    if errors.length(field, &monitoring.interval, 1, limits::DURATION)
        && !rules::is_duration(&monitoring.interval)
    {
        errors.push(field, messages::INTERVAL);
    }
    errors.label_map(
        "spec.monitoring.labels",
        "monitoring.labels",
        &monitoring.labels,
    );
    let a = &monitoring.alerts;
    let prefix = "spec.monitoring.alerts";
    errors.at_least(&format!("{prefix}.requestsWaiting"), a.requests_waiting, 1);
    errors.at_least(
        &format!("{prefix}.kvCacheUsagePercent"),
        a.kv_cache_usage_percent,
        1,
    );
    if a.kv_cache_usage_percent > 100 {
        errors.push(
            format!("{prefix}.kvCacheUsagePercent"),
            "must be at most 100",
        );
    }
    errors.at_least(
        &format!("{prefix}.timeToFirstTokenP95Ms"),
        a.time_to_first_token_p95_ms,
        1,
    );
    errors.at_least(
        &format!("{prefix}.e2eLatencyP95Ms"),
        a.e2e_latency_p95_ms,
        1,
    );
    for (name, value) in [
        ("criticalSeverity", &a.critical_severity),
        ("warningSeverity", &a.warning_severity),
    ] {
        let field = format!("{prefix}.{name}");
        if errors.length(&field, value, 1, limits::LABEL_NAME) && !rules::is_label_value(value) {
            errors.push(field, "must be a valid label value");
        }
    }
}

fn check_shutdown(spec: &VLLMServiceSpec, errors: &mut Errors) {
    let s = &spec.shutdown;
    for (name, value, max) in [
        ("drainSeconds", s.drain_seconds, limits::DRAIN_SECONDS),
        (
            "preStopSeconds",
            s.pre_stop_seconds,
            limits::PRE_STOP_SECONDS,
        ),
    ] {
        let field = format!("spec.shutdown.{name}");
        errors.at_least(&field, value, 0);
        if value > max {
            errors.push(field, format!("must be at most {max}"));
        }
    }
    if let Some(grace) = spec.termination_grace_period_seconds {
        if grace < 0 {
            errors.push("spec.terminationGracePeriodSeconds", "must be at least 0");
        } else if !rules::grace_period_covers_shutdown(
            Some(grace),
            s.pre_stop_seconds,
            s.drain_seconds,
        ) {
            errors.push(
                "spec.terminationGracePeriodSeconds",
                messages::grace_period(grace, s.pre_stop_seconds, s.drain_seconds),
            );
        }
    }
}

fn check_rollout(rollout: &Rollout, errors: &mut Errors) {
    errors.at_least("spec.rollout.maxSurge", rollout.max_surge, 0);
    errors.at_least("spec.rollout.maxUnavailable", rollout.max_unavailable, 0);
    if !rules::surge_progresses(
        rollout.strategy == RolloutStrategy::Surge,
        rollout.max_surge,
        rollout.max_unavailable,
    ) {
        errors.push("spec.rollout", messages::SURGE_PROGRESSES);
    }
}

fn check_autoscaling(a: &Autoscaling, errors: &mut Errors) {
    let prefix = "spec.autoscaling";
    errors.at_least(&format!("{prefix}.minReplicas"), a.min_replicas, 0);
    let field = format!("{prefix}.maxReplicas");
    errors.at_least(&field, a.max_replicas, 1);
    if !rules::autoscaling_range_ok(a.min_replicas, a.max_replicas) {
        errors.push(
            field,
            messages::autoscaling_range(a.min_replicas, a.max_replicas),
        );
    }
    let field = format!("{prefix}.target");
    if errors.length(&field, &a.target, 1, limits::DECIMAL) {
        if !rules::is_decimal(&a.target) {
            errors.push(&field, messages::AUTOSCALING_TARGET_DECIMAL);
        } else if !rules::is_positive_decimal(&a.target) {
            errors.push(&field, messages::AUTOSCALING_TARGET);
        }
    }
    if !rules::kv_cache_target_ok(a.metric == AutoscalingMetric::KvCacheUsage, &a.target) {
        errors.push(&field, messages::KV_CACHE_TARGET);
    }
    if let Some(p) = &a.prometheus {
        if let Some(address) = &p.server_address {
            let field = format!("{prefix}.prometheus.serverAddress");
            if errors.length(&field, address, 0, limits::URL)
                && !rules::is_http_url_or_empty(address)
            {
                errors.push(field, messages::SERVER_ADDRESS);
            }
        }
        if let Some(query) = &p.query {
            errors.length(
                &format!("{prefix}.prometheus.query"),
                query,
                0,
                limits::QUERY,
            );
        }
    }
    if let Some(query) = &a.activation_query {
        errors.length(
            &format!("{prefix}.activationQuery"),
            query,
            0,
            limits::QUERY,
        );
    }
    let field = format!("{prefix}.scaleDownStabilizationSeconds");
    errors.at_least(&field, a.scale_down_stabilization_seconds, 0);
    if a.scale_down_stabilization_seconds > limits::STABILIZATION_SECONDS {
        errors.push(
            field,
            format!("must be at most {}", limits::STABILIZATION_SECONDS),
        );
    }
    errors.at_least(
        &format!("{prefix}.initialCooldownSeconds"),
        a.initial_cooldown_seconds,
        0,
    );
}

/// A DNS-1035 label: what a Service name must be.
fn is_dns1035_label(s: &str) -> bool {
    s.len() <= limits::LABEL_NAME
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1035_labels() {
        assert!(is_dns1035_label("qwen-demo"));
        assert!(is_dns1035_label("a"));
        assert!(!is_dns1035_label("1abc"));
        assert!(!is_dns1035_label("qwen2.5"));
        assert!(!is_dns1035_label("a-"));
        assert!(!is_dns1035_label(&"a".repeat(64)));
    }
}
