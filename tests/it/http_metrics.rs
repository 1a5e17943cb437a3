//! `/metrics`: the Prometheus text format, parsed by a Prometheus parser, with fire and delivery
//! counters that equal the ledger's after a demo run.

use std::collections::BTreeMap;
use std::sync::Arc;

use rowfire::clock::Clock;
use rowfire::metrics::Metrics;
use sqlx::{Connection, Row};

use crate::served::{Served, Setup};
use crate::support::now;

/// The samples of `family` (its name as the parser reads it), summed by the labels named.
fn by_labels(
    scrape: &prometheus_parse::Scrape,
    family: &str,
    labels: &[&str],
) -> BTreeMap<Vec<String>, f64> {
    let mut out = BTreeMap::new();
    for s in scrape.samples.iter().filter(|s| s.metric == family) {
        let key = labels
            .iter()
            .map(|l| s.labels.get(l).unwrap_or("").to_string())
            .collect();
        let value = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        *out.entry(key).or_insert(0.0) += value;
    }
    out
}

#[tokio::test]
async fn after_a_demo_run_the_fire_and_delivery_counters_equal_the_ledgers() {
    let dir = tempfile::tempdir().unwrap();
    let made = rowfire::demo::run(&dir.path().join("demo"), now())
        .await
        .unwrap();
    let clock = Clock::fixed(now());
    let metrics = Arc::new(Metrics::default());
    let poller = made.poller(clock.clone()).with_metrics(metrics.clone());
    let reports = poller.poll_due().await.unwrap();
    assert!(!reports.is_empty(), "the demo's triggers are due");
    let sender = made.sender(clock.clone()).with_metrics(metrics.clone());
    while sender.step().await.unwrap().claimed > 0 {}
    // Fresh activity two minutes on: a meeting moved, one cancelled, one booked, so the next
    // sweep cancels sends too, and the counters must count those where they finish.
    clock.advance(jiff::SignedDuration::from_mins(2));
    rowfire::fixture::simulate(&made.sample_url, clock.now(), 3)
        .await
        .unwrap();
    let again = poller.poll_due().await.unwrap();
    assert!(!again.is_empty(), "the triggers are due again");
    while sender.step().await.unwrap().claimed > 0 {}

    let served = Served::on_with_metrics(made.store.clone(), Setup::default(), metrics).await;
    let response = served.get("/metrics").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format");

    let mut db = sqlx::SqliteConnection::connect(&made.control_plane_url)
        .await
        .unwrap();
    let mut fires = BTreeMap::new();
    for r in sqlx::query("SELECT rule_name, mode, count(*) AS n FROM fire GROUP BY rule_name, mode")
        .fetch_all(&mut db)
        .await
        .unwrap()
    {
        let key = vec![
            r.get::<String, _>("rule_name"),
            r.get::<String, _>("mode"),
            "fired".to_string(),
        ];
        fires.insert(key, r.get::<i64, _>("n") as f64);
    }
    assert!(!fires.is_empty(), "the demo run fired");
    let counted: BTreeMap<_, _> =
        by_labels(&scrape, "rowfire_fires_total", &["rule", "mode", "outcome"])
            .into_iter()
            .filter(|(k, _)| k[2] == "fired")
            .collect();
    assert_eq!(counted, fires, "fires by rule and mode");

    let mut deliveries = BTreeMap::new();
    for r in sqlx::query("SELECT integration, status, count(*) AS n FROM delivery WHERE status <> 'pending' GROUP BY integration, status")
        .fetch_all(&mut db)
        .await
        .unwrap()
    {
        let key = vec![r.get::<String, _>("integration"), r.get::<String, _>("status")];
        deliveries.insert(key, r.get::<i64, _>("n") as f64);
    }
    assert!(!deliveries.is_empty(), "the demo run delivered");
    assert!(
        deliveries.keys().any(|k| k[1] == "cancelled"),
        "the second sweep cancelled a send: {deliveries:?}"
    );
    let counted = by_labels(
        &scrape,
        "rowfire_deliveries_total",
        &["integration", "outcome"],
    );
    assert_eq!(
        counted, deliveries,
        "finished deliveries by integration and state"
    );

    let pending: i64 = sqlx::query("SELECT count(*) AS n FROM delivery WHERE status = 'pending'")
        .fetch_one(&mut db)
        .await
        .unwrap()
        .get("n");
    let depth: f64 = by_labels(&scrape, "rowfire_queue_depth", &["state"])
        .values()
        .sum();
    assert_eq!(
        depth, pending as f64,
        "queue depth counts every pending delivery"
    );
    for family in [
        "rowfire_poll_duration_seconds_count",
        "rowfire_poll_rows_read_total",
    ] {
        assert!(
            scrape.samples.iter().any(|s| s.metric == family),
            "{family} in {text}"
        );
    }
}
