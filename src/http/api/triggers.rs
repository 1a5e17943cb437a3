//! `/api/triggers`: the triggers in force with their state, a query checked as it is typed (the
//! guard's verdict, then the output columns from a `LIMIT 0` run), run now, and rewind.

use crate::http::extract::Path;
use axum::Json;
use axum::extract::State;
use jiff::SignedDuration;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::author::{self, MAX_SQL_BYTES, connect, in_force, shorten};
use crate::definitions::{DEFAULT_SOURCE, Definitions};
use crate::http::AppState;
use crate::http::error::{ApiError, ApiResult, Body, ErrorBody};
use crate::http::guard::Caller;
use crate::poll::{self, PollReport, Poller};
use crate::sql_guard::Window;
use crate::store::WorkspaceId;

/// One trigger in force and its state.
#[derive(Debug, Serialize, ToSchema)]
pub struct TriggerOut {
    /// Its name.
    pub name: String,
    /// What it means.
    pub description: Option<String>,
    /// The source it reads.
    pub source: String,
    /// Its SQL.
    pub sql: String,
    /// The clock column.
    pub event_time: String,
    /// The key columns.
    pub key: Vec<String>,
    /// The rules on it.
    pub rules: Vec<String>,
    /// Rows before this instant have been evaluated.
    pub watermark: Option<String>,
    /// When it is next due.
    pub next_poll_at: Option<String>,
    /// When a poll last settled it.
    pub last_polled_at: Option<String>,
    /// The last poll's error, if it failed.
    pub last_error: Option<String>,
    /// A stored state that cannot be read, with the command that repairs it.
    pub problem: Option<String>,
}

/// The triggers in force with their state, from the definitions in force and the control plane.
pub async fn list_all(
    state: &AppState,
    workspace: &WorkspaceId,
) -> ApiResult<(Definitions, Vec<TriggerOut>)> {
    let (_, defs) = in_force(state, workspace).await?;
    let states = poll::list(&state.store, workspace).await?;
    let out = defs
        .triggers
        .iter()
        .map(|t| {
            let s = states
                .iter()
                .find(|s| s.trigger == t.name && s.removed_at.is_none());
            let ok = s.filter(|s| s.problem.is_none());
            TriggerOut {
                name: t.name.clone(),
                description: t.description.clone(),
                source: t.source.clone(),
                sql: t.sql.clone(),
                event_time: t.event_time.clone(),
                key: t.key.clone(),
                rules: defs
                    .rules
                    .iter()
                    .filter(|r| r.trigger == t.name)
                    .map(|r| r.name.clone())
                    .collect(),
                watermark: ok.map(|s| s.watermark.to_string()),
                next_poll_at: ok.map(|s| s.next_poll_at.to_string()),
                last_polled_at: s.and_then(|s| s.last_polled_at).map(|t| t.to_string()),
                last_error: s.and_then(|s| s.last_error.clone()),
                problem: s.and_then(|s| s.problem.clone()),
            }
        })
        .collect();
    Ok((defs, out))
}

/// 404 unless `name` is a trigger in force.
fn unknown(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "there is no trigger \"{}\" in force in this workspace",
        shorten(name)
    ))
    .at("name")
}

/// The triggers in force with their state (watermark, next poll, last run, problem).
#[utoipa::path(get, path = "/triggers", tag = "triggers",
    responses((status = 200, body = Vec<TriggerOut>), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<TriggerOut>>> {
    Ok(Json(list_all(&state, &caller.workspace).await?.1))
}

/// A query to check as it is typed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckQuery {
    /// The SQL (at most 64 KiB).
    pub sql: String,
    /// The source it would read (default: the default source).
    #[serde(default)]
    pub source: Option<String>,
    /// The clock column picked, for the SQL a poll would run (shown when it and every key
    /// column are among the output columns).
    #[serde(default)]
    pub clock: Option<String>,
    /// The key columns picked (at most 16).
    #[serde(default)]
    pub key: Vec<String>,
}

/// An output column of a query.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ColumnOut {
    /// Its name.
    pub name: String,
    /// Its database type name (may be empty on SQLite).
    #[serde(rename = "type")]
    pub type_name: String,
}

/// The guard's verdict on a query and, when it passed, its output columns.
#[derive(Debug, Serialize, ToSchema)]
pub struct Verdict {
    /// True when the guard admitted the query and its `LIMIT 0` run succeeded.
    pub ok: bool,
    /// Why not, when it is not ok.
    pub reason: Option<String>,
    /// The input at fault when it is not ok (`sql`).
    pub field: Option<String>,
    /// The source's dialect.
    pub dialect: String,
    /// The output columns and their types (empty unless ok).
    pub columns: Vec<ColumnOut>,
    /// The SQL a poll of one day would run with the clock and key picked, as `rowfire explain`
    /// prints it (when the query is ok and the clock and every key column are output columns).
    pub planned_sql: Option<String>,
}

/// Checks `sql` on `source`: the guard first (nothing it refuses is run), then a `LIMIT 0` run
/// for the output columns. Refusals are verdicts, not errors.
pub async fn check_sql(
    state: &AppState,
    workspace: &WorkspaceId,
    sql: &str,
    source: &str,
    plan: Option<(&str, &[String])>,
) -> ApiResult<Verdict> {
    let source_name = source;
    if sql.len() > MAX_SQL_BYTES {
        return Err(ApiError::invalid(format!(
            "the query is {} bytes; a trigger's SQL is at most {MAX_SQL_BYTES}",
            sql.len()
        ))
        .at("sql"));
    }
    let (_, defs) = in_force(state, workspace).await?;
    let allowed = defs
        .source(source)
        .map(|d| d.allow_functions.clone())
        .unwrap_or_default();
    let source = connect(state, workspace, &defs, source).await?;
    let refused = |reason: String| Verdict {
        ok: false,
        reason: Some(reason),
        field: Some("sql".to_string()),
        dialect: source.dialect().to_string(),
        columns: Vec::new(),
        planned_sql: None,
    };
    let query = match crate::sql_guard::check_allowing(sql, source.dialect(), &allowed) {
        Ok(query) => query,
        Err(e) => return Ok(refused(e.to_string())),
    };
    let now = state.clock.now();
    let window = Window {
        since: crate::store::earlier(now, SignedDuration::from_hours(1)),
        until: now,
    };
    match source.columns(&query, window).await {
        Ok(columns) => Ok(Verdict {
            ok: true,
            reason: None,
            field: None,
            dialect: source.dialect().to_string(),
            planned_sql: plan.and_then(|(clock, key)| {
                let named = |n: &str| columns.iter().any(|c| c.name == n);
                let picked = named(clock) && !key.is_empty() && key.iter().all(|k| named(k));
                let def = defs.source(source_name)?;
                picked.then(|| {
                    let draft = crate::definitions::Trigger {
                        name: "draft".to_string(),
                        description: None,
                        source: source_name.to_string(),
                        sql: sql.to_string(),
                        event_time: clock.to_string(),
                        key: key.to_vec(),
                        occurrence: Vec::new(),
                        poll_interval: crate::definitions::DEFAULT_POLL_INTERVAL,
                        lookback: SignedDuration::ZERO,
                    };
                    crate::explanation::plan::planned_sql(&draft, def, source.dialect(), now, 1)
                        .unwrap_or_else(|e| e.to_string())
                })
            }),
            columns: columns
                .into_iter()
                .map(|c| ColumnOut {
                    name: c.name,
                    type_name: c.type_name,
                })
                .collect(),
        }),
        Err(e) => match ApiError::from(e) {
            e if e.status.is_client_error() => Ok(refused(e.message)),
            e => Err(e),
        },
    }
}

/// Checks a query as it is typed: the guard's verdict (ok, or the reason) and, when ok, the
/// output columns and types from a `LIMIT 0` run on the source. Nothing is saved.
#[utoipa::path(post, path = "/triggers/check", tag = "triggers", request_body = CheckQuery,
    responses((status = 200, body = Verdict), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn check(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body<CheckQuery>,
) -> ApiResult<Json<Verdict>> {
    let source = body.source.as_deref().unwrap_or(DEFAULT_SOURCE);
    if body.key.len() > 16 || body.key.iter().chain(&body.clock).any(|c| c.len() > 128) {
        return Err(
            ApiError::invalid("pick at most 16 key columns, each name at most 128 bytes").at("key"),
        );
    }
    let plan = body.clock.as_deref().map(|c| (c, body.key.as_slice()));
    Ok(Json(
        check_sql(&state, &caller.workspace, &body.sql, source, plan).await?,
    ))
}

/// One rule's part of a poll.
#[derive(Debug, Serialize, ToSchema)]
pub struct RulePollOut {
    /// The rule.
    pub rule: String,
    /// The mode it claimed in.
    pub mode: String,
    /// Fires it made.
    pub fired: u64,
    /// Rows whose bucket it had already claimed.
    pub already: u64,
}

/// What one poll did.
#[derive(Debug, Serialize, ToSchema)]
pub struct PollOut {
    /// The trigger.
    pub trigger: String,
    /// `ok`, `skipped`, `failed`, `lease_lost` or `stopped`.
    pub status: String,
    /// Why, when there is a reason.
    pub reason: Option<String>,
    /// The window read: its start.
    pub since: Option<String>,
    /// The window read: its end.
    pub until: Option<String>,
    /// Rows read in the window.
    pub matched: u64,
    /// Rows that made at least one new fire.
    pub fired: u64,
    /// Rows that fired for no rule.
    pub already: u64,
    /// Rows with a NULL key.
    pub null_keys: u64,
    /// Rows with a NULL clock.
    pub null_clocks: u64,
    /// Per rule.
    pub rules: Vec<RulePollOut>,
}

impl From<PollReport> for PollOut {
    fn from(r: PollReport) -> PollOut {
        let (status, reason) = r.status.parts();
        PollOut {
            trigger: r.trigger.clone(),
            status: status.to_string(),
            reason: reason.map(str::to_string),
            since: r.window.map(|w| w.since.to_string()),
            until: r.window.map(|w| w.until.to_string()),
            matched: r.matched,
            fired: r.fired,
            already: r.already,
            null_keys: r.null_keys,
            null_clocks: r.null_clocks,
            rules: r
                .rules
                .into_iter()
                .map(|p| RulePollOut {
                    rule: p.rule,
                    mode: p.mode.to_string(),
                    fired: p.fired,
                    already: p.already,
                })
                .collect(),
        }
    }
}

/// Whether `name` is a trigger in force (in the control plane's state) in `workspace`.
async fn exists(state: &AppState, workspace: &WorkspaceId, name: &str) -> ApiResult<bool> {
    Ok(poll::list(&state.store, workspace)
        .await?
        .iter()
        .any(|t| t.trigger == name && t.removed_at.is_none()))
}

/// Polls the trigger now, due or not, and returns the poll's report.
#[utoipa::path(post, path = "/triggers/{name}/run", tag = "triggers",
    params(("name" = String, Path, description = "the trigger")),
    responses((status = 200, body = PollOut), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn run_now(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<PollOut>> {
    if !exists(&state, &caller.workspace, &name).await? {
        return Err(unknown(&name));
    }
    let dsns = state.source_dsns(&caller.workspace).await?;
    let poller = Poller::new(state.store.clone(), "api", state.clock.clone(), dsns);
    match poller.poll_now(&caller.workspace, &name).await? {
        Some(report) => Ok(Json(report.into())),
        None => Err(ApiError::conflict(format!(
            "trigger {name} is being polled by a worker right now; its report will be in Activity"
        ))),
    }
}

/// How far back to rewind.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rewind {
    /// Days back from now (1 to 3650).
    pub days: u32,
}

/// What a rewind did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Rewound {
    /// The trigger.
    pub trigger: String,
    /// The watermark it moved back to (never forward).
    pub watermark: String,
    /// What happens next.
    pub message: String,
}

/// Moves the trigger's watermark back `days` days and makes it due now; rows that already fired
/// do not fire again.
#[utoipa::path(post, path = "/triggers/{name}/rewind", tag = "triggers", request_body = Rewind,
    params(("name" = String, Path, description = "the trigger")),
    responses((status = 200, body = Rewound), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn rewind(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Body(body): Body<Rewind>,
) -> ApiResult<Json<Rewound>> {
    let days = author::days(body.days, "days")?;
    let by = SignedDuration::from_hours(24 * i64::from(days));
    let now = state.clock.now();
    if !poll::rewind(&state.store, &caller.workspace, &name, by, now).await? {
        return Err(unknown(&name));
    }
    Ok(Json(Rewound {
        trigger: name,
        watermark: crate::store::earlier(now, by).to_string(),
        message: "due now; rows that already fired will not fire again".to_string(),
    }))
}
