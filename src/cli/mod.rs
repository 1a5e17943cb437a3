//! The commands behind `main.rs`, one file per thing they serve: `definitions` (validate,
//! explain, backtest, push, pull, list, promote, demote, why), `workspace` (migrate, status,
//! halt, resume, rewind, keygen), `workspaces` (create, list, rename, delete), `worker`,
//! `deliveries`, `schedule`, `integrations`, `sources`, `init` (a draft from a source's
//! catalogue) and `demo` (with the sample database). A command
//! works in one workspace (`open_workspace`: `--workspace`, else `ROWFIRE_WORKSPACE`). They call the library and print what it returns; `commands`
//! holds the arguments and their bounds, `out` the one way to standard output, `logs` where
//! logs go (standard error, text or JSON). Binary only.

use anyhow::Result;
use jiff::Timestamp;
use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::store::{Store, WorkspaceId};

pub(crate) mod commands;
pub(crate) mod definitions;
pub(crate) mod deliveries;
pub(crate) mod demo;
pub(crate) mod init;
pub(crate) mod integrations;
pub(crate) mod logs;
pub(crate) mod out;
pub(crate) mod schedule;
pub(crate) mod serve;
pub(crate) mod sources;
pub(crate) mod worker;
pub(crate) mod workspace;
pub(crate) mod workspaces;

/// What commands that need definitions say when nothing has been pushed.
pub(crate) const NOTHING_PUSHED: &str =
    "nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`";

/// Opens the control plane the environment names and checks that its tables are current.
pub(crate) async fn open_store(config: &Config) -> Result<Store> {
    let store = Store::open(&config.database_url).await?;
    store.check_migrated().await?;
    Ok(store)
}

/// Opens the control plane and the workspace the command works in (`--workspace`, else
/// `ROWFIRE_WORKSPACE`, else the default one), which must exist.
pub(crate) async fn open_workspace(config: &Config) -> Result<(Store, WorkspaceId)> {
    let store = open_store(config).await?;
    let ws = config.workspace()?.clone();
    rowfire::store::workspace::get(&store, &ws).await?;
    Ok((store, ws))
}

/// Opens the control plane the environment names, creating or upgrading its tables.
pub(crate) async fn open_and_migrate(config: &Config) -> Result<Store> {
    let store = Store::open(&config.database_url).await?;
    store.migrate().await?;
    Ok(store)
}

/// Now, on the one clock.
pub(crate) fn now() -> Timestamp {
    Clock::system().now()
}

/// The width of a column: its longest entry, in characters.
pub(crate) fn width<'a>(entries: impl Iterator<Item = &'a str>) -> usize {
    entries.map(|e| e.chars().count()).max().unwrap_or(0)
}
