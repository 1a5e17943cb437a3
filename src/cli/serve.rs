//! `rowfire serve` (the UI, the API and `/metrics`, with the worker beside them on
//! `--with-worker`) and `rowfire tokens` (the API tokens that let a caller act in a workspace).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::http::{self, AppState};
use rowfire::metrics::Metrics;
use rowfire::token;
use rowfire::worker::{Worker, WorkerConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{now, open_and_migrate, open_workspace, width};

/// What `rowfire tokens` does.
#[derive(Subcommand)]
pub(crate) enum TokensCommand {
    /// Create a token for the workspace and print it once (only its hash is stored).
    ///
    /// Example: rowfire tokens create ci-bot
    Create {
        /// What the token is for (1 to 100 characters).
        name: String,
    },
    /// The workspace's tokens: id, name, when created and last used, whether revoked.
    ///
    /// Example: rowfire tokens list
    List,
    /// Revoke a token by its id: the next request carrying it is refused.
    ///
    /// Example: rowfire tokens revoke 3f9a0c12b7de
    Revoke {
        /// The token's id (the 12 hex digits after `rft_`).
        id: String,
    },
}

/// `rowfire tokens …`.
pub(crate) async fn tokens(config: &Config, command: TokensCommand) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    match command {
        TokensCommand::Create { name } => {
            let (made, text) = token::create(&store, &ws, &name, now()).await?;
            println!(
                "created token {} ({}) for workspace {ws}:",
                made.id, made.name
            );
            println!("  {text}");
            println!(
                "It is shown only now. Send it as `Authorization: Bearer …`, or paste it at /login."
            );
        }
        TokensCommand::List => {
            let all = token::list(&store, &ws).await?;
            if all.is_empty() {
                println!(
                    "no tokens in workspace {ws}; create one with `rowfire tokens create NAME`"
                );
            }
            let w = width(all.iter().map(|t| t.name.as_str()));
            for t in all {
                let used = t
                    .last_used_at
                    .map_or("never used".to_string(), |at| format!("last used {at}"));
                let state = t
                    .revoked_at
                    .map_or(String::new(), |at| format!(", revoked {at}"));
                println!(
                    "{}  {:<w$}  created {}, {used}{state}",
                    t.id, t.name, t.created_at
                );
            }
        }
        TokensCommand::Revoke { id } => {
            token::revoke(&store, &ws, &id, now()).await?;
            println!("revoked token {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire serve`: the server until ctrl-c or SIGTERM, and the worker beside it on
/// `with_worker`.
pub(crate) async fn serve(
    config: &Config,
    listen: SocketAddr,
    with_worker: bool,
) -> Result<ExitCode> {
    let store = open_and_migrate(config).await?;
    let ws = config.workspace()?.clone();
    // Which workspaces are the operator's decides what their sources may reach: a list that
    // cannot be read stops the server rather than quietly meaning "none".
    config
        .operator_workspaces(&ws)
        .map_err(|e| anyhow::anyhow!("ROWFIRE_OPERATOR_WORKSPACES: {e}"))?;
    let clock = Clock::system();
    if !listen.ip().is_loopback() && token::list(&store, &ws).await?.is_empty() {
        eprintln!(
            "warning: listening on {listen}, beyond loopback: every request needs a token, and workspace {ws} has none yet; create one with `rowfire tokens create NAME`"
        );
    }
    let metrics = Arc::new(Metrics::default());
    let worker = if with_worker {
        let worker_config = WorkerConfig {
            workspace: ws.clone(),
            operators: config.operator_workspaces(&ws)?,
            metrics: Some(metrics.clone()),
            ..WorkerConfig::from_config(config)?
        };
        Some(Worker::new(store.clone(), clock.clone(), worker_config).await?)
    } else {
        None
    };
    let (listener, url) = bind(listen, false).await?;
    let state = AppState::new(
        store.clone(),
        clock,
        config,
        ws,
        listener.local_addr()?,
        metrics,
    );
    println!("Rowfire is serving {url}  (ctrl-c stops it)");
    let stop = stop_on_signal();
    let ending = state.stop_when(until(stop.clone()));
    let server = http::serve_router(listener, rowfire::ui::app(state), ending);
    match worker {
        Some(worker) => {
            println!("The worker runs beside it.");
            let (served, worked) =
                tokio::join!(server, worker.run_until(until(stop), |r| print!("{r}")));
            served?;
            if let Err(e) = worked {
                eprintln!("warning: the worker stopped with an error: {e}");
            }
        }
        None => server.await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Binds `listen` and returns the listener and the URL to open. With `or_any_port`, a port in
/// use is replaced by one the system picks (the demo must start, whatever else runs).
pub(crate) async fn bind(listen: SocketAddr, or_any_port: bool) -> Result<(TcpListener, String)> {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) if or_any_port && e.kind() == std::io::ErrorKind::AddrInUse => {
            TcpListener::bind(SocketAddr::new(listen.ip(), 0)).await?
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("could not listen on {listen}; is another server using it? pick another address with --listen")
            });
        }
    };
    let url = format!("http://{}/", shown_authority(listener.local_addr()?));
    Ok((listener, url))
}

/// A switch that turns on at ctrl-c or SIGTERM.
pub(crate) fn stop_on_signal() -> watch::Receiver<bool> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let signalled = super::worker::shutdown_signal();
    tokio::spawn(async move {
        signalled.await;
        eprintln!("stopping: finishing the requests, polls and sends in progress");
        let _ = stop_tx.send(true);
    });
    stop_rx
}

/// Resolves when `stop` turns on (or its sender is gone).
pub(crate) async fn until(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// `127.0.0.1:8000`, or `localhost:8000` for an unspecified address (0.0.0.0 is not a place a
/// browser can go).
fn shown_authority(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("localhost:{}", addr.port())
    } else {
        addr.to_string()
    }
}

/// Parses `--listen`.
pub(crate) fn parse_listen(text: &str) -> Result<SocketAddr> {
    match text.parse::<SocketAddr>() {
        Ok(addr) => Ok(addr),
        Err(_) => bail!("\"{text}\" is not an address to listen on; write it as 127.0.0.1:8000"),
    }
}
