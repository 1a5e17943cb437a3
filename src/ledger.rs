//! The fire ledger (the `fire`, `occurrence` and `occurrence_count` tables). A fire happens if,
//! and only if, the claim inserted its row: one `INSERT … ON CONFLICT DO NOTHING RETURNING` per
//! batch under the unique key (workspace, rule, mode, dedup key, dedup bucket). The caller owns
//! the transaction, so a fire and its deliveries commit together.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use sqlx::Row as _;

use crate::cadence::{self, Cadence, Placement};
use crate::definitions::{Rule, Trigger};
use crate::row::Row;
use crate::rules::Mode;
use crate::store::{Arg, DbTime, StoreTx, fetch_all, sqlite_sql, values_list};

/// Rows per multi-row statement on SQLite (each fire takes 10 binds); PostgreSQL takes arrays.
const CHUNK: usize = 1_000;

/// Who claims, for what, and when.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The workspace.
    pub workspace: &'a str,
    /// The rule.
    pub rule: &'a Rule,
    /// Its trigger.
    pub trigger: &'a Trigger,
    /// The namespace claimed in: shadow and live never stop each other.
    pub mode: Mode,
    /// The poll claiming.
    pub run_id: Option<i64>,
    /// The claim time.
    pub now: Timestamp,
}

/// What claiming a page did for one rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    /// New fires: (fire id, index of the row it fired on).
    pub fires: Vec<(i64, usize)>,
    /// Rows whose bucket was already claimed, or that were not an nth occurrence.
    pub already: u64,
    /// Rows that cannot fire (NULL clock, key or anchor).
    pub skipped: u64,
}

/// Claims a page of rows (in clock order) for one rule inside `tx`.
pub async fn claim(
    tx: &mut StoreTx,
    claim: Claim<'_>,
    rows: &[Row],
) -> Result<Claimed, sqlx::Error> {
    let mut out = Claimed::default();
    let mut candidates: Vec<(usize, String, String)> = Vec::new();
    let mut occurrences: Vec<(usize, String, String)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let placed = row
            .clock
            .ok_or(cadence::Skip::NullClock)
            .and_then(|clock| Ok((clock, cadence::dedup_key(row, &claim.trigger.key)?)))
            .and_then(|(clock, key)| Ok((clock, claim.rule.cadence.place(clock, row)?, key)));
        match placed {
            Err(_) => out.skipped += 1,
            Ok((_, Placement::Bucket(bucket), key)) => candidates.push((i, key, bucket)),
            Ok((clock, Placement::Occurrence, key)) => {
                let id = cadence::occurrence_id(&key, clock, row, &claim.trigger.occurrence);
                occurrences.push((i, key, id));
            }
        }
    }
    // Rows that could fire: every placed row (for once_per_n, every occurrence).
    let considered = candidates.len() + occurrences.len();
    if let Cadence::OncePerN { n } = claim.rule.cadence {
        candidates = count_occurrences(tx, claim, n, &occurrences).await?;
    }
    out.fires = insert_fires(tx, claim, rows, candidates).await?;
    out.already = (considered - out.fires.len()) as u64;
    Ok(out)
}

/// Records new occurrences and returns the nth ones as (row, key, ordinal bucket). An occurrence
/// already recorded (a replayed or re-read row) is not counted again.
async fn count_occurrences(
    tx: &mut StoreTx,
    claim: Claim<'_>,
    n: u32,
    occurrences: &[(usize, String, String)],
) -> Result<Vec<(usize, String, String)>, sqlx::Error> {
    // First sighting within the page wins; sorted inserts keep lock order stable across workers.
    let mut seen = HashSet::new();
    let mut unique: Vec<&(usize, String, String)> = occurrences
        .iter()
        .filter(|(_, k, id)| seen.insert((k, id)))
        .collect();
    let mut sorted = unique.clone();
    sorted.sort_by(|a, b| (&a.1, &a.2).cmp(&(&b.1, &b.2)));
    let keys: Vec<String> = sorted.iter().map(|(_, k, _)| k.clone()).collect();
    let ids: Vec<String> = sorted.iter().map(|(_, _, id)| id.clone()).collect();
    let new: HashSet<(String, String)> = match tx {
        // PostgreSQL: the whole batch as arrays, one statement.
        StoreTx::Postgres(t) => sqlx::query(
            "INSERT INTO occurrence (workspace_id, rule_name, mode, dedup_key, occurrence_id)
             SELECT $1, $2, $3, u.k, u.o FROM unnest($4::text[], $5::text[]) AS u(k, o)
             ON CONFLICT DO NOTHING RETURNING dedup_key, occurrence_id",
        )
        .bind(claim.workspace)
        .bind(&claim.rule.name)
        .bind(claim.mode.to_string())
        .bind(&keys)
        .bind(&ids)
        .fetch_all(&mut **t)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?,
        StoreTx::Sqlite(_) => {
            let rows = keys.iter().zip(&ids).map(|(key, id)| {
                let mut row = fixed(&claim);
                row.extend([Arg::Text(key.clone()), Arg::Text(id.clone())]);
                row
            });
            sqlite_values(
                tx,
                "INSERT INTO occurrence (workspace_id, rule_name, mode, dedup_key, occurrence_id)",
                "ON CONFLICT DO NOTHING RETURNING dedup_key, occurrence_id",
                rows.collect(),
                |r| Ok((r.try_get(0)?, r.try_get(1)?)),
            )
            .await?
            .into_iter()
            .collect()
        }
    };
    unique.retain(|(_, k, id)| new.contains(&(k.clone(), id.clone())));
    // New occurrences per key, in clock (page) order.
    let mut per_key: Vec<(String, Vec<usize>)> = Vec::new();
    let mut slot: HashMap<&str, usize> = HashMap::new();
    for (i, key, _) in &unique {
        let s = *slot.entry(key.as_str()).or_insert_with(|| {
            per_key.push((key.clone(), Vec::new()));
            per_key.len() - 1
        });
        per_key[s].1.push(*i);
    }
    per_key.sort_by(|a, b| a.0.cmp(&b.0));
    let keys: Vec<String> = per_key.iter().map(|(k, _)| k.clone()).collect();
    let counts: Vec<i64> = per_key.iter().map(|(_, rows)| rows.len() as i64).collect();
    let totals: HashMap<String, i64> = match tx {
        StoreTx::Postgres(t) => sqlx::query(
            "INSERT INTO occurrence_count (workspace_id, rule_name, mode, dedup_key, count)
             SELECT $1, $2, $3, u.k, u.n FROM unnest($4::text[], $5::bigint[]) AS u(k, n)
             ON CONFLICT (workspace_id, rule_name, mode, dedup_key) DO UPDATE SET count = occurrence_count.count + excluded.count
             RETURNING dedup_key, count",
        )
        .bind(claim.workspace)
        .bind(&claim.rule.name)
        .bind(claim.mode.to_string())
        .bind(&keys)
        .bind(&counts)
        .fetch_all(&mut **t)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?,
        StoreTx::Sqlite(_) => {
            let rows = keys.iter().zip(&counts).map(|(key, n)| {
                let mut row = fixed(&claim);
                row.extend([Arg::Text(key.clone()), Arg::Int(*n)]);
                row
            });
            sqlite_values(
                tx,
                "INSERT INTO occurrence_count (workspace_id, rule_name, mode, dedup_key, count)",
                "ON CONFLICT (workspace_id, rule_name, mode, dedup_key) DO UPDATE SET count = occurrence_count.count + excluded.count \
                 RETURNING dedup_key, count",
                rows.collect(),
                |r| Ok((r.try_get(0)?, r.try_get(1)?)),
            )
            .await?
            .into_iter()
            .collect()
        }
    };
    let mut nth = Vec::new();
    for (key, rows) in per_key {
        let total = totals.get(&key).copied().unwrap_or(rows.len() as i64) as u64;
        let before = total - rows.len() as u64;
        for (j, i) in rows.into_iter().enumerate() {
            if let Some(bucket) = cadence::nth_bucket(n, before + 1 + j as u64) {
                nth.push((i, key.clone(), bucket));
            }
        }
    }
    Ok(nth)
}

/// Inserts fires for (row, key, bucket) candidates; returns (fire id, row) for those that were new.
async fn insert_fires(
    tx: &mut StoreTx,
    claim: Claim<'_>,
    rows: &[Row],
    candidates: Vec<(usize, String, String)>,
) -> Result<Vec<(i64, usize)>, sqlx::Error> {
    // Within a batch the first row of a (key, bucket) wins; sorting keeps lock order stable.
    let mut first: HashMap<(String, String), usize> = HashMap::new();
    for (i, key, bucket) in candidates {
        first.entry((key, bucket)).or_insert(i);
    }
    let mut batch: Vec<((String, String), usize)> = first.into_iter().collect();
    batch.sort();
    let index: HashMap<(&str, &str), usize> = batch
        .iter()
        .map(|((k, b), i)| ((k.as_str(), b.as_str()), *i))
        .collect();
    let returned: Vec<(i64, String, String)> = match tx {
        // PostgreSQL: the whole batch as arrays, one statement.
        StoreTx::Postgres(t) => {
            let keys: Vec<&str> = batch.iter().map(|((k, _), _)| k.as_str()).collect();
            let buckets: Vec<&str> = batch.iter().map(|((_, b), _)| b.as_str()).collect();
            let clocks: Vec<jiff_sqlx::Timestamp> = batch
                .iter()
                .map(|(_, i)| rows[*i].clock.expect("a claimed row has a clock").into())
                .collect();
            let json: Vec<String> = batch
                .iter()
                .map(|(_, i)| rows[*i].to_json().to_string())
                .collect();
            sqlx::query(
                "INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, run_id, fired_at)
                 SELECT $1, $2, $3, u.k, u.b, $4, u.c, u.r, $5, $6
                 FROM unnest($7::text[], $8::text[], $9::timestamptz[], $10::text[]) AS u(k, b, c, r)
                 ON CONFLICT (workspace_id, rule_name, mode, dedup_key, dedup_bucket) DO NOTHING
                 RETURNING id, dedup_key, dedup_bucket",
            )
            .bind(claim.workspace)
            .bind(&claim.rule.name)
            .bind(claim.mode.to_string())
            .bind(&claim.trigger.name)
            .bind(claim.run_id.unwrap_or(0))
            .bind(DbTime(claim.now))
            .bind(&keys)
            .bind(&buckets)
            .bind(&clocks)
            .bind(&json)
            .fetch_all(&mut **t)
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect::<Result<_, sqlx::Error>>()?
        }
        StoreTx::Sqlite(_) => {
            let values = batch.iter().map(|((key, bucket), i)| {
                let row = &rows[*i];
                let mut values = fixed(&claim);
                values.extend([
                    Arg::Text(key.clone()),
                    Arg::Text(bucket.clone()),
                    Arg::Text(claim.trigger.name.clone()),
                    Arg::Time(DbTime(row.clock.expect("a claimed row has a clock"))),
                    Arg::Text(row.to_json().to_string()),
                    Arg::Int(claim.run_id.unwrap_or(0)),
                    Arg::Time(DbTime(claim.now)),
                ]);
                values
            });
            sqlite_values(
                tx,
                "INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, run_id, fired_at)",
                "ON CONFLICT (workspace_id, rule_name, mode, dedup_key, dedup_bucket) DO NOTHING RETURNING id, dedup_key, dedup_bucket",
                values.collect(),
                |r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
            )
            .await?
        }
    };
    let mut fired: Vec<(i64, usize)> = returned
        .iter()
        .map(|(id, k, b)| (*id, index[&(k.as_str(), b.as_str())]))
        .collect();
    fired.sort_by_key(|(_, i)| *i);
    Ok(fired)
}

/// The values every row of a claim shares: workspace, rule, mode.
fn fixed(claim: &Claim<'_>) -> Vec<Arg> {
    vec![
        Arg::Text(claim.workspace.into()),
        Arg::Text(claim.rule.name.clone()),
        Arg::Text(claim.mode.to_string()),
    ]
}

/// SQLite has no arrays: runs `head VALUES (…), (…) tail` over `rows` in chunks, mapping what
/// each statement returns.
async fn sqlite_values<T>(
    tx: &mut StoreTx,
    head: &str,
    tail: &str,
    rows: Vec<Vec<Arg>>,
    map: impl Fn(&sqlx::sqlite::SqliteRow) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    let StoreTx::Sqlite(t) = tx else {
        unreachable!("only SQLite takes multi-row VALUES here")
    };
    let mut out = Vec::new();
    for chunk in rows.chunks(CHUNK) {
        let width = chunk.first().map_or(0, Vec::len);
        let sql = sqlite_sql(&format!(
            "{head} VALUES {} {tail}",
            values_list(chunk.len(), width)
        ));
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for arg in chunk.iter().flatten() {
            q = match arg {
                Arg::Text(s) => q.bind(s.clone()),
                Arg::Int(i) => q.bind(*i),
                Arg::Time(t) => q.bind(*t),
            };
        }
        for row in q.fetch_all(&mut **t).await? {
            out.push(map(&row)?);
        }
    }
    Ok(out)
}

/// One stored fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// Its id.
    pub id: i64,
    /// Its rule.
    pub rule: String,
    /// shadow or live.
    pub mode: String,
    /// The dedup key.
    pub key: String,
    /// The dedup bucket.
    pub bucket: String,
    /// The clock of the row it fired on.
    pub clock: Timestamp,
    /// The row, as JSON.
    pub row_json: String,
    /// The poll that claimed it.
    pub run_id: i64,
    /// When it was claimed.
    pub fired_at: Timestamp,
}

/// The fires of one rule, optionally for one dedup key, oldest first.
pub async fn fires(
    tx: &mut StoreTx,
    workspace: &str,
    rule: &str,
    key: Option<&str>,
) -> Result<Vec<Fire>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT id, rule_name, mode, dedup_key, dedup_bucket, clock, row_json, run_id, fired_at FROM fire \
         WHERE workspace_id = $1 AND rule_name = $2 AND ($3 = '' OR dedup_key = $3) ORDER BY clock, id",
        [workspace, rule, key.unwrap_or("")],
        |r| Ok(Fire {
            id: r.try_get(0)?,
            rule: r.try_get(1)?,
            mode: r.try_get(2)?,
            key: r.try_get(3)?,
            bucket: r.try_get(4)?,
            clock: r.try_get::<DbTime, _>(5)?.0,
            row_json: r.try_get(6)?,
            run_id: r.try_get(7)?,
            fired_at: r.try_get::<DbTime, _>(8)?.0,
        })
    )
}
