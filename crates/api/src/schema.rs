//! Schema transforms that add the API server's validation (`x-kubernetes-validations` CEL
//! rules, bounds) to fields whose rules the plain schemars attributes cannot express.

use schemars::Schema;
use serde_json::{Value, json};

use crate::rules::{self, RESERVED_FLAGS, limits, messages};

/// Appends one CEL rule with its message to a schema.
fn push_rule(schema: &mut Schema, rule: &str, message: &str) {
    let entry = json!({ "rule": rule, "message": message });
    match schema
        .ensure_object()
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        Value::Array(list) => list.push(entry),
        other => *other = Value::Array(vec![entry]),
    }
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

/// Fields holding resource quantities (`resources`, `env[].valueFrom` divisors):
/// adds the quantity pattern to every int-or-string below, so "lots" is rejected at apply
/// instead of when the Deployment is written. The pattern only applies to the string form.
pub(crate) fn quantities(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        object.values_mut().for_each(walk_quantities);
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
