//! `rowfire validate`, `explain`, `backtest`, `push`, `pull`, `list`, `promote`, `demote` and
//! `why`: the definitions, checked, stored and read back, and what the rules in them do.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use rowfire::backtest::{self, Options};
use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::definitions::{self, Definitions, versions};
use rowfire::poll;
use rowfire::push::{self, PushError};
use rowfire::rules::{self, Mode};
use rowfire::source::{Source, dialect_of};

use rowfire::store::{Store, WorkspaceId};
use rowfire::validation::{self, TriggerCheck};

use super::{NOTHING_PUSHED, now, open_and_migrate, open_workspace, width};

/// `rowfire backtest`: what a rule would have done over the last `days` days.
pub(crate) async fn backtest(
    config: &Config,
    rule: &str,
    file: &Path,
    days: u32,
    sample: usize,
    clock: Clock,
    json: bool,
) -> Result<ExitCode> {
    // A rule that names no time zone takes the workspace's, as it will once pushed.
    let zone = zone_if_configured(config).await;
    let defs = definitions::parse_in_zone(&definitions::read_file(file)?, &zone)?;
    let (_, trigger) = defs.rule_and_trigger(rule)?;
    let def = defs.source(&trigger.source).expect("validated");
    let source = Source::from_env(def).await?;
    let opts = Options {
        days,
        sample,
        now: clock.now(),
    };
    let report = backtest::run(&defs, rule, &source, &opts).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire push`: stores the file as the next version (creating the control plane's tables if
/// needed) and says what changed.
pub(crate) async fn push(config: &Config, file: &Path) -> Result<ExitCode> {
    let text = match definitions::read_file(file) {
        Ok(text) => text,
        Err(problems) => {
            eprint!("{}", super::out::printable(&problems.to_string()));
            return Ok(ExitCode::FAILURE);
        }
    };
    let store = open_and_migrate(config).await?;
    let ws = config.workspace()?;
    rowfire::store::workspace::get(&store, ws).await?;
    let summary = match push::push(&store, ws, &text, now()).await {
        Err(PushError::Definitions(problems)) => {
            eprint!("{}", super::out::printable(&problems.to_string()));
            return Ok(ExitCode::FAILURE);
        }
        other => other?,
    };
    print_push(&summary);
    if let Ok(defs) = definitions::parse(&text) {
        warn_unresolved_sources(&store, ws, &defs).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire pull`: the definitions in force (or an older version), byte for byte.
pub(crate) async fn pull(config: &Config, version: Option<i64>) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    match versions::get(store, ws, version).await? {
        Some(v) => print!("{}", v.document),
        None if version.is_some() => bail!(
            "there is no version {}; `rowfire status` shows the one in force",
            version.unwrap_or(0)
        ),
        None => bail!("{NOTHING_PUSHED}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire why RULE KEY`: a key's fires and the fate of its recent rows.
pub(crate) async fn why(config: &Config, rule: &str, key: &str, days: u32) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    let Some((_, defs)) = versions::in_force(store, ws).await? else {
        bail!("{NOTHING_PUSHED}");
    };
    let explained = rowfire::explanation::why(
        store,
        ws,
        &defs,
        rowfire::explanation::Question {
            rule,
            key,
            days,
            now: now(),
        },
        &poll::env_dsn(std::slice::from_ref(ws)),
    )
    .await
    .map_err(|e| anyhow!(e))?;
    print!("{explained}");
    Ok(ExitCode::SUCCESS)
}

/// What a push did, a line per kind of change.
pub(crate) fn print_push(s: &push::PushSummary) {
    if s.unchanged {
        println!("unchanged: version {} is already in force", s.version);
        return;
    }
    println!("pushed version {}", s.version);
    let groups = [
        ("new trigger(s), starting at now", &s.new_triggers),
        ("removed trigger(s)", &s.removed_triggers),
        ("new rule(s), in shadow", &s.new_rules),
        ("changed rule(s), back in shadow", &s.changed_rules),
        ("removed rule(s), kept as tombstones", &s.tombstoned_rules),
    ];
    for (label, names) in groups {
        if !names.is_empty() {
            println!("  {} {label}: {}", names.len(), names.join(", "));
        }
    }
}

/// `rowfire list`: the triggers and rules in force, with each rule's mode and cadence.
pub(crate) async fn list(config: &Config) -> Result<ExitCode> {
    let (store, ws) = &open_workspace(config).await?;
    let Some((version, defs)) = versions::in_force(store, ws).await? else {
        println!("{NOTHING_PUSHED}");
        return Ok(ExitCode::SUCCESS);
    };
    let modes = rules::list(store, ws).await?;
    println!("definitions version {version} on {}", store.shown());
    // Columns as wide as their longest entry, so long names never push a row out of line.
    let trigger_w = width(defs.triggers.iter().map(|t| t.name.as_str()));
    let source_w = width(defs.triggers.iter().map(|t| t.source.as_str()));
    println!("triggers:");
    for t in &defs.triggers {
        println!(
            "  {:<trigger_w$} source {:<source_w$} key [{}]",
            t.name,
            t.source,
            t.key.join(", ")
        );
    }
    let rule_w = width(defs.rules.iter().map(|r| r.name.as_str()));
    let on_w = width(defs.rules.iter().map(|r| r.trigger.as_str()));
    println!("rules:");
    for r in &defs.rules {
        let mode = modes
            .iter()
            .find(|m| m.rule == r.name)
            .map_or(Mode::Shadow, |m| m.mode);
        let key = defs.trigger(&r.trigger).map_or(&[][..], |t| &t.key[..]);
        println!(
            "  {:<rule_w$} {:<6} on {:<on_w$} {}",
            r.name,
            mode.to_string(),
            r.trigger,
            r.cadence.describe(key)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire promote` and `demote`: a rule's mode.
pub(crate) async fn set_mode(config: &Config, rule: &str, mode: Mode) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    let before = rules::set_mode(store, ws, rule, mode, now()).await?;
    if before == mode {
        println!("{rule} is already {mode}");
    } else {
        println!("{rule}: {before} → {mode}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads and checks a definitions file.
pub(crate) fn load(file: &Path) -> Result<Definitions> {
    Ok(definitions::load_file(file)?)
}

/// `rowfire validate`: every problem at once, then each trigger's columns on its source.
pub(crate) async fn validate(config: &Config, file: &Path) -> Result<ExitCode> {
    let defs = match definitions::load_file(file) {
        Ok(defs) => defs,
        Err(problems) => {
            eprint!("{}", super::out::printable(&problems.to_string()));
            return Ok(ExitCode::FAILURE);
        }
    };
    println!(
        "{}: {} trigger(s), {} rule(s); syntax, cadences and SQL guard ok",
        file.display(),
        defs.triggers.len(),
        defs.rules.len()
    );
    // Sources the file only names may be stored in the control plane; each one that is not
    // holds back its trigger's rules only.
    let stored = stored_sources_if_configured(config).await;
    let unresolved = defs.held_back(|name| stored.contains(name));
    if !unresolved.is_empty() {
        println!(
            "{} problem(s) that hold back only the rules named (the rest of the file is fine):",
            unresolved.len()
        );
        for p in &unresolved {
            println!("  {}: {}", p.path, p.message);
        }
    }
    for source in defs
        .sources
        .iter()
        .filter(|s| !s.allow_functions.is_empty())
    {
        println!(
            "  source {} admits extra functions: {}",
            source.name,
            source.allow_functions.join(", ")
        );
    }
    let mut failed = false;
    for check in validation::check_against_sources(&defs, now()).await {
        match check {
            TriggerCheck::Ok { trigger, source } => {
                println!("  trigger {trigger}: columns ok on {source}")
            }
            TriggerCheck::NotChecked { trigger, var } => {
                println!("  trigger {trigger}: columns not checked ({var} is not set)")
            }
            TriggerCheck::Undeclared { trigger, source } => {
                let how = if stored.contains(&source) {
                    "stored in the control plane"
                } else {
                    "not declared in this file"
                };
                println!("  trigger {trigger}: columns not checked (source {source} is {how})")
            }
            TriggerCheck::SourceUnavailable { trigger, source } => {
                failed = true;
                println!(
                    "  trigger {trigger}: not checked, source {source} is unreachable (see above)"
                )
            }
            TriggerCheck::Failed { trigger, error } => {
                failed = true;
                println!("  trigger {trigger}: {error}")
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The sources stored in the control plane, when one is configured (`ROWFIRE_DATABASE_URL`, or
/// `rowfire.db` here); none otherwise. Never creates a control plane.
/// Whether the environment names a control plane (or the default embedded one exists), so a
/// command about a file may consult it.
fn control_plane_configured(config: &Config) -> bool {
    config.database_url_set || Path::new("rowfire.db").exists()
}

async fn stored_sources_if_configured(config: &Config) -> std::collections::BTreeSet<String> {
    if !control_plane_configured(config) {
        return Default::default();
    }
    let stored = async {
        let (store, ws) = open_workspace(config).await?;
        let (store, ws) = (&store, &ws);
        Ok::<_, anyhow::Error>(rowfire::secret::stored_sources(store, ws).await?)
    };
    stored.await.unwrap_or_else(|e| {
        eprintln!("note: stored sources were not consulted: {e:#}");
        Default::default()
    })
}

/// The workspace's time zone when a control plane is configured and reachable, else UTC.
async fn zone_if_configured(config: &Config) -> jiff::tz::TimeZone {
    if !control_plane_configured(config) {
        return jiff::tz::TimeZone::UTC;
    }
    let zone = async {
        let (store, ws) = open_workspace(config).await?;
        let name = rowfire::store::workspace::get(&store, &ws).await?.timezone;
        Ok::<_, anyhow::Error>(jiff::tz::TimeZone::get(&name)?)
    };
    zone.await.unwrap_or_else(|e| {
        eprintln!("note: the workspace's time zone was not consulted (rules naming none are read in UTC): {e:#}");
        jiff::tz::TimeZone::UTC
    })
}

/// After a push: says which triggers name a source that is neither declared nor stored (their
/// rules wait; everything else runs).
pub(crate) async fn warn_unresolved_sources(
    store: &Store,
    ws: &WorkspaceId,
    defs: &Definitions,
) -> Result<()> {
    let stored = rowfire::secret::stored_sources(store, ws).await?;
    for p in defs.held_back(|name| stored.contains(name)) {
        eprintln!("warning: {}: {}", p.path, p.message);
    }
    Ok(())
}

/// `rowfire explain`: the SQL a trigger runs, with the window's literals.
pub(crate) fn explain(name: &str, file: &Path, days: u32, clock: Clock) -> Result<ExitCode> {
    let defs = load(file)?;
    let trigger = defs.trigger_named(name)?;
    let def = defs.source(&trigger.source).expect("validated");
    if !def.declared {
        bail!("{}", def.missing_dsn());
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a definitions file's dsn_env is data: the variable it names holds a source's DSN"
    )]
    let from_env = std::env::var(&def.dsn_env)
        .ok()
        .and_then(|dsn| dialect_of(&dsn));
    let dialect = def.kind.or(from_env).ok_or_else(|| {
        anyhow!("source {} declares no `type` and {} is not set; set one so Rowfire knows the SQL dialect", def.name, def.dsn_env)
    })?;
    let text = rowfire::explanation::plan::planned_sql(trigger, def, dialect, clock.now(), days)?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
