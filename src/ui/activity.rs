//! `/activity`: polls with matched, fired and already, fires, deliveries with their outcomes and
//! attempts, and the kill switch; kept live by `/activity/stream`, a server-sent event stream
//! that reads the control plane every second for what is new since the ids it last sent, so it
//! works whether the worker runs in this process or another one. `/inbox` listens to the same
//! stream for new Demo inbox messages.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use crate::http::extract::Query;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::StreamExt;
use jiff::SignedDuration;
use maud::{Markup, html};

use crate::http::AppState;
use crate::http::api::activity::{FireView, RunView, recent_fires};
use crate::http::api::deliveries::{DeliveryView, find};
use crate::http::api::inbox::messages;
use crate::http::error::{ApiError, ApiResult};
use crate::http::guard::Caller;
use crate::outbox::Filter;
use crate::store::{Store, WorkspaceId, workspace};

/// How many of each kind the page shows, and the stream sends per second at most.
const SHOWN: i64 = 50;

/// How often the stream reads the control plane.
const EVERY: Duration = Duration::from_secs(1);

/// A run still `running`, or a delivery not yet final, is read again (and sent again when it
/// changed) for this long; after it the stream moves past it.
const FOLLOW: SignedDuration = SignedDuration::from_mins(5);

/// The Activity page.
pub async fn page(State(state): State<AppState>, caller: Caller) -> ApiResult<Markup> {
    let (store, ws) = (&state.store, &caller.workspace);
    let runs = crate::poll::run::recent(store, ws, None, SHOWN).await?;
    let fires = recent_fires(store, ws, None, SHOWN).await?;
    let deliveries = find(
        store,
        ws,
        &Filter {
            limit: Some(SHOWN),
            ..Filter::default()
        },
    )
    .await?;
    let found = workspace::get(store, ws).await?;
    let halted = found.halted.map(|(reason, at)| (reason, at.to_string()));
    // The stream starts before the oldest item shown that may still change, so it is redrawn.
    let run_cursor = runs
        .iter()
        .filter(|r| r.status == "running")
        .map(|r| r.id - 1)
        .min()
        .unwrap_or(runs.first().map_or(0, |r| r.id));
    let delivery_cursor = deliveries
        .iter()
        .filter(|d| !d.status.is_terminal())
        .map(|d| d.id - 1)
        .min()
        .unwrap_or(deliveries.first().map_or(0, |d| d.id));
    let content = html! {
        h1 { "Activity" }
        p.lede { "Polls, fires and deliveries as they happen. This page updates by itself." }
        (kill_switch(halted.as_ref()))
        div #activity-feed .feeds data-stream="/activity/stream" data-topics="run,fire,delivery,status"
            data-after-run=(run_cursor)
            data-after-fire=(fires.first().map_or(0, |f| f.id))
            data-after-delivery=(delivery_cursor) {
            section .feed aria-labelledby="runs-title" {
                h2 #runs-title { "Polls" }
                p .empty #runs-empty hidden[!runs.is_empty()] {
                    "No polls yet. Start a worker (" code { "rowfire worker" } ") or run " code { "rowfire serve --with-worker" } "."
                }
                ol #runs-feed aria-live="polite" {
                    @for r in &runs { (run_item(&RunView::from(r))) }
                }
            }
            section .feed aria-labelledby="fires-title" {
                h2 #fires-title { "Fires" }
                p .empty #fires-empty hidden[!fires.is_empty()] {
                    "No fires yet. A rule fires when a poll finds a row it has not claimed before."
                }
                ol #fires-feed aria-live="polite" {
                    @for f in &fires { (fire_item(&FireView::from(f))) }
                }
            }
            section .feed aria-labelledby="deliveries-title" {
                h2 #deliveries-title { "Deliveries" }
                p .empty #deliveries-empty hidden[!deliveries.is_empty()] {
                    "No deliveries yet. Each fire renders one delivery per action of its rule."
                }
                ol #deliveries-feed aria-live="polite" {
                    @for d in &deliveries { (delivery_item(&DeliveryView::from(d))) }
                }
            }
        }
    };
    Ok(super::page("Activity", content))
}

/// The kill switch: the workspace's state, halt with a reason, resume.
fn kill_switch(halted: Option<&(String, String)>) -> Markup {
    html! {
        section #kill-switch .card aria-labelledby="kill-switch-title" {
            h2 #kill-switch-title { "Kill switch" }
            (halt_state(halted))
            @if halted.is_some() {
                form #resume-form data-api="/api/resume" data-method="POST" data-then="reload" {
                    button #resume-button type="submit" { "Resume sending" }
                    p .field-error data-error-for="body" role="alert" {}
                }
            } @else {
                form #halt-form .inline-form data-api="/api/halt" data-method="POST" data-then="reload" {
                    div .field {
                        label for="halt-reason" { "Reason" }
                        input #halt-reason name="reason" type="text" required maxlength="500"
                            placeholder="a wrong message went out" aria-describedby="halt-reason-error";
                        p #halt-reason-error .field-error data-error-for="reason" role="alert" {}
                    }
                    button #halt-button .danger type="submit" { "Halt everything" }
                }
            }
        }
    }
}

/// The workspace's state line.
fn halt_state(halted: Option<&(String, String)>) -> Markup {
    html! {
        @match halted {
            Some((reason, at)) => p #halt-state .halted data-halted="true" {
                strong { "Halted" } " since " time { (at) } ": " (reason)
                ". Nothing is sent and no watermark moves until you resume."
            },
            None => p #halt-state data-halted="false" {
                strong { "Running." } " Halting stops every send and poll of this workspace at once."
            },
        }
    }
}

/// One poll, as the feed shows it.
pub fn run_item(r: &RunView) -> Markup {
    html! {
        li .item data-run-id=(r.id) data-status=(r.status) {
            span .badge data-status=(r.status) { (r.status) }
            strong { (r.trigger) }
            span .counts {
                " matched=" span data-count="matched" { (r.matched) }
                " fired=" span data-count="fired" { (r.fired) }
                " already=" span data-count="already" { (r.already) }
            }
            @if r.null_rows > 0 { span .note { " (" (r.null_rows) " with a NULL clock or key, not fired)" } }
            @if let Some(e) = &r.error { p .error { (e) } }
            small .when { "window " (r.window_since) " – " (r.window_until) }
        }
    }
}

/// One fire, as the feed shows it.
pub fn fire_item(f: &FireView) -> Markup {
    html! {
        li .item data-fire-id=(f.id) data-mode=(f.mode) {
            span .badge data-mode=(f.mode) { (f.mode) }
            strong { (f.rule) }
            " key " code { (f.key) }
            @if !f.bucket.is_empty() { " bucket " code { (f.bucket) } }
            small .when { "fired " (f.fired_at) " (poll " (f.run_id) ")" }
        }
    }
}

/// One delivery, as the feed shows it.
pub fn delivery_item(d: &DeliveryView) -> Markup {
    html! {
        li .item data-delivery-id=(d.id) data-status=(d.status) {
            span .badge data-status=(d.status) { (d.status) }
            strong { (d.action) }
            " for " (d.rule)
            @if let Some(r) = &d.recipient { " to " (r) }
            span .counts { " attempts=" span data-count="attempts" { (d.attempts) } }
            @if let Some(reason) = &d.reason { span .note { " (" (reason) ")" } }
            small .when {
                @match &d.sent_at { Some(t) => { "sent " (t) }, None => { "due " (d.due_at) } }
                " · " a href={ "/api/deliveries/" (d.id) } { "details" }
            }
        }
    }
}

/// The stream's cursors and topics, from its query.
fn cursor(query: &HashMap<String, String>, name: &str) -> Result<Option<i64>, ApiError> {
    crate::http::api::input::after(query.get(name).map(String::as_str)).map_err(|e| e.at(name))
}

/// What the stream has sent and where it reads from next.
struct Feed {
    store: Store,
    clock: crate::clock::Clock,
    ws: WorkspaceId,
    topics: Vec<String>,
    run: i64,
    fire: i64,
    delivery: i64,
    inbox: i64,
    sent_runs: HashMap<i64, String>,
    sent_deliveries: HashMap<i64, (String, i64)>,
    halted: Option<Option<String>>,
    first: bool,
}

/// `/activity/stream`: server-sent events `run`, `fire`, `delivery`, `inbox` and `status`, each
/// a JSON object with the item's fields and `html`, the item as the page draws it. Query:
/// `topics` (comma-separated, default all) and a cursor per topic (`run`, `fire`, `delivery`,
/// `inbox`: send only greater ids; default: only what is new from now).
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>> {
    let (store, ws) = (&state.store, &caller.workspace);
    let topics: Vec<String> = query
        .get("topics")
        .map_or("run,fire,delivery,inbox,status", String::as_str)
        .split(',')
        .take(8)
        .map(|t| t.trim().to_string())
        .collect();
    let latest_run = match cursor(&query, "run")? {
        Some(n) => n,
        None => crate::poll::run::recent(store, ws, None, 1)
            .await?
            .first()
            .map_or(0, |r| r.id),
    };
    let latest_fire = match cursor(&query, "fire")? {
        Some(n) => n,
        None => recent_fires(store, ws, None, 1)
            .await?
            .first()
            .map_or(0, |f| f.id),
    };
    let latest_delivery = match cursor(&query, "delivery")? {
        Some(n) => n,
        None => find(
            store,
            ws,
            &Filter {
                limit: Some(1),
                ..Filter::default()
            },
        )
        .await?
        .first()
        .map_or(0, |d| d.id),
    };
    let latest_inbox = match cursor(&query, "inbox")? {
        Some(n) => n,
        None => messages(store, ws, None, 1)
            .await?
            .first()
            .map_or(0, |m| m.delivery_id),
    };
    let feed = Feed {
        store: state.store.clone(),
        clock: state.clock.clone(),
        ws: caller.workspace.clone(),
        topics,
        run: latest_run,
        fire: latest_fire,
        delivery: latest_delivery,
        inbox: latest_inbox,
        sent_runs: HashMap::new(),
        sent_deliveries: HashMap::new(),
        halted: None,
        first: true,
    };
    // The stream ends when the server stops, and when the token that opened it is revoked.
    let stopping = state.stopping.subscribe();
    let token = caller.token.clone();
    let events = futures_util::stream::unfold(feed, move |mut feed| {
        let (mut stopping, token) = (stopping.clone(), token.clone());
        async move {
            if !feed.first {
                tokio::select! {
                    () = tokio::time::sleep(EVERY) => {}
                    _ = stopping.wait_for(|s| *s) => return None,
                }
            }
            if *stopping.borrow() {
                return None;
            }
            if let Some(id) = &token
                && !crate::token::is_live(&feed.store, &feed.ws, id)
                    .await
                    .unwrap_or(true)
            {
                return None;
            }
            feed.first = false;
            let events = match feed.tick().await {
                Ok(events) => events,
                Err(e) => vec![
                    Event::default()
                        .event("error")
                        .data(serde_json::json!({ "message": e.message }).to_string()),
                ],
            };
            Some((futures_util::stream::iter(events.into_iter().map(Ok)), feed))
        }
    })
    .flatten();
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// An event named `name` carrying `fields` and `html`.
fn event(name: &str, fields: impl serde::Serialize, html: Markup) -> Event {
    let mut value = serde_json::to_value(fields).unwrap_or_default();
    if let Some(o) = value.as_object_mut() {
        o.insert("html".into(), html.into_string().into());
    }
    Event::default().event(name).data(value.to_string())
}

impl Feed {
    fn wants(&self, topic: &str) -> bool {
        self.topics.iter().any(|t| t == topic)
    }

    /// One read of the control plane: the events for what is new or changed.
    async fn tick(&mut self) -> ApiResult<Vec<Event>> {
        let (store, ws) = (&self.store, &self.ws);
        let now = self.clock.now();
        let horizon = crate::store::earlier(now, FOLLOW);
        let mut out = Vec::new();
        if self.wants("run") {
            let mut moving = true;
            for r in crate::poll::run::recent(store, ws, Some(self.run), SHOWN).await? {
                if self.sent_runs.get(&r.id) != Some(&r.status) {
                    let view = RunView::from(&r);
                    out.push(event("run", &view, run_item(&view)));
                    self.sent_runs.insert(r.id, r.status.clone());
                }
                moving &= r.status != "running" || r.started_at < horizon;
                if moving {
                    self.run = r.id;
                    self.sent_runs.remove(&r.id);
                }
            }
        }
        if self.wants("fire") {
            for f in recent_fires(store, ws, Some(self.fire), SHOWN).await? {
                let view = FireView::from(&f);
                out.push(event("fire", &view, fire_item(&view)));
                self.fire = f.id;
            }
        }
        if self.wants("delivery") {
            let filter = Filter {
                after: Some(self.delivery),
                limit: Some(SHOWN),
                ..Filter::default()
            };
            let mut moving = true;
            for d in find(store, ws, &filter).await? {
                let seen = (d.status.to_string(), d.attempts);
                if self.sent_deliveries.get(&d.id) != Some(&seen) {
                    let view = DeliveryView::from(&d);
                    out.push(event("delivery", &view, delivery_item(&view)));
                    self.sent_deliveries.insert(d.id, seen);
                }
                let far = d.due_at < horizon || d.due_at > crate::store::later(now, FOLLOW);
                moving &= d.status.is_terminal() || far;
                if moving {
                    self.delivery = d.id;
                    self.sent_deliveries.remove(&d.id);
                }
            }
        }
        if self.wants("inbox") {
            let mut found = messages(store, ws, Some(self.inbox), SHOWN).await?;
            found.sort_by_key(|m| m.delivery_id);
            for m in found {
                out.push(event("inbox", &m, super::inbox::card(&m)));
                self.inbox = m.delivery_id;
            }
        }
        if self.wants("status") {
            let found = workspace::get(store, ws).await?;
            let halted = found.halted.as_ref().map(|(r, _)| r.clone());
            if self.halted.as_ref() != Some(&halted) {
                if self.halted.is_some() {
                    let shown = found.halted.map(|(r, at)| (r, at.to_string()));
                    out.push(event(
                        "status",
                        serde_json::json!({ "halted": halted }),
                        halt_state(shown.as_ref()),
                    ));
                }
                self.halted = Some(halted);
            }
        }
        Ok(out)
    }
}
