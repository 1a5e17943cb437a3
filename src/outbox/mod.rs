//! Deliveries (the `delivery` and `inbox_message` tables): one rendered request per binding of a
//! fire, written in the fire's own transaction. Shadow deliveries are recorded as suppressed;
//! live ones to the Demo inbox complete in-process; every other live delivery waits in the queue
//! for a sender.

mod scheduled;
mod status;
pub mod target;

use jiff::Timestamp;

use crate::definitions::{Binding, Definitions, Rule, Trigger};
use crate::row::Row;
use crate::rules::Mode;
use crate::store::WorkspaceId;
use crate::store::{DbTime, StoreTx, execute, fetch_all};
use crate::template;

pub use scheduled::{LeadFrom, Scheduled, is_inbox_url, to_inbox};
pub use status::DeliveryStatus;
pub use target::RenderError;

/// Deliveries that finished as they were written (sent to the Demo inbox, suppressed, failed,
/// expired), counted by (integration, state), for `/metrics`. Pending ones are counted when a
/// sender settles them.
pub type Tally = std::collections::BTreeMap<(String, &'static str), u64>;

pub use crate::definitions::catalog::INBOX_URL;

/// A request rendered from a binding and a row, ready to store and (later) to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Who receives it.
    pub recipient: String,
    /// HTTP method.
    pub method: String,
    /// Full URL.
    pub url: String,
    /// Headers, rendered (never credentials: those are added at the moment of sending).
    pub headers: serde_json::Value,
    /// The body, rendered.
    pub body: serde_json::Value,
}

/// What a fire looks like to a template: every column, plus `row`, `rule`, `trigger`,
/// `entity_id` (the key), `event_time` (RFC 3339) and `fired_at`.
pub fn context(
    row: &Row,
    rule: &Rule,
    trigger: &Trigger,
    fired_at: Timestamp,
) -> serde_json::Value {
    let row_json = row.to_json();
    let mut ctx = match &row_json {
        serde_json::Value::Object(m) => m.clone(),
        _ => serde_json::Map::new(),
    };
    let key: Vec<String> = trigger
        .key
        .iter()
        .map(|k| row.get(k).map(|v| v.to_string()).unwrap_or_default())
        .collect();
    ctx.insert("row".into(), row_json);
    ctx.insert("rule".into(), rule.name.clone().into());
    ctx.insert("trigger".into(), trigger.name.clone().into());
    ctx.insert("entity_id".into(), key.join("/").into());
    ctx.insert(
        "event_time".into(),
        row.clock.map(|c| c.to_string()).unwrap_or_default().into(),
    );
    ctx.insert("fired_at".into(), fired_at.to_string().into());
    serde_json::Value::Object(ctx)
}

/// Renders one binding against a fire's context. Values placed in the URL are percent-encoded
/// into their segment or query value (a binding's parameter used in the path is its author's
/// text, with only its own values encoded), and the URL is checked to stay under the base URL;
/// header values may hold no line breaks. Body values are JSON, escaped by JSON.
pub fn render(
    defs: &Definitions,
    binding: &Binding,
    ctx: &serde_json::Value,
) -> Result<Request, RenderError> {
    let integration = defs
        .integration(&binding.integration)
        .expect("validated: bindings name defined integrations");
    let action = &integration.spec.actions[&binding.action];
    let mut params = serde_json::Map::new();
    for (name, declared) in &action.params {
        let value = match binding.params.get(name) {
            Some(t) => template::render(t, ctx)?,
            None => declared.default.clone().unwrap_or(serde_json::Value::Null),
        };
        params.insert(name.clone(), value);
    }
    let recipient = match &binding.recipient {
        Some(t) => match template::render_str(t, ctx)? {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        },
        None => ctx["entity_id"].as_str().unwrap_or_default().to_string(),
    };
    let mut full = ctx.clone();
    full["params"] = serde_json::Value::Object(params);
    full["recipient"] = recipient.clone().into();
    // `{{ params.x }}` in a path stands for the binding's own text for x (or the catalogue's
    // default text), which is kept as written; only the row values inside it are encoded.
    let param_text = |name: &str| -> Option<String> {
        let param = name.strip_prefix("params.")?;
        match binding.params.get(param) {
            Some(serde_json::Value::String(text)) => Some(text.clone()),
            Some(_) => None,
            None => match action.params.get(param)?.default.as_ref()? {
                serde_json::Value::String(text) if !text.contains("{{") => Some(text.clone()),
                _ => None,
            },
        }
    };
    let inline = template::url::Inline {
        text: &param_text,
        ctx,
    };
    let path = template::url::render_url(&action.path, &full, Some(&inline))?;
    let url = target::join(&integration.spec.base_url, &path)?;
    target::at_most("URL", url.len(), target::MAX_URL)?;
    target::at_most("recipient", recipient.len(), target::MAX_RECIPIENT)?;
    let headers = serde_json::to_value(&action.headers).unwrap_or_default();
    let headers = template::render(&headers, &full)?;
    target::check_headers(&headers)?;
    let body = template::render(&action.body, &full)?;
    let size = serde_json::to_vec(&body).map_or(usize::MAX, |b| b.len());
    target::at_most("body", size, target::MAX_BODY)?;
    Ok(Request {
        recipient,
        method: action.method.clone(),
        url,
        headers,
        body,
    })
}

/// Writes the deliveries of one new fire inside the claim's transaction, due now or, for a
/// time-anchored fire, when `scheduled` says. Returns how many wait in the queue for a sender
/// (announce them with [`announce`] before committing).
#[allow(
    clippy::too_many_arguments,
    reason = "the claim's parts, each borrowed from the poll"
)]
pub async fn enqueue(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    defs: &Definitions,
    rule: &Rule,
    trigger: &Trigger,
    mode: Mode,
    fire_id: i64,
    row: &Row,
    scheduled: Option<&Scheduled>,
    now: Timestamp,
    tally: &mut Tally,
) -> Result<usize, sqlx::Error> {
    let ctx = context(row, rule, trigger, now);
    let mut queued = 0;
    for (index, binding) in rule.actions.iter().enumerate() {
        let rendered = render(defs, binding, &ctx);
        let in_process = defs
            .integration(&binding.integration)
            .is_some_and(|i| i.spec.base_url == INBOX_URL);
        let capped = match (&rendered, rule.frequency_cap) {
            (Ok(r), Some(cap)) => {
                capped(tx, workspace, fire_id, rule, mode, &r.recipient, cap, now).await?
            }
            _ => None,
        };
        let was_capped = capped.is_some();
        let (status, reason, sent_at) = match (&rendered, mode) {
            (Err(e), _) => (DeliveryStatus::Failed, Some(e.to_string()), None),
            (Ok(_), Mode::Live) if scheduled.is_some_and(|s| s.too_late) => (
                DeliveryStatus::Expired,
                scheduled.map(|s| s.expired_reason(rule.cadence.anchor())),
                None,
            ),
            (Ok(_), Mode::Shadow) => (
                DeliveryStatus::Suppressed,
                Some(capped.map_or("shadow".to_string(), |c| format!("shadow; {c}"))),
                None,
            ),
            (Ok(_), Mode::Live) if capped.is_some() => (DeliveryStatus::Suppressed, capped, None),
            // A scheduled send to the Demo inbox waits for its due time like any other.
            (Ok(_), Mode::Live) if in_process && scheduled.is_none() => {
                (DeliveryStatus::Sent, None, Some(DbTime(now)))
            }
            (Ok(_), Mode::Live) => (DeliveryStatus::Pending, None, None),
        };
        queued += usize::from(status == DeliveryStatus::Pending);
        if status != DeliveryStatus::Pending {
            *tally
                .entry((binding.integration.clone(), status.as_str()))
                .or_default() += 1;
        }
        let request = rendered.as_ref().ok();
        let id = fetch_all!(
            &mut *tx,
            "INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, recipient, method, url, headers, body,
                                   status, reason, due_at, created_at, sent_at, expires_at, capped, anchor_at, lead_from)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21) RETURNING id",
            [
                workspace,
                fire_id,
                &rule.name,
                mode.to_string(),
                index as i64,
                &binding.integration,
                &binding.action,
                request.map(|r| r.recipient.clone()),
                request.map(|r| r.method.clone()),
                request.map(|r| r.url.clone()),
                request.map(|r| r.headers.to_string()),
                request.map(|r| r.body.to_string()),
                status,
                reason,
                DbTime(scheduled.map_or(now, |s| s.due)),
                DbTime(now),
                sent_at,
                scheduled
                    .map(|s| DbTime(s.expires))
                    .or(rule.expire_after.map(|e| DbTime(crate::store::later(now, e)))),
                was_capped,
                scheduled.map(|s| DbTime(s.anchor)),
                scheduled.map(|s| s.lead_from.as_str())
            ],
            |r| r.try_get::<i64, _>("id")
        )?[0];
        if let (Some(request), DeliveryStatus::Sent) = (request, status) {
            execute!(
                &mut *tx,
                "INSERT INTO inbox_message (workspace_id, delivery_id, action, recipient, body, received_at) VALUES ($1, $2, $3, $4, $5, $6)",
                [
                    workspace,
                    id,
                    &binding.action,
                    &request.recipient,
                    request.body.to_string(),
                    DbTime(now)
                ]
            )?;
        }
    }
    Ok(queued)
}

/// Whether a rule's frequency cap holds back one more delivery to `recipient` in `mode`: counts
/// the earlier fires that reached (or, in shadow, would have reached) them through this rule over
/// the rolling window. A fire's own other actions do not count against it.
#[allow(
    clippy::too_many_arguments,
    reason = "the cap's parts, each borrowed from enqueue"
)]
async fn capped(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    fire_id: i64,
    rule: &Rule,
    mode: Mode,
    recipient: &str,
    cap: crate::definitions::FrequencyCap,
    now: Timestamp,
) -> Result<Option<String>, sqlx::Error> {
    let recent = fetch_all!(
        &mut *tx,
        "SELECT COUNT(DISTINCT fire_id) AS n FROM delivery
         WHERE workspace_id = $1 AND rule_name = $2 AND mode = $3 AND recipient = $4 AND created_at > $5
           AND fire_id <> $6 AND NOT capped AND (status IN ('pending', 'sent') OR (mode = 'shadow' AND status = 'suppressed'))",
        [workspace, &rule.name, mode.to_string(), recipient, DbTime(crate::store::earlier(now, cap.per)), fire_id],
        |r| r.try_get::<i64, _>("n")
    )?[0];
    Ok((recent >= i64::from(cap.max)).then(|| {
        format!(
            "frequency cap: {recipient} already had {recent} in the last {:#}",
            cap.per
        )
    }))
}

/// One delivery as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its id (the idempotency key).
    pub id: i64,
    /// The fire it belongs to.
    pub fire_id: i64,
    /// The rule.
    pub rule: String,
    /// shadow or live.
    pub mode: Mode,
    /// `integration.action`.
    pub action: String,
    /// Who receives it.
    pub recipient: Option<String>,
    /// Its state.
    pub status: DeliveryStatus,
    /// Why it is in that state.
    pub reason: Option<String>,
    /// The rendered body.
    pub body: Option<String>,
    /// The recorded request's method and URL (`None` when it was never rendered).
    pub request: Option<(String, String)>,
    /// The recorded headers (a JSON object; never credentials).
    pub headers: Option<String>,
    /// Attempts so far.
    pub attempts: i64,
    /// When it is (or was) due.
    pub due_at: Timestamp,
    /// When it was sent.
    pub sent_at: Option<Timestamp>,
}

/// Which deliveries to list.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this rule's.
    pub rule: Option<String>,
    /// Only in this state.
    pub status: Option<DeliveryStatus>,
    /// Only this one.
    pub id: Option<i64>,
    /// At most this many (newest first); `None` for all.
    pub limit: Option<i64>,
    /// Only those with a greater id, oldest first (a live feed's cursor).
    pub after: Option<i64>,
}

/// Deliveries of a workspace, newest first (oldest first after [`Filter::after`]).
pub async fn list(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    filter: &Filter,
) -> Result<Vec<Delivery>, sqlx::Error> {
    let order = if filter.after.is_some() {
        "ASC"
    } else {
        "DESC"
    };
    fetch_all!(
        tx,
        &format!("SELECT {DELIVERY_COLUMNS} FROM delivery
         WHERE workspace_id = $1 AND ($2 = '' OR rule_name = $2) AND ($3 = '' OR status = $3) AND ($4 = 0 OR id = $4) AND id > $6
         ORDER BY id {order} LIMIT $5"),
        [
            workspace,
            filter.rule.as_deref().unwrap_or(""),
            filter.status.map_or("", DeliveryStatus::as_str),
            filter.id.unwrap_or(0),
            filter.limit.unwrap_or(i64::MAX),
            filter.after.unwrap_or(0)
        ],
        |r| delivery_of(r)
    )
}

/// The columns [`delivery_of`] reads.
const DELIVERY_COLUMNS: &str = "id, fire_id, rule_name, mode, integration, action, recipient, status, reason, body, method, url, headers, attempts, due_at, sent_at";

/// A [`Delivery`] from a row holding [`DELIVERY_COLUMNS`].
fn delivery_of(r: &crate::store::StoreRow) -> Result<Delivery, sqlx::Error> {
    Ok(Delivery {
        id: r.try_get("id")?,
        fire_id: r.try_get("fire_id")?,
        rule: r.try_get("rule_name")?,
        mode: r.try_get("mode")?,
        action: format!(
            "{}.{}",
            r.try_get::<String, _>("integration")?,
            r.try_get::<String, _>("action")?
        ),
        recipient: r.try_get("recipient")?,
        status: r.try_get("status")?,
        reason: r.try_get("reason")?,
        body: r.try_get("body")?,
        request: r
            .try_get::<Option<String>, _>("method")?
            .zip(r.try_get::<Option<String>, _>("url")?),
        headers: r.try_get("headers")?,
        attempts: r.try_get("attempts")?,
        due_at: r.try_get::<DbTime, _>("due_at")?.0,
        sent_at: r.try_get::<Option<DbTime>, _>("sent_at")?.map(|t| t.0),
    })
}

/// The Demo inbox as its reader sees it: deliveries to `inbox://demo` that arrived (live, sent)
/// or would have (shadow, suppressed), newest first, or oldest first after `after`.
pub async fn inbox_feed(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Delivery>, sqlx::Error> {
    let order = if after.is_some() { "ASC" } else { "DESC" };
    fetch_all!(
        tx,
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM delivery
         WHERE workspace_id = $1 AND id > $2 AND (url = $4 OR url LIKE $5)
           AND (status = 'sent' OR (mode = 'shadow' AND status = 'suppressed'))
         ORDER BY id {order} LIMIT $3"
        ),
        [
            workspace,
            after.unwrap_or(0),
            limit,
            INBOX_URL,
            format!("{INBOX_URL}/%")
        ],
        |r| delivery_of(r)
    )
}

/// How many deliveries a workspace has in each state, with the earliest due time among them.
pub async fn counts(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
) -> Result<Vec<(DeliveryStatus, i64, Timestamp)>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT status, COUNT(*) AS n, MIN(due_at) AS first_due FROM delivery WHERE workspace_id = $1 GROUP BY status ORDER BY status",
        [workspace],
        |r| Ok((
            r.try_get("status")?,
            r.try_get("n")?,
            r.try_get::<DbTime, _>("first_due")?.0
        ))
    )
}

/// The Demo inbox: messages delivered to `inbox://demo`, newest first.
pub async fn inbox(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    limit: i64,
) -> Result<Vec<(String, Option<String>, String)>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT action, recipient, body FROM inbox_message WHERE workspace_id = $1 ORDER BY id DESC LIMIT $2",
        [workspace, limit],
        |r| Ok((
            r.try_get("action")?,
            r.try_get("recipient")?,
            r.try_get("body")?
        ))
    )
}

/// Why a delivery cannot be retried by hand.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// No such delivery.
    #[error("there is no delivery {0}")]
    Unknown(i64),
    /// Not in a state that can be retried.
    #[error("delivery {id} is {status}; only failed or dead deliveries can be retried")]
    NotRetryable {
        /// The delivery.
        id: i64,
        /// Its state.
        status: DeliveryStatus,
    },
    /// It was never rendered (its template failed), so there is nothing to send.
    #[error(
        "delivery {0} was never rendered (its template failed); fix the template, push, and rewind the trigger instead"
    )]
    NeverRendered(i64),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Re-queues a failed or dead delivery, due now, keeping its id (its idempotency key).
pub async fn retry(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
    id: i64,
    now: Timestamp,
) -> Result<(), RetryError> {
    let mut tx = store.begin(workspace).await?;
    let found = fetch_all!(
        &mut tx,
        "SELECT status, body IS NOT NULL AS rendered FROM delivery WHERE workspace_id = $1 AND id = $2",
        [workspace, id],
        |r| Ok((r.try_get::<DeliveryStatus, _>("status")?, r.try_get::<bool, _>("rendered")?))
    )
    .map_err(|e| store.error(e))?;
    let Some((status, rendered)) = found.into_iter().next() else {
        return Err(RetryError::Unknown(id));
    };
    if !status.is_retryable() {
        return Err(RetryError::NotRetryable { id, status });
    }
    if !rendered {
        return Err(RetryError::NeverRendered(id));
    }
    execute!(
        &mut tx,
        "UPDATE delivery SET status = 'pending', reason = 'retried by hand', due_at = $3, lease_expires_at = NULL
         WHERE workspace_id = $1 AND id = $2",
        [workspace, id, DbTime(now)]
    )
    .map_err(|e| store.error(e))?;
    announce(&mut tx).await.map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    store.wake();
    Ok(())
}

/// Announces queued work to idle workers in other processes, once per transaction (PostgreSQL
/// delivers the NOTIFY at commit and folds repeats). Callers also call [`crate::store::Store::wake`] after
/// committing, for this process. A no-op on SQLite.
pub async fn announce(tx: &mut crate::store::StoreTx) -> Result<(), sqlx::Error> {
    if let crate::store::StoreTx::Postgres(t) = tx {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(crate::store::WORK_CHANNEL)
            .execute(&mut **t)
            .await?;
    }
    Ok(())
}
