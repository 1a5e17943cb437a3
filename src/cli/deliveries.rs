//! `rowfire deliveries`: list, show one with its attempts, retry, prune.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Subcommand;
use jiff::SignedDuration;
use rowfire::config::Config;
use rowfire::outbox::{self, Filter};
use rowfire::send::queue;
use rowfire::store::{Store, WorkspaceId};

use super::{now, open_workspace};

/// `rowfire deliveries …`: newest first, filtered by rule and state, or one delivery's command.
pub(crate) async fn run(
    config: &Config,
    command: Option<DeliveriesCommand>,
    rule: Option<String>,
    status: Option<rowfire::outbox::DeliveryStatus>,
    limit: i64,
) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    let filter = match command {
        Some(DeliveriesCommand::Retry { id }) => {
            outbox::retry(store, ws, id, now()).await?;
            println!("delivery {id} is pending again and due now");
            return Ok(ExitCode::SUCCESS);
        }
        Some(DeliveriesCommand::Prune { older_than }) => {
            let before = rowfire::store::earlier(now(), older_than);
            let n = rowfire::send::queue::prune(store, ws, before).await?;
            println!(
                "pruned {n} finished deliveries created before {before}; pending deliveries and the ledger are kept"
            );
            return Ok(ExitCode::SUCCESS);
        }
        Some(DeliveriesCommand::Show { id }) => return show(store, ws, id).await,
        None => Filter {
            rule,
            status,
            id: None,
            limit: Some(limit),
            after: None,
        },
    };
    let mut tx = store.begin(ws).await?;
    let found = outbox::list(&mut tx, ws, &filter).await?;
    tx.rollback().await?;
    let rule_w = found.iter().map(|d| d.rule.chars().count()).max();
    let action_w = found.iter().map(|d| d.action.chars().count()).max();
    let (rule_w, action_w) = (rule_w.unwrap_or(0), action_w.unwrap_or(0));
    for d in &found {
        let reason = d
            .reason
            .as_deref()
            .map(|r| format!("  ({r})"))
            .unwrap_or_default();
        println!(
            "#{:<7} {:<10} {:<6} {:<rule_w$} {:<action_w$} {}{reason}",
            d.id,
            d.status,
            d.mode,
            d.rule,
            d.action,
            d.recipient.as_deref().unwrap_or("-")
        );
    }
    if found.is_empty() {
        println!("no deliveries match");
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire deliveries show ID`: the recorded request (never credentials) and every attempt.
async fn show(store: &Store, ws: &WorkspaceId, id: i64) -> Result<ExitCode> {
    let filter = Filter {
        id: Some(id),
        ..Default::default()
    };
    let mut tx = store.begin(ws).await?;
    let found = outbox::list(&mut tx, ws, &filter).await?;
    tx.rollback().await?;
    let Some(d) = found.first() else {
        bail!("there is no delivery {id}")
    };
    println!(
        "delivery {}  (fire {}, rule {}, {})",
        d.id, d.fire_id, d.rule, d.mode
    );
    println!("  action     {}", d.action);
    println!("  recipient  {}", d.recipient.as_deref().unwrap_or("-"));
    let reason = d
        .reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    println!("  status     {}{reason}", d.status);
    println!("  due        {}", d.due_at);
    if let Some(sent) = d.sent_at {
        println!("  sent       {sent}");
    }
    match &d.request {
        Some((method, url)) => println!("  request    {method} {url}"),
        None => println!("  request    (not rendered)"),
    }
    if let Some(h) = d.headers.as_deref().filter(|h| *h != "{}") {
        println!("  headers    {h}  (authentication is added when sending, never stored)");
    }
    let body = d
        .body
        .as_deref()
        .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok());
    if let Some(b) = body {
        println!("  body\n{}", serde_json::to_string_pretty(&b)?);
    }
    let attempts = queue::attempts(store, ws, id).await?;
    println!("  attempts   {}", attempts.len());
    for (n, a) in attempts.iter().enumerate() {
        let status = a.status_code.map_or("-".to_string(), |s| s.to_string());
        let class = a.error_class.map_or("ok", |c| c.as_str());
        let response: String = a
            .response
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(120)
            .collect();
        println!(
            "    {}. {}  {status:>3}  {class:<11} {:>5} ms  {}",
            n + 1,
            a.started_at,
            a.latency_ms,
            response.replace('\n', " ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `rowfire deliveries` does besides listing.
#[derive(Subcommand)]
pub(crate) enum DeliveriesCommand {
    /// One delivery: its rule, state, reason, recipient, recorded request and every attempt.
    ///
    /// Example: rowfire deliveries show 42
    Show {
        /// The delivery's id.
        id: i64,
    },
    /// Re-queue a failed or dead delivery, due now, with the same id (its idempotency key).
    ///
    /// Example: rowfire deliveries retry 42
    Retry {
        /// The delivery's id.
        id: i64,
    },
    /// Delete finished deliveries older than an age; pending ones and the ledger are kept.
    ///
    /// Example: rowfire deliveries prune --older-than 30d
    Prune {
        /// Age such as 30d, 12h or 90m.
        #[arg(long, value_parser = super::commands::parse_age)]
        older_than: SignedDuration,
    },
}
