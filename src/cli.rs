//! The command implementations behind `main.rs`: opening the control plane, running workers and
//! the demo, and printing what the library returns. Binary only; the library holds the logic.

use anyhow::{Context, Result, anyhow, bail};
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::definitions::{self, Definitions, versions};
use rowfire::deliver::client::Client;
use rowfire::deliver::egress;
use rowfire::deliver::sender::{self, Sender};
use rowfire::poll::Poller;
use rowfire::rules::{self, Mode};
use rowfire::secret::MasterKey;
use rowfire::source::dialect_of;
use rowfire::sql_guard::{self, Shape, Window};
use rowfire::store::{DEFAULT_WORKSPACE, Store, workspace};
use rowfire::validation::{self, TriggerCheck};
use rowfire::{demo, poll};
use std::path::Path;
use std::process::ExitCode;

pub(crate) mod commands;
pub(crate) mod integrations;
pub(crate) mod out;

/// How a worker process runs.
pub(crate) struct WorkerOptions {
    pub once: bool,
    pub due_now: bool,
    pub concurrency: usize,
    pub poll_only: bool,
    pub delivery_lease: SignedDuration,
    pub trigger_lease: SignedDuration,
}

/// A sender for this process: the egress policy and master key from the environment.
pub(crate) fn sender(store: &Store, clock: Clock, config: sender::Config) -> Result<Sender> {
    let policy = egress::Policy::from_env().map_err(|e| anyhow!(e))?;
    let key = MasterKey::from_env().map_err(|e| e.to_string());
    Ok(Sender::new(
        store.clone(),
        Client::new(policy),
        clock,
        key,
        config,
    ))
}

pub(crate) async fn worker(store: Store, opts: WorkerOptions) -> Result<ExitCode> {
    let dsn = integrations::dsn_resolver(&store).await?;
    // Leases are stamped on the control plane's clock, not this host's: one clock for the whole
    // process, measured against the control plane now and every minute while it runs.
    let clock = Clock::system();
    store.sync_clock(&clock).await?;
    // One id (host, pid, start time) for every lease this process takes.
    let me = poll::workers::WorkerId::this_process(clock.now());
    let concurrency = opts.concurrency;
    let pollers: Vec<Poller> = (0..concurrency)
        .map(|_| {
            Poller::new(store.clone(), me.id.clone(), clock.clone(), dsn.clone())
                .with_lease(opts.trigger_lease)
        })
        .collect();
    let senders: Vec<Sender> = (0..concurrency)
        .map(|_| {
            let config = sender::Config {
                lease: opts.delivery_lease,
                ..sender::Config::default()
            };
            sender(&store, clock.clone(), config)
        })
        .collect::<Result<_>>()?;
    if opts.delivery_lease < sender::MIN_LEASE {
        bail!(
            "--delivery-lease {:#} is too short; give at least {:#} (and more than your integrations' timeouts)",
            opts.delivery_lease,
            sender::MIN_LEASE
        );
    }
    let key = MasterKey::from_env();
    let in_force = versions::in_force(&store, DEFAULT_WORKSPACE).await?;
    let warnings = match &in_force {
        Some((_, defs)) => {
            let lease = opts.delivery_lease;
            rowfire::integrations::readiness(&store, DEFAULT_WORKSPACE, defs, key.as_ref(), lease)
                .await?
        }
        None => Vec::new(),
    };
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    if let Some((_, defs)) = &in_force {
        let resolves = |name: &str| defs.source(name).is_some_and(|d| dsn(d).is_some());
        for p in defs.unresolved_sources(resolves) {
            eprintln!("warning: {}: {}", p.path, p.message);
        }
    }
    if opts.once {
        return work_once(&store, &clock, &pollers, &senders[0], opts.due_now).await;
    }
    if !opts.poll_only {
        store.listen_for_work().await;
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let signalled = shutdown_signal();
    tokio::spawn(async move {
        signalled.await;
        eprintln!("stopping: finishing the polls and sends in progress");
        let _ = stop_tx.send(true);
    });
    eprintln!(
        "worker running on {} with {concurrency} poller(s) and {concurrency} sender(s){}; ctrl-c to stop",
        store.shown(),
        if opts.poll_only { ", poll-only" } else { "" }
    );
    poll::workers::register(&store, &me, clock.now()).await?;
    let alive = tokio::spawn(poll::workers::keep_alive(
        store.clone(),
        me.clone(),
        clock.clone(),
    ));
    let resync = tokio::spawn(keep_clock_synced(store.clone(), clock.clone()));
    let polls = pollers
        .iter()
        .map(|p| p.run_until(stop_rx.clone(), |r| print!("{r}")));
    let sends = senders.iter().map(|s| s.run_until(stop_rx.clone()));
    futures_util::future::join(
        futures_util::future::join_all(polls),
        futures_util::future::join_all(sends),
    )
    .await;
    resync.abort();
    alive.abort();
    give_back(&store, &me, &clock).await;
    Ok(ExitCode::SUCCESS)
}

/// A clean stop: gives back every trigger lease this worker still holds (another worker polls
/// those triggers at once) and records it as stopped.
async fn give_back(store: &Store, me: &poll::workers::WorkerId, clock: &Clock) {
    match poll::workers::stopped(store, me, clock.now()).await {
        Ok(0) => {}
        Ok(n) => eprintln!("stopping: gave back {n} trigger lease(s)"),
        Err(e) => eprintln!(
            "warning: could not give back this worker's leases ({e}); they lapse within their lease"
        ),
    }
}

/// Measures the control plane's clock again every minute (host clocks drift); a failed
/// measurement keeps the last offset.
async fn keep_clock_synced(store: Store, clock: Clock) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        if let Err(e) = store.sync_clock(&clock).await {
            tracing::warn!(error = %e, "could not read the control plane's clock; keeping the last offset");
        }
    }
}

/// `worker --once`: polls every due trigger once (every trigger with `due_now`), prints a line
/// per trigger and rule, or says that nothing is due and when each trigger next is, sends what
/// is due, and exits non-zero when a poll failed, after printing everything else.
async fn work_once(
    store: &Store,
    clock: &Clock,
    pollers: &[Poller],
    sender: &Sender,
    due_now: bool,
) -> Result<ExitCode> {
    if due_now {
        poll::due_now(store, DEFAULT_WORKSPACE, clock.now()).await?;
    }
    let mut all = Vec::new();
    let mut control_plane = None;
    for batch in futures_util::future::join_all(pollers.iter().map(|p| p.poll_due())).await {
        match batch {
            Ok(reports) => all.extend(reports),
            Err(e) => control_plane = Some(e),
        }
    }
    all.sort_by(|a, b| a.trigger.cmp(&b.trigger));
    for report in &all {
        print!("{report}");
    }
    if all.is_empty() && control_plane.is_none() {
        print_nothing_due(store, clock.now()).await?;
    }
    let sent = sender.drain().await?;
    if sent.claimed > 0 {
        print!("{sent}");
    }
    if let Some(e) = control_plane {
        return Err(anyhow!(e).context("polling stopped: the control plane failed"));
    }
    let failed: Vec<&str> = all
        .iter()
        .filter(|r| matches!(r.status, poll::PollStatus::Failed(_)))
        .map(|r| r.trigger.as_str())
        .collect();
    if !failed.is_empty() {
        eprintln!(
            "error: the poll of {} failed (see above); its watermark stays and it is retried within 30 seconds",
            failed.join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `worker --once` says when no trigger is due: when each is next due, and how to poll now.
async fn print_nothing_due(store: &Store, now: Timestamp) -> Result<()> {
    let triggers: Vec<poll::TriggerState> = poll::list(store, DEFAULT_WORKSPACE)
        .await?
        .into_iter()
        .filter(|t| t.removed_at.is_none())
        .collect();
    if triggers.is_empty() {
        println!(
            "no trigger is due: none is defined; push a definitions file with `rowfire push -f FILE`"
        );
        return Ok(());
    }
    println!("no trigger is due; next due:");
    let width = triggers.iter().map(|t| t.trigger.len()).max().unwrap_or(0);
    for t in &triggers {
        match &t.problem {
            Some(problem) => println!("  {:<width$}  {problem}", t.trigger),
            None => {
                let wait = SignedDuration::from_secs(now.duration_until(t.next_poll_at).as_secs());
                println!(
                    "  {:<width$}  {} (in {:#})",
                    t.trigger,
                    t.next_poll_at,
                    wait.max(SignedDuration::ZERO)
                );
            }
        }
    }
    println!(
        "to poll every trigger now: `rowfire worker --once --due-now`; to re-read past days: `rowfire rewind TRIGGER --days N`"
    );
    Ok(())
}

/// Resolves on ctrl-c or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled, so a signal that arrives right after "worker running" is printed
/// stops the worker cleanly instead of killing it.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub(crate) async fn open_store() -> Result<Store> {
    let store = Store::from_env().await?;
    store.check_migrated().await?;
    Ok(store)
}

pub(crate) fn print_push(s: &versions::PushSummary) {
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

pub(crate) async fn list(store: &Store) -> Result<ExitCode> {
    let Some((version, defs)) = versions::in_force(store, DEFAULT_WORKSPACE).await? else {
        println!(
            "nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`"
        );
        return Ok(ExitCode::SUCCESS);
    };
    let modes = rules::list(store, DEFAULT_WORKSPACE).await?;
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

pub(crate) async fn status(store: &Store) -> Result<ExitCode> {
    // Lease expiries and due times are on the control plane's clock.
    let clock = Clock::system();
    store.sync_clock(&clock).await?;
    let now = clock.now();
    let ws = workspace::get(store, DEFAULT_WORKSPACE).await?;
    match &ws.halted {
        Some((reason, at)) => println!("workspace {}: HALTED since {at}: {reason}", ws.id),
        None => println!("workspace {}: running", ws.id),
    }
    if let Some(v) = versions::get(store, DEFAULT_WORKSPACE, None).await? {
        println!("definitions version {} (pushed {})", v.version, v.pushed_at);
    }
    println!("triggers:");
    let triggers: Vec<poll::TriggerState> = poll::list(store, DEFAULT_WORKSPACE)
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
    let rules = rules::list(store, DEFAULT_WORKSPACE).await?;
    let rule_w = width(rules.iter().map(|r| r.rule.as_str()));
    for r in rules {
        let state = if r.tombstoned_at.is_some() {
            "removed".to_string()
        } else {
            r.mode.to_string()
        };
        println!("  {:<rule_w$} {state:<7} on {}", r.rule, r.trigger);
    }
    let mut tx = store.begin(DEFAULT_WORKSPACE).await?;
    let counts = rowfire::deliver::counts(&mut tx, DEFAULT_WORKSPACE).await?;
    tx.rollback().await?;
    let shown: Vec<String> = counts
        .iter()
        .map(|(status, n, oldest)| match status.as_str() {
            "pending" => format!("pending {n} (earliest due {oldest})"),
            _ => format!("{status} {n}"),
        })
        .collect();
    if !shown.is_empty() {
        println!("deliveries: {}", shown.join(", "));
    }
    for i in rowfire::integrations::states(store, DEFAULT_WORKSPACE).await? {
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

/// The width of a column: its longest entry, in characters.
fn width<'a>(entries: impl Iterator<Item = &'a str>) -> usize {
    entries.map(|e| e.chars().count()).max().unwrap_or(0)
}

pub(crate) async fn set_mode(rule: &str, mode: Mode) -> Result<ExitCode> {
    let store = open_store().await?;
    let before = rules::set_mode(&store, DEFAULT_WORKSPACE, rule, mode, Timestamp::now()).await?;
    if before == mode {
        println!("{rule} is already {mode}");
    } else {
        println!("{rule}: {before} → {mode}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn load(file: &Path) -> Result<Definitions> {
    Ok(definitions::load_file(file)?)
}

pub(crate) async fn demo(dir: &Path, clock: Clock, once: bool) -> Result<ExitCode> {
    let now = clock.now();
    let made = demo::run(dir, now)
        .await
        .context("the demo could not run")?;
    println!("Sample database: {}", made.sample_url);
    println!("Sample definitions: {}", made.definitions.display());
    println!();
    println!(
        "What each sample rule would have done over the last {} days:",
        demo::DEMO_DAYS
    );
    for report in &made.reports {
        println!("  {}", report.headline());
    }
    println!();
    println!(
        "Control plane: {} (every rule live; its only destination is the Demo inbox)",
        made.control_plane_url
    );
    println!(
        "The worker polls the same {} days into the ledger:",
        demo::DEMO_DAYS
    );
    let poller = made.poller(clock.clone());
    for report in poller.poll_due().await? {
        print!("{report}");
    }
    print_inbox(&made.store).await?;
    println!();
    let rowfire = demo::invocation();
    println!(
        "Look closer: type these into a shell, one after another (the worker finds the sample by itself):"
    );
    for step in made.next_steps(&rowfire.command, now) {
        println!("  $ {step}");
    }
    if let Some(hint) = &rowfire.install_hint {
        println!("({hint})");
    }
    if once {
        return Ok(ExitCode::SUCCESS);
    }
    println!();
    println!("The worker keeps running; add activity from another terminal with:");
    println!(
        "  $ {} fixture simulate --into {}",
        rowfire.command,
        demo::shell_word(&made.sample_url)
    );
    println!("ctrl-c stops it.");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let signalled = shutdown_signal();
    tokio::spawn(async move {
        signalled.await;
        let _ = stop_tx.send(true);
    });
    poller
        .run_until(stop_rx, |r| {
            if r.fired > 0 {
                print!("{r}")
            }
        })
        .await;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn print_inbox(store: &Store) -> Result<()> {
    let mut tx = store.begin(DEFAULT_WORKSPACE).await?;
    let latest = rowfire::deliver::inbox(&mut tx, DEFAULT_WORKSPACE, 3).await?;
    let deliveries =
        rowfire::deliver::list(&mut tx, DEFAULT_WORKSPACE, &Default::default()).await?;
    tx.rollback().await?;
    let sent = deliveries.iter().filter(|d| d.status == "sent").count();
    println!("Demo inbox: {sent} message(s) delivered. The latest:");
    for (action, recipient, body) in latest {
        println!("  {action} to {}: {body}", recipient.unwrap_or_default());
    }
    Ok(())
}

pub(crate) async fn validate(file: &Path) -> Result<ExitCode> {
    let defs = match definitions::load_file(file) {
        Ok(defs) => defs,
        Err(problems) => {
            eprint!("{problems}");
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
    let stored = stored_sources_if_configured().await;
    let unresolved = defs.unresolved_sources(|name| stored.contains(name));
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
    for check in validation::check_against_sources(&defs, Timestamp::now()).await {
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
async fn stored_sources_if_configured() -> std::collections::BTreeSet<String> {
    let configured = std::env::var(rowfire::store::DATABASE_URL_ENV).is_ok_and(|u| !u.is_empty())
        || Path::new("rowfire.db").exists();
    if !configured {
        return Default::default();
    }
    let stored = async {
        let store = open_store().await?;
        Ok::<_, anyhow::Error>(rowfire::secret::stored_sources(&store, DEFAULT_WORKSPACE).await?)
    };
    stored.await.unwrap_or_else(|e| {
        eprintln!("note: stored sources were not consulted: {e:#}");
        Default::default()
    })
}

/// After a push: says which triggers name a source that is neither declared nor stored (their
/// rules wait; everything else runs).
pub(crate) async fn warn_unresolved_sources(store: &Store, defs: &Definitions) -> Result<()> {
    let stored = rowfire::secret::stored_sources(store, DEFAULT_WORKSPACE).await?;
    for p in defs.unresolved_sources(|name| stored.contains(name)) {
        eprintln!("warning: {}: {}", p.path, p.message);
    }
    Ok(())
}

pub(crate) fn explain(name: &str, file: &Path, days: u32, clock: Clock) -> Result<ExitCode> {
    let defs = load(file)?;
    let trigger = defs.trigger_named(name)?;
    let def = defs.source(&trigger.source).expect("validated");
    if !def.declared {
        bail!("{}", def.missing_dsn());
    }
    let from_env = std::env::var(&def.dsn_env)
        .ok()
        .and_then(|dsn| dialect_of(&dsn));
    let dialect = def.kind.or(from_env).ok_or_else(|| {
        anyhow!("source {} declares no `type` and {} is not set; set one so Rowfire knows the SQL dialect", def.name, def.dsn_env)
    })?;
    let query = sql_guard::check_allowing(&trigger.sql, dialect, &def.allow_functions)
        .map_err(|e| anyhow!("trigger {name}: {e}"))?;
    let now = clock.now();
    let Some(since) = now
        .checked_sub(SignedDuration::from_hours(24 * i64::from(days)))
        .ok()
    else {
        bail!("--days {days} reaches before the earliest representable time");
    };
    let window = Window { since, until: now };
    let shape = Shape {
        clock: &trigger.event_time,
        key: &trigger.key,
    };
    let inline = |slice| {
        query
            .page_sql(shape, window, slice, sql_guard::Placeholders::Inline)
            .sql
    };
    let probe = inline(sql_guard::Slice::Boundary {
        after: None,
        offset: def.page_size.max(1) - 1,
    });
    let symbolic = sql_guard::Keyset {
        clock: rowfire::row::Value::Text(format!("<boundary {}>", trigger.event_time)),
        clock_type: None,
        key: trigger
            .key
            .iter()
            .map(|k| (rowfire::row::Value::Text(format!("<boundary {k}>")), None))
            .collect(),
    };
    let page = inline(sql_guard::Slice::Between {
        after: None,
        upto: Some(&symbolic),
    });
    println!("-- trigger {name} on source {} ({dialect})", def.name);
    if query.names_window() {
        println!("-- window {since} → {now}, bound to the query's own :since and :until");
    } else {
        println!("-- window {since} ≤ {} < {now}", trigger.event_time);
    }
    let order = format!("({}, {})", trigger.event_time, trigger.key.join(", "));
    println!("-- rows with a NULL key are counted, not paged");
    println!(
        "\n-- 1. where the first page ends: the row {} rows in, in {order} order",
        def.page_size
    );
    println!("{probe};");
    println!(
        "\n-- 2. the page: every row up to and including that one, so rows equal on {order} are never split"
    );
    println!("{page};");
    println!(
        "\n-- each next page adds AND {order} > (the previous page's last row), until the probe finds no row"
    );
    Ok(ExitCode::SUCCESS)
}
