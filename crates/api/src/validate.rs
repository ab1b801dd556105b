//! Offline validation: the generated CRD's own schema, evaluated as the API server evaluates it.
//!
//! The API server rejects invalid objects at `kubectl apply`, but the controller can still read
//! one: an object stored under an older schema, one created while validation was off, or a file
//! given to the offline `render` command. Those are checked here against the CRD of this build
//! ([`crate::crd`]), so the CRD stays the one statement of every rule: its OpenAPI schema goes to
//! the `jsonschema` crate, its CEL rules to `kube-cel`, each compiled once. Nothing is read or
//! written here; the CRD is generated in memory.
//!
//! What `kube-cel` cannot judge offline as the API server does (the CEL quantity library on some
//! spellings of quantities) is listed at [`KUBE_CEL_GAPS`]; no Rust twin of those rules is kept.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use serde_json::{Map, Value, json};

use crate::rules::messages;
use crate::v1alpha1::{VLLMService, VLLMServiceSpec};

/// A `resources` spec on which `kube-cel`'s CEL quantity library and the API server's disagree,
/// so validate() and the API server give opposite verdicts.
#[derive(Debug, Clone, Copy)]
pub struct KubeCelGap {
    /// `resources.requests`, as JSON.
    pub requests: &'static str,
    /// `resources.limits`, as JSON.
    pub limits: &'static str,
    /// The API server's verdict; validate() gives the other.
    pub api_server_accepts: bool,
    /// Why they differ.
    pub why: &'static str,
}

const NOT_INT64: &str = "the API server's isInteger() asks whether the parsed quantity is held \
                         as an int64, which depends on the spelling (a fraction or milli suffix, \
                         more than 18 digits or an Ei suffix make it a decimal); kube-cel asks \
                         whether the value is whole";
const CAPPED: &str = "the API server caps binary-suffixed quantities at 2^63-1, so these two are \
                      equal there; kube-cel compares the values as written";

/// Where `kube-cel` cannot judge the CRD's rules on `resources` offline as the API server does
/// (whole extended resources and hugepages ask `isInteger()`; requests and limits compare). The
/// api_server test proves the API server's verdict on each; the api crate's tests fail when a
/// kube-cel release closes one, so that it is struck from here.
pub const KUBE_CEL_GAPS: &[KubeCelGap] = &[
    KubeCelGap {
        requests: r#"{}"#,
        limits: r#"{"nvidia.com/gpu": "1.0"}"#,
        api_server_accepts: false,
        why: NOT_INT64,
    },
    KubeCelGap {
        requests: r#"{"nvidia.com/gpu": "1"}"#,
        limits: r#"{"nvidia.com/gpu": "1000m"}"#,
        api_server_accepts: false,
        why: NOT_INT64,
    },
    KubeCelGap {
        requests: r#"{}"#,
        limits: r#"{"nvidia.com/gpu": "1Ei"}"#,
        api_server_accepts: false,
        why: NOT_INT64,
    },
    KubeCelGap {
        requests: r#"{}"#,
        limits: r#"{"nvidia.com/gpu": "1234567890123456789"}"#,
        api_server_accepts: false,
        why: NOT_INT64,
    },
    KubeCelGap {
        requests: r#"{}"#,
        limits: r#"{"cpu": "1", "hugepages-2Mi": "1Ei"}"#,
        api_server_accepts: false,
        why: NOT_INT64,
    },
    KubeCelGap {
        requests: r#"{"memory": "99999999999999999999Ti"}"#,
        limits: r#"{"memory": "8Ei"}"#,
        api_server_accepts: true,
        why: CAPPED,
    },
];

/// One rule broken by one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Path of the field, as the API server names it: `spec.engineArgs.gpuMemoryUtilization`,
    /// `spec.engineArgs.extraArgs[0]` for a list item, `spec.labels.team` for a map entry; empty
    /// for a rule on the whole object (the rule on `metadata.name`).
    pub field: String,
    /// What is wrong, in the API server's words: a CEL rule's message, or the detail of an
    /// OpenAPI keyword such as `should be at least 1 chars long`.
    pub message: String,
}

/// A VLLMService that breaks at least one rule; every broken rule is listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec {
    /// The broken rules, sorted by field. Never empty.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid VLLMService: ")?;
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            if error.field.is_empty() {
                f.write_str(&error.message)?;
            } else {
                write!(f, "{error}")?;
            }
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

/// Checks a whole VLLMService against the CRD, as the API server would at create.
pub fn validate(vllm: &VLLMService) -> Result<Valid<'_>, InvalidSpec> {
    let object = serde_json::to_value(vllm).expect("a VLLMService serializes to JSON");
    let mut errors = Vec::new();
    if vllm.metadata.name.as_deref().unwrap_or_default().is_empty() {
        // The API server's own check of every object; the CRD's rule on the name needs one.
        errors.push(error("metadata.name", "Required value"));
    } else {
        errors = check(&object);
    }
    typed_invariants(&vllm.spec, &mut errors);
    if errors.is_empty() {
        Ok(Valid(vllm))
    } else {
        Err(InvalidSpec { errors })
    }
}

/// The VLLMServices that passed [`validate`], by uid, with the generation that passed: the
/// rules judge the spec and the name, and every change of the spec bumps the generation, so an
/// object is checked again only when it changed. The controller reconciles an object several
/// times per change (its children's events, the periodic resync), and the CRD's CEL rules are
/// its largest cost per reconcile. Owned by its caller (one per controller); an entry goes with
/// [`Passed::forget`] when its object is deleted.
#[derive(Debug, Default)]
pub struct Passed(std::sync::Mutex<std::collections::HashMap<String, i64>>);

impl Passed {
    /// [`validate`], unless this generation of `vllm` passed before.
    pub fn validate<'a>(&self, vllm: &'a VLLMService) -> Result<Valid<'a>, InvalidSpec> {
        let key = vllm.metadata.uid.clone().zip(vllm.metadata.generation);
        let memo = || self.0.lock().expect("validation memo lock");
        if let Some((uid, generation)) = &key
            && memo().get(uid) == Some(generation)
        {
            return Ok(Valid(vllm));
        }
        // Checked without the lock held: the CEL rules are the slow part.
        let valid = validate(vllm)?;
        if let Some((uid, generation)) = key {
            memo().insert(uid, generation);
        }
        Ok(valid)
    }

    /// Forgets the object with this uid (it was deleted).
    pub fn forget(&self, uid: &str) {
        self.0.lock().expect("validation memo lock").remove(uid);
    }

    pub fn len(&self) -> usize {
        self.0.lock().expect("validation memo lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Checks a spec against every rule of the CRD that is about the spec.
pub fn validate_spec(spec: &VLLMServiceSpec) -> Result<(), InvalidSpec> {
    // The rule on the name is not about the spec: give it a name that passes.
    let object = json!({"metadata": {"name": "spec"}, "spec": spec});
    let mut errors = check(&object);
    typed_invariants(spec, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidSpec { errors })
    }
}

/// What the builders take for granted beyond the schema (they `expect` a PVC where a download
/// goes), checked on the typed value too so that no gap in an offline evaluator can make them
/// panic; reported only where the CEL rule has not already said it.
fn typed_invariants(spec: &VLLMServiceSpec, errors: &mut Vec<FieldError>) {
    let image = spec.model_source.as_ref().and_then(|m| m.image.as_ref());
    let has_pvc = spec.storage.pvc_name.is_some();
    let mut push = |field: &str, message: &str| {
        let e = error(field, message);
        if !errors.contains(&e) {
            errors.push(e);
        }
    };
    if has_pvc == image.is_some() {
        push("spec.storage.pvcName", messages::ONE_MODEL_VOLUME);
    }
    if !has_pvc && spec.lora_adapters.iter().any(|a| a.hugging_face.is_some()) {
        push("spec.loraAdapters", messages::LORA_DOWNLOAD_NEEDS_PVC);
    }
}

fn error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// The CRD's schema, compiled for both evaluators. Built on first use and never changed.
struct Compiled {
    /// The openAPIV3Schema as the CRD has it: for defaults and list types.
    openapi: Value,
    structural: jsonschema::Validator,
    cel: kube_cel::CompiledSchema,
    /// kube-cel's CEL environment (its Kubernetes functions), built once too.
    validator: kube_cel::Validator,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let crd = serde_json::to_value(crate::crd()).expect("a CRD serializes to JSON");
    let openapi = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let structural = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .with_keyword(RE2_PATTERN, |_, pattern, _| {
            let text = pattern.as_str().unwrap_or_default();
            let regex = regex::Regex::new(text)
                .map_err(|e| jsonschema::ValidationError::schema(e.to_string()))?;
            Ok(Box::new(Re2Pattern(regex)))
        })
        .should_validate_formats(false)
        .build(&to_json_schema(&openapi))
        .expect("the CRD's schema is a valid JSON schema");
    let cel = kube_cel::compile_schema(&openapi);
    assert!(!cel.has_errors(), "the CRD's CEL rules compile");
    Compiled {
        openapi,
        structural,
        cel,
        validator: kube_cel::Validator::new(),
    }
});

/// The errors of one object (as JSON) against the CRD, after the schema's defaults.
fn check(object: &Value) -> Vec<FieldError> {
    let compiled = &*COMPILED;
    let object = kube_cel::apply_defaults(&compiled.openapi, object);
    let mut errors: Vec<FieldError> = compiled
        .structural
        .iter_errors(&object)
        .map(|e| structural_error(&e))
        .collect();
    list_duplicates(&compiled.openapi, &object, "", &mut errors);
    if let Err(cel) = compiled
        .validator
        .validate_compiled(&compiled.cel, &object, None)
    {
        errors.extend(cel.iter().map(|e| error(&e.field_path, &e.message)));
    }
    // kube-cel walks maps in no fixed order: sort, so the same object always reads the same.
    errors.sort_by(|a, b| (&a.field, &a.message).cmp(&(&b.field, &b.message)));
    errors.dedup();
    errors
}

/// The OpenAPI v3 structural schema of a CRD as a JSON Schema draft 4, which it is but for
/// Kubernetes' extensions: `nullable` becomes a `null` type, `x-kubernetes-int-or-string` the
/// two types it allows, and `pattern` (RE2 in the API server, ECMA-262 in JSON Schema, which
/// refuses e.g. `[[:space:]]`) the keyword [`RE2_PATTERN`]. The other `x-kubernetes-*` keys are ignored as unknown keywords (CEL
/// rules go to kube-cel, list types to [`list_duplicates`]), as are `format`s, which the API
/// server does not check on numbers and our strings do not use.
fn to_json_schema(node: &Value) -> Value {
    let Value::Object(schema) = node else {
        return node.clone();
    };
    let mut out = Map::new();
    for (key, value) in schema {
        let value = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), to_json_schema(v)))
                    .collect(),
            ),
            "items" | "additionalProperties" | "not" => to_json_schema(value),
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(to_json_schema)
                    .collect(),
            ),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    if let Some(pattern) = out.remove("pattern") {
        out.insert(RE2_PATTERN.into(), pattern);
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        out.insert("type".into(), json!(["integer", "string"]));
    }
    if schema.get("nullable") == Some(&Value::Bool(true)) {
        if let Some(Value::String(t)) = out.get("type") {
            let t = t.clone();
            out.insert("type".into(), json!([t, "null"]));
        }
        if let Some(Value::Array(options)) = out.get_mut("enum") {
            options.push(Value::Null);
        }
    }
    Value::Object(out)
}

/// `pattern` with RE2 semantics: the API server's Go regexp, which the `regex` crate follows.
const RE2_PATTERN: &str = "x-re2-pattern";

struct Re2Pattern(regex::Regex);

impl<'i> jsonschema::Keyword<'i> for Re2Pattern {
    fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(jsonschema::ValidationError::custom(format!(
                "should match '{}'",
                self.0.as_str()
            )))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        instance.as_str().is_none_or(|s| self.0.is_match(s))
    }
}

/// A JSON pointer as the API server names the field: `spec.env[0].name`.
fn field_path<'a>(segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut path = String::new();
    for segment in segments {
        match segment {
            LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
            LocationSegment::Property(p) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&p);
            }
        }
    }
    path
}

/// One OpenAPI keyword's failure, named and worded as the API server reports it (the detail
/// after `<field>: Invalid value: <value>:`, without the repeated field name).
fn structural_error(e: &jsonschema::ValidationError<'_>) -> FieldError {
    let mut field = field_path(e.instance_path().segments());
    let message = match e.kind() {
        ValidationErrorKind::Required { property } => {
            let property = property.as_str().unwrap_or_default();
            field = if field.is_empty() {
                property.to_string()
            } else {
                format!("{field}.{property}")
            };
            "Required value".to_string()
        }
        ValidationErrorKind::MinLength { limit } => {
            format!("should be at least {limit} chars long")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("Too long: may not be more than {limit} bytes")
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("should be greater than or equal to {}", number(limit))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("should be less than or equal to {}", number(limit))
        }
        ValidationErrorKind::Custom { message, .. } => message.clone(),
        ValidationErrorKind::MaxItems { limit } | ValidationErrorKind::MaxProperties { limit } => {
            format!("Too many: must have at most {limit} items")
        }
        ValidationErrorKind::Enum { options } => {
            let options: Vec<String> = options
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| !o.is_null())
                .map(Value::to_string)
                .collect();
            format!(
                "Unsupported value: {}: supported values: {}",
                e.instance(),
                options.join(", ")
            )
        }
        ValidationErrorKind::Type { kind } => {
            let wanted = match kind {
                jsonschema::error::TypeKind::Single(t) => t.to_string(),
                jsonschema::error::TypeKind::Multiple(ts) => ts
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            format!("must be of type {wanted}")
        }
        _ => e.to_string(),
    };
    error(field, message)
}

/// A bound as the API server prints it: `1`, not the `1.0` schemars writes.
fn number(limit: &Value) -> String {
    match limit.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => limit.to_string(),
    }
}

/// The API server's check of `x-kubernetes-list-type`, which JSON Schema cannot state: items
/// of a `set` are unique, and so are the keys of the items of a `map`.
fn list_duplicates(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                let child_schema = schema
                    .get("properties")
                    .and_then(|p| p.get(key))
                    .or_else(|| schema.get("additionalProperties"));
                if let Some(child_schema) = child_schema {
                    let child_path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    list_duplicates(child_schema, child, &child_path, errors);
                }
            }
        }
        Value::Array(items) => {
            let keys: Option<Vec<&str>> = match schema["x-kubernetes-list-type"].as_str() {
                Some("map") => Some(
                    schema["x-kubernetes-list-map-keys"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect(),
                ),
                Some("set") => Some(Vec::new()),
                _ => None,
            };
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                if let Some(keys) = &keys {
                    let identity = if keys.is_empty() {
                        item.clone()
                    } else {
                        Value::Object(
                            keys.iter()
                                .map(|k| (k.to_string(), item[*k].clone()))
                                .collect(),
                        )
                    };
                    if !seen.insert(identity.to_string()) {
                        errors.push(error(&item_path, format!("Duplicate value: {identity}")));
                    }
                }
                if let Some(item_schema) = schema.get("items") {
                    list_duplicates(item_schema, item, &item_path, errors);
                }
            }
        }
        _ => {}
    }
}
