//! `rowfire workspaces`: create, list, rename and delete workspaces (tenants). One worker serves
//! them all; `--workspace NAME` (or `ROWFIRE_WORKSPACE`) picks the one a command works in.

use std::io::{BufRead as _, Read as _};
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Subcommand;
use rowfire::config::Config;
use rowfire::store::{Engine, MAX_WORKSPACE_ID, WorkspaceId, workspace};

use rowfire::push;

use super::definitions::print_push;
use super::{now, open_store, width};

/// What `rowfire workspaces` does.
#[derive(Subcommand)]
pub(crate) enum WorkspacesCommand {
    /// List the workspaces (the default when no subcommand is given).
    ///
    /// Example: rowfire workspaces list
    List,
    /// Create a workspace.
    ///
    /// Example: rowfire workspaces create acme --name "Acme Inc" --timezone Europe/Berlin
    Create {
        /// Its id: 1 to 64 lower-case letters, digits, '-' or '_'.
        #[arg(value_parser = parse_workspace)]
        id: WorkspaceId,
        /// Its display name (default: the id).
        #[arg(long)]
        name: Option<String>,
        /// The IANA time zone its rules' periods default to.
        #[arg(long, default_value = "UTC")]
        timezone: String,
    },
    /// Rename a workspace, or change its default time zone (its definitions are then read in the
    /// new zone, and rules whose periods move go back to shadow).
    ///
    /// Example: rowfire workspaces rename acme "Acme GmbH" --timezone Europe/Berlin
    #[command(arg_required_else_help = true)]
    Rename {
        /// The workspace.
        #[arg(value_parser = parse_workspace)]
        id: WorkspaceId,
        /// Its new display name (default: unchanged).
        #[arg(required_unless_present = "timezone")]
        name: Option<String>,
        /// A new default time zone for rules that name none.
        #[arg(long)]
        timezone: Option<String>,
    },
    /// Delete a workspace and everything in it (definitions, state, ledger, deliveries,
    /// credentials). Asks for the id to be typed again unless --yes is given.
    ///
    /// Example: rowfire workspaces delete acme --yes
    Delete {
        /// The workspace.
        #[arg(value_parser = parse_workspace)]
        id: WorkspaceId,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
}

/// A workspace id as typed on the command line.
pub(crate) fn parse_workspace(s: &str) -> Result<WorkspaceId, String> {
    WorkspaceId::parse(s).map_err(|e| e.to_string())
}

/// `rowfire workspaces …`.
pub(crate) async fn run(config: &Config, command: Option<WorkspacesCommand>) -> Result<ExitCode> {
    let store = open_store(config).await?;
    match command.unwrap_or(WorkspacesCommand::List) {
        WorkspacesCommand::List => {
            let all = workspace::list(&store).await?;
            let w = width(all.iter().map(|ws| ws.id.as_str()));
            for ws in &all {
                let halted = ws
                    .halted
                    .as_ref()
                    .map_or(String::new(), |(reason, _)| format!("  HALTED: {reason}"));
                println!(
                    "{:<w$}  {}  (time zone {}){halted}",
                    ws.id, ws.name, ws.timezone
                );
            }
            if store.engine() == Engine::Sqlite && all.len() > 1 {
                println!(
                    "note: on SQLite, workspaces are kept apart by Rowfire itself; isolation enforced by the database (row-level security) needs a PostgreSQL control plane"
                );
            }
        }
        WorkspacesCommand::Create { id, name, timezone } => {
            let name = name.unwrap_or_else(|| id.to_string());
            workspace::create(&store, &id, &name, &timezone).await?;
            println!(
                "workspace {id} created (time zone {timezone}); work in it with --workspace {id} or ROWFIRE_WORKSPACE={id}"
            );
        }
        WorkspacesCommand::Rename { id, name, timezone } => {
            if let Some(name) = name {
                workspace::rename(&store, &id, &name).await?;
                println!("workspace {id} is now \"{name}\"");
            }
            if let Some(zone) = timezone {
                let summary = push::set_zone(&store, &id, &zone, now()).await?;
                println!(
                    "its time zone is now {zone}: rules that name none count their days, weeks and months in it"
                );
                if let Some(summary) = summary {
                    print_push(&summary);
                }
            }
        }
        WorkspacesCommand::Delete { id, yes } => {
            if !yes {
                eprintln!(
                    "This deletes workspace {id} and everything in it: definitions, state, the ledger, deliveries and credentials. Type its id to confirm:"
                );
                // One short line is all a confirmation needs; a flood on stdin is not read.
                let mut typed = String::new();
                std::io::stdin()
                    .lock()
                    .take(u64::try_from(MAX_WORKSPACE_ID).unwrap_or(64) + 2)
                    .read_line(&mut typed)?;
                if typed.trim() != id.as_str() {
                    bail!("not confirmed; nothing was deleted (pass --yes to skip the question)");
                }
            }
            let rows = workspace::delete(&store, &id).await?;
            println!("workspace {id} deleted ({rows} rows)");
        }
    }
    Ok(ExitCode::SUCCESS)
}
