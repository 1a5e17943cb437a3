//! `rowfire integrations`: list, catalogue, add, set a credential, enable, disable, test.
//! Credential values are read from the environment or standard input, never from the command
//! line, and are never printed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use rowfire::config::Config;
use rowfire::definitions::catalog;
use rowfire::definitions::{Binding, Definitions, versions};
use rowfire::integrations;
use rowfire::secret;
use rowfire::send::client::Client;
use rowfire::send::outcome::{AttemptResult, Verdict};
use rowfire::send::request::try_action;
use rowfire::store::{Store, WorkspaceId};

use super::commands::IntegrationsCommand;
use super::{NOTHING_PUSHED, now, open_workspace};

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
    versions::in_force(store, ws)
        .await?
        .ok_or_else(|| anyhow!("{NOTHING_PUSHED}"))
}

fn action_names(spec: &catalog::Integration) -> String {
    spec.actions.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// `rowfire integrations list`: each integration in force, its auth, credentials and state.
pub(crate) async fn list(store: &Store, ws: &WorkspaceId) -> Result<ExitCode> {
    let (_, defs) = in_force(store, ws).await?;
    let states = integrations::states(store, ws).await?;
    if defs.integrations.is_empty() {
        println!("no integrations; add one with `rowfire integrations add NAME --catalog slack`");
    }
    for i in &defs.integrations {
        let stored = secret::names(store, ws, &secret::integration_owner(&i.name)).await?;
        let creds: Vec<String> = i
            .spec
            .credentials()
            .into_iter()
            .map(|c| {
                let mark = if stored.iter().any(|s| s == c) {
                    "set"
                } else {
                    "MISSING"
                };
                format!("{c} {mark}")
            })
            .collect();
        let state = match states.iter().find(|s| s.name == i.name) {
            Some(s) if s.disabled_at.is_some() => format!(
                "DISABLED ({}); `rowfire integrations enable {}`",
                s.disabled_reason.as_deref().unwrap_or("no reason"),
                i.name
            ),
            Some(s) if s.paused_until.is_some_and(|p| p > now()) => {
                format!("paused until {}", s.paused_until.unwrap())
            }
            _ => "enabled".into(),
        };
        println!("{}  ({})  {}", i.name, i.spec.name, i.spec.base_url);
        println!("  actions      {}", action_names(&i.spec));
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
    let current = versions::get(store, ws, None).await?.ok_or_else(|| {
        anyhow!("nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`")
    })?;
    let entry = match (from_catalog, from_file) {
        (Some(entry), None) => {
            let mut pairs = vec![("catalog", entry)];
            pairs.extend(base_url.map(|u| ("base_url", u)));
            rowfire::definitions::edit::settings(&pairs)
        }
        (None, Some(file)) => {
            let text = rowfire::definitions::read_file(file).map_err(|e| anyhow!(e.to_string()))?;
            match base_url {
                Some(u) => format!(
                    "{text}\n{}",
                    rowfire::definitions::edit::settings(&[("base_url", u)])
                ),
                None => text,
            }
        }
        _ => bail!(
            "give either --catalog ENTRY or --from FILE (a custom integration: base_url, auth, actions)"
        ),
    };
    let text = rowfire::definitions::edit::add_to_document(&current.document, name, &entry)
        .map_err(|e| anyhow!(e))?;
    let summary = rowfire::push::push(store, ws, &text, now()).await?;
    super::definitions::print_push(&summary);
    let defs = rowfire::definitions::parse(&text).map_err(|e| anyhow!(e.to_string()))?;
    let needs = defs
        .integration(name)
        .map(|i| i.spec.credentials())
        .unwrap_or_default();
    for c in needs {
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
    let (_, defs) = in_force(store, ws).await?;
    let Some(i) = defs.integration(name) else {
        bail!("there is no integration {name}; `rowfire integrations list` shows them");
    };
    let known = i.spec.credentials();
    if credential != "signing_secret_previous" && !known.contains(&credential) {
        bail!(
            "{name} does not use a credential named {credential}; it uses: {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    }
    let key = config.master_key.clone()?;
    let value = secret_value(from_env)?;
    if credential.starts_with("signing_secret") {
        rowfire::send::webhook::parse_secret(&value)?;
    }
    secret::put(
        store,
        &key,
        ws,
        &secret::integration_owner(name),
        credential,
        &value,
        now(),
    )
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
    let (_, defs) = in_force(store, ws).await?;
    let Some(i) = defs.integration(name) else {
        bail!("there is no integration {name}; `rowfire integrations list` shows them");
    };
    if !i.spec.actions.contains_key(action) {
        bail!(
            "{name} has no action {action}; it has: {}",
            action_names(&i.spec)
        );
    }
    let row: serde_json::Value =
        serde_json::from_str(row).context("--row must be a JSON object, such as '{\"id\": 1}'")?;
    let mut given = BTreeMap::new();
    for p in params {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| anyhow!("--param takes NAME=TEMPLATE, not {p}"))?;
        given.insert(k.to_string(), serde_json::Value::String(v.to_string()));
    }
    let binding = Binding {
        integration: name.into(),
        action: action.into(),
        params: given,
        recipient,
    };
    let key = config.master_key.clone().ok();
    let client = Client::new(config.egress.clone().map_err(|e| anyhow!(e))?);
    let tried = try_action(
        store,
        ws,
        &defs,
        &binding,
        &row,
        key.as_ref(),
        &client,
        now(),
    )
    .await?;
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
        AttemptResult::Timeout => bail!("timed out after {} ms", i.spec.timeout_ms),
        AttemptResult::Network(e) => bail!("network error: {e}"),
        AttemptResult::Refused(e) => bail!("refused by the egress check: {e}"),
        AttemptResult::Invalid(e) => bail!("the request cannot be sent as rendered: {e}"),
    }
}
