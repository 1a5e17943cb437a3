//! `rowfire worker`: the library's [`Worker`] with the command line's options, printing each
//! poll's report; `--once` polls and sends what is due and exits, saying what happened.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use std::sync::Arc;

use rowfire::config::Config;
use rowfire::http::AppState;
use rowfire::metrics::Metrics;
use rowfire::poll;
use rowfire::store::{Store, WorkspaceId};
use rowfire::worker::{Worker, WorkerConfig};

use super::open_and_migrate;

/// How a worker process runs.
pub(crate) struct WorkerOptions {
    pub once: bool,
    pub due_now: bool,
    pub concurrency: usize,
    pub poll_only: bool,
    pub delivery_lease: SignedDuration,
    pub trigger_lease: SignedDuration,
    pub metrics: Option<std::net::SocketAddr>,
    pub count_clocks_every: SignedDuration,
}

/// `rowfire worker`: runs until ctrl-c or SIGTERM, or with `--once` polls and sends once.
pub(crate) async fn worker(config: &Config, opts: WorkerOptions) -> Result<ExitCode> {
    let store = open_and_migrate(config).await?;
    let metrics = Arc::new(Metrics::default());
    if let Some(listen) = opts.metrics {
        let (listener, url) = super::serve::bind(listen, false).await?;
        let state = AppState::new(
            store.clone(),
            Clock::system(),
            config,
            config.workspace()?.clone(),
            listener.local_addr()?,
            metrics.clone(),
        );
        eprintln!("metrics at {url}metrics");
        tokio::spawn(rowfire::http::serve_router(
            listener,
            rowfire::http::metrics_router(state),
            std::future::pending(),
        ));
    }
    let worker_config = WorkerConfig {
        metrics: Some(metrics),
        concurrency: opts.concurrency,
        listen: !opts.poll_only,
        delivery_lease: opts.delivery_lease,
        trigger_lease: opts.trigger_lease,
        count_clocks_every: opts.count_clocks_every,
        workspace: config.workspace()?.clone(),
        operators: config
            .operator_workspaces(config.workspace()?)
            .map_err(|e| anyhow!("ROWFIRE_OPERATOR_WORKSPACES: {e}"))?,
        ..WorkerConfig::from_config(config)?
    };
    let worker = Worker::new(store.clone(), Clock::system(), worker_config).await?;
    for warning in worker.warnings().await? {
        eprintln!("warning: {warning}");
    }
    if opts.once {
        return work_once(&store, config.workspace()?, &worker, opts.due_now).await;
    }
    let signalled = shutdown_signal();
    let shutdown = async move {
        signalled.await;
        eprintln!("stopping: finishing the polls and sends in progress");
    };
    let concurrency = opts.concurrency;
    eprintln!(
        "worker running on {} with {concurrency} poller(s) and up to {} requests in flight{}; ctrl-c to stop",
        store.shown(),
        rowfire::send::sender::Config::with_concurrency(concurrency).in_flight,
        if opts.poll_only { ", poll-only" } else { "" }
    );
    match worker.run_until(shutdown, |r| print!("{r}")).await {
        Ok(0) => {}
        Ok(n) => eprintln!("stopping: gave back {n} trigger lease(s)"),
        Err(e) => eprintln!(
            "warning: could not register this worker or give back its leases ({e}); they lapse within their lease"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `worker --once`: polls every due trigger once (every trigger with `due_now`), prints a line
/// per trigger and rule, or says that nothing is due and when each trigger next is, sends what
/// is due, and exits non-zero when a poll failed, after printing everything else.
async fn work_once(
    store: &Store,
    ws: &WorkspaceId,
    worker: &Worker,
    due_now: bool,
) -> Result<ExitCode> {
    let (all, control_plane) = worker.poll_once(due_now).await?;
    for report in &all {
        print!("{report}");
    }
    if all.is_empty() && control_plane.is_none() {
        print_nothing_due(store, ws, worker.clock().now()).await?;
    }
    let sent = worker.send_once().await?;
    if sent.claimed > 0 {
        print!("{sent}");
    }
    if let Some(e) = control_plane {
        return Err(anyhow!(e).context("polling stopped: the control plane failed"));
    }
    let failed: Vec<&str> = all
        .iter()
        .filter(|r| matches!(r.status, poll::PollStatus::Failed(_)))
        .map(|r| r.trigger.as_str())
        .collect();
    if !failed.is_empty() {
        eprintln!(
            "error: the poll of {} failed (see above); its watermark stays and it is retried within 30 seconds",
            failed.join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `worker --once` says when no trigger is due: when each is next due, and how to poll now.
async fn print_nothing_due(store: &Store, ws: &WorkspaceId, now: Timestamp) -> Result<()> {
    let triggers: Vec<poll::TriggerState> = poll::list(store, ws)
        .await?
        .into_iter()
        .filter(|t| t.removed_at.is_none())
        .collect();
    if triggers.is_empty() {
        println!(
            "no trigger is due: none is defined; push a definitions file with `rowfire push -f FILE`"
        );
        return Ok(());
    }
    println!("no trigger is due; next due:");
    let width = triggers.iter().map(|t| t.trigger.len()).max().unwrap_or(0);
    for t in &triggers {
        match &t.problem {
            Some(problem) => println!("  {:<width$}  {problem}", t.trigger),
            None => {
                let wait = SignedDuration::from_secs(now.duration_until(t.next_poll_at).as_secs());
                println!(
                    "  {:<width$}  {} (in {:#})",
                    t.trigger,
                    t.next_poll_at,
                    wait.max(SignedDuration::ZERO)
                );
            }
        }
    }
    println!(
        "to poll every trigger now: `rowfire worker --once --due-now`; to re-read past days: `rowfire rewind TRIGGER --days N`"
    );
    Ok(())
}

/// Resolves on ctrl-c or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled, so a signal that arrives right after "worker running" is printed
/// stops the worker cleanly instead of killing it.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
