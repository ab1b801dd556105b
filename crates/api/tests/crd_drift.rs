//! The checked-in CRD must be exactly what the Rust types generate.

mod common;

#[test]
fn checked_in_crd_matches_generated() {
    const CHECKED_IN: &str = "config/crd/vllmservice.yaml";
    let path = common::repo_path(CHECKED_IN);
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = vllmservice_api::crd_yaml();
    if checked_in == generated {
        return;
    }
    let first_difference = checked_in
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
    panic!(
        "{CHECKED_IN} is out of date with the Rust types in crates/api (first difference at line {}:\n  \
         checked in: {:?}\n  generated:  {:?}).\n\
         Regenerate it from the repository root with:\n\n    {}\n",
        first_difference + 1,
        checked_in
            .lines()
            .nth(first_difference)
            .unwrap_or("<end of file>"),
        generated
            .lines()
            .nth(first_difference)
            .unwrap_or("<end of file>"),
        vllmservice_api::CRD_REGENERATE_COMMAND,
    );
}
