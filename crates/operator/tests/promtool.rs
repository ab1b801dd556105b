//! The per-service alerting rules are valid Prometheus rules: `promtool check
//! rules` (built from the Prometheus Go module, hack/tools/promtool.sh) accepts
//! what the builder renders for the examples.

use std::process::Command;

use serde_json::json;
use vllmservice_api::VLLMService;
use vllmservice_controller::reconcile::build;

fn example(file: &str) -> VLLMService {
    let path = testkit::repo_root().join("examples").join(file);
    let mut vs: VLLMService =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    vs.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    vs.spec.monitoring.enabled = true;
    vs
}

#[test]
fn rendered_alert_rules_pass_promtool_check_rules() {
    let dir = testkit::repo_root().join("target/promtool");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["qwen-demo.yaml", "full.yaml"] {
        let vs = example(name);
        let valid = vllmservice_api::validate(&vs).expect("the example is valid");
        let rule = build::prometheusrule(&valid).expect("alerts are on by default");
        let file = dir.join(format!("rules-{name}"));
        let body = json!({"groups": rule.spec.groups});
        std::fs::write(&file, serde_saphyr::to_string(&body).unwrap()).unwrap();
        let out = Command::new(testkit::repo_root().join("hack/tools/promtool.sh"))
            .args(["check", "rules"])
            .arg(&file)
            .output()
            .expect("hack/tools/promtool.sh runs");
        assert!(
            out.status.success(),
            "promtool check rules {} failed:\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.contains("SUCCESS: 6 rules found"), "{report}");
    }
}
