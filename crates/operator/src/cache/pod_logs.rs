//! What was read from each pod's logs, remembered so that a container
//! instance's log is read at most once; an entry goes with its pod. No I/O.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
};

use kube::{Resource, runtime::watcher};

use super::relist;
use crate::diagnosis::{hf_log, vllm_log};

/// Why a container log is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogPurpose {
    /// A container that failed, restarts or overran its startup budget.
    Diagnosis,
    /// The start-up lines of a Ready container (the engine's settings).
    Engine,
    /// The output of a download Job's pod.
    Download,
}

impl LogPurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            LogPurpose::Diagnosis => "diagnosis",
            LogPurpose::Engine => "engine",
            LogPurpose::Download => "download",
        }
    }
}

/// What one log read found.
#[derive(Debug, Clone, PartialEq)]
pub enum LogOutcome {
    /// The read failed (the message is for the operator's log only).
    Failed,
    /// A diagnosis, and how far the load got.
    Diagnosed {
        diagnosis: Option<vllm_log::Diagnosis>,
        progress: Option<String>,
    },
    Engine(vllm_log::EngineInfo),
    /// Why a download pod failed.
    Download(hf_log::Classified),
}

/// Per pod UID, per purpose: the container instance last read (its key) and what
/// the read found. One entry per purpose and pod, so the memory is bounded by the
/// pods in the cache; an entry goes with its pod's Delete event (or a re-list
/// without it).
#[derive(Clone, Default)]
pub struct PodLogs(Arc<Mutex<LogsState>>);

#[derive(Default)]
struct LogsState {
    by_pod: HashMap<String, HashMap<LogPurpose, (String, LogOutcome)>>,
    /// The UIDs of a re-list in progress.
    relisting: Option<BTreeSet<String>>,
}

impl PodLogs {
    /// Applies one event of the pod watch: forgets deleted pods.
    pub fn saw<K: Resource>(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        let Ok(event) = event else { return };
        let mut s = self.0.lock().expect("pod logs lock");
        match event {
            watcher::Event::Delete(pod) => {
                if let Some(uid) = &pod.meta().uid {
                    s.by_pod.remove(uid);
                }
            }
            watcher::Event::Init => s.relisting = Some(BTreeSet::new()),
            watcher::Event::InitApply(pod) => {
                let seen = relist(&mut s.relisting);
                if let Some(uid) = &pod.meta().uid {
                    seen.insert(uid.clone());
                }
            }
            watcher::Event::InitDone => {
                let seen = s.relisting.take().unwrap_or_default();
                s.by_pod.retain(|uid, _| seen.contains(uid));
            }
            watcher::Event::Apply(_) => {}
        }
    }

    /// What the read of `key` (a container instance) for `purpose` of pod `uid`
    /// found, if that instance was read.
    pub fn get(&self, uid: &str, purpose: LogPurpose, key: &str) -> Option<LogOutcome> {
        let s = self.0.lock().expect("pod logs lock");
        match s.by_pod.get(uid)?.get(&purpose) {
            Some((k, outcome)) if k == key => Some(outcome.clone()),
            _ => None,
        }
    }

    /// Remembers what the read of `key` found (replacing the pod's older instance).
    pub fn put(&self, uid: &str, purpose: LogPurpose, key: &str, outcome: LogOutcome) {
        let mut s = self.0.lock().expect("pod logs lock");
        s.by_pod
            .entry(uid.to_string())
            .or_default()
            .insert(purpose, (key.to_string(), outcome));
    }

    /// How many pods have an entry (for tests).
    pub fn len(&self) -> usize {
        self.0.lock().expect("pod logs lock").by_pod.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
