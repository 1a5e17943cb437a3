//! `rowfire schedule [RULE] [--within 3h]`: the upcoming sends of time-anchored rules, soonest
//! first, and each anchored rule's sweep (its last run and when it is next due).

use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::definitions::versions;
use rowfire::explanation::shown_key;
use rowfire::schedule::upcoming::{self, RuleSweep, ScheduledSend, Upcoming};

use super::{NOTHING_PUSHED, open_workspace, width};

/// An instant to the second, fixed width, so columns line up.
pub(crate) fn at(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// A send's state: its status, and why when there is a reason.
pub(crate) fn state(s: &ScheduledSend) -> String {
    match &s.reason {
        Some(r) => format!("{} ({r})", s.status),
        None => s.status.to_string(),
    }
}

/// `rowfire schedule`.
pub(crate) async fn run(
    config: &Config,
    rule: Option<&str>,
    within: SignedDuration,
    limit: i64,
    clock: Clock,
) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let Some((_, defs)) = versions::in_force(&store, &ws).await? else {
        bail!("{NOTHING_PUSHED}");
    };
    let found = upcoming::upcoming(&store, &ws, &defs, rule, clock.now(), within, limit)
        .await
        .map_err(|e| anyhow!(e))?;
    print_schedule(&found, within);
    Ok(ExitCode::SUCCESS)
}

fn print_schedule(u: &Upcoming, within: SignedDuration) {
    if u.sweeps.is_empty() {
        println!(
            "no time-anchored rules in force (a rule with `anchor:` schedules its sends ahead)"
        );
        return;
    }
    println!(
        "sends due {} → {} (within {within:#}), soonest first:",
        at(u.now),
        at(u.until)
    );
    if u.sends.is_empty() {
        println!("  none");
    } else {
        print_sends(&u.sends);
        if u.total > u.sends.len() as i64 {
            println!(
                "  … {} more in the window (--limit shows more)",
                u.total - u.sends.len() as i64
            );
        }
    }
    println!();
    println!("sweeps:");
    print_sweeps(&u.sweeps, u.now);
}

/// The sends as a table: due, anchor, rule, key, mode, lead source, state.
pub(crate) fn print_sends(sends: &[ScheduledSend]) {
    let keys: Vec<String> = sends.iter().map(|s| shown_key(&s.key)).collect();
    let rule_w = width(sends.iter().map(|s| s.rule.as_str()).chain(["rule"]));
    let key_w = width(keys.iter().map(String::as_str).chain(["key"]));
    let time_w = at(Timestamp::UNIX_EPOCH).len();
    println!(
        "  {:<time_w$}  {:<time_w$}  {:<rule_w$}  {:<key_w$}  {:<6}  {:<7}  state",
        "due", "anchor", "rule", "key", "mode", "lead"
    );
    for (s, key) in sends.iter().zip(&keys) {
        let lead = s.lead_from.map_or("-", |l| l.as_str());
        println!(
            "  {:<time_w$}  {:<time_w$}  {:<rule_w$}  {:<key_w$}  {:<6}  {:<7}  {}",
            at(s.due_at),
            at(s.anchor_at),
            s.rule,
            key,
            s.mode.to_string(),
            lead,
            state(s)
        );
    }
}

fn print_sweeps(sweeps: &[RuleSweep], now: Timestamp) {
    let rule_w = width(sweeps.iter().map(|s| s.rule.as_str()));
    for s in sweeps {
        let Some(last) = &s.last else {
            println!(
                "  {:<rule_w$}  never swept: due at its trigger's next poll",
                s.rule
            );
            continue;
        };
        let outcome = match &last.error {
            Some(e) => format!("failed (nothing cancelled): {e}"),
            None => format!("ok: {}", last.report),
        };
        println!(
            "  {:<rule_w$}  last {} (look-ahead to {}) {outcome}",
            s.rule,
            at(last.started_at),
            at(last.look_until)
        );
        let next = s.next_at.unwrap_or(now);
        let when = if next <= now {
            "due now".to_string()
        } else {
            format!(
                "in {:#}",
                now.duration_until(next)
                    .round(jiff::Unit::Second)
                    .unwrap_or_default()
            )
        };
        println!("  {:<rule_w$}  next {} ({when})", "", at(next));
    }
}
