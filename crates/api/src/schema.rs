//! Schema transforms that add the API server's validation (`x-kubernetes-validations` CEL
//! rules, bounds) to fields whose rules the plain schemars attributes cannot express. They edit
//! the generated schema in memory; no I/O.

use schemars::Schema;
use serde_json::{Value, json};

use crate::rules::{self, RESERVED_FLAGS, limits, messages};

/// Appends one CEL rule with its message to a schema.
fn push_rule(schema: &mut Schema, rule: &str, message: &str) {
    push_entry(
        schema.ensure_object(),
        json!({ "rule": rule, "message": message }),
    );
}

/// Appends one CEL rule to a schema node of a type we do not own (k8s-openapi's), reported at
/// `field_path` (e.g. `.requests`) below the node when given.
fn push_rule_on(node: &mut Value, rule: &str, message: &str, field_path: Option<&str>) {
    let mut entry = json!({ "rule": rule, "message": message });
    if let Some(path) = field_path {
        entry["fieldPath"] = json!(path);
    }
    let object = node.as_object_mut().expect("a schema node is an object");
    push_entry(object, entry);
}

fn push_entry(object: &mut serde_json::Map<String, Value>, entry: Value) {
    match object
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        Value::Array(list) => list.push(entry),
        other => *other = Value::Array(vec![entry]),
    }
}

/// Runs `edit` on the schema as a JSON value.
fn edit_value(schema: &mut Schema, edit: impl FnOnce(&mut Value)) {
    let mut value = Value::from(std::mem::take(schema));
    edit(&mut value);
    *schema = Schema::try_from(value).expect("still a schema");
}

/// The schema node at `path` (property names, `items` or `additionalProperties`) below `node`;
/// panics when k8s-openapi's schema no longer has it, which the api crate's tests would catch.
fn node_at<'a>(node: &'a mut Value, path: &[&str]) -> &'a mut Value {
    path.iter().fold(node, |node, step| {
        let next = match *step {
            "items" | "additionalProperties" => node.get_mut(*step),
            property => node
                .get_mut("properties")
                .and_then(|properties| properties.get_mut(property)),
        };
        next.unwrap_or_else(|| panic!("the schema has no {path:?} (at {step})"))
    })
}

/// The spec's rule that terminationGracePeriodSeconds covers the shutdown, reported on that
/// field with the three numbers.
pub(crate) fn grace_period_rule(schema: &mut Schema) {
    push_entry(
        schema.ensure_object(),
        json!({
            "rule": rules::grace_period_cel(),
            "messageExpression": rules::grace_period_message_cel(),
            "message": messages::GRACE_PERIOD,
            "fieldPath": ".terminationGracePeriodSeconds",
            "reason": "FieldValueInvalid",
        }),
    );
}

/// The spec's rules about where the model and the LoRA adapters come from, each reported on
/// the field to change.
pub(crate) fn model_rules(schema: &mut Schema) {
    let mut rule = |rule: String, message: &str, field_path: &str| {
        push_entry(
            schema.ensure_object(),
            json!({
                "rule": rule,
                "message": message,
                "fieldPath": field_path,
                "reason": "FieldValueInvalid",
            }),
        );
    };
    rule(
        rules::ONE_MODEL_VOLUME_CEL.into(),
        messages::ONE_MODEL_VOLUME,
        ".storage.pvcName",
    );
    rule(
        rules::DOWNLOAD_PATH_CEL.into(),
        messages::DOWNLOAD_PATH,
        ".modelPath",
    );
    rule(
        rules::LORA_DOWNLOAD_NEEDS_PVC_CEL.into(),
        messages::LORA_DOWNLOAD_NEEDS_PVC,
        ".loraAdapters",
    );
    rule(
        rules::LORA_NAME_NOT_MODEL_CEL.into(),
        messages::LORA_NAME_NOT_MODEL,
        ".loraAdapters",
    );
    for flag in rules::LORA_FLAGS {
        rule(
            flag.lora_cel(),
            &flag.lora_message(),
            ".engineArgs.extraArgs",
        );
    }
}

/// `autoscaling`'s rules that relate two of its fields, each reported on the field to change.
pub(crate) fn autoscaling_rules(schema: &mut Schema) {
    push_entry(
        schema.ensure_object(),
        json!({
            "rule": rules::autoscaling_range_cel(),
            "messageExpression": rules::autoscaling_range_message_cel(),
            "message": messages::AUTOSCALING_RANGE,
            "fieldPath": ".maxReplicas",
            "reason": "FieldValueInvalid",
        }),
    );
    push_entry(
        schema.ensure_object(),
        json!({
            "rule": rules::kv_cache_target_cel(),
            "message": messages::KV_CACHE_TARGET,
            "fieldPath": ".target",
            "reason": "FieldValueInvalid",
        }),
    );
}

/// A transform that adds one CEL rule.
pub(crate) fn cel(rule: String, message: String) -> impl FnMut(&mut Schema) {
    move |schema| push_rule(schema, &rule, &message)
}

/// `labels`-like maps: label keys and values, at most [`limits::MAP_ENTRIES`] entries.
pub(crate) fn label_map(field: &'static str) -> impl FnMut(&mut Schema) {
    move |schema| {
        bounded_map(schema);
        if let Some(values) = schema.get_mut("additionalProperties") {
            values["maxLength"] = json!(limits::LABEL_NAME);
            values["pattern"] = json!(rules::LABEL_VALUE_RE);
        }
        push_rule(
            schema,
            &rules::label_keys_cel(),
            &messages::label_keys(field),
        );
    }
}

/// `podAnnotations`: annotation keys, free-form values.
pub(crate) fn annotation_map(field: &'static str) -> impl FnMut(&mut Schema) {
    move |schema| {
        bounded_map(schema);
        push_rule(
            schema,
            &rules::annotation_keys_cel(),
            &messages::annotation_keys(field),
        );
    }
}

fn bounded_map(schema: &mut Schema) {
    schema.insert("maxProperties".into(), json!(limits::MAP_ENTRIES));
}

/// `engineArgs.extraArgs`: one rule per flag the operator sets itself.
pub(crate) fn extra_args(schema: &mut Schema) {
    for flag in RESERVED_FLAGS {
        push_rule(schema, &flag.cel(), &flag.message());
    }
}

/// `status.conditions` is a map-type list keyed by `type`, so server-side apply merges
/// conditions by type instead of replacing the whole list.
pub(crate) fn conditions(schema: &mut Schema) {
    schema.insert("x-kubernetes-list-type".into(), json!("map"));
    schema.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
}

/// Rustdoc wraps long comments over several lines; the API server's `description` (shown by
/// `kubectl explain`) reads better with each paragraph on one line. Applied to a struct, this
/// rewraps the struct's own description and those of its fields, which are all ours.
pub(crate) fn unwrap_doc_lines(schema: &mut Schema) {
    fn unwrap(object: &mut serde_json::Map<String, Value>) {
        if let Some(Value::String(text)) = object.get_mut("description") {
            *text = text
                .split("\n\n")
                .map(|paragraph| {
                    paragraph
                        .split('\n')
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("\n\n");
        }
    }
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            if let Value::Object(property) = property {
                unwrap(property);
            }
        }
    }
    unwrap(object);
}

/// Fields holding resource quantities (`env[].valueFrom` divisors): adds the quantity pattern
/// to every int-or-string below, so "lots" is rejected at apply instead of when the Deployment
/// is written. The pattern only applies to the string form.
pub(crate) fn quantities(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        object.values_mut().for_each(walk_quantities);
    }
}

/// `resources`: what the API server checks in a container's resources (names, non-negative
/// quantities, whole extended resources, requests against limits, hugepages), bounded for the
/// CEL cost estimate.
pub(crate) fn resources(schema: &mut Schema) {
    edit_value(schema, resources_value);
}

fn resources_value(node: &mut Value) {
    for list in ["requests", "limits"] {
        let map = node_at(node, &[list]);
        map["maxProperties"] = json!(limits::RESOURCES);
        let values = node_at(map, &["additionalProperties"]);
        values["pattern"] = json!(rules::SIZE_RE);
        values["minimum"] = json!(0);
        values["maxLength"] = json!(limits::QUANTITY);
        push_rule_on(
            map,
            &rules::resource_names_cel(),
            &messages::resource_names(list),
            None,
        );
        push_rule_on(
            map,
            &rules::resource_integers_cel(),
            &messages::resource_integers(list),
            None,
        );
        push_rule_on(
            map,
            &rules::resource_hugepages_cel(),
            &messages::resource_hugepages(list),
            None,
        );
    }
    push_rule_on(
        node_at(node, &["claims"]),
        rules::NO_CLAIMS_CEL,
        messages::CLAIMS,
        None,
    );
    push_rule_on(
        node,
        &rules::requests_within_limits_cel(),
        messages::REQUESTS_WITHIN_LIMITS,
        Some(".requests"),
    );
    push_rule_on(
        node,
        &rules::requests_equal_limits_cel(),
        messages::REQUESTS_EQUAL_LIMITS,
        Some(".requests"),
    );
    push_rule_on(
        node,
        &rules::hugepages_need_cpu_or_memory_cel(),
        messages::HUGEPAGES_NEED_CPU_OR_MEMORY,
        None,
    );
}

/// `env`: the API server's rules for environment variables (`ValidateEnv`), bounded for the
/// CEL cost estimate; also the quantity pattern on `resourceFieldRef.divisor`.
pub(crate) fn env(schema: &mut Schema) {
    quantities(schema);
    edit_value(schema, env_value);
}

fn env_value(node: &mut Value) {
    node["maxItems"] = json!(limits::ENV);
    let item = node_at(node, &["items"]);
    push_rule_on(
        item,
        rules::ENV_VALUE_FROM_WITH_VALUE_CEL,
        messages::ENV_VALUE_FROM_WITH_VALUE,
        Some(".valueFrom"),
    );
    let name = node_at(item, &["name"]);
    name["maxLength"] = json!(limits::ENV_NAME);
    push_rule_on(name, &rules::env_name_cel(), messages::ENV_NAME, None);
    let value_from = node_at(item, &["valueFrom"]);
    push_rule_on(
        value_from,
        rules::ENV_SOURCES_CEL,
        messages::ENV_SOURCES,
        None,
    );
    push_rule_on(
        value_from,
        rules::ENV_NO_FILE_KEY_REF_CEL,
        messages::ENV_FILE_KEY_REF,
        Some(".fileKeyRef"),
    );
    for source in ["secretKeyRef", "configMapKeyRef"] {
        let name = node_at(value_from, &[source, "name"]);
        name["maxLength"] = json!(limits::DNS_SUBDOMAIN);
        push_rule_on(
            name,
            &rules::dns_subdomain_cel(),
            &messages::env_source_name(source),
            None,
        );
        let key = node_at(value_from, &[source, "key"]);
        key["maxLength"] = json!(limits::DNS_SUBDOMAIN);
        push_rule_on(
            key,
            &rules::config_key_cel(),
            &messages::env_source_key(source),
            None,
        );
    }
}

/// A non-negative quantity such as `shmSize`: the size pattern for the string form, a
/// minimum for the integer form.
pub(crate) fn size(schema: &mut Schema) {
    schema.insert("pattern".into(), json!(rules::SIZE_RE));
    schema.insert("minimum".into(), json!(0));
}

fn walk_quantities(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                object.insert("pattern".into(), json!(rules::QUANTITY_RE));
            }
            object.values_mut().for_each(walk_quantities);
        }
        Value::Array(items) => items.iter_mut().for_each(walk_quantities),
        _ => {}
    }
}
