//! `rowfire sources`: where each source's DSN comes from, and storing one encrypted.

use std::process::ExitCode;

use anyhow::{Result, bail};
use rowfire::config::Config;
use rowfire::secret;
use rowfire::store::{Store, WorkspaceId};

use super::commands::SourcesCommand;
use super::integrations::{in_force, secret_value};
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
    let (_, defs) = in_force(store, ws).await?;
    let files = secret::file_urls(store, ws).await?;
    for s in &defs.sources {
        let stored = secret::names(store, ws, &source_owner(&s.name))
            .await?
            .iter()
            .any(|n| n == "dsn");
        #[expect(
            clippy::disallowed_methods,
            reason = "a definitions file's dsn_env is data: the variable it names holds a source's DSN"
        )]
        let from = if stored {
            "stored DSN (encrypted)".to_string()
        } else if files.contains_key(&s.name) {
            "stored SQLite file URL (no credential, not encrypted)".to_string()
        } else if !s.declared {
            format!(
                "not declared in the definitions and NOT STORED; `rowfire sources add {} --url-env VAR`",
                s.name
            )
        } else if std::env::var(&s.dsn_env).is_ok_and(|v| !v.is_empty()) {
            format!("${} (set)", s.dsn_env)
        } else {
            format!(
                "${} (NOT SET; or `rowfire sources add {} --url-env VAR`)",
                s.dsn_env, s.name
            )
        };
        println!("{}  {from}", s.name);
    }
    Ok(ExitCode::SUCCESS)
}

fn source_owner(name: &str) -> String {
    format!("source:{name}")
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
    let Some(dialect) = rowfire::source::dialect_of(&dsn) else {
        bail!("{url_env} does not hold a postgres://, mysql:// or sqlite: URL");
    };
    let key = match config.master_key.clone() {
        Ok(key) => key,
        Err(rowfire::secret::SecretError::MissingMasterKey)
            if dialect == rowfire::sql_guard::Dialect::Sqlite =>
        {
            secret::put_file_url(store, ws, name, &dsn, now()).await?;
            println!(
                "stored source {name}'s SQLite file URL (a path, no credential: not encrypted); workers read it at start"
            );
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    secret::put(store, &key, ws, &source_owner(name), "dsn", &dsn, now()).await?;
    println!(
        "stored source {name}'s DSN (encrypted under master key {}); workers read it at start",
        key.id()
    );
    Ok(ExitCode::SUCCESS)
}
