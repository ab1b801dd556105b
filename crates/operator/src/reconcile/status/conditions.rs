//! Conditions as the operator computes them, and their merge into the stored
//! list: lastTransitionTime moves only when a condition's status flips, so an
//! unchanged world yields an identical status and no write.
//! Pure.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use crate::diagnosis::masking::{MAX_CONDITION_MESSAGE_BYTES, truncate};

/// A condition's value before it is stamped with time and generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: Status,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// The state of an optional feature (HTTPRoute, ServiceMonitor): its condition, ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub status: Status,
    pub reason: String,
    pub message: String,
}

impl Feature {
    pub fn ready(reason: &str, message: &str) -> Self {
        Feature {
            status: Status::True,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// This verdict as the condition `type_`.
    pub fn condition(&self, type_: &'static str) -> Cond {
        Cond::new(type_, self.status, &self.reason, &self.message)
    }
}

impl Cond {
    pub fn new(
        type_: &'static str,
        status: Status,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Cond {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == Status::True
    }
}

/// The stored conditions after applying `next`: conditions of other types are
/// kept, lastTransitionTime is kept unless the status changed, and every
/// condition in `next` records `generation`. The result is ordered as `next`,
/// followed by kept conditions of other types.
pub fn merge(
    previous: &[Condition],
    next: &[Cond],
    generation: i64,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = next
        .iter()
        .map(|c| {
            let prev = previous.iter().find(|p| p.type_ == c.type_);
            let last_transition_time = match prev {
                Some(p) if p.status == c.status.as_str() => p.last_transition_time.clone(),
                _ => Time(now),
            };
            Condition {
                type_: c.type_.to_string(),
                status: c.status.as_str().to_string(),
                reason: c.reason.clone(),
                message: truncate(&c.message, MAX_CONDITION_MESSAGE_BYTES).into_owned(),
                observed_generation: Some(generation),
                last_transition_time,
            }
        })
        .collect();
    out.extend(
        previous
            .iter()
            .filter(|p| !next.iter().any(|c| c.type_ == p.type_))
            .cloned(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let first = merge(
            &[],
            &[Cond::new("Available", Status::False, "PodsNotReady", "0/1")],
            1,
            t(100),
        );
        assert_eq!(first[0].last_transition_time, Time(t(100)));
        let same = merge(
            &first,
            &[Cond::new(
                "Available",
                Status::False,
                "PodsNotReady",
                "still 0/1",
            )],
            2,
            t(200),
        );
        assert_eq!(same[0].last_transition_time, Time(t(100)));
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped = merge(
            &same,
            &[Cond::new("Available", Status::True, "Available", "1/1")],
            2,
            t(300),
        );
        assert_eq!(flipped[0].last_transition_time, Time(t(300)));
    }

    #[test]
    fn conditions_of_other_types_are_kept() {
        let prev = merge(
            &[],
            &[Cond::new("RouteReady", Status::True, "Accepted", "")],
            1,
            t(1),
        );
        let next = merge(
            &prev,
            &[Cond::new("Available", Status::True, "Available", "")],
            1,
            t(2),
        );
        let types: Vec<_> = next.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Available", "RouteReady"]);
    }
}
