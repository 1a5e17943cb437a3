//! The fire ledger (the `fire`, `occurrence` and `occurrence_count` tables). A fire happens if,
//! and only if, the claim inserted its row: one `INSERT … ON CONFLICT DO NOTHING RETURNING` per
//! batch under the unique key (workspace, rule, mode, dedup key, dedup bucket). The caller owns
//! the transaction, so a fire and its deliveries commit together.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;

use crate::cadence::{self, Cadence, Placement};
use crate::definitions::{Rule, Trigger};
use crate::row::Row;
use crate::rules::Mode;
use crate::store::WorkspaceId;
use crate::store::batch::{Rows, fetch_with_rows};
use crate::store::{Arg, DbTime, StoreTx, fetch_all};

/// Who claims, for what, and when.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The workspace.
    pub workspace: &'a WorkspaceId,
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
    let new: HashSet<(String, String)> = fetch_with_rows(
        tx,
        &Rows::new().text("k", keys).text("o", ids),
        &fixed(&claim),
        "INSERT INTO occurrence (workspace_id, rule_name, mode, dedup_key, occurrence_id)
         SELECT $1, $2, $3, u.k, u.o FROM u WHERE true
         ON CONFLICT DO NOTHING RETURNING dedup_key, occurrence_id",
        |r| Ok((r.try_get("dedup_key")?, r.try_get("occurrence_id")?)),
    )
    .await?
    .into_iter()
    .collect();
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
    let totals: HashMap<String, i64> = fetch_with_rows(
        tx,
        &Rows::new().text("k", keys).int("n", counts),
        &fixed(&claim),
        "INSERT INTO occurrence_count (workspace_id, rule_name, mode, dedup_key, count)
         SELECT $1, $2, $3, u.k, u.n FROM u WHERE true
         ON CONFLICT (workspace_id, rule_name, mode, dedup_key) DO UPDATE SET count = occurrence_count.count + excluded.count
         RETURNING dedup_key, count",
        |r| Ok((r.try_get("dedup_key")?, r.try_get("count")?)),
    )
    .await?
    .into_iter()
    .collect();
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
    let clock = |i: usize| rows[i].clock.expect("a claimed row has a clock");
    let candidates = Rows::new()
        .text("k", batch.iter().map(|((k, _), _)| k.as_str()))
        .text("b", batch.iter().map(|((_, b), _)| b.as_str()))
        .time("c", batch.iter().map(|(_, i)| clock(*i)))
        .text(
            "r",
            batch.iter().map(|(_, i)| rows[*i].to_json().to_string()),
        );
    let mut shared = fixed(&claim);
    shared.extend([
        Arg::Text(claim.trigger.name.clone()),
        Arg::Int(claim.run_id.unwrap_or(0)),
        Arg::Time(DbTime(claim.now)),
    ]);
    let returned: Vec<(i64, String, String)> = fetch_with_rows(
        tx,
        &candidates,
        &shared,
        "INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, run_id, fired_at)
         SELECT $1, $2, $3, u.k, u.b, $4, u.c, u.r, $5, $6 FROM u WHERE true
         ON CONFLICT (workspace_id, rule_name, mode, dedup_key, dedup_bucket) DO NOTHING
         RETURNING id, dedup_key, dedup_bucket",
        |r| Ok((r.try_get("id")?, r.try_get("dedup_key")?, r.try_get("dedup_bucket")?)),
    )
    .await?;
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
        Arg::Text(claim.workspace.to_string()),
        Arg::Text(claim.rule.name.clone()),
        Arg::Text(claim.mode.to_string()),
    ]
}

/// One stored fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// Its id.
    pub id: i64,
    /// Its rule.
    pub rule: String,
    /// shadow or live.
    pub mode: Mode,
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
    workspace: &WorkspaceId,
    rule: &str,
    key: Option<&str>,
) -> Result<Vec<Fire>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT id, rule_name, mode, dedup_key, dedup_bucket, clock, row_json, run_id, fired_at FROM fire \
         WHERE workspace_id = $1 AND rule_name = $2 AND ($3 = '' OR dedup_key = $3) ORDER BY clock, id",
        [workspace, rule, key.unwrap_or("")],
        |r| fire_row(r)
    )
}

/// A workspace's fires of every rule, newest first, or oldest first after `after`.
pub async fn recent(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Fire>, sqlx::Error> {
    let order = if after.is_some() { "ASC" } else { "DESC" };
    fetch_all!(
        tx,
        &format!(
            "SELECT id, rule_name, mode, dedup_key, dedup_bucket, clock, row_json, run_id, fired_at FROM fire \
         WHERE workspace_id = $1 AND id > $2 ORDER BY id {order} LIMIT $3"
        ),
        [workspace, after.unwrap_or(0), limit],
        |r| fire_row(r)
    )
}

/// A fire as the two listings select it.
fn fire_row(r: &crate::store::StoreRow<'_>) -> Result<Fire, sqlx::Error> {
    Ok(Fire {
        id: r.try_get("id")?,
        rule: r.try_get("rule_name")?,
        mode: r.try_get("mode")?,
        key: r.try_get("dedup_key")?,
        bucket: r.try_get("dedup_bucket")?,
        clock: r.try_get::<DbTime, _>("clock")?.0,
        row_json: r.try_get("row_json")?,
        run_id: r.try_get("run_id")?,
        fired_at: r.try_get::<DbTime, _>("fired_at")?.0,
    })
}

/// How many times one rule's key has occurred (`occurrence_count`): (mode, count), by mode.
pub async fn occurrences(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    rule: &str,
    key: &str,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT mode, count FROM occurrence_count WHERE workspace_id = $1 AND rule_name = $2 AND dedup_key = $3 ORDER BY mode",
        [workspace, rule, key],
        |r| Ok((
            r.try_get::<String, _>("mode")?,
            r.try_get::<i64, _>("count")?
        ))
    )
}

/// The dedup keys of `fires` that exist in the workspace, by fire id, in one statement.
pub async fn keys_of(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    fires: &[i64],
) -> Result<HashMap<i64, String>, sqlx::Error> {
    let rows = Rows::new().int("id", fires.iter().copied());
    Ok(fetch_with_rows(
        tx,
        &rows,
        &[Arg::Text(workspace.to_string())],
        "SELECT f.id, f.dedup_key FROM u JOIN fire f ON f.workspace_id = $1 AND f.id = u.id",
        |r| {
            Ok((
                r.try_get::<i64, _>("id")?,
                r.try_get::<String, _>("dedup_key")?,
            ))
        },
    )
    .await?
    .into_iter()
    .collect())
}

/// How many fires each rule made in each mode, in the workspace: (rule, mode, count), by rule
/// then mode.
pub async fn counts_by_mode(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
) -> Result<Vec<(String, Mode, i64)>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT rule_name, mode, COUNT(*) AS fires FROM fire WHERE workspace_id = $1 \
         GROUP BY rule_name, mode ORDER BY rule_name, mode",
        [workspace],
        |r| Ok((
            r.try_get("rule_name")?,
            r.try_get("mode")?,
            r.try_get("fires")?
        ))
    )
}
