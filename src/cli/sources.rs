//! `rowfire sources`: where each source's DSN comes from, and storing one encrypted. The work is
//! the library's [`rowfire::operator::sources`]; this prints it.

use std::process::ExitCode;

use anyhow::Result;
use rowfire::config::Config;
use rowfire::operator::sources::{self, Stored};
use rowfire::store::{Store, WorkspaceId};

use super::commands::SourcesCommand;
use super::integrations::secret_value;
use super::{now, open_workspace};

/// `rowfire sources …`.
pub(crate) async fn run(config: &Config, command: Option<SourcesCommand>) -> Result<ExitCode> {
    let (store, ws) = &open_workspace(config).await?;
    match command.unwrap_or(SourcesCommand::List) {
        SourcesCommand::List => list(store, ws).await,
        SourcesCommand::Add { name, url_env } => add(config, store, ws, &name, &url_env).await,
    }
}

/// `rowfire sources`: each source in force and where its DSN comes from.
async fn list(store: &Store, ws: &WorkspaceId) -> Result<ExitCode> {
    for s in sources::list(store, ws, sources::Reach::Operator).await? {
        println!("{}  {}", s.name, s.note);
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire sources add NAME --url-env VAR`: stores a source's DSN encrypted.
/// Without a master key, a SQLite file's URL (no credential) is stored as it is.
async fn add(
    config: &Config,
    store: &Store,
    ws: &WorkspaceId,
    name: &str,
    url_env: &str,
) -> Result<ExitCode> {
    let dsn = secret_value(Some(url_env))?;
    if rowfire::source::dialect_of(&dsn).is_none() {
        anyhow::bail!("{url_env} does not hold a postgres://, mysql:// or sqlite: URL");
    }
    match sources::add(
        store,
        &config.master_key,
        ws,
        name,
        &dsn,
        now(),
        sources::Reach::Operator,
    )
    .await?
    {
        Stored::FileUrl => println!(
            "stored source {name}'s SQLite file URL (a path, no credential: not encrypted); running workers read it within a minute"
        ),
        Stored::Sealed { key_id } => println!(
            "stored source {name}'s DSN (encrypted under master key {key_id}); running workers read it within a minute"
        ),
    }
    Ok(ExitCode::SUCCESS)
}
