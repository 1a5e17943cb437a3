//! Seeing time-anchored rules: `rowfire schedule` (upcoming sends and each rule's sweep),
//! `rowfire why` on an anchored key (its scheduled, moved and cancelled sends) and a backtest of
//! an anchored rule (sends per due day). Every test drives a fixed clock; none sleeps.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use rowfire::backtest::{self, ANCHORED_CAVEAT, Options};
use rowfire::clock::Clock;
use rowfire::definitions::{self, Definitions};
use rowfire::explanation::{self, Question};
use rowfire::outbox::DeliveryStatus;
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::schedule::LeadFrom;
use rowfire::schedule::upcoming::{self, UpcomingError};
use rowfire::source::Source;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, SqliteConnection};

use crate::cli::{rowfire, text};
use crate::support::{TestSqlite, now};

/// The reminders suite's definitions (`nudge`, no recheck) plus a plain rule on the same
/// trigger, `booked`, that `schedule` must leave out.
fn definitions_text() -> String {
    format!(
        "{}  booked:\n    trigger: meetings\n    policy: once_ever\n",
        crate::reminders::definitions(false)
    )
}

fn at(m: i64) -> Timestamp {
    now() + SignedDuration::from_mins(m)
}

/// A control plane with the definitions pushed (`nudge` live), a meetings source and a poller,
/// on one fixed clock.
struct Desk {
    store: Store,
    clock: Clock,
    poller: Poller,
    source: TestSqlite,
    defs: Definitions,
}

impl Desk {
    async fn new(control_plane: &str) -> Desk {
        let source = TestSqlite::new();
        let desk_source = source.url.clone();
        let mut c = SqliteConnection::connect(&format!("{desk_source}?mode=rwc"))
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE meeting (id TEXT PRIMARY KEY, title TEXT, starts_at TEXT, reminder_minutes INTEGER, cancelled INTEGER NOT NULL DEFAULT 0)",
        )
        .execute(&mut c)
        .await
        .unwrap();
        let store = Store::open(control_plane).await.unwrap();
        store.migrate().await.unwrap();
        push::push(&store, WS, &definitions_text(), now())
            .await
            .unwrap();
        rules::set_mode(&store, WS, "nudge", Mode::Live, now())
            .await
            .unwrap();
        let clock = Clock::fixed(now());
        let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(desk_source.clone().into()));
        let poller = Poller::new(store.clone(), "desk", clock.clone(), dsn);
        let defs = definitions::parse(&definitions_text()).unwrap();
        Desk {
            store,
            clock,
            poller,
            source,
            defs,
        }
    }

    async fn sql(&self, sql: String) {
        let mut c = SqliteConnection::connect(&self.source.url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .unwrap();
    }

    async fn book(&self, id: &str, starts: Timestamp, lead: Option<i64>) {
        let lead = lead.map_or("NULL".to_string(), |m| m.to_string());
        self.sql(format!(
            "INSERT INTO meeting VALUES ('{id}', 'Meeting {id}', '{starts}', {lead}, 0)"
        ))
        .await;
    }

    async fn set(&self, id: &str, assignment: String) {
        self.sql(format!("UPDATE meeting SET {assignment} WHERE id = '{id}'"))
            .await;
    }

    async fn sweep_at(&self, m: i64) {
        self.clock.set(at(m));
        for r in self.poller.poll_due().await.unwrap() {
            for (_, s) in &r.sweeps {
                s.as_ref().expect("the sweep succeeds");
            }
        }
    }

    /// Books five meetings, sweeps at 0, then moves one (120 → 150), cancels one and sweeps at 5.
    async fn busy_afternoon(&self) {
        self.book("plain", at(60), None).await;
        self.book("own", at(90), Some(30)).await;
        self.book("moved", at(120), None).await;
        self.book("gone", at(100), None).await;
        self.book("far", at(600), None).await;
        self.sweep_at(0).await;
        self.set("moved", format!("starts_at = '{}'", at(150)))
            .await;
        self.set("gone", "cancelled = 1".into()).await;
        self.sweep_at(5).await;
    }
}

on_both_engines!(
    schedule_lists,
    the_schedule_lists_upcoming_sends_soonest_first_with_their_lead_source_state_and_the_last_sweep
);

async fn the_schedule_lists_upcoming_sends_soonest_first_with_their_lead_source_state_and_the_last_sweep(
    url: &str,
) {
    let d = Desk::new(url).await;
    d.busy_afternoon().await;
    let three_hours = SignedDuration::from_hours(3);
    let u = upcoming::upcoming(&d.store, WS, &d.defs, None, at(5), three_hours, 100)
        .await
        .unwrap();
    let seen: Vec<_> = u
        .sends
        .iter()
        .map(|s| {
            (
                explanation::shown_key(&s.key),
                s.due_at,
                s.anchor_at,
                s.lead_from,
                s.status,
                s.reason.clone(),
            )
        })
        .collect();
    let (default, row) = (Some(LeadFrom::Default), Some(LeadFrom::Row));
    let (pending, cancelled) = (DeliveryStatus::Pending, DeliveryStatus::Cancelled);
    let moved = Some("anchor moved".to_string());
    let gone = Some("no longer matches".to_string());
    assert_eq!(
        seen,
        [
            ("plain".into(), at(50), at(60), default, pending, None),
            ("own".into(), at(60), at(90), row, pending, None),
            ("gone".into(), at(90), at(100), default, cancelled, gone),
            ("moved".into(), at(110), at(120), default, cancelled, moved),
            ("moved".into(), at(140), at(150), default, pending, None),
        ],
        "soonest first; the far meeting is past the look-ahead"
    );
    assert_eq!(u.total, 5);
    assert_eq!((u.now, u.until), (at(5), at(185)));
    let [sweep] = u.sweeps.as_slice() else {
        panic!("one anchored rule: {:?}", u.sweeps)
    };
    let last = sweep.last.as_ref().expect("swept");
    assert_eq!(sweep.rule, "nudge");
    assert_eq!((last.started_at, last.look_until), (at(5), at(185)));
    assert_eq!(last.error, None);
    let r = &last.report;
    assert_eq!(
        (
            r.rows,
            r.queued,
            r.already,
            r.cancelled_moved,
            r.cancelled_gone
        ),
        (3, 1, 2, 1, 1),
        "{r:?}"
    );
    assert_eq!(sweep.next_at, Some(at(6)), "its interval is a minute");

    // A shorter window and a limit: the soonest only, with the total.
    let u = upcoming::upcoming(&d.store, WS, &d.defs, Some("nudge"), at(5), three_hours, 2)
        .await
        .unwrap();
    assert_eq!((u.sends.len(), u.total), (2, 5));
    let hour = SignedDuration::from_hours(1);
    let u = upcoming::upcoming(&d.store, WS, &d.defs, None, at(55), hour, 100)
        .await
        .unwrap();
    let keys: Vec<_> = u
        .sends
        .iter()
        .map(|s| explanation::shown_key(&s.key))
        .collect();
    assert_eq!(
        keys,
        ["plain", "own", "gone", "moved"],
        "the overdue pending send is still listed; none due after 15:55"
    );

    for (rule, says) in [("booked", "not time-anchored"), ("nope", "unknown rule")] {
        match upcoming::upcoming(&d.store, WS, &d.defs, Some(rule), at(5), hour, 10).await {
            Err(UpcomingError::Rule(e)) => assert!(e.contains(says), "{rule}: {e}"),
            other => panic!("{rule}: {other:?}"),
        }
    }
}

on_both_engines!(
    why_anchored,
    why_shows_an_anchored_keys_scheduled_moved_and_cancelled_sends
);

async fn why_shows_an_anchored_keys_scheduled_moved_and_cancelled_sends(url: &str) {
    let d = Desk::new(url).await;
    d.busy_afternoon().await;
    let source = d.source.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(source.clone().into()));
    let ask = |key| Question {
        rule: "nudge",
        key,
        days: 1,
        now: at(5),
    };
    let moved = explanation::why(&d.store, WS, &d.defs, ask("moved"), &dsn)
        .await
        .unwrap();
    let sends = moved.sends.as_ref().expect("an anchored rule has sends");
    assert_eq!(
        sends
            .iter()
            .map(|s| (s.anchor_at, s.status))
            .collect::<Vec<_>>(),
        [
            (at(120), DeliveryStatus::Cancelled),
            (at(150), DeliveryStatus::Pending)
        ],
        "in the order they were made"
    );
    let shown = moved.to_string();
    let lines: Vec<&str> = shown.lines().filter(|l| l.contains("anchor ")).collect();
    assert_eq!(lines.len(), 2, "{shown}");
    let stamp = |t: Timestamp| t.strftime("%Y-%m-%d %H:%M:%SZ").to_string();
    assert!(
        lines[0].contains(&format!(
            "anchor {}  due {}",
            stamp(at(120)),
            stamp(at(110))
        )) && lines[0].contains("lead default")
            && lines[0].contains("cancelled (anchor moved) by the sweep at"),
        "{shown}"
    );
    assert!(
        lines[1].contains(&stamp(at(150))) && lines[1].contains("pending"),
        "{shown}"
    );

    let gone = explanation::why(&d.store, WS, &d.defs, ask("gone"), &dsn)
        .await
        .unwrap()
        .to_string();
    assert!(gone.contains("cancelled (no longer matches)"), "{gone}");
    let own = explanation::why(&d.store, WS, &d.defs, ask("own"), &dsn)
        .await
        .unwrap()
        .to_string();
    assert!(own.contains("lead row") && own.contains("pending"), "{own}");

    // A rule that is not anchored has no sends section.
    let q = Question {
        rule: "booked",
        ..ask("own")
    };
    let booked = explanation::why(&d.store, WS, &d.defs, q, &dsn)
        .await
        .unwrap();
    assert!(booked.sends.is_none());
}

#[tokio::test]
async fn a_backtest_of_an_anchored_rule_counts_one_send_per_key_and_anchor_on_the_day_it_falls_due()
{
    let d = Desk::new(&TestSqlite::new().url).await;
    let day = |n: i64| SignedDuration::from_hours(24 * n);
    let hours = |n: i64| SignedDuration::from_hours(n);
    let midnight = Timestamp::from_second(now().as_second() / 86_400 * 86_400).unwrap();
    // Two days back: two sends; yesterday: one by the row's lead.
    d.book("a", midnight - day(2) + hours(10), None).await;
    d.book("b", midnight - day(2) + hours(15), None).await;
    d.book("c", midnight - day(1) + hours(9), Some(30)).await;
    // Starts just after now but is due before it: counted (today).
    d.book("soon", now() + SignedDuration::from_mins(5), None)
        .await;
    // Due after now: not counted.
    d.book("later", now() + SignedDuration::from_mins(20), None)
        .await;
    // Starts inside the window but was due before it: not counted.
    let since = now() - day(3);
    d.book("early", since + SignedDuration::from_mins(5), None)
        .await;
    // Starts after now, and its own lead (2 days) put its due time two days back, but no sweep
    // reads an anchor 2 days ahead (the look-ahead is 3h): live expires it, and so does this.
    d.book("long", now() + hours(1), Some(48 * 60)).await;

    let def = d.defs.source(definitions::DEFAULT_SOURCE).unwrap().clone();
    let source = Source::connect(&def, &d.source.url).await.unwrap();
    let opts = Options {
        days: 3,
        sample: 5,
        now: now(),
    };
    let report = backtest::run(&d.defs, "nudge", &source, &opts)
        .await
        .unwrap();
    assert_eq!(
        (report.fires, report.expired_sends, report.rows_matched),
        (4, 1, 5),
        "{report}"
    );
    // The same count, by hand: each counted meeting's due time, by UTC day.
    let mins = SignedDuration::from_mins;
    let dues = [
        midnight - day(2) + hours(10) - mins(10),
        midnight - day(2) + hours(15) - mins(10),
        midnight - day(1) + hours(9) - mins(30),
        now() - mins(5),
    ];
    let mut expected = std::collections::BTreeMap::new();
    for due in dues {
        *expected
            .entry(due.to_zoned(jiff::tz::TimeZone::UTC).date().to_string())
            .or_insert(0u64) += 1;
    }
    let counted: std::collections::BTreeMap<String, u64> = report
        .per_day
        .iter()
        .filter(|d| d.fires > 0)
        .map(|d| (d.date.clone(), d.fires))
        .collect();
    assert_eq!(counted, expected);
    assert_eq!(report.anchored_caveat, Some(ANCHORED_CAVEAT));
    let shown = report.to_string();
    assert!(shown.contains("sends per day, by due time"), "{shown}");
    assert!(shown.contains("moved or cancelled"), "{shown}");
    assert!(report.headline().contains("→ 4 sends over 3 days"));
    assert!(shown.contains("sends found too late"), "{shown}");
}

#[tokio::test]
async fn rowfire_schedule_prints_aligned_columns_and_bounds_within() {
    let cp = TestSqlite::new();
    let d = Desk::new(&cp.url).await;
    d.busy_afternoon().await;
    let env = [("ROWFIRE_DATABASE_URL", cp.url.as_str())];
    let start = at(5).to_string();
    let out = rowfire(&["schedule", "--now", &start, "--within", "3h"], &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("due "))
        .unwrap_or_else(|| panic!("a header in\n{stdout}"));
    let rows = &lines[header..header + 6];
    for column in ["anchor", "rule", "key", "mode", "lead", "state"] {
        let x = rows[0].find(column).unwrap();
        for row in &rows[1..] {
            assert_ne!(row.get(x - 2..x), None, "{column} in\n{stdout}");
            assert_eq!(&row[x - 2..x], "  ", "{column} lines up in\n{stdout}");
            assert_ne!(&row[x..x + 1], " ", "{column} lines up in\n{stdout}");
        }
    }
    assert!(rows[4].contains("cancelled (anchor moved)"), "{stdout}");
    assert!(
        stdout.contains("sweeps:") && stdout.contains("nudge  last "),
        "{stdout}"
    );
    assert!(
        stdout.contains("cancelled(no longer matches)=1"),
        "{stdout}"
    );

    for (within, says) in [("91d", "at most"), ("0s", "from 1s"), ("soon", "not a")] {
        let out = rowfire(&["schedule", "--within", within], &env);
        let (_, stderr) = text(&out);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{within}: {stderr}"
        );
    }
    let out = rowfire(&["schedule", "booked"], &env);
    assert!(
        text(&out).1.contains("not time-anchored"),
        "{:?}",
        text(&out)
    );
}
