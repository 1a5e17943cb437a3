//! `rowfire migrate`, `status`, `halt`, `resume`, `rewind` and `keygen`: the control plane and
//! the workspace's state.

use std::process::ExitCode;

use anyhow::{Result, bail};
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::definitions::versions;
use rowfire::outbox::DeliveryStatus;
use rowfire::poll;
use rowfire::rules;
use rowfire::store::{ErrorKind, Store, WorkspaceId, postgres_role, tenancy, workspace};

use super::{now, open_workspace, width};

/// `rowfire migrate`: creates or upgrades the control plane's tables, as the owner's connection
/// (`ROWFIRE_MIGRATE_URL`) when one is named, then grants the application's role
/// (`ROWFIRE_DATABASE_URL`) what it needs and checks that row-level security binds it. What it
/// lacks the right to do, it prints for an operator to run.
pub(crate) async fn migrate(config: &Config) -> Result<ExitCode> {
    let owner_url = config
        .migrate_url
        .as_deref()
        .unwrap_or(&config.database_url);
    let store = Store::open(owner_url).await?;
    let applied = match store.migrate().await {
        Ok(applied) => applied,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            eprintln!("error: {e}");
            eprintln!(
                "the role cannot create or alter Rowfire's tables. Run `rowfire migrate` with ROWFIRE_MIGRATE_URL naming the database's owner, or have the owner run:\n"
            );
            eprintln!("{}", store.pending_statements().await?);
            if let Some(role) = postgres_role(&config.database_url) {
                eprintln!(
                    "-- and let Rowfire's role read and write them:\n{}",
                    Store::grant_statements(&role)
                );
            }
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "control plane {}: {applied} migration(s) applied, schema up to date",
        store.shown()
    );
    let app_role = postgres_role(&config.database_url);
    if config.migrate_url.is_some()
        && let Some(role) = app_role.filter(|r| Some(r) != postgres_role(owner_url).as_ref())
    {
        match store.grant_to(&role).await {
            Ok(()) => println!("role {role} may read and write Rowfire's tables"),
            Err(e) => {
                eprintln!(
                    "warning: could not grant role {role} its privileges ({e}); as the tables' owner run:\n{}",
                    Store::grant_statements(&role)
                );
            }
        }
        let app = Store::open(&config.database_url).await?;
        match tenancy::check(&app).await?.problem() {
            None => println!("isolation: row-level security binds role {role}"),
            Some(problem) => eprintln!("warning: {problem}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rowfire status`: halted or running, watermarks, next polls, last errors, modes, deliveries.
pub(crate) async fn status(config: &Config) -> Result<ExitCode> {
    let (store, ws) = &open_workspace(config).await?;
    // Lease expiries and due times are on the control plane's clock.
    let clock = Clock::system();
    store.sync_clock(&clock).await?;
    let now = clock.now();
    let state = workspace::get(store, ws).await?;
    match &state.halted {
        Some((reason, at)) => println!("workspace {}: HALTED since {at}: {reason}", state.id),
        None => println!("workspace {}: running", state.id),
    }
    if let Some(v) = versions::get(store, ws, None).await? {
        println!("definitions version {} (pushed {})", v.version, v.pushed_at);
    }
    println!("triggers:");
    let triggers: Vec<poll::TriggerState> = poll::list(store, ws)
        .await?
        .into_iter()
        .filter(|t| t.removed_at.is_none())
        .collect();
    let trigger_w = width(triggers.iter().map(|t| t.trigger.as_str()));
    for t in &triggers {
        if let Some(problem) = &t.problem {
            println!("  {:<trigger_w$} {problem}", t.trigger);
            continue;
        }
        let error = t.last_error.as_deref().unwrap_or("-");
        println!(
            "  {:<trigger_w$} watermark {}  next poll {}  last error: {error}",
            t.trigger, t.watermark, t.next_poll_at
        );
        for line in poll::workers::lease_lines(t, now) {
            println!("  {:<trigger_w$}   {line}", "");
        }
    }
    print_workers(store, now).await?;
    println!("rules:");
    let rules = rules::list(store, ws).await?;
    let rule_w = width(rules.iter().map(|r| r.rule.as_str()));
    for r in rules {
        let state = if r.tombstoned_at.is_some() {
            "removed".to_string()
        } else {
            r.mode.to_string()
        };
        println!("  {:<rule_w$} {state:<7} on {}", r.rule, r.trigger);
    }
    let mut tx = store.begin(ws).await?;
    let counts = rowfire::outbox::counts(&mut tx, ws).await?;
    tx.rollback().await?;
    let shown: Vec<String> = counts
        .iter()
        .map(|(status, n, oldest)| match status {
            DeliveryStatus::Pending => format!("pending {n} (earliest due {oldest})"),
            _ => format!("{status} {n}"),
        })
        .collect();
    if !shown.is_empty() {
        println!("deliveries: {}", shown.join(", "));
    }
    print_due(store, ws, now).await?;
    for i in rowfire::integrations::states(store, ws).await? {
        if let Some(at) = i.disabled_at {
            println!(
                "integration {} DISABLED since {at}: {}; `rowfire integrations enable {}`",
                i.name,
                i.disabled_reason.as_deref().unwrap_or("no reason"),
                i.name
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Due now, as the lease and the claim see them (across workspaces, under their bypass), for
/// this workspace and in total: work the claims should be taking, so a stuck queue is visible.
async fn print_due(store: &Store, ws: &WorkspaceId, now: Timestamp) -> Result<()> {
    let triggers = poll::state::due_counts(store, now).await?;
    let deliveries = rowfire::send::queue::due_counts(store, now).await?;
    let mine =
        |counts: &[(WorkspaceId, i64)]| counts.iter().find(|(w, _)| w == ws).map_or(0, |(_, n)| *n);
    let total = |counts: &[(WorkspaceId, i64)]| counts.iter().map(|(_, n)| n).sum::<i64>();
    println!(
        "due now, as the claims see them: {} trigger(s) and {} deliveries here; {} and {} in all {} workspace(s)",
        mine(&triggers),
        mine(&deliveries),
        total(&triggers),
        total(&deliveries),
        rowfire::store::workspace::list(store).await?.len()
    );
    use rowfire::store::tenancy::Isolation;
    let isolation = tenancy::check(store).await?;
    match (&isolation, isolation.problem()) {
        (Isolation::Embedded, _) => println!(
            "isolation: on SQLite, workspaces are kept apart by Rowfire itself; isolation enforced by the database (row-level security) needs a PostgreSQL control plane"
        ),
        (_, Some(problem)) => println!("isolation: WARNING: {problem}"),
        (_, None) => println!("isolation: enforced by PostgreSQL's row-level security"),
    }
    Ok(())
}

/// `rowfire halt REASON`: nothing is sent and no watermark moves until `resume`.
pub(crate) async fn halt(config: &Config, reason: &str) -> Result<ExitCode> {
    let max = workspace::MAX_HALT_REASON_CHARS;
    if reason.trim().is_empty() || reason.chars().count() > max {
        anyhow::bail!(
            "give a reason of 1 to {max} characters (it is shown with every skipped poll and send)"
        );
    }
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    workspace::halt(store, ws, reason, now()).await?;
    println!(
        "workspace {ws} halted: {reason}. Nothing is sent and no watermark moves until `rowfire resume`."
    );
    Ok(ExitCode::SUCCESS)
}

/// `rowfire resume`.
pub(crate) async fn resume(config: &Config) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    workspace::resume(store, ws).await?;
    println!(
        "workspace {ws} resumed; rows that arrived while halted are evaluated on the next polls."
    );
    Ok(ExitCode::SUCCESS)
}

/// `rowfire rewind TRIGGER --days N`: the watermark back N days, due now.
pub(crate) async fn rewind(config: &Config, trigger: &str, days: u32) -> Result<ExitCode> {
    let (store, ws) = open_workspace(config).await?;
    let (store, ws) = (&store, &ws);
    let by = SignedDuration::from_hours(24 * i64::from(days));
    let now = now();
    if !poll::rewind(store, ws, trigger, by, now).await? {
        bail!("unknown trigger \"{trigger}\"; `rowfire status` lists the triggers in force");
    }
    println!(
        "{trigger}: watermark moved back to {} and due now; rows that already fired will not fire again",
        rowfire::store::earlier(now, by)
    );
    Ok(ExitCode::SUCCESS)
}

/// `rowfire keygen`: a new master key on standard output, advice on standard error.
pub(crate) fn keygen() -> ExitCode {
    println!("{}", rowfire::secret::MasterKey::generate());
    eprintln!("Set it as ROWFIRE_MASTER_KEY wherever Rowfire runs and keep a copy somewhere safe:");
    eprintln!("secrets sealed under it cannot be opened without it.");
    ExitCode::SUCCESS
}

/// The `workers:` section of `status`: workers seen recently, with their last heartbeat.
async fn print_workers(store: &Store, now: Timestamp) -> Result<()> {
    let since = rowfire::store::earlier(now, poll::workers::RECENT);
    let seen = poll::workers::recent(store, since).await?;
    if seen.is_empty() {
        println!(
            "workers: none seen in the last {:#}; start one with `rowfire worker`",
            poll::workers::RECENT
        );
        return Ok(());
    }
    println!("workers seen in the last {:#}:", poll::workers::RECENT);
    for w in &seen {
        println!("  {}", poll::workers::worker_line(w, now));
    }
    Ok(())
}
