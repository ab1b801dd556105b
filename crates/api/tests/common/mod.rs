//! Helpers shared by the api crate's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

pub use testkit::repo_path;

/// A YAML file of the repository as JSON.
pub fn read_yaml(relative: &str) -> Value {
    let path = repo_path(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The examples every test runs against.
pub const EXAMPLES: [&str; 3] = [
    "examples/qwen-demo.yaml",
    "examples/full.yaml",
    "examples/model-image.yaml",
];

/// The generated CRD's openAPIV3Schema as JSON.
pub fn crd_schema() -> Value {
    let crd = serde_json::to_value(vllmservice_api::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// One entry of tests/cases/invalid.yaml.
#[derive(Debug, Deserialize)]
pub struct InvalidCase {
    pub name: String,
    pub field: String,
    #[serde(default)]
    pub decode: bool,
    #[serde(default)]
    pub cel: bool,
    pub patch: Value,
}

impl InvalidCase {
    /// The qwen-demo example with this case's patch applied to its spec.
    pub fn object(&self) -> Value {
        let mut object = read_yaml("examples/qwen-demo.yaml");
        object["metadata"]["name"] = Value::String(self.name.clone());
        merge_patch(&mut object["spec"], &self.patch);
        object
    }
}

pub fn invalid_cases() -> Vec<InvalidCase> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cases/invalid.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}
