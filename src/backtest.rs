//! Backtests: what a rule would have done over the last N days, as a floor, not a replay.
//!
//! The trigger's window is read page by page and every row is run through the rule's cadence in
//! memory (the same [`cadence`](crate::cadence) functions the ledger uses).

mod report;

use std::collections::HashMap;
use std::time::Instant;

use compact_str::CompactString;
use jiff::civil::Date;
use jiff::{SignedDuration, Timestamp};

use crate::cadence::{self, Cadence, Placement, Skip};
use crate::definitions::limits::MAX_LEAD;
use crate::definitions::{Definitions, Problems};
use crate::row::Row;
use crate::schedule;
use crate::source::{Source, SourceError};
use crate::sql_guard::{Shape, Window};

pub use report::{ANCHORED_CAVEAT, CAVEAT, DayCount, Report, Sample, ZeroRun};

/// What a backtest could not do.
#[derive(Debug, thiserror::Error)]
pub enum BacktestError {
    /// The rule or its trigger is not defined.
    #[error(transparent)]
    Definitions(#[from] Problems),
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// How to run a backtest.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many days back from `now`.
    pub days: u32,
    /// How many sample fires to show, spread across the window.
    pub sample: usize,
    /// The end of the window.
    pub now: Timestamp,
}

/// What the cadence did with one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It fires: a new (key, bucket).
    Fired {
        /// The dedup key.
        key: String,
        /// The dedup bucket.
        bucket: String,
    },
    /// Its (key, bucket) already fired, or (once_per_n) it is not an nth occurrence.
    Collapsed,
    /// It cannot fire; counted and reported.
    Skipped(Skip),
}

/// A rule's cadence applied in memory, row after row in clock order. Buckets are numbered on
/// first sight and keys are held inline with their claimed buckets, so a row that collapses
/// allocates nothing.
pub struct Simulator<'a> {
    cadence: &'a Cadence,
    key: &'a [String],
    occurrence: &'a [String],
    /// Every key seen, with the buckets claimed for it.
    keys: HashMap<CompactString, Claimed, Fast>,
    /// Every bucket seen, numbered in the order first seen, and each number's bucket.
    buckets: HashMap<String, u32, Fast>,
    bucket_names: Vec<String>,
    occurrences: HashMap<String, Occurrences>,
    /// The local day of the last row placed in a period and its bucket's number: rows come in
    /// clock order, so most rows fall in the day before them.
    day: Option<(LocalDay, u32)>,
    /// The dedup key of the row being evaluated, its buffer reused row after row.
    scratch: String,
}

/// The simulator's hasher: FxHash's multiply-and-rotate (as in rustc), much faster than SipHash
/// on short keys. The sets hold keys and buckets read from the source, never chosen by an
/// attacker against this process's memory over time, and live for one backtest.
#[derive(Clone, Copy, Default)]
struct Fast;

impl std::hash::BuildHasher for Fast {
    type Hasher = FastHasher;

    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let word = u64::from_le_bytes(c.try_into().expect("eight bytes"));
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0xf135_7aea_2e62_a9c5);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

/// The buckets (by their numbers in `buckets`) claimed for one key: the latest apart, since rows
/// come in clock order and most rows of a key fall in the bucket claimed last.
#[derive(Default)]
struct Claimed {
    latest: Option<u32>,
    /// The others, sorted.
    earlier: Vec<u32>,
}

impl Claimed {
    /// Claims `bucket`; false if it was claimed already.
    fn claim(&mut self, bucket: u32) -> bool {
        if self.latest == Some(bucket) {
            return false;
        }
        if self.earlier.binary_search(&bucket).is_ok() {
            return false;
        }
        if let Some(before) = self.latest.replace(bucket) {
            let at = self.earlier.partition_point(|&b| b < before);
            self.earlier.insert(at, before);
        }
        true
    }
}

/// A local day as the instants [start, next start), to place many instants of one day with two
/// comparisons each.
struct LocalDay {
    start: Timestamp,
    end: Timestamp,
}

impl LocalDay {
    /// The local day in `tz` holding `clock`: from its first instant to the first instant of the
    /// next date. `None` (nothing to cache: the caller works the day out again) at the edges of
    /// the times jiff handles, and when that range would hold an instant of another date, as
    /// when a gap in the clocks swallows the next midnight.
    fn of(clock: Timestamp, tz: &jiff::tz::TimeZone) -> Option<LocalDay> {
        let zoned = clock.to_zoned(tz.clone());
        let date = zoned.date();
        let start = zoned.start_of_day().ok()?.timestamp();
        let end = date.tomorrow().ok()?.to_zoned(tz.clone()).ok()?.timestamp();
        let last = end.checked_sub(SignedDuration::from_nanos(1)).ok()?;
        (start <= clock && clock < end && last.to_zoned(tz.clone()).date() == date)
            .then_some(LocalDay { start, end })
    }

    fn holds(&self, clock: Timestamp) -> bool {
        self.start <= clock && clock < self.end
    }
}

struct Occurrences {
    count: u64,
    last_clock: Timestamp,
    ids_at_last_clock: Vec<String>,
}

impl<'a> Simulator<'a> {
    /// A simulator with nothing claimed yet.
    pub fn new(cadence: &'a Cadence, key: &'a [String], occurrence: &'a [String]) -> Self {
        Simulator {
            cadence,
            key,
            occurrence,
            keys: HashMap::default(),
            buckets: HashMap::default(),
            bucket_names: Vec::new(),
            occurrences: HashMap::new(),
            day: None,
            scratch: String::new(),
        }
    }

    /// Distinct keys among rows that could fire.
    pub fn distinct_keys(&self) -> u64 {
        self.keys.len() as u64
    }

    /// Applies the cadence to one row. Rows must come in clock order.
    pub fn evaluate(&mut self, row: &Row) -> Outcome {
        let mut key = std::mem::take(&mut self.scratch);
        let outcome = self.evaluate_keyed(row, &mut key);
        self.scratch = key;
        outcome
    }

    /// [`Simulator::evaluate`], the row's dedup key written into `key`.
    fn evaluate_keyed(&mut self, row: &Row, key: &mut String) -> Outcome {
        let Some(clock) = row.clock else {
            return Outcome::Skipped(Skip::NullClock);
        };
        if let Err(skip) = cadence::dedup_key_into(row, self.key, key) {
            return Outcome::Skipped(skip);
        }
        let placed = match self.cadence {
            Cadence::OncePerPeriod { period, tz } => Ok(self.period_bucket(*period, tz, clock)),
            _ => match self.cadence.place(clock, row) {
                Err(skip) => Err(skip),
                Ok(Placement::Bucket(b)) => Ok(self.bucket_number(b)),
                Ok(Placement::Occurrence) => return self.occurrence(row, clock, key),
            },
        };
        let bucket = match placed {
            Err(skip) => return Outcome::Skipped(skip),
            Ok(b) => b,
        };
        let fresh = match self.keys.get_mut(key.as_str()) {
            Some(claimed) => claimed.claim(bucket),
            None => {
                let mut claimed = Claimed::default();
                claimed.claim(bucket);
                self.keys.insert(CompactString::new(&*key), claimed);
                true
            }
        };
        if !fresh {
            return Outcome::Collapsed;
        }
        Outcome::Fired {
            key: key.clone(),
            bucket: self.bucket_names[bucket as usize].clone(),
        }
    }

    /// `once_per_n`: counts the row's occurrence of its key (rows at one instant with the same
    /// occurrence id are one occurrence) and fires on occurrences 1, n+1, 2n+1, ….
    fn occurrence(&mut self, row: &Row, clock: Timestamp, key: &str) -> Outcome {
        let Cadence::OncePerN { n } = self.cadence else {
            unreachable!("only once_per_n counts")
        };
        let id = cadence::occurrence_id(key, clock, row, self.occurrence);
        let seen = self
            .occurrences
            .entry(key.to_string())
            .or_insert(Occurrences {
                count: 0,
                last_clock: clock,
                ids_at_last_clock: Vec::new(),
            });
        if seen.last_clock != clock {
            seen.last_clock = clock;
            seen.ids_at_last_clock.clear();
        }
        if seen.ids_at_last_clock.contains(&id) {
            self.see(key);
            return Outcome::Collapsed;
        }
        seen.ids_at_last_clock.push(id);
        seen.count += 1;
        let ordinal = seen.count;
        self.see(key);
        match cadence::nth_bucket(*n, ordinal) {
            Some(bucket) => Outcome::Fired {
                key: key.to_string(),
                bucket,
            },
            None => Outcome::Collapsed,
        }
    }

    /// The number of the bucket [`Cadence::place`] gives `clock` in a period cadence, worked
    /// out once per local day: a period's start depends only on the local date.
    fn period_bucket(
        &mut self,
        period: cadence::Period,
        tz: &jiff::tz::TimeZone,
        clock: Timestamp,
    ) -> u32 {
        if let Some((day, bucket)) = &self.day
            && day.holds(clock)
        {
            return *bucket;
        }
        let bucket = self.bucket_number(period.start(tz, clock).to_string());
        self.day = LocalDay::of(clock, tz).map(|day| (day, bucket));
        bucket
    }

    /// The bucket's number, given on first sight.
    fn bucket_number(&mut self, bucket: String) -> u32 {
        if let Some(n) = self.buckets.get(&bucket) {
            return *n;
        }
        let n = self.bucket_names.len() as u32;
        self.bucket_names.push(bucket.clone());
        self.buckets.insert(bucket, n);
        n
    }

    /// Counts a key among those seen, with nothing claimed for it yet.
    fn see(&mut self, key: &str) {
        if !self.keys.contains_key(key) {
            self.keys
                .insert(CompactString::new(key), Claimed::default());
        }
    }
}

/// Runs a rule's backtest over `[now - days, now)` on its trigger's source.
pub async fn run(
    defs: &Definitions,
    rule_name: &str,
    source: &Source,
    opts: &Options,
) -> Result<Report, BacktestError> {
    let (rule, trigger) = defs.rule_and_trigger(rule_name)?;
    let anchor = rule.cadence.anchor();
    let since = opts
        .now
        .checked_sub(SignedDuration::from_hours(24 * i64::from(opts.days)))
        .unwrap_or(Timestamp::MIN);
    let window = Window {
        since,
        until: opts.now,
    };
    // A time-anchored rule sends at its anchor minus its lead: the rows read are those whose
    // anchor (the sweep's clock) may put a send's due time in the window, and each send is
    // counted on the day it is due.
    let (shape, read) = match anchor {
        Some(a) => {
            let lead = if a.lead_column.is_some() {
                MAX_LEAD.max(a.lead)
            } else {
                a.lead
            };
            let shape = Shape {
                clock: &a.column,
                key: &trigger.key,
            };
            let until = opts.now.checked_add(lead).unwrap_or(opts.now);
            (shape, Window { since, until })
        }
        None => (trigger.shape(), window),
    };
    // A send's due time (anchor minus the row's lead), and whether live would find it only
    // after its grace (a lead from the row of at least the look-ahead plus the grace).
    let due_of = |row: &Row| {
        let (clock, a) = (row.clock?, anchor?);
        let lead = schedule::lead_of(a, row).0;
        Some((
            clock.checked_sub(lead).unwrap_or(clock),
            a.read_too_late(lead),
        ))
    };
    let started = Instant::now();
    let query = source.prepare(defs, trigger, read).await?;

    let tz = rule.cadence.time_zone();
    let first_day = since.to_zoned(tz.clone()).date();
    let last_day = opts
        .now
        .checked_sub(SignedDuration::from_nanos(1))
        .unwrap_or(opts.now)
        .to_zoned(tz.clone())
        .date();
    let mut per_day = vec![0u64; days_between(first_day, last_day) as usize + 1];
    let mut report = Report::new(rule, trigger, source, opts, window, &tz);

    let slices = opts.sample.max(1);
    let slice_len =
        (window.until.as_second() - window.since.as_second()).max(1) as f64 / slices as f64;
    let mut samples: Vec<Option<Sample>> = vec![None; slices];

    let mut sim = Simulator::new(&rule.cadence, &trigger.key, &trigger.occurrence);
    // The local day of the last fire and its index in `per_day`.
    let mut today: Option<(LocalDay, usize)> = None;
    let mut reader = source.read_window(&query, shape, read).await?;
    while let Some(page) = reader.next_page().await? {
        for row in &page {
            let (due, too_late) = due_of(row).unzip();
            if due.is_some_and(|d| d < window.since || d >= window.until) {
                continue;
            }
            report.rows_matched += 1;
            match sim.evaluate(row) {
                // Live claims its fire and records the send as expired: the key has fired, and
                // nothing goes out.
                Outcome::Fired { .. } if too_late == Some(true) => report.expired_sends += 1,
                Outcome::Fired { key, bucket } => {
                    report.fires += 1;
                    let clock = due.or(row.clock).expect("a fired row has a clock");
                    let index = match &today {
                        Some((day, index)) if day.holds(clock) => *index,
                        _ => {
                            let day = clock.to_zoned(tz.clone()).date();
                            let index = days_between(first_day, day) as usize;
                            today = LocalDay::of(clock, &tz).map(|day| (day, index));
                            index
                        }
                    };
                    if let Some(n) = per_day.get_mut(index) {
                        *n += 1;
                    }
                    let slot = (((clock.as_second() - window.since.as_second()) as f64 / slice_len)
                        as usize)
                        .min(slices - 1);
                    if opts.sample > 0 && samples[slot].is_none() {
                        samples[slot] = Some(Sample {
                            clock: clock.to_string(),
                            key,
                            bucket,
                            row: row.to_json(),
                        });
                    }
                }
                Outcome::Collapsed => report.collapsed += 1,
                Outcome::Skipped(Skip::NullAnchor { .. }) => report.null_anchor_rows += 1,
                Outcome::Skipped(Skip::NullKey { .. }) => report.null_key_rows += 1,
                Outcome::Skipped(Skip::NullClock) => report.null_clock_rows += 1,
            }
        }
    }
    report.pages = reader.pages();
    // Rows with a NULL key are left out of every page; the reader counted them.
    let null_keys = reader.null_keys();
    reader.finish().await;
    report.null_key_rows += null_keys;
    report.rows_matched += null_keys;
    let null_clocks = source.count_null_clocks(&query, shape, read).await?;
    // For a time-anchored rule the clock read is the anchor: a NULL one is a NULL anchor.
    match anchor {
        Some(_) => report.null_anchor_rows += null_clocks,
        None => report.null_clock_rows += null_clocks,
    }
    report.unreadable_clocks = source.count_unreadable_clocks(&query, shape, read).await?;
    report.distinct_keys = sim.distinct_keys();
    report.query_ms = started.elapsed().as_millis() as u64;
    report.samples = samples.into_iter().flatten().collect();
    report.set_days(first_day, &per_day);
    Ok(report)
}

fn days_between(a: Date, b: Date) -> i64 {
    a.until(b)
        .map(|s| i64::from(s.get_days()))
        .unwrap_or(0)
        .max(0)
}

#[cfg(test)]
mod tests {
    use super::LocalDay;
    use jiff::tz::TimeZone;
    use jiff::{SignedDuration, Timestamp};

    /// Every instant a cached day holds is on the clock's own local date, around clock changes
    /// that swallow or repeat a midnight, or a whole day.
    #[test]
    fn a_cached_local_day_holds_only_instants_of_its_own_date() {
        let cases = [
            // The gap ends at midnight: 22:59:59 −02 is followed by 00:00 −01.
            ("America/Nuuk", "2025-03-27T12:00:00Z"),
            // The gap starts at midnight.
            ("America/Sao_Paulo", "2018-11-02T12:00:00Z"),
            // 23:30 becomes 00:00.
            ("Asia/Pyongyang", "2018-05-03T12:00:00Z"),
            // A whole date (2011-12-30) skipped.
            ("Pacific/Apia", "2011-12-28T12:00:00Z"),
            // Midnight repeated: 00:00 −02 becomes 23:00 −03 the day before.
            ("America/Sao_Paulo", "2019-02-15T12:00:00Z"),
            ("Europe/Berlin", "2026-03-27T12:00:00Z"),
        ];
        let step = SignedDuration::from_mins(10);
        for (zone, from) in cases {
            let tz = TimeZone::get(zone).expect("the system's time zone database");
            let mut clock: Timestamp = from.parse().unwrap();
            for _ in 0..(4 * 24 * 6) {
                let date = clock.to_zoned(tz.clone()).date();
                if let Some(day) = LocalDay::of(clock, &tz) {
                    assert!(day.holds(clock), "{zone} {clock}");
                    let mut inside = day.start;
                    while inside < day.end {
                        assert_eq!(
                            inside.to_zoned(tz.clone()).date(),
                            date,
                            "{zone} {clock}: {inside}"
                        );
                        inside = inside.checked_add(step).unwrap();
                    }
                    let last = day.end.checked_sub(SignedDuration::from_nanos(1)).unwrap();
                    assert_eq!(last.to_zoned(tz.clone()).date(), date, "{zone} {clock}");
                }
                clock = clock.checked_add(step).unwrap();
            }
        }
        // The case that found it: a Friday 23:30 in Nuuk does not take in the Saturday after.
        let nuuk = TimeZone::get("America/Nuuk").unwrap();
        let friday: Timestamp = "2025-03-29T01:30:00Z".parse().unwrap();
        let saturday_noon: Timestamp = "2025-03-29T14:00:00Z".parse().unwrap();
        assert!(LocalDay::of(friday, &nuuk).is_none_or(|day| !day.holds(saturday_noon)));
    }
}
