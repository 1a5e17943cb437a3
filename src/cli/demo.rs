//! `rowfire demo` and `rowfire fixture`: the first run, and the sample database it reads.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::Arc;

use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::http::AppState;
use rowfire::metrics::Metrics;
use rowfire::store::{DEFAULT_WORKSPACE, Store};
use rowfire::{demo, fixture};

use super::commands::FixtureCommand;
use super::now;

/// `rowfire demo`: the sample database and definitions, a backtest headline per rule, one poll
/// into the Demo inbox, the next commands; then the worker until ctrl-c (unless `once`).
pub(crate) async fn demo(
    config: &Config,
    dir: &Path,
    clock: Clock,
    once: bool,
    listen: SocketAddr,
) -> Result<ExitCode> {
    let now = clock.now();
    let made = demo::run(dir, now)
        .await
        .context("the demo could not run")?;
    println!("Sample database: {}", made.sample_url);
    println!("Sample definitions: {}", made.definitions.display());
    println!();
    println!(
        "What each sample rule would have done over the last {} days:",
        demo::DEMO_DAYS
    );
    for report in &made.reports {
        println!("  {}", report.headline());
    }
    println!();
    println!(
        "Control plane: {} (every rule live; its only destination is the Demo inbox)",
        made.control_plane_url
    );
    println!(
        "The worker polls the same {} days into the ledger:",
        demo::DEMO_DAYS
    );
    let metrics = Arc::new(Metrics::default());
    let poller = made.poller(clock.clone()).with_metrics(metrics.clone());
    for report in poller.poll_due().await? {
        print!("{report}");
    }
    print_inbox(&made.store).await?;
    println!();
    let rowfire = demo::invocation();
    println!(
        "Look closer: type these into a shell, one after another (the worker finds the sample by itself):"
    );
    for step in made.next_steps(&rowfire.command, now) {
        println!("  $ {step}");
    }
    if let Some(hint) = &rowfire.install_hint {
        println!("({hint})");
    }
    if once {
        return Ok(ExitCode::SUCCESS);
    }
    println!();
    println!("The worker keeps running; add activity from another terminal with:");
    println!(
        "  $ {} fixture simulate --into {}",
        rowfire.command,
        demo::shell_word(&made.sample_url)
    );
    println!(
        "It books, moves and cancels meetings too; `{} schedule` then shows the reminders queued, moved and cancelled.",
        rowfire.command
    );
    let (listener, url) = super::serve::bind(listen, true).await?;
    let state = AppState::new(
        made.store.clone(),
        clock.clone(),
        config,
        DEFAULT_WORKSPACE.clone(),
        listener.local_addr()?,
        metrics.clone(),
    );
    println!();
    println!("Open {url} to watch it: Activity fills in as the worker polls. ctrl-c stops it.");
    let stop = super::serve::stop_on_signal();
    let ending = state.stop_when(super::serve::until(stop.clone()));
    let server = rowfire::http::serve_router(listener, rowfire::ui::app(state), ending);
    // The poller sweeps the reminders into the queue; the sender delivers them when due.
    let sender = made.sender(clock.clone()).with_metrics(metrics);
    let sending = sender.run_until(stop.clone());
    let polling = poller.run_until(stop, |r| {
        let swept = r.sweeps.iter().any(|(_, s)| {
            s.as_ref().map_or(true, |s| {
                s.queued + s.moved + s.reinstated + s.cancelled_moved + s.cancelled_gone > 0
            })
        });
        if r.fired > 0 || swept {
            print!("{r}")
        }
    });
    let (served, _, _) = tokio::join!(server, sending, polling);
    served?;
    Ok(ExitCode::SUCCESS)
}

/// The Demo inbox: how many messages it holds and the latest three.
pub(crate) async fn print_inbox(store: &Store) -> Result<()> {
    let mut tx = store.begin(DEFAULT_WORKSPACE).await?;
    let latest = rowfire::outbox::inbox(&mut tx, DEFAULT_WORKSPACE, 3).await?;
    let deliveries = rowfire::outbox::list(&mut tx, DEFAULT_WORKSPACE, &Default::default()).await?;
    tx.rollback().await?;
    let sent = deliveries
        .iter()
        .filter(|d| d.status == rowfire::outbox::DeliveryStatus::Sent)
        .count();
    println!("Demo inbox: {sent} message(s) delivered. The latest:");
    for (action, recipient, body) in latest {
        println!("  {action} to {}: {body}", recipient.unwrap_or_default());
    }
    Ok(())
}

/// `rowfire fixture load` and `fixture simulate`.
pub(crate) async fn fixture(command: FixtureCommand) -> Result<ExitCode> {
    match command {
        FixtureCommand::Simulate { into, rows } => {
            let added = fixture::simulate(&into, now(), rows).await?;
            println!(
                "added fresh activity ({added} statements: declined payments, a detractor, and a meeting moved, one cancelled and one booked); a running worker fires on them and sweeps the reminders at its next poll"
            );
        }
        FixtureCommand::Load { into, now } => {
            let data = fixture::load(&into, Clock::from_option(now).now()).await?;
            let counts: Vec<String> = data
                .tables
                .iter()
                .map(|t| format!("{} {}", t.rows.len(), t.name))
                .collect();
            println!(
                "sample data placed relative to {}: {}",
                data.now,
                counts.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
