//! `/api/rules`: the rules in force with their mode and fire counts, a new rule (pushed as a new
//! version), promote and demote, backtest (the report `rowfire backtest --json` prints) and
//! `why` for a key.

use crate::http::extract::{Path, Query};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::author::{self, MAX_KEY_BYTES, MAX_SAMPLE, connect, in_force, shorten};
use crate::backtest::{self, Options, Report};
use crate::definitions::{Definitions, edit};
use crate::http::AppState;
use crate::http::error::{ApiError, ApiResult, Body, ErrorBody};
use crate::http::guard::Caller;
use crate::rules::{self, Mode};
use crate::store::WorkspaceId;

/// Fires by mode.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct FireCounts {
    /// Fires made in shadow (recorded, not sent).
    pub shadow: i64,
    /// Fires made live.
    pub live: i64,
}

/// A rule's binding to an action.
#[derive(Debug, Serialize, ToSchema)]
pub struct BindingOut {
    /// `integration.action`.
    pub action: String,
    /// The recipient template, if any.
    pub recipient: Option<String>,
    /// Parameter templates by name.
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
}

/// One rule in force.
#[derive(Debug, Serialize, ToSchema)]
pub struct RuleOut {
    /// Its name.
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// Its trigger.
    pub trigger: String,
    /// `shadow` or `live`.
    pub mode: String,
    /// The cadence in words.
    pub cadence: String,
    /// The time zone its periods are counted in.
    pub time_zone: String,
    /// Its fires so far, by mode.
    pub fires: FireCounts,
    /// Its bindings.
    pub bindings: Vec<BindingOut>,
}

/// The rules in force with their mode and fire counts.
pub async fn list_all(
    state: &AppState,
    workspace: &WorkspaceId,
) -> ApiResult<(Definitions, Vec<RuleOut>)> {
    let (_, defs) = in_force(state, workspace).await?;
    let modes = rules::list(&state.store, workspace).await?;
    let mut tx = state.store.begin(workspace).await?;
    let counts = crate::ledger::counts_by_mode(&mut tx, workspace)
        .await
        .map_err(|e| state.store.error(e))?;
    tx.rollback().await.map_err(|e| state.store.error(e))?;
    let out = defs
        .rules
        .iter()
        .map(|r| {
            let mode = modes
                .iter()
                .find(|m| m.rule == r.name)
                .map_or(Mode::Shadow, |m| m.mode);
            let key = defs.trigger(&r.trigger).map_or(&[][..], |t| &t.key[..]);
            let mut fires = FireCounts::default();
            for (rule, mode, n) in &counts {
                if *rule == r.name {
                    match mode {
                        Mode::Shadow => fires.shadow = *n,
                        Mode::Live => fires.live = *n,
                    }
                }
            }
            RuleOut {
                name: r.name.clone(),
                description: r.description.clone(),
                trigger: r.trigger.clone(),
                mode: mode.to_string(),
                cadence: r.cadence.describe(key),
                time_zone: r.timezone.iana_name().unwrap_or("UTC").to_string(),
                fires,
                bindings: r
                    .actions
                    .iter()
                    .map(|b| BindingOut {
                        action: format!("{}.{}", b.integration, b.action),
                        recipient: b.recipient.clone(),
                        params: serde_json::to_value(&b.params).unwrap_or_default(),
                    })
                    .collect(),
            }
        })
        .collect();
    Ok((defs, out))
}

fn unknown(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "there is no rule \"{}\" in force in this workspace",
        shorten(name)
    ))
    .at("name")
}

/// The rules in force with their mode, cadence and fires by mode.
#[utoipa::path(get, path = "/rules", tag = "rules",
    responses((status = 200, body = Vec<RuleOut>), (status = 404, body = ErrorBody)))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<RuleOut>>> {
    Ok(Json(list_all(&state, &caller.workspace).await?.1))
}

/// A mode change.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModeChange {
    /// The rule.
    pub rule: String,
    /// Its mode before.
    pub before: String,
    /// Its mode now.
    pub mode: String,
}

async fn set_mode(
    state: &AppState,
    caller: &Caller,
    name: &str,
    mode: Mode,
) -> ApiResult<ModeChange> {
    let (_, defs) = in_force(state, &caller.workspace).await?;
    if defs.rule(name).is_none() {
        return Err(unknown(name));
    }
    let before = rules::set_mode(
        &state.store,
        &caller.workspace,
        name,
        mode,
        state.clock.now(),
    )
    .await?;
    Ok(ModeChange {
        rule: name.to_string(),
        before: before.to_string(),
        mode: mode.to_string(),
    })
}

/// Promotes a rule to live: its fires are sent for real from the next poll on.
#[utoipa::path(post, path = "/rules/{name}/promote", tag = "rules",
    params(("name" = String, Path, description = "the rule")),
    responses((status = 200, body = ModeChange), (status = 404, body = ErrorBody)))]
pub async fn promote(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<ModeChange>> {
    Ok(Json(set_mode(&state, &caller, &name, Mode::Live).await?))
}

/// Returns a rule to shadow: its fires are recorded and nothing is sent.
#[utoipa::path(post, path = "/rules/{name}/demote", tag = "rules",
    params(("name" = String, Path, description = "the rule")),
    responses((status = 200, body = ModeChange), (status = 404, body = ErrorBody)))]
pub async fn demote(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<ModeChange>> {
    Ok(Json(set_mode(&state, &caller, &name, Mode::Shadow).await?))
}

/// What to backtest.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BacktestRequest {
    /// Days back from now (1 to 3650).
    pub days: u32,
    /// Sample fires to show (0 to 50; default 5).
    #[serde(default = "default_sample")]
    pub sample: usize,
}

fn default_sample() -> usize {
    5
}

/// The report `rowfire backtest --json` prints: counts, fires per day, headline days, samples.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct BacktestReport(pub Report);

impl utoipa::PartialSchema for BacktestReport {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .description(Some(
                "The backtest report, as `rowfire backtest --json` prints it: rows_matched, fires, per_day [{date, fires}], busiest_day, quietest_day, longest_zero_run, samples, caveat",
            ))
            .into()
    }
}

impl ToSchema for BacktestReport {}

/// Backtests a rule of the definitions in force over `days` days on its source.
pub async fn run_backtest(
    state: &AppState,
    workspace: &WorkspaceId,
    name: &str,
    days: u32,
    sample: usize,
) -> ApiResult<Report> {
    let days = author::days(days, "days")?;
    if sample > MAX_SAMPLE {
        return Err(
            ApiError::invalid(format!("sample must be between 0 and {MAX_SAMPLE}")).at("sample"),
        );
    }
    let (_, defs) = in_force(state, workspace).await?;
    let Some(rule) = defs.rule(name) else {
        return Err(unknown(name));
    };
    let trigger = defs.trigger(&rule.trigger).ok_or_else(|| unknown(name))?;
    let source = connect(state, workspace, &defs, &trigger.source).await?;
    let opts = Options {
        days,
        sample,
        now: state.clock.now(),
    };
    Ok(backtest::run(&defs, name, &source, &opts).await?)
}

/// What the rule would have done over the last `days` days: the same report as
/// `rowfire backtest --json` (fires per day, headline, sample fires).
#[utoipa::path(post, path = "/rules/{name}/backtest", tag = "rules", request_body = BacktestRequest,
    params(("name" = String, Path, description = "the rule")),
    responses((status = 200, body = BacktestReport), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn backtest(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Body(body): Body<BacktestRequest>,
) -> ApiResult<Json<BacktestReport>> {
    let report = run_backtest(&state, &caller.workspace, &name, body.days, body.sample).await?;
    Ok(Json(BacktestReport(report)))
}

/// Which key to explain.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WhyQuery {
    /// The key as typed (`42`, `acme`, or an encoded tuple `["a","b"]`).
    pub key: Option<String>,
    /// Days of recent rows to look at (1 to 3650; default 30).
    pub days: Option<String>,
}

/// What `why` says about a key.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhyOut {
    /// The rule.
    pub rule: String,
    /// The key as asked.
    pub key: String,
    /// Its fires.
    pub fires: usize,
    /// The explanation, as `rowfire why` prints it.
    pub text: String,
}

/// `why` for a rule and key: its fires and the fate of its recent rows.
pub async fn explain(
    state: &AppState,
    workspace: &WorkspaceId,
    name: &str,
    key: &str,
    days: u32,
) -> ApiResult<WhyOut> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(ApiError::invalid(format!("key must be 1 to {MAX_KEY_BYTES} bytes")).at("key"));
    }
    let days = author::days(days, "days")?;
    let (_, defs) = in_force(state, workspace).await?;
    if defs.rule(name).is_none() {
        return Err(unknown(name));
    }
    let dsns = state.source_dsns(workspace).await?;
    let explained = crate::explanation::why(
        &state.store,
        workspace,
        &defs,
        crate::explanation::Question {
            rule: name,
            key,
            days,
            now: state.clock.now(),
        },
        &dsns,
    )
    .await
    .map_err(|e| match e {
        crate::explanation::WhyError::Question(m) => ApiError::invalid(m),
        crate::explanation::WhyError::ControlPlane(e) => ApiError::from(e),
    })?;
    Ok(WhyOut {
        rule: name.to_string(),
        key: key.to_string(),
        fires: explained.fires.len(),
        text: explained.to_string(),
    })
}

/// Why a key fired, or did not: its fires (bucket, mode, poll) and the fate of its recent rows.
#[utoipa::path(get, path = "/rules/{name}/why", tag = "rules",
    params(("name" = String, Path, description = "the rule"), WhyQuery),
    responses((status = 200, body = WhyOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn why(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<WhyQuery>,
) -> ApiResult<Json<WhyOut>> {
    let key = q
        .key
        .ok_or_else(|| ApiError::invalid("say which key: ?key=…").at("key"))?;
    let days = match q.days {
        None => 30,
        Some(d) => d
            .parse()
            .map_err(|_| ApiError::invalid("days must be a whole number of days").at("days"))?,
    };
    Ok(Json(
        explain(&state, &caller.workspace, &name, &key, days).await?,
    ))
}

/// A rule to add (the Get started page's "turn it on").
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRule {
    /// Its name (letters, digits, `_`, `-`).
    pub name: String,
    /// The trigger it subscribes to.
    pub trigger: String,
    /// `once_ever`, `once_per_period` or `once_per_n`.
    pub policy: String,
    /// With `once_per_period`: `day`, `week` or `month`.
    #[serde(default)]
    pub period: Option<String>,
    /// With `once_per_n`: every nth occurrence.
    #[serde(default)]
    pub n: Option<u32>,
    /// Its IANA time zone (default: the workspace's).
    #[serde(default)]
    pub timezone: Option<String>,
    /// The message, a template (`{{ column }}`), posted to the Demo inbox.
    pub message: String,
}

/// The longest message template a new rule takes.
const MAX_MESSAGE_BYTES: usize = 8 * 1024;

/// The rule as a definitions entry: every value quoted as a JSON string (valid YAML).
fn rule_entry(r: &NewRule, inbox: &str) -> ApiResult<String> {
    let q = |s: &str| serde_json::to_string(s).expect("strings serialise");
    if r.message.is_empty() || r.message.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::invalid(format!(
            "the message must be 1 to {MAX_MESSAGE_BYTES} bytes"
        ))
        .at("message"));
    }
    let mut entry = format!("trigger: {}\npolicy: {}\n", q(&r.trigger), q(&r.policy));
    if let Some(period) = &r.period {
        entry.push_str(&format!("period: {}\n", q(period)));
    }
    if let Some(n) = r.n {
        entry.push_str(&format!("n: {n}\n"));
    }
    if let Some(tz) = &r.timezone {
        entry.push_str(&format!("timezone: {}\n", q(tz)));
    }
    entry.push_str(&format!(
        "actions:\n  - action: {}\n    params:\n      channel: \"#rowfire\"\n      text: {}\n",
        q(&format!("{inbox}.chat_message")),
        q(&r.message)
    ));
    Ok(entry)
}

/// Adds a rule to the definitions in force and pushes the result as a new version (the rule
/// starts in shadow; promote it to turn it on). Its only action posts the message to the Demo
/// inbox.
#[utoipa::path(post, path = "/rules", tag = "rules", request_body = NewRule,
    responses((status = 200, body = super::definitions::Pushed), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body<NewRule>,
) -> ApiResult<Json<super::definitions::Pushed>> {
    let ws = &caller.workspace;
    let (_, text) = with_rule(&state, ws, &body).await?;
    let summary = crate::push::push(&state.store, ws, &text, state.clock.now()).await?;
    Ok(Json(summary))
}

/// A draft rule to backtest before it is added.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DraftBacktest {
    /// The rule as it would be added.
    pub rule: NewRule,
    /// Days back from now (1 to 3650).
    pub days: u32,
    /// Sample fires to show (0 to 50; default 5).
    #[serde(default = "default_sample")]
    pub sample: usize,
}

/// The definitions in force with `rule` added (not stored), and its document.
async fn with_rule(
    state: &AppState,
    ws: &WorkspaceId,
    rule: &NewRule,
) -> ApiResult<(Definitions, String)> {
    let current = crate::definitions::versions::get(&state.store, ws, None)
        .await?
        .ok_or_else(|| ApiError::not_found(author::NOTHING_PUSHED))?;
    let defs = current.definitions().map_err(ApiError::from)?;
    if defs.trigger(&rule.trigger).is_none() {
        return Err(ApiError::not_found(format!(
            "there is no trigger \"{}\" in force",
            shorten(&rule.trigger)
        ))
        .at("trigger"));
    }
    let inbox = defs
        .integrations
        .iter()
        .find(|i| i.spec.name == "demo_inbox")
        .ok_or_else(|| {
            ApiError::conflict("the definitions in force declare no Demo inbox integration (`catalog: demo_inbox`); add one and push")
        })?;
    let entry = rule_entry(rule, &inbox.name)?;
    let text = edit::add_rule(&current.document, &rule.name, &entry).map_err(|message| {
        let field = ["period", "n", "timezone", "policy", "trigger", "actions"]
            .into_iter()
            .find(|f| message.contains(&format!("rules.{}.{f}", rule.name)))
            .map(|f| if f == "actions" { "message" } else { f })
            .unwrap_or("name");
        ApiError::invalid(message).at(field)
    })?;
    let draft = crate::definitions::versions::Version {
        document: text.clone(),
        ..current
    }
    .definitions()
    .map_err(ApiError::from)?;
    Ok((draft, text))
}

/// Backtests a rule that is not added yet (the Get started page), on the definitions in force
/// with it added; nothing is written.
#[utoipa::path(post, path = "/rules/backtest", tag = "rules", request_body = DraftBacktest,
    responses((status = 200, body = BacktestReport), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn backtest_draft(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body<DraftBacktest>,
) -> ApiResult<Json<BacktestReport>> {
    let days = author::days(body.days, "days")?;
    if body.sample > MAX_SAMPLE {
        return Err(
            ApiError::invalid(format!("sample must be between 0 and {MAX_SAMPLE}")).at("sample"),
        );
    }
    let (defs, _) = with_rule(&state, &caller.workspace, &body.rule).await?;
    let trigger = defs
        .trigger(&body.rule.trigger)
        .ok_or_else(|| unknown(&body.rule.name))?;
    let source = connect(&state, &caller.workspace, &defs, &trigger.source).await?;
    let opts = Options {
        days,
        sample: body.sample,
        now: state.clock.now(),
    };
    Ok(Json(BacktestReport(
        backtest::run(&defs, &body.rule.name, &source, &opts).await?,
    )))
}
