//! The sample's reminders as the demo runs them, on a fixed clock: the first sweep queues the
//! meetings of the next hours (checked against the sample data itself), and after `fixture
//! simulate` the next sweep shows a moved, a cancelled and a newly queued send.

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::demo;
use rowfire::fixture::{self, generate};
use rowfire::outbox::DeliveryStatus;
use rowfire::poll::PollReport;
use rowfire::row::Value;
use rowfire::schedule::SweepReport;
use rowfire::schedule::upcoming;
use rowfire::store::DEFAULT_WORKSPACE as WS;

use crate::support::{now, sample_definitions};

fn sweep_of(reports: &[PollReport], rule: &str) -> SweepReport {
    reports
        .iter()
        .flat_map(|r| &r.sweeps)
        .find(|(name, _)| name == rule)
        .map(|(_, s)| s.clone().expect("the sweep succeeds"))
        .unwrap_or_else(|| panic!("{rule} was swept"))
}

#[tokio::test]
async fn the_demo_queues_the_next_hours_reminders_and_simulate_moves_cancels_and_books_meetings() {
    let dir = tempfile::tempdir().unwrap();
    let made = demo::run(dir.path(), now()).await.unwrap();
    let clock = Clock::fixed(now());
    let poller = made.poller(clock.clone());
    let first = sweep_of(&poller.poll_due().await.unwrap(), "meeting_nudge");

    // By hand: booked meetings starting in the next three hours, due at their start minus their
    // own minutes (else ten), queued unless already past due plus five minutes' grace.
    let data = generate(now());
    let meetings = data.table("meetings");
    let col = |name: &str| {
        meetings
            .columns
            .iter()
            .position(|(c, _)| *c == name)
            .unwrap()
    };
    let (starts, lead, status) = (col("starts_at"), col("lead_minutes"), col("status"));
    let horizon = now() + SignedDuration::from_hours(3);
    let (mut queued, mut too_late) = (0, 0);
    for row in &meetings.rows {
        let (Value::Timestamp(at), Value::Text(s)) = (&row[starts], &row[status]) else {
            panic!("{row:?}")
        };
        if s != "booked" || *at < now() || *at >= horizon {
            continue;
        }
        let minutes = match row[lead] {
            Value::Int(m) => m,
            _ => 10,
        };
        let due = *at - SignedDuration::from_mins(minutes);
        if due + SignedDuration::from_mins(5) <= now() {
            too_late += 1;
        } else {
            queued += 1;
        }
    }
    assert!(queued >= 4, "the planted meetings are in the next hours");
    assert_eq!(
        (first.queued, first.too_late),
        (queued, too_late),
        "{first:?}"
    );
    assert_eq!(first.cancelled_moved + first.cancelled_gone, 0);

    // A running demo: fresh activity a minute later, swept at the next minute.
    let minute = |m: i64| now() + SignedDuration::from_mins(m);
    fixture::simulate(&made.sample_url, minute(1), 1)
        .await
        .unwrap();
    clock.set(minute(2));
    let second = sweep_of(&poller.poll_due().await.unwrap(), "meeting_nudge");
    assert_eq!(
        (second.cancelled_moved, second.cancelled_gone, second.queued),
        (1, 1, 2),
        "one moved (its new instant queued), one cancelled, one booked: {second:?}"
    );

    let defs = sample_definitions();
    let u = upcoming::upcoming(
        &made.store,
        WS,
        &defs,
        Some("meeting_nudge"),
        minute(2),
        SignedDuration::from_hours(3),
        100,
    )
    .await
    .unwrap();
    let reasons: Vec<Option<&str>> = u
        .sends
        .iter()
        .filter(|s| s.status == DeliveryStatus::Cancelled)
        .map(|s| s.reason.as_deref())
        .collect();
    assert_eq!(reasons.len(), 2, "{:?}", u.sends);
    assert!(
        reasons.contains(&Some("anchor moved")) && reasons.contains(&Some("no longer matches"))
    );
    let pending = u
        .sends
        .iter()
        .filter(|s| s.status == DeliveryStatus::Pending)
        .count() as u64;
    assert_eq!(
        pending, queued,
        "one cancelled, one booked, and the moved one queued again for its new start"
    );
}
