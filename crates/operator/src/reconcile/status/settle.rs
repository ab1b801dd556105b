//! When a new VLLMService's first status is written, pure.
//!
//! Off by default: a new service's first status is written as soon as it is
//! known. A service whose pods start quickly then gets two status writes a
//! second apart, Pending as its Deployment is created and Available as its pod
//! becomes ready; a status write costs the API server about twice a create of
//! the object, so a cluster that creates many services at once may prefer
//! one. With `--status-settle-seconds N` the *first* status of a new service
//! waits up to N seconds from its Deployment's creation: it is written at once when the
//! service is Available, Failed or Degraded, and otherwise when the window
//! ends (the reconcile that held it asks to be run again then; the pods'
//! events reconcile it sooner). A service whose model takes
//! minutes to load shows Pending after at most the window; one that starts
//! within it is written once, Available.
//!
//! Only the first status is held: once a status exists every change is
//! written as soon as it is seen.

use std::time::Duration;

use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use vllmservice_api::{Phase, VLLMServiceStatus, condition_types as ct};

/// How long the first status of a new service may still wait, if it should
/// not be written yet: `stored` is the status the object has (None: never
/// written), `next` the one derived, `deployment` the live Deployment.
pub fn hold(
    stored: Option<&VLLMServiceStatus>,
    next: &VLLMServiceStatus,
    deployment: Option<&Deployment>,
    window: Duration,
    now: Timestamp,
) -> Option<Duration> {
    if window.is_zero() || stored.is_some() || next.phase != Some(Phase::Pending) {
        return None;
    }
    let degraded = next
        .conditions
        .iter()
        .any(|c| c.type_ == ct::DEGRADED && c.status == "True");
    if degraded {
        return None;
    }
    let created = deployment?.metadata.creation_timestamp.as_ref()?.0;
    // A creation time ahead of this clock (skew) counts as just created.
    let age = Duration::try_from(now.duration_since(created)).unwrap_or(Duration::ZERO);
    window.checked_sub(age).filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WINDOW: Duration = Duration::from_secs(5);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn deployment_created_at(seconds: i64) -> Deployment {
        serde_json::from_value(json!({"metadata": {
            "name": "d", "creationTimestamp": at(seconds).to_string()}}))
        .unwrap()
    }

    fn status(phase: &str, degraded: &str) -> VLLMServiceStatus {
        serde_json::from_value(json!({"phase": phase, "conditions": [
            {"type": "Degraded", "status": degraded, "reason": "R", "message": "m",
             "lastTransitionTime": at(0).to_string()}]}))
        .unwrap()
    }

    #[test]
    fn a_new_pending_service_waits_for_the_rest_of_the_window_from_its_deployments_creation() {
        let d = deployment_created_at(0);
        let pending = status("Pending", "False");
        assert_eq!(hold(None, &pending, Some(&d), WINDOW, at(0)), Some(WINDOW));
        assert_eq!(
            hold(None, &pending, Some(&d), WINDOW, at(2)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(hold(None, &pending, Some(&d), WINDOW, at(5)), None);
        assert_eq!(hold(None, &pending, Some(&d), WINDOW, at(60)), None);
        // Clock skew: a Deployment "created" after now waits the window, no longer.
        assert_eq!(
            hold(None, &pending, Some(&d), WINDOW, at(-30)),
            Some(WINDOW)
        );
    }

    #[test]
    fn available_failed_degraded_and_later_statuses_are_written_at_once() {
        let d = deployment_created_at(0);
        let now = at(1);
        for next in [
            status("Running", "False"),
            status("Failed", "True"),
            status("Pending", "True"),
        ] {
            assert_eq!(hold(None, &next, Some(&d), WINDOW, now), None, "{next:?}");
        }
        let pending = status("Pending", "False");
        assert_eq!(
            hold(Some(&pending), &pending, Some(&d), WINDOW, now),
            None,
            "only the first status waits"
        );
        assert_eq!(
            hold(None, &pending, None, WINDOW, now),
            None,
            "no Deployment yet (a download holds it): written at once"
        );
        assert_eq!(
            hold(None, &pending, Some(&d), Duration::ZERO, now),
            None,
            "window 0: never held"
        );
    }
}
