//! The backtest report: counts, fires per day, samples, and what the numbers are not.

use std::fmt;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use serde::Serialize;

use super::Options;
use crate::definitions::{Rule, Trigger};
use crate::source::{Source, UnreadableClocks};
use crate::sql_guard::Window;

/// What every backtest says about its own numbers.
pub const CAVEAT: &str = "This is a floor, not a replay: rows are evaluated as they are now and placed in time by their clock column, so rows that have since changed or been deleted, and keys that fired before the window, are not seen.";

/// What a backtest of a time-anchored rule adds about its numbers.
pub const ANCHORED_CAVEAT: &str = "Sends are counted on the day they fall due (anchor minus lead), one per key and anchor instant, from the rows as they are now: anchors that were moved or cancelled since cannot be replayed from today's rows, so their sends (and the cancellations) are not seen.";

/// Fires on one local day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayCount {
    /// The local date, in the rule's time zone.
    pub date: String,
    /// Fires on that day.
    pub fires: u64,
}

/// The longest stretch of consecutive days without a fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZeroRun {
    /// Days in the stretch.
    pub days: u64,
    /// Its first day.
    pub from: String,
    /// Its last day.
    pub to: String,
}

/// One fire shown as an example.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// The row's clock.
    pub clock: String,
    /// The dedup key.
    pub key: String,
    /// The dedup bucket.
    pub bucket: String,
    /// The row as JSON.
    pub row: serde_json::Value,
}

/// A backtest's findings. Printed for people by `Display`, for scripts as JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The rule.
    pub rule: String,
    /// Its trigger.
    pub trigger: String,
    /// The cadence in words.
    pub cadence: String,
    /// The source, without secrets.
    pub source: String,
    /// The time zone days are counted in.
    pub time_zone: String,
    /// Days back from `until`.
    pub days: u32,
    /// Window start (inclusive).
    pub since: String,
    /// Window end (exclusive).
    pub until: String,
    /// Rows the trigger returned in the window.
    pub rows_matched: u64,
    /// Fires the rule would have made.
    pub fires: u64,
    /// Rows whose (key, bucket) had already fired, or that were not an nth occurrence.
    pub collapsed: u64,
    /// Distinct keys among rows that could fire.
    pub distinct_keys: u64,
    /// Rows whose clock is NULL, over the whole query.
    pub null_clock_rows: u64,
    /// Rows whose clock is there but is not a time (`'yesterday'`), over the whole query, with
    /// one of them.
    pub unreadable_clocks: UnreadableClocks,
    /// Rows in the window with a NULL key column.
    pub null_key_rows: u64,
    /// Rows of a time-anchored rule whose anchor is NULL.
    pub null_anchor_rows: u64,
    /// Sends of a time-anchored rule that live would record as expired instead of sending:
    /// their lead (from the row) is at least the look-ahead plus the grace, so no sweep reads
    /// their anchor before their grace has run out. Their keys have fired; they are not among
    /// `fires` or `per_day`.
    pub expired_sends: u64,
    /// Fires per local day.
    pub per_day: Vec<DayCount>,
    /// The busiest day.
    pub busiest_day: Option<DayCount>,
    /// The quietest day with any fire (none when no day had one).
    pub quietest_day: Option<DayCount>,
    /// The longest run of days without fires.
    pub longest_zero_run: Option<ZeroRun>,
    /// Wall time of every source query, in milliseconds.
    pub query_ms: u64,
    /// Pages read.
    pub pages: u32,
    /// Example fires, spread across the window.
    pub samples: Vec<Sample>,
    /// What the numbers are not.
    pub caveat: &'static str,
    /// For a time-anchored rule (whose fires are sends, counted by due day): what replaying
    /// anchors cannot show.
    pub anchored_caveat: Option<&'static str>,
}

impl Report {
    pub(super) fn new(
        rule: &Rule,
        trigger: &Trigger,
        source: &Source,
        opts: &Options,
        window: Window,
        tz: &TimeZone,
    ) -> Report {
        Report {
            rule: rule.name.clone(),
            trigger: trigger.name.clone(),
            cadence: rule.cadence.describe(&trigger.key),
            source: format!("{} ({})", source.name(), source.shown()),
            time_zone: tz.iana_name().unwrap_or("UTC").to_string(),
            days: opts.days,
            since: window.since.to_string(),
            until: window.until.to_string(),
            caveat: CAVEAT,
            anchored_caveat: matches!(rule.cadence, crate::cadence::Cadence::Anchored(_))
                .then_some(ANCHORED_CAVEAT),
            ..Report::default()
        }
    }

    pub(super) fn set_days(&mut self, first: Date, counts: &[u64]) {
        let date = |i: usize| {
            first
                .checked_add(jiff::Span::new().days(i as i64))
                .map(|d| d.to_string())
                .unwrap_or_default()
        };
        self.per_day = counts
            .iter()
            .enumerate()
            .map(|(i, &fires)| DayCount {
                date: date(i),
                fires,
            })
            .collect();
        // Ties go to the earliest day.
        self.busiest_day = self.per_day.iter().rev().max_by_key(|d| d.fires).cloned();
        // The quietest day with any fire: a day without fires is a zero run, not a quiet day.
        self.quietest_day = self
            .per_day
            .iter()
            .filter(|d| d.fires > 0)
            .min_by_key(|d| d.fires)
            .cloned();
        let (mut best, mut run_start, mut best_start) = (0usize, 0usize, 0usize);
        for (i, &n) in counts.iter().enumerate() {
            if n != 0 {
                run_start = i + 1;
            } else if i + 1 - run_start > best {
                best = i + 1 - run_start;
                best_start = run_start;
            }
        }
        self.longest_zero_run = (best > 0).then(|| ZeroRun {
            days: best as u64,
            from: date(best_start),
            to: date(best_start + best - 1),
        });
    }

    /// One line: "billing_ticket: 211 rows matched → 105 fires over 120 days (…)".
    pub fn headline(&self) -> String {
        format!(
            "{}: {} rows matched → {} {} over {} days ({})",
            self.rule,
            self.rows_matched,
            self.fires,
            self.fires_word(),
            self.days,
            self.cadence
        )
    }

    /// What a fire is called: a time-anchored rule's fires are sends, counted by due day.
    fn fires_word(&self) -> &'static str {
        if self.anchored_caveat.is_some() {
            "sends"
        } else {
            "fires"
        }
    }

    /// Fires per day as a terminal sparkline: `·` is a day with no fires, `▁` the quietest day
    /// with any, `█` the busiest.
    pub fn sparkline(&self) -> String {
        sparkline(&self.per_day.iter().map(|d| d.fires).collect::<Vec<_>>())
    }
}

/// Renders counts as a sparkline in which zero (`·`) never looks like a small number (`▁`).
pub fn sparkline(counts: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = counts.iter().copied().max().unwrap_or(0);
    counts
        .iter()
        .map(|&n| match n {
            0 => '·',
            _ if max <= 1 => BARS[0],
            _ => BARS[((n - 1) * 7 / (max - 1)) as usize],
        })
        .collect()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.rule, self.cadence)?;
        writeln!(f, "trigger {} on source {}", self.trigger, self.source)?;
        writeln!(
            f,
            "window  {} → {} ({} days)",
            self.since, self.until, self.days
        )?;
        writeln!(f)?;
        let line = |f: &mut fmt::Formatter<'_>, label: &str, n: u64, note: &str| {
            writeln!(f, "  {label:<22}{n:>9}{note}")
        };
        line(f, "rows matched", self.rows_matched, "")?;
        line(f, self.fires_word(), self.fires, "")?;
        line(f, "collapsed by cadence", self.collapsed, "")?;
        line(f, "distinct keys", self.distinct_keys, "")?;
        line(
            f,
            "rows with NULL clock",
            self.null_clock_rows,
            "   (over the whole query; never fire)",
        )?;
        if self.unreadable_clocks.rows > 0 {
            line(
                f,
                "rows with unreadable clock",
                self.unreadable_clocks.rows,
                "   (over the whole query; never fire)",
            )?;
            if let Some(e) = &self.unreadable_clocks.example {
                writeln!(
                    f,
                    "  {:<22}{:>9}   e.g. {:?} (key {}): write the clock as a time, or cast it in the SQL",
                    "", "", e.clock, e.key
                )?;
            }
        }
        line(
            f,
            "rows with NULL key",
            self.null_key_rows,
            "   (never fire)",
        )?;
        if self.null_anchor_rows > 0 {
            line(
                f,
                "rows with NULL anchor",
                self.null_anchor_rows,
                "   (never fire)",
            )?;
        }
        if self.expired_sends > 0 {
            line(
                f,
                "sends found too late",
                self.expired_sends,
                "   (the row's lead is not shorter than anchor.look_ahead plus grace: no sweep reads them in time; raise anchor.look_ahead to at least the longest lead plus the sweep interval)",
            )?;
        }
        writeln!(f)?;
        match self.anchored_caveat {
            Some(_) => writeln!(
                f,
                "sends per day, by due time ({}; · = none):",
                self.time_zone
            )?,
            None => writeln!(f, "fires per day ({}; · = none):", self.time_zone)?,
        }
        let spark: Vec<char> = self.sparkline().chars().collect();
        for (chunk, days) in spark.chunks(60).zip(self.per_day.chunks(60)) {
            writeln!(
                f,
                "  {}  {}",
                days[0].date,
                chunk.iter().collect::<String>()
            )?;
        }
        if let (Some(b), Some(q)) = (&self.busiest_day, &self.quietest_day) {
            writeln!(f, "  busiest day   {}  {} fires", b.date, b.fires)?;
            writeln!(f, "  quietest day  {}  {} fires", q.date, q.fires)?;
        }
        match &self.longest_zero_run {
            Some(z) => writeln!(
                f,
                "  longest run without fires: {} days ({} → {})",
                z.days, z.from, z.to
            )?,
            None => writeln!(f, "  every day had fires")?,
        }
        writeln!(
            f,
            "  query time {} ms over {} page(s)",
            self.query_ms, self.pages
        )?;
        if !self.samples.is_empty() {
            writeln!(f)?;
            writeln!(f, "sample fires (spread across the window):")?;
            for s in &self.samples {
                let bucket = if s.bucket.is_empty() { "''" } else { &s.bucket };
                writeln!(f, "  {}  key {}  bucket {}", s.clock, s.key, bucket)?;
                writeln!(f, "      {}", truncate(&s.row.to_string(), 160))?;
            }
        }
        writeln!(f)?;
        writeln!(f, "{}", self.caveat)?;
        if let Some(c) = self.anchored_caveat {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_for_busiest_and_quietest_go_to_the_earliest_day() {
        let mut r = Report::default();
        r.set_days("2026-11-01".parse().unwrap(), &[3, 0, 3, 0]);
        assert_eq!(r.busiest_day.unwrap().date, "2026-11-01");
        assert_eq!(r.quietest_day.unwrap().date, "2026-11-01");
        assert_eq!(r.longest_zero_run.unwrap().days, 1);
    }

    #[test]
    fn the_quietest_day_is_the_quietest_with_any_fire() {
        let mut r = Report::default();
        r.set_days("2026-11-01".parse().unwrap(), &[0, 4, 2, 0, 7]);
        let quietest = r.quietest_day.clone().unwrap();
        assert_eq!((quietest.date.as_str(), quietest.fires), ("2026-11-03", 2));
        r.set_days("2026-11-01".parse().unwrap(), &[0, 0]);
        assert_eq!(r.quietest_day, None, "no day had a fire");
    }

    #[test]
    fn an_empty_day_looks_different_from_a_quiet_one() {
        assert_eq!(sparkline(&[0, 1, 8, 0, 4]), "·▁█·▄");
        assert_eq!(sparkline(&[0, 1, 1]), "·▁▁");
        assert_eq!(sparkline(&[]), "");
    }
}
