//! The operator's own metrics (served at `/metrics` by the binary) and the
//! client layer that counts every write request the operator sends.
//! No I/O of its own: the binary serves `/metrics`; the layer wraps the client.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use http::Request;
use kube::client::Body;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use tower::util::MapRequestLayer;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// create, update, patch, delete
    pub verb: String,
    /// The API resource, with its subresource: `deployments`, `vllmservices/status`, `events`.
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LogReadLabels {
    /// `diagnosis` (a container that failed, restarts or overran its startup budget)
    /// or `engine` (the start-up lines of a Ready pod, once per revision).
    pub purpose: String,
}

/// Every series the operator exports.
pub struct Metrics {
    pub reconciles: Counter,
    /// Reconciles running right now.
    pub reconciles_in_flight: Gauge,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub writes: Family<WriteLabels, Counter>,
    pub managed_objects: Gauge,
    pub leader: Gauge,
    /// Container log reads (`pods/log` requests), by purpose.
    pub pod_log_reads: Family<LogReadLabels, Counter>,
    /// Reconciles that held a new service's first status back (`status::settle`).
    pub status_writes_held: Counter,
    /// With leader election: how much of its lease term the leader had left
    /// when it saw its renewal (below 1 s its writes pause; at 0 it stops leading).
    pub lease_renewal_slack: Histogram,
    registry: Registry,
    /// The same counts as `writes`, readable in-process (a `Family` cannot be iterated).
    write_counts: Mutex<BTreeMap<(String, String), u64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            reconciles: Counter::default(),
            reconciles_in_flight: Gauge::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            writes: Family::default(),
            managed_objects: Gauge::default(),
            leader: Gauge::default(),
            pod_log_reads: Family::default(),
            status_writes_held: Counter::default(),
            lease_renewal_slack: Histogram::new([0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0]),
            registry: Registry::with_prefix("vllmservice_operator"),
            write_counts: Mutex::default(),
        };
        let r = &mut m.registry;
        r.register(
            "reconciles",
            "Reconciles run, by any outcome",
            m.reconciles.clone(),
        );
        let help = "Reconciles running right now";
        r.register("reconciles_in_flight", help, m.reconciles_in_flight.clone());
        let help = "Reconciles that failed, by error category";
        r.register("reconcile_errors", help, m.reconcile_errors.clone());
        let help = "Time one reconcile took";
        r.register(
            "reconcile_duration_seconds",
            help,
            m.reconcile_duration.clone(),
        );
        let help = "Write requests sent to the API server, by verb and resource";
        r.register("write_requests", help, m.writes.clone());
        let help = "VLLMServices the operator currently knows";
        r.register("managed_objects", help, m.managed_objects.clone());
        let help = "1 while this replica holds the leader lease and reconciles";
        r.register("leader", help, m.leader.clone());
        let help = "Container log reads (pods/log requests) of vLLM containers, by purpose";
        r.register("pod_log_reads", help, m.pod_log_reads.clone());
        let help = "Reconciles that held a new VLLMService's first status back while its pods \
                    may still become ready within the settle window (--status-settle-seconds)";
        r.register("status_writes_held", help, m.status_writes_held.clone());
        let help = "Seconds of the leader's lease term left when it saw the lease renewed \
                    (writes pause 1 s before the term ends; at 0 it stops leading)";
        r.register(
            "lease_renewal_slack_seconds",
            help,
            m.lease_renewal_slack.clone(),
        );
        m
    }
}

impl Metrics {
    /// The text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// Counts one write request.
    pub fn record_write(&self, labels: WriteLabels) {
        self.writes.get_or_create(&labels).inc();
        let mut seen = self.write_counts.lock().expect("write counts lock");
        *seen.entry((labels.verb, labels.resource)).or_default() += 1;
    }

    /// Counts one container log read for `purpose` (`diagnosis` or `engine`).
    pub fn record_log_read(&self, purpose: &str) {
        self.log_read_counter(purpose).inc();
    }

    /// Container log reads so far for `purpose`.
    pub fn log_reads(&self, purpose: &str) -> u64 {
        self.log_read_counter(purpose).get()
    }

    fn log_read_counter(&self, purpose: &str) -> Counter {
        let labels = LogReadLabels {
            purpose: purpose.to_string(),
        };
        self.pod_log_reads.get_or_create(&labels).clone()
    }

    /// Total write requests sent so far (any verb, any resource).
    pub fn write_total(&self) -> u64 {
        self.write_counts
            .lock()
            .expect("write counts lock")
            .values()
            .sum()
    }

    /// Write requests so far, as `("verb resource", count)`, for reports and test failures.
    pub fn writes_by_kind(&self) -> Vec<(String, u64)> {
        self.write_counts
            .lock()
            .expect("write counts lock")
            .iter()
            .map(|((verb, resource), n)| (format!("{verb} {resource}"), *n))
            .collect()
    }
}

/// The verb and resource of a request, when it is a write.
pub fn classify_write(method: &http::Method, path: &str) -> Option<WriteLabels> {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => return None,
    };
    let path = path.split('?').next().unwrap_or_default();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.first() {
        Some(&"api") => segs.get(2..),
        Some(&"apis") => segs.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let resource = match rest {
        [resource] | [resource, _] => resource.to_string(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [] => "unknown".to_string(),
    };
    Some(WriteLabels {
        verb: verb.to_string(),
        resource,
    })
}

/// A layer for kube's client that counts write requests into [`Metrics::writes`].
pub fn count_writes(
    metrics: Arc<Metrics>,
) -> MapRequestLayer<impl Fn(Request<Body>) -> Request<Body> + Clone> {
    MapRequestLayer::new(move |req: Request<Body>| {
        if let Some(labels) = classify_write(req.method(), req.uri().path()) {
            metrics.record_write(labels);
        }
        req
    })
}

/// A client whose write requests are counted into `metrics`.
pub fn counting_client(config: kube::Config, metrics: Arc<Metrics>) -> kube::Result<kube::Client> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&count_writes(metrics))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_classified_by_verb_and_resource() {
        let c = |m: http::Method, p: &str| {
            classify_write(&m, p).map(|l| format!("{} {}", l.verb, l.resource))
        };
        assert_eq!(
            c(
                http::Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/x?fieldManager=m"
            ),
            Some("patch deployments".into())
        );
        assert_eq!(
            c(
                http::Method::PATCH,
                "/apis/aiinfra.example.com/v1alpha1/namespaces/a/vllmservices/x/status"
            ),
            Some("patch vllmservices/status".into())
        );
        assert_eq!(
            c(
                http::Method::POST,
                "/apis/events.k8s.io/v1/namespaces/a/events"
            ),
            Some("create events".into())
        );
        assert_eq!(
            c(http::Method::DELETE, "/api/v1/namespaces/a"),
            Some("delete namespaces".into())
        );
        assert_eq!(c(http::Method::GET, "/api/v1/namespaces/a/pods"), None);
    }

    #[test]
    fn counted_writes_are_summed() {
        let m = Metrics::default();
        for (verb, res) in [
            ("patch", "deployments"),
            ("patch", "deployments"),
            ("create", "events"),
        ] {
            m.record_write(WriteLabels {
                verb: verb.into(),
                resource: res.into(),
            });
        }
        assert_eq!(m.write_total(), 3);
        assert_eq!(
            m.writes_by_kind(),
            vec![
                ("create events".to_string(), 1),
                ("patch deployments".to_string(), 2)
            ]
        );
    }
}
