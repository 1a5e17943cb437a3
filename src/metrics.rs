//! What a Rowfire process counts, in the Prometheus text format (`prometheus-client`): fires by
//! rule, mode and outcome; deliveries by integration and outcome; poll duration and rows read;
//! queue depth by state; delivery lateness; lease takeovers; source errors. Served at `/metrics`
//! by `rowfire serve` and `rowfire demo`, and by `rowfire worker --metrics ADDR`.
//!
//! Counters count what this process did since it started (Prometheus reads a restart as a
//! reset). Queue depth is read from the control plane at each scrape, by the server. This module
//! is a leaf: the poller and the sender call it with plain values, and it imports neither.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FireLabels {
    rule: String,
    mode: String,
    /// `fired` (a new fire claimed) or `already` (its bucket was claimed before).
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    integration: String,
    /// The state the send settled in (`sent`, `failed`, `dead`, `expired`, `skipped`, …) or
    /// `retry` / `waiting` when it goes again.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// The registry and every metric in it. Shared by a process's server, pollers and senders.
pub struct Metrics {
    registry: Mutex<Registry>,
    fires: Family<FireLabels, Counter>,
    deliveries: Family<DeliveryLabels, Counter>,
    poll_seconds: Family<TriggerLabels, Histogram>,
    rows_read: Family<TriggerLabels, Counter>,
    source_errors: Family<TriggerLabels, Counter>,
    takeovers: Family<KindLabels, Counter>,
    lateness: Histogram,
    queue_depth: Family<StateLabels, Gauge>,
}

/// Queue depth by state, as the server reads it at a scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Pending and due now, waiting for a sender.
    pub due: u64,
    /// Pending and due later (scheduled sends, retries waiting out their backoff).
    pub scheduled: u64,
    /// Claimed by a sender whose lease has not lapsed.
    pub leased: u64,
}

fn seconds_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    ])
}

impl Default for Metrics {
    fn default() -> Metrics {
        let m = Metrics {
            registry: Mutex::new(Registry::with_prefix("rowfire")),
            fires: Family::default(),
            deliveries: Family::default(),
            poll_seconds: Family::new_with_constructor(seconds_histogram),
            rows_read: Family::default(),
            source_errors: Family::default(),
            takeovers: Family::default(),
            lateness: seconds_histogram(),
            queue_depth: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(|e| e.into_inner());
            r.register(
                "fires",
                "Rows claimed by rules: outcome fired (a new fire) or already (its bucket was claimed before)",
                m.fires.clone(),
            );
            r.register(
                "deliveries",
                "Sends settled, by integration and the state they settled in",
                m.deliveries.clone(),
            );
            r.register(
                "poll_duration_seconds",
                "How long each poll of a trigger took, read and claims included",
                m.poll_seconds.clone(),
            );
            r.register(
                "poll_rows_read",
                "Rows polls read from sources",
                m.rows_read.clone(),
            );
            r.register(
                "source_errors",
                "Polls that failed reading their source",
                m.source_errors.clone(),
            );
            r.register(
                "lease_takeovers",
                "Work found taken over by another worker after its lease lapsed (a poll that lost its trigger lease, a settle that found its delivery re-claimed)",
                m.takeovers.clone(),
            );
            r.register(
                "delivery_lateness_seconds",
                "How long after its due time each delivery was sent",
                m.lateness.clone(),
            );
            r.register(
                "queue_depth",
                "Deliveries not yet finished, by state (read at each scrape)",
                m.queue_depth.clone(),
            );
        }
        m
    }
}

/// Label values come from definitions (rule, trigger, integration names): kept short, and
/// without the characters the text format would have to escape.
fn label(text: &str) -> String {
    text.chars()
        .take(120)
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' => '_',
            c => c,
        })
        .collect()
}

impl Metrics {
    /// A poll of `trigger` ended: how long it took, how many rows it read, and whether it
    /// failed on its source or lost its lease.
    pub fn poll(&self, trigger: &str, took: Duration, rows: u64, failed: bool, lease_lost: bool) {
        let t = TriggerLabels {
            trigger: label(trigger),
        };
        self.poll_seconds
            .get_or_create(&t)
            .observe(took.as_secs_f64());
        self.rows_read.get_or_create(&t).inc_by(rows);
        if failed {
            self.source_errors.get_or_create(&t).inc();
        }
        if lease_lost {
            self.takeover("trigger");
        }
    }

    /// A poll claimed `fired` new fires for `rule` in `mode` and found `already` claimed.
    pub fn fires(&self, rule: &str, mode: &str, fired: u64, already: u64) {
        for (outcome, n) in [("fired", fired), ("already", already)] {
            self.fires
                .get_or_create(&FireLabels {
                    rule: label(rule),
                    mode: label(mode),
                    outcome: outcome.to_string(),
                })
                .inc_by(n);
        }
    }

    /// A send through `integration` settled as `outcome`, `late` after its due time when it
    /// was sent.
    pub fn delivery(&self, integration: &str, outcome: &str, late: Option<Duration>) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                integration: label(integration),
                outcome: label(outcome),
            })
            .inc();
        if let Some(late) = late {
            self.lateness.observe(late.as_secs_f64());
        }
    }

    /// `n` deliveries through `integration` finished as they were written, in `state`.
    pub fn deliveries_written(&self, integration: &str, state: &str, n: u64) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                integration: label(integration),
                outcome: label(state),
            })
            .inc_by(n);
    }

    /// Work of `kind` (`trigger`, `delivery`) was found taken over by another worker.
    pub fn takeover(&self, kind: &str) {
        self.takeovers
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Sets the queue depth read from the control plane.
    pub fn set_queue_depth(&self, depth: QueueDepth) {
        for (state, n) in [
            ("due", depth.due),
            ("scheduled", depth.scheduled),
            ("leased", depth.leased),
        ] {
            self.queue_depth
                .get_or_create(&StateLabels {
                    state: state.to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Everything, in the text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
