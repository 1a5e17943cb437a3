//! What one poll did: its counts per trigger and per rule, its status, the line
//! `worker --once` prints for it, and the same numbers as structured log events
//! ([`PollReport::log`]).

use std::fmt;

use crate::rules::Mode;
use crate::sql_guard::Window;

/// One rule's part of a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulePoll {
    /// The rule.
    pub rule: String,
    /// The mode it claimed in.
    pub mode: Mode,
    /// Fires it made.
    pub fired: u64,
    /// Rows whose bucket it had already claimed.
    pub already: u64,
}

/// How a poll ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollStatus {
    /// The whole window was evaluated.
    Ok,
    /// Nothing was read (halted workspace, no rules); the watermark stays.
    Skipped(String),
    /// The poll failed; the watermark stays and the window is read again next time.
    Failed(String),
    /// The lease was lost (taken over, or not renewed in time): the poll stopped at once and did
    /// not settle; whoever holds the lease now reads the window.
    LeaseLost,
    /// The worker is stopping: the poll finished the page it held and gave the trigger back,
    /// due at once, its watermark unmoved.
    Stopped,
}

/// What one poll of one trigger did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollReport {
    /// The trigger.
    pub trigger: String,
    /// The window read.
    pub window: Option<Window>,
    /// Rows read in the window.
    pub matched: u64,
    /// Rows that made at least one new fire (any rule); `fired + already = matched`.
    pub fired: u64,
    /// Rows that fired for no rule.
    pub already: u64,
    /// Rows in the window with a NULL key.
    pub null_keys: u64,
    /// Rows with a NULL clock (whole query).
    pub null_clocks: u64,
    /// Rows whose clock is not a time (whole query), with one of them.
    pub unreadable_clocks: crate::source::UnreadableClocks,
    /// When `null_clocks` and `unreadable_clocks` were counted: by this poll, or by an earlier
    /// one less than the count interval ago (a poll reads only its window; see
    /// [`super::DEFAULT_CLOCK_COUNT_EVERY`]). `None` when nothing was read.
    pub clocks_counted_at: Option<jiff::Timestamp>,
    /// True when this poll counted them.
    pub clocks_recounted: bool,
    /// Per rule.
    pub rules: Vec<RulePoll>,
    /// The sweeps of time-anchored rules this poll ran: per rule, what it did or why it failed
    /// (a failed sweep cancels nothing).
    pub sweeps: Vec<(String, Result<crate::schedule::SweepReport, String>)>,
    /// How it ended.
    pub status: PollStatus,
    /// False when the lease had been taken over and the settle changed nothing.
    pub settled: bool,
    /// Deliveries that finished as they were written, by integration and state.
    pub enqueued: crate::outbox::Tally,
}

impl PollStatus {
    /// How the poll ended, in a word (`ok`, `skipped`, `failed`, `lease_lost`, `stopped`), and
    /// why, when there is a reason.
    pub fn parts(&self) -> (&'static str, Option<&str>) {
        match self {
            PollStatus::Ok => ("ok", None),
            PollStatus::Skipped(why) => ("skipped", Some(why)),
            PollStatus::Failed(why) => ("failed", Some(why)),
            PollStatus::LeaseLost => ("lease_lost", None),
            PollStatus::Stopped => ("stopped", None),
        }
    }
}

impl PollReport {
    /// Logs what the printed report says as `info` events with its numbers as fields: one for
    /// the trigger (`poll report`), then one per rule (`poll report for a rule`).
    pub fn log(&self) {
        let (status, reason) = self.status.parts();
        tracing::info!(
            trigger = %self.trigger,
            since = self.window.map(|w| tracing::field::display(w.since)),
            until = self.window.map(|w| tracing::field::display(w.until)),
            matched = self.matched,
            fired = self.fired,
            already = self.already,
            null_keys = self.null_keys,
            null_clocks = self.null_clocks,
            unreadable_clocks = self.unreadable_clocks.rows,
            clocks_counted_at = self.clocks_counted_at.map(tracing::field::display),
            clocks_recounted = self.clocks_recounted,
            status,
            reason,
            settled = self.settled,
            "poll report"
        );
        for r in &self.rules {
            tracing::info!(
                trigger = %self.trigger,
                rule = %r.rule,
                mode = %r.mode,
                fired = r.fired,
                already = r.already,
                "poll report for a rule"
            );
        }
        for (rule, swept) in &self.sweeps {
            match swept {
                Ok(r) => {
                    tracing::info!(trigger = %self.trigger, rule = %rule, queued = r.queued, moved = r.moved,
                    reinstated = r.reinstated, cancelled_moved = r.cancelled_moved, cancelled_gone = r.cancelled_gone,
                    too_late = r.too_late, "sweep report")
                }
                Err(e) => {
                    tracing::warn!(trigger = %self.trigger, rule = %rule, error = %e, "sweep failed; it cancelled nothing")
                }
            }
        }
    }
}

impl fmt::Display for PollReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: matched={} fired={} already={}",
            self.trigger, self.matched, self.fired, self.already
        )?;
        for r in &self.rules {
            writeln!(
                f,
                "  {} {} fired={} already={}",
                r.rule, r.mode, r.fired, r.already
            )?;
        }
        for (rule, swept) in &self.sweeps {
            match swept {
                Ok(r) => writeln!(f, "  {rule} swept: {r}")?,
                Err(e) => writeln!(f, "  {rule} sweep failed (nothing cancelled): {e}")?,
            }
        }
        if self.null_keys + self.null_clocks + self.unreadable_clocks.rows > 0 {
            // Clocks are counted over the whole query, at most once per interval: say when.
            let counted = match (self.clocks_recounted, self.clocks_counted_at) {
                (false, Some(at)) if self.null_clocks + self.unreadable_clocks.rows > 0 => {
                    format!(" (clocks as counted at {at})")
                }
                _ => String::new(),
            };
            writeln!(
                f,
                "  not fired: {} row(s) with a NULL key, {} with a NULL clock, {} with an unreadable clock{counted}",
                self.null_keys, self.null_clocks, self.unreadable_clocks.rows
            )?;
        }
        if let Some(e) = &self.unreadable_clocks.example {
            writeln!(
                f,
                "  unreadable clock: e.g. {:?} (key {}); write the clock as a time, or cast it in the SQL",
                e.clock, e.key
            )?;
        }
        match &self.status {
            PollStatus::Ok => {}
            PollStatus::Skipped(why) => writeln!(f, "  skipped: {why}")?,
            PollStatus::Failed(why) => writeln!(f, "  failed: {why}")?,
            PollStatus::LeaseLost => writeln!(
                f,
                "  stopped: the lease was lost to another worker, which reads this window again"
            )?,
            PollStatus::Stopped => writeln!(
                f,
                "  stopped: this worker is stopping; the trigger was given back, due now"
            )?,
        }
        if !self.settled && self.status != PollStatus::LeaseLost {
            writeln!(
                f,
                "  lease was taken over by another worker; this poll's settle changed nothing"
            )?;
        }
        Ok(())
    }
}
