//! Logs a collector can read: `ROWFIRE_LOG_FORMAT=json` makes every stderr line of a worker one
//! JSON object, carrying the fields of the spans it happened in (the poll's workspace and
//! trigger, the claim's rule, the send's and settle's delivery ids, each span's duration) and
//! the per-poll report as an event with its numbers.

use serde_json::Value;

use crate::cli::{rowfire, text};
use crate::receiver::Receiver;
use crate::sending::{Options, add_signups, prepare};
use crate::support::TestSqlite;

/// The lines whose innermost span or enclosing spans hold `field`.
fn with_span_field<'a>(lines: &'a [Value], field: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| {
            l["span"].get(field).is_some()
                || l["spans"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s.get(field).is_some()))
        })
        .collect()
}

/// The `done` line of the span named `name`, which carries its fields and its duration.
fn done<'a>(lines: &'a [Value], name: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["fields"]["message"] == "done" && l["span"]["name"] == name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_span_fields() {
    let receiver = Receiver::start().await;
    let source = TestSqlite::new();
    #[expect(
        clippy::disallowed_methods,
        reason = "the worker under test runs on the system clock, so its rows must be recent"
    )]
    let at = jiff::Timestamp::now();
    add_signups(&source, 0..2, at).await;
    let cp = TestSqlite::new();
    let store = rowfire::store::Store::open(&cp.url).await.unwrap();
    store.migrate().await.unwrap();
    let key = prepare(&store, &receiver.url, &Options::default(), at).await;
    drop(store);
    let env = [
        ("ROWFIRE_DATABASE_URL", cp.url.as_str()),
        ("ROWFIRE_MASTER_KEY", key.as_str()),
        ("ROWFIRE_EGRESS_ALLOW", "127.0.0.1"),
        ("SIGNUPS_URL", source.url.as_str()),
        ("ROWFIRE_LOG", "info"),
        ("ROWFIRE_LOG_FORMAT", "json"),
    ];
    let out = rowfire(&["worker", "--once"], &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    // What the command prints is unchanged.
    assert!(
        stdout.contains("signups: matched=2 fired=2 already=0"),
        "{stdout}"
    );
    assert!(stdout.contains("sent=2"), "{stdout}");

    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object ({e}): {l}"))
        })
        .collect();
    assert!(lines.iter().all(Value::is_object), "{stderr}");

    // The poll's workspace and trigger, and the claim's rule, are on the lines in their spans.
    let polls = with_span_field(&lines, "trigger");
    assert!(
        polls
            .iter()
            .any(|l| l["spans"][0]["workspace"] == "default"
                && l["spans"][0]["trigger"] == "signups"),
        "{stderr}"
    );
    let claims = done(&lines, "claim");
    assert_eq!(claims.len(), 1, "{stderr}");
    let claim = &claims[0]["span"];
    assert_eq!(claim["workspace"], "default", "{stderr}");
    assert_eq!(claim["trigger"], "signups", "{stderr}");
    assert_eq!(claim["rule"], "welcome", "{stderr}");
    assert_eq!(claim["fired"], 2, "{stderr}");
    assert!(claim["duration_ms"].as_f64().is_some(), "{stderr}");
    // The claim line names its poll too.
    assert!(
        claims[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "poll" && s["trigger"] == "signups"),
        "{stderr}"
    );
    let poll = done(&lines, "poll");
    assert_eq!(poll.len(), 1, "{stderr}");
    assert!(
        poll[0]["span"]["duration_ms"].as_f64().is_some(),
        "{stderr}"
    );

    // The per-poll report, with its numbers as fields.
    let report: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "poll report")
        .collect();
    assert_eq!(report.len(), 1, "{stderr}");
    let fields = &report[0]["fields"];
    assert_eq!(report[0]["level"], "INFO");
    assert_eq!(fields["trigger"], "signups");
    assert_eq!(fields["matched"], 2);
    assert_eq!(fields["fired"], 2);
    assert_eq!(fields["already"], 0);
    assert_eq!(fields["status"], "ok");
    assert_eq!(report[0]["span"]["workspace"], "default", "{stderr}");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "poll report for a rule"
                && l["fields"]["rule"] == "welcome"
                && l["fields"]["fired"] == 2),
        "{stderr}"
    );

    // Each send names its delivery; each settle the deliveries it settled.
    let sends = done(&lines, "send");
    assert_eq!(sends.len(), 2, "{stderr}");
    assert!(
        sends.iter().all(|s| s["span"]["delivery"].is_i64()
            && s["span"]["outcome"] == "sent"
            && s["span"]["duration_ms"].as_f64().is_some()),
        "{stderr}"
    );
    let settled: Vec<&str> = done(&lines, "settle")
        .iter()
        .filter_map(|s| s["span"]["deliveries"].as_str())
        .flat_map(|d| d.split(','))
        .collect();
    assert_eq!(settled.len(), 2, "{stderr}");
}

#[test]
fn an_unknown_log_format_is_refused_with_the_formats_accepted() {
    let out = rowfire(&["keygen"], &[("ROWFIRE_LOG_FORMAT", "xml")]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("ROWFIRE_LOG_FORMAT=\"xml\" is not a log format; use json"),
        "{stderr}"
    );
}
