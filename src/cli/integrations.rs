//! `rowfire integrations`: list, catalogue, add, set a credential, enable, disable, test.
//! Credential values are read from the environment or standard input, never from the command
//! line, and are never printed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use rowfire::config::Config;
use rowfire::definitions::Definitions;
use rowfire::definitions::catalog;
use rowfire::integrations;
use rowfire::operator;
use rowfire::operator::integrations::NewIntegration;
use rowfire::send::client::Client;
use rowfire::send::outcome::{AttemptResult, Verdict};
use rowfire::store::{Store, WorkspaceId};

use super::commands::IntegrationsCommand;
use super::{now, open_workspace};

/// `rowfire integrations …`.
pub(crate) async fn run(config: &Config, command: Option<IntegrationsCommand>) -> Result<ExitCode> {
    let (store, ws) = &open_workspace(config).await?;
    match command.unwrap_or(IntegrationsCommand::List) {
        IntegrationsCommand::List => list(store, ws).await,
        IntegrationsCommand::Catalog => Ok(catalog()),
        IntegrationsCommand::Add {
            name,
            catalog,
            from,
            base_url,
        } => {
            let (entry, url) = (catalog.as_deref(), base_url.as_deref());
            add(store, ws, &name, entry, url, from.as_deref()).await
        }
        IntegrationsCommand::SetCredential {
            name,
            credential,
            from_env,
        } => set_credential(config, store, ws, &name, &credential, from_env.as_deref()).await,
        IntegrationsCommand::Enable { name } => enable(store, ws, &name).await,
        IntegrationsCommand::Disable { name, reason } => {
            disable(store, ws, &name, &reason.join(" ")).await
        }
        IntegrationsCommand::Test {
            name,
            action,
            row,
            params,
            recipient,
        } => test(config, store, ws, &name, &action, &row, &params, recipient).await,
    }
}

/// The definitions in force, or an error saying nothing was pushed.
pub(crate) async fn in_force(store: &Store, ws: &WorkspaceId) -> Result<(i64, Definitions)> {
    Ok(operator::in_force(store, ws).await?)
}

/// `rowfire integrations list`: each integration in force, its auth, credentials and state.
pub(crate) async fn list(store: &Store, ws: &WorkspaceId) -> Result<ExitCode> {
    let shown = operator::integrations::list(store, ws, now()).await?;
    if shown.is_empty() {
        println!("no integrations; add one with `rowfire integrations add NAME --catalog slack`");
    }
    for i in &shown {
        let creds: Vec<String> = i
            .credentials
            .iter()
            .map(|c| format!("{} {}", c.name, if c.set { "set" } else { "MISSING" }))
            .collect();
        let state = match (i.state.as_str(), &i.state_note) {
            ("disabled", note) => format!(
                "DISABLED ({}); `rowfire integrations enable {}`",
                note.as_deref().unwrap_or("no reason"),
                i.name
            ),
            ("paused", Some(note)) => note.clone(),
            _ => "enabled".into(),
        };
        let actions: Vec<&str> = i.actions.iter().map(|a| a.name.as_str()).collect();
        println!("{}  ({})  {}", i.name, i.entry, i.base_url);
        println!("  actions      {}", actions.join(", "));
        println!(
            "  credentials  {}",
            if creds.is_empty() {
                "none needed".to_string()
            } else {
                creds.join(", ")
            }
        );
        println!("  state        {state}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations catalog`: the built-in entries.
pub(crate) fn catalog() -> ExitCode {
    for entry in catalog::all() {
        let creds = entry.credentials();
        println!("{}  {}", entry.name, entry.description);
        for (name, action) in &entry.actions {
            println!("  {name}: {}", action.description);
        }
        if !creds.is_empty() {
            println!("  credentials: {}", creds.join(", "));
        }
    }
    ExitCode::SUCCESS
}

/// `rowfire integrations add`: a new definitions version with the integration added.
pub(crate) async fn add(
    store: &Store,
    ws: &WorkspaceId,
    name: &str,
    from_catalog: Option<&str>,
    base_url: Option<&str>,
    from_file: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let text;
    let from = match (from_catalog, from_file) {
        (Some(entry), None) => NewIntegration::Catalog(entry),
        (None, Some(file)) => {
            text = rowfire::definitions::read_file(file).map_err(|e| anyhow!(e.to_string()))?;
            NewIntegration::Custom(&text)
        }
        _ => bail!(
            "give either --catalog ENTRY or --from FILE (a custom integration: base_url, auth, actions)"
        ),
    };
    let added = operator::integrations::add(store, ws, name, from, base_url, now()).await?;
    super::definitions::print_push(&added.push);
    for c in added.needs {
        println!("set its {c}: rowfire integrations set-credential {name} {c} --from-env VAR");
    }
    println!("`rowfire pull` prints the document with it; keep your file in step.");
    Ok(ExitCode::SUCCESS)
}

/// Reads a secret's value from `env` or, without it, from standard input (one line).
pub(crate) fn secret_value(env: Option<&str>) -> Result<String> {
    #[expect(
        clippy::disallowed_methods,
        reason = "--from-env names the variable that holds the secret: data, not a setting"
    )]
    let value = match env {
        Some(var) => {
            std::env::var(var).map_err(|_| anyhow!("the environment variable {var} is not set"))?
        }
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the value from standard input")?;
            text
        }
    };
    let value = value.trim_end_matches(['\r', '\n']).to_string();
    if value.is_empty() {
        bail!("the value is empty; give it with --from-env VAR or on standard input");
    }
    Ok(value)
}

/// `rowfire integrations set-credential`.
pub(crate) async fn set_credential(
    config: &Config,
    store: &Store,
    ws: &WorkspaceId,
    name: &str,
    credential: &str,
    from_env: Option<&str>,
) -> Result<ExitCode> {
    // The name and credential are checked before a value is read or the key is needed.
    let (_, defs) = in_force(store, ws).await?;
    operator::integrations::check_credential(&defs, name, credential)?;
    let key = config.master_key.clone()?;
    let value = secret_value(from_env)?;
    operator::integrations::set_credential(store, &key, ws, name, credential, &value, now())
        .await?;
    println!(
        "stored {name}'s {credential} (encrypted under master key {})",
        key.id()
    );
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations disable`.
pub(crate) async fn disable(
    store: &Store,
    ws: &WorkspaceId,
    name: &str,
    reason: &str,
) -> Result<ExitCode> {
    let (_, defs) = in_force(store, ws).await?;
    if defs.integration(name).is_none() {
        bail!("there is no integration {name}; `rowfire integrations list` shows them");
    }
    let reason = if reason.trim().is_empty() {
        "disabled by hand".to_string()
    } else {
        format!("disabled by hand: {reason}")
    };
    integrations::disable(store, ws, name, &reason, now()).await?;
    println!("{name} is disabled; its deliveries wait until `rowfire integrations enable {name}`");
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations enable`.
pub(crate) async fn enable(store: &Store, ws: &WorkspaceId, name: &str) -> Result<ExitCode> {
    if integrations::enable(store, ws, name).await? {
        println!("{name} is enabled; its waiting deliveries go now");
    } else {
        println!("{name} was not disabled");
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations test`: renders one action against a sample row and sends it once.
#[expect(
    clippy::too_many_arguments,
    reason = "the control plane and workspace, then one argument per flag of the command"
)]
pub(crate) async fn test(
    config: &Config,
    store: &Store,
    ws: &WorkspaceId,
    name: &str,
    action: &str,
    row: &str,
    params: &[String],
    recipient: Option<String>,
) -> Result<ExitCode> {
    let row: serde_json::Value =
        serde_json::from_str(row).context("--row must be a JSON object, such as '{\"id\": 1}'")?;
    let mut given = BTreeMap::new();
    for p in params {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| anyhow!("--param takes NAME=TEMPLATE, not {p}"))?;
        given.insert(k.to_string(), serde_json::Value::String(v.to_string()));
    }
    let key = config.master_key.clone().ok();
    let client = Client::new(config.egress.clone().map_err(|e| anyhow!(e))?);
    let tried = operator::integrations::test(
        store,
        key.as_ref(),
        ws,
        name,
        action,
        &row,
        given,
        recipient,
        &client,
        now(),
    )
    .await?;
    let timeout_ms = in_force(store, ws)
        .await?
        .1
        .integration(name)
        .map_or(0, |i| i.spec.timeout_ms);
    println!("{} {}", tried.request.method, tried.request.url);
    println!("{}", serde_json::to_string_pretty(&tried.request.body)?);
    let Some((result, took, verdict)) = tried.sent else {
        println!("(the Demo inbox: nothing leaves the machine)");
        return Ok(ExitCode::SUCCESS);
    };
    match result {
        AttemptResult::Response { status, body, .. } => {
            println!("→ {status} in {} ms", took.as_millis());
            println!("{}", body.chars().take(500).collect::<String>());
            if verdict == Verdict::Sent {
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("as a delivery this would be: {verdict:?}");
            Ok(ExitCode::FAILURE)
        }
        AttemptResult::Timeout => bail!("timed out after {timeout_ms} ms"),
        AttemptResult::Network(e) => bail!("network error: {e}"),
        AttemptResult::Refused(e) => bail!("refused by the egress check: {e}"),
        AttemptResult::Invalid(e) => bail!("the request cannot be sent as rendered: {e}"),
    }
}
