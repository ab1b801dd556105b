//! The restricted Pod Security Standard on a namespace of the shared cluster:
//! for the tests that prove the operator's manifests are admitted there.

/// Labels `ns` to enforce the restricted Pod Security Standard and checks that
/// the API server does ([`assert_restricted`]).
pub fn enforce_restricted(ns: &str) {
    crate::kubectl_ok(&[
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "--overwrite",
    ]);
    assert_restricted(ns);
}

/// Checks that `ns` enforces the restricted Pod Security Standard: it carries
/// the label, and a pod without a security context is refused (a server-side
/// dry run).
pub fn assert_restricted(ns: &str) {
    let labels = crate::kubectl_ok(&["get", "namespace", ns, "--show-labels"]);
    assert!(
        labels.contains("pod-security.kubernetes.io/enforce=restricted"),
        "namespace {ns} is not labelled to enforce restricted: {labels}"
    );
    let out = crate::kubectl(&[
        "-n",
        ns,
        "run",
        "unconfined",
        "--image=localhost/busybox:dev",
        "--dry-run=server",
    ]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("violates PodSecurity"),
        "namespace {ns} does not enforce restricted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
