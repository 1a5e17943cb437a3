//! `rowfire integrations`, `rowfire sources` and `rowfire deliveries show`: printing what the
//! library returns. Credential values are read from the environment or standard input, never
//! from the command line, and are never printed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use jiff::Timestamp;
use rowfire::definitions::catalog;
use rowfire::definitions::{Binding, Definitions, versions};
use rowfire::integrations;
use rowfire::secret::{self, MasterKey};
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::outcome::{AttemptResult, Verdict};
use rowfire::send::queue;
use rowfire::send::request::try_action;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

async fn in_force(store: &Store) -> Result<(i64, Definitions)> {
    versions::in_force(store, WS).await?.ok_or_else(|| {
        anyhow!("nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`")
    })
}

fn action_names(spec: &catalog::Integration) -> String {
    spec.actions.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// `rowfire integrations list`: each integration in force, its auth, credentials and state.
pub(crate) async fn list(store: &Store) -> Result<ExitCode> {
    let (_, defs) = in_force(store).await?;
    let states = integrations::states(store, WS).await?;
    if defs.integrations.is_empty() {
        println!("no integrations; add one with `rowfire integrations add NAME --catalog slack`");
    }
    for i in &defs.integrations {
        let stored = secret::names(store, WS, &secret::integration_owner(&i.name)).await?;
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
            Some(s) if s.paused_until.is_some_and(|p| p > Timestamp::now()) => {
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
    name: &str,
    from_catalog: Option<&str>,
    base_url: Option<&str>,
    from_file: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let current = versions::get(store, WS, None).await?.ok_or_else(|| {
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
    let summary = rowfire::push::push(store, WS, &text, Timestamp::now()).await?;
    crate::cli::print_push(&summary);
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
fn secret_value(env: Option<&str>) -> Result<String> {
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
    store: &Store,
    name: &str,
    credential: &str,
    from_env: Option<&str>,
) -> Result<ExitCode> {
    let (_, defs) = in_force(store).await?;
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
    let key = MasterKey::from_env()?;
    let value = secret_value(from_env)?;
    if credential.starts_with("signing_secret") {
        rowfire::send::webhook::parse_secret(&value)?;
    }
    secret::put(
        store,
        &key,
        WS,
        &secret::integration_owner(name),
        credential,
        &value,
        Timestamp::now(),
    )
    .await?;
    println!(
        "stored {name}'s {credential} (encrypted under master key {})",
        key.id()
    );
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations disable`.
pub(crate) async fn disable(store: &Store, name: &str, reason: &str) -> Result<ExitCode> {
    let (_, defs) = in_force(store).await?;
    if defs.integration(name).is_none() {
        bail!("there is no integration {name}; `rowfire integrations list` shows them");
    }
    let reason = if reason.trim().is_empty() {
        "disabled by hand".to_string()
    } else {
        format!("disabled by hand: {reason}")
    };
    integrations::disable(store, WS, name, &reason, Timestamp::now()).await?;
    println!("{name} is disabled; its deliveries wait until `rowfire integrations enable {name}`");
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations enable`.
pub(crate) async fn enable(store: &Store, name: &str) -> Result<ExitCode> {
    if integrations::enable(store, WS, name).await? {
        println!("{name} is enabled; its waiting deliveries go now");
    } else {
        println!("{name} was not disabled");
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire integrations test`: renders one action against a sample row and sends it once.
pub(crate) async fn test(
    store: &Store,
    name: &str,
    action: &str,
    row: &str,
    params: &[String],
    recipient: Option<String>,
) -> Result<ExitCode> {
    let (_, defs) = in_force(store).await?;
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
    let key = MasterKey::from_env().ok();
    let client = Client::new(Policy::from_env().map_err(|e| anyhow!(e))?);
    let tried = try_action(
        store,
        WS,
        &defs,
        &binding,
        &row,
        key.as_ref(),
        &client,
        Timestamp::now(),
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

/// `rowfire sources`: each source in force and where its DSN comes from.
pub(crate) async fn sources(store: &Store) -> Result<ExitCode> {
    let (_, defs) = in_force(store).await?;
    let files = secret::file_urls(store, WS).await?;
    for s in &defs.sources {
        let stored = secret::names(store, WS, &source_owner(&s.name))
            .await?
            .iter()
            .any(|n| n == "dsn");
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
pub(crate) async fn add_source(store: &Store, name: &str, url_env: &str) -> Result<ExitCode> {
    let dsn = secret_value(Some(url_env))?;
    let Some(dialect) = rowfire::source::dialect_of(&dsn) else {
        bail!("{url_env} does not hold a postgres:// or sqlite: URL");
    };
    let key = match MasterKey::from_env() {
        Ok(key) => key,
        Err(rowfire::secret::SecretError::MissingMasterKey)
            if dialect == rowfire::sql_guard::Dialect::Sqlite =>
        {
            secret::put_file_url(store, WS, name, &dsn, Timestamp::now()).await?;
            println!(
                "stored source {name}'s SQLite file URL (a path, no credential: not encrypted); workers read it at start"
            );
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    secret::put(
        store,
        &key,
        WS,
        &source_owner(name),
        "dsn",
        &dsn,
        Timestamp::now(),
    )
    .await?;
    println!(
        "stored source {name}'s DSN (encrypted under master key {}); workers read it at start",
        key.id()
    );
    Ok(ExitCode::SUCCESS)
}

/// The DSN resolver for workers: stored DSNs first, then environment variables. Without a master
/// key, stored DSNs are skipped with a warning (environment variables still work).
pub(crate) async fn dsn_resolver(store: &Store) -> Result<rowfire::poll::DsnResolver> {
    let mut stored = secret::file_urls(store, WS).await?;
    match MasterKey::from_env() {
        Ok(key) => stored.extend(secret::open_named(store, &key, WS, "source:", "dsn").await?),
        Err(e) => {
            tracing::debug!(error = %e, "no master key: stored source DSNs are not read");
        }
    };
    Ok(rowfire::poll::stored_or_env_dsn(stored))
}

/// `rowfire deliveries show ID`: the recorded request (never credentials) and every attempt.
pub(crate) async fn show_delivery(store: &Store, id: i64) -> Result<ExitCode> {
    let filter = rowfire::outbox::Filter {
        id: Some(id),
        ..Default::default()
    };
    let mut tx = store.begin(WS).await?;
    let found = rowfire::outbox::list(&mut tx, WS, &filter).await?;
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
    let attempts = queue::attempts(store, WS, id).await?;
    println!("  attempts   {}", attempts.len());
    for (n, a) in attempts.iter().enumerate() {
        let status = a.status_code.map_or("-".to_string(), |s| s.to_string());
        let class = a.error_class.unwrap_or("ok");
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
