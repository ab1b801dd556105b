//! Publishing Kubernetes Events (events.k8s.io/v1) the way kube's `Recorder`
//! does, remembering less.
//!
//! As with kube's: an event that repeats (same type, reason, action, object
//! and related object) within six minutes is not created again; the first
//! one's `series` is patched with the new count and time. kube's Recorder
//! keeps every published Event whole (~1.5 KB each) in a table that never
//! shrinks: at 1,000 services, two events each, that is ~6 MB held for good
//! (BENCHMARKS.md). This one keeps, per recent event, a digest of its key,
//! its name and count, and gives memory back when the events age out.

use std::{collections::HashMap, sync::Mutex};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event as K8sEvent},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    runtime::events::{Event, EventType, Reporter},
};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::lean;

/// How long a published event can be repeated as a series (kube's value).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Publishes events and remembers the recent ones.
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    /// Per recent event, its key's digest (not the key's ten strings: at 1,000
    /// services two events each stay here for six minutes).
    recent: Mutex<HashMap<Digest, Series>>,
}

/// A [`Key`]'s SHA-256, cut to 128 bits: two different keys collide with a
/// chance of about 2^-64 even among 2^32 events.
type Digest = [u8; 16];

/// What makes two events the same event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    action: String,
    reason: String,
    regarding: Target,
    related: Option<Target>,
}

/// An object an event is about: enough of its reference to tell it apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl Key {
    fn digest(&self) -> Digest {
        let mut h = Sha256::new();
        // Each field length-prefixed (and each option tagged), so that no two
        // keys feed the same bytes.
        let mut field = |v: Option<&str>| match v {
            None => h.update([0]),
            Some(v) => {
                h.update([1]);
                h.update((v.len() as u64).to_le_bytes());
                h.update(v.as_bytes());
            }
        };
        field(Some(if self.warning { "Warning" } else { "Normal" }));
        field(Some(&self.action));
        field(Some(&self.reason));
        for target in [Some(&self.regarding), self.related.as_ref()] {
            match target {
                None => field(None),
                Some(t) => {
                    field(Some("target"));
                    for v in [&t.kind, &t.namespace, &t.name, &t.uid] {
                        field(v.as_deref());
                    }
                }
            }
        }
        let mut digest = [0; 16];
        digest.copy_from_slice(&h.finalize()[..16]);
        digest
    }
}

impl From<&ObjectReference> for Target {
    fn from(r: &ObjectReference) -> Self {
        Target {
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

/// A recently published event: its object's name and how often it occurred.
#[derive(Debug, Clone)]
struct Series {
    name: String,
    count: i32,
    last: Timestamp,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            recent: Mutex::default(),
        }
    }

    /// Publishes `ev` about `regarding`: creates the Event, or patches the
    /// series of the same event published in the last six minutes.
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let now = Timestamp::now();
        let key = Key {
            warning: matches!(ev.type_, EventType::Warning),
            action: ev.action.clone(),
            reason: ev.reason.clone(),
            regarding: regarding.into(),
            related: ev.secondary.as_ref().map(Target::from),
        }
        .digest();
        let repeat = {
            let mut recent = self.recent.lock().expect("event table lock");
            forget_older_than(&mut recent, now - SERIES_WINDOW);
            recent.get(&key).cloned()
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let series = match repeat {
            Some(s) => {
                let count = s.count + 1;
                let patch = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
                api.patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Series {
                    count,
                    last: now,
                    ..s
                }
            }
            None => {
                let event = self.event(ev, regarding, now);
                let created = lean::create_meta(&api, &PostParams::default(), &event).await?;
                Series {
                    name: created.name.unwrap_or_default(),
                    count: 1,
                    last: now,
                }
            }
        };
        self.recent
            .lock()
            .expect("event table lock")
            .insert(key, series);
        Ok(())
    }

    /// The Event object for a first occurrence (the fields kube's Recorder sets).
    fn event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let controller = &self.reporter.controller;
        K8sEvent {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            ..K8sEvent::default()
        }
    }
}

/// Drops the events last seen before `cutoff`, and the table's room when
/// most of it is empty (a map keeps its capacity otherwise).
fn forget_older_than(recent: &mut HashMap<Digest, Series>, cutoff: Timestamp) {
    recent.retain(|_, s| s.last > cutoff);
    if recent.capacity() > 64 && recent.len() < recent.capacity() / 4 {
        recent.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            warning: false,
            action: "Reconcile".into(),
            reason: "Created".into(),
            regarding: Target {
                kind: Some("VLLMService".into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
            },
            related: None,
        }
    }

    #[test]
    fn old_events_are_forgotten_and_their_room_given_back() {
        let now = Timestamp::now();
        let mut recent = HashMap::new();
        for i in 0..1000 {
            let last = if i < 990 {
                now - SignedDuration::from_mins(7)
            } else {
                now
            };
            let series = Series {
                name: format!("e{i}"),
                count: 1,
                last,
            };
            recent.insert(key(&format!("s{i}")).digest(), series);
        }
        let before = recent.capacity();
        forget_older_than(&mut recent, now - SERIES_WINDOW);
        assert_eq!(recent.len(), 10);
        assert!(recent.contains_key(&key("s995").digest()));
        assert!(!recent.contains_key(&key("s5").digest()));
        assert!(
            recent.capacity() < before / 4,
            "{} of {before}",
            recent.capacity()
        );
    }

    #[test]
    fn events_differing_in_reason_object_or_related_object_are_different() {
        let a = key("a");
        let mut other_reason = a.clone();
        other_reason.reason = "Updated".into();
        let mut related = a.clone();
        related.related = Some(key("b").regarding);
        let mut warning = a.clone();
        warning.warning = true;
        // Fields that would feed the same bytes if they were only concatenated.
        let mut shifted = a.clone();
        shifted.action = "Reconcil".into();
        shifted.reason = "eCreated".into();
        let mut moved = a.clone();
        moved.regarding.kind = None;
        moved.regarding.namespace = Some("VLLMServicens".into());
        for other in [key("b"), other_reason, related, warning, shifted, moved] {
            assert_ne!(a, other);
            assert_ne!(a.digest(), other.digest(), "{other:?}");
        }
        assert_eq!(a, key("a"));
        assert_eq!(a.digest(), key("a").digest());
    }
}
