//! The `rowfire` command line: parses arguments and dispatches to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use clap::{Parser, Subcommand};
use jiff::{SignedDuration, Timestamp};

use rowfire::backtest::{self, Options};
use rowfire::clock::Clock;
use rowfire::definitions::versions;
use rowfire::rules::Mode;
use rowfire::source::Source;
use rowfire::store::{DEFAULT_WORKSPACE, Store, workspace};
use rowfire::{fixture, poll};

/// `print!` for this binary: through [`cli::out::write`], which stops quietly on a closed pipe.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*))
    };
}

/// `println!` for this binary: through [`cli::out::write`], which stops quietly on a closed pipe.
macro_rules! println {
    () => {
        $crate::cli::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod cli;
use cli::commands::*;
use cli::*;

/// Rowfire turns rows in your database into actions, exactly once per rule, per key, per period.
#[derive(Parser)]
#[command(name = "rowfire", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a sample database and definitions in DIR and print a backtest headline per rule.
    ///
    /// Example: rowfire demo --dir rowfire-demo
    Demo {
        /// Where to put the sample database and definitions.
        #[arg(long, default_value = "rowfire-demo")]
        dir: PathBuf,
        /// Place the sample data relative to this instant (RFC 3339 or YYYY-MM-DD); default now.
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
        /// Poll once and exit instead of running the worker until ctrl-c.
        #[arg(long)]
        once: bool,
    },
    /// Check a definitions file: every problem at once, with its path. With a source's DSN in the
    /// environment, also check each trigger's columns against the source.
    ///
    /// Example: rowfire validate examples/saas/definitions.yaml
    Validate {
        /// The definitions file.
        file: PathBuf,
    },
    /// Show the SQL a trigger runs, in its source's dialect, with the window's literals.
    ///
    /// Example: rowfire explain declined_charge -f examples/saas/definitions.yaml
    Explain {
        /// The trigger.
        trigger: String,
        /// The definitions file.
        #[arg(short, long)]
        file: PathBuf,
        /// Window length in days, ending now (at most 3650).
        #[arg(long, default_value_t = 1, value_parser = parse_days)]
        days: u32,
        /// The end of the window (RFC 3339 or YYYY-MM-DD); default now.
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
    },
    /// What a rule would have done over the last N days (a floor, not a replay).
    ///
    /// Example: rowfire backtest billing_ticket -f examples/saas/definitions.yaml --days 120
    Backtest {
        /// The rule.
        rule: String,
        /// The definitions file.
        #[arg(short, long)]
        file: PathBuf,
        /// Days back from now (at most 3650).
        #[arg(long, default_value_t = 30, value_parser = parse_days)]
        days: u32,
        /// Sample fires to show, spread across the window.
        #[arg(long, default_value_t = 5, value_parser = parse_sample)]
        sample: usize,
        /// The end of the window (RFC 3339 or YYYY-MM-DD); default now.
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The sample database.
    #[command(subcommand)]
    Fixture(FixtureCommand),
    /// Create or upgrade the control plane's tables (ROWFIRE_DATABASE_URL, default sqlite://rowfire.db).
    ///
    /// Example: ROWFIRE_DATABASE_URL=postgres://rowfire@127.0.0.1/rowfire rowfire migrate
    Migrate,
    /// Store a definitions file as the next version and reconcile trigger and rule state.
    ///
    /// New triggers start at now (history never fires); new rules and rules whose meaning changed
    /// start in shadow; removed rules become tombstones that keep their ledger.
    /// Example: rowfire push -f examples/saas/definitions.yaml
    Push {
        /// The definitions file.
        #[arg(short, long)]
        file: PathBuf,
    },
    /// Print the definitions in force, byte for byte.
    ///
    /// Example: rowfire pull --version 3 > definitions.yaml
    Pull {
        /// An older version instead of the one in force.
        #[arg(long)]
        version: Option<i64>,
    },
    /// List the triggers and rules in force, with each rule's mode and cadence.
    ///
    /// Example: rowfire list
    List,
    /// Show the workspace's state: halted or running, watermarks, next polls, last errors, modes.
    ///
    /// Example: rowfire status
    Status,
    /// Switch a rule to live: its fires are sent for real.
    ///
    /// Example: rowfire promote billing_ticket
    Promote {
        /// The rule.
        rule: String,
    },
    /// Switch a rule back to shadow: its fires are recorded, nothing is sent.
    ///
    /// Example: rowfire demote billing_ticket
    Demote {
        /// The rule.
        rule: String,
    },
    /// Halt the workspace: nothing is sent and watermarks stop until `resume`.
    ///
    /// Example: rowfire halt "billing outage, investigating"
    Halt {
        /// Why, for the people who will see it.
        #[arg(required = true, num_args = 1..)]
        reason: Vec<String>,
    },
    /// Poll due triggers, claim their fires, and send their deliveries.
    ///
    /// `--once` polls every due trigger once and prints `TRIGGER: matched=N fired=X already=Y`
    /// (rows: `fired + already = matched`) and one line per rule (that rule's fires), then sends
    /// what is due and prints `deliveries: …`. With nothing due it says when each trigger next
    /// is (`--due-now` polls them all now); a failed poll makes it exit non-zero. Without it, the
    /// worker runs until ctrl-c or SIGTERM, finishing the page and sends it holds and giving its
    /// triggers back, due at once. Any number of workers may share one PostgreSQL control plane;
    /// a worker that dies is taken over within its trigger lease. Outbound requests go only to public
    /// addresses unless ROWFIRE_EGRESS_ALLOW lists a range; ROWFIRE_MASTER_KEY opens credentials.
    ///
    /// Example: rowfire worker --once
    Worker {
        /// Poll every due trigger once, send what is due, print what happened, and exit
        /// (non-zero when a poll failed).
        #[arg(long)]
        once: bool,
        /// With --once: make every trigger due now first, whatever its next-due time.
        #[arg(long, requires = "once")]
        due_now: bool,
        /// Pollers and senders in this process (1 to 64).
        #[arg(long, default_value_t = 1, value_parser = parse_concurrency)]
        concurrency: usize,
        /// Do not LISTEN for work (for connection poolers): idle senders look every second.
        #[arg(long)]
        poll_only: bool,
        /// How long a claimed delivery is held before another worker may take it over (a
        /// worker that dies mid-send delays its deliveries by at most this).
        #[arg(long, default_value = "60s", value_parser = parse_lease)]
        delivery_lease: jiff::SignedDuration,
        /// How long a trigger lease lasts (1s to 1h); the poll renews it as it works, and a worker
        /// that dies is taken over within it.
        #[arg(long, default_value = "30s", value_parser = parse_trigger_lease)]
        trigger_lease: jiff::SignedDuration,
    },
    /// Move a trigger's watermark back N days so the next poll re-reads them (the ledger stops
    /// re-sends).
    ///
    /// Example: rowfire rewind declined_charge --days 7
    Rewind {
        /// The trigger.
        trigger: String,
        /// How many days back from now (at most 3650).
        #[arg(long, value_parser = parse_days)]
        days: u32,
    },
    /// Explain a key: its fires (buckets, modes, polls) and, for its recent rows that did not
    /// fire, which earlier fire took their bucket.
    ///
    /// Example: rowfire why billing_ticket acct_012 --days 30
    Why {
        /// The rule.
        rule: String,
        /// The key: a value, or a JSON array for a key of several columns.
        key: String,
        /// Days of rows to look at (at most 3650).
        #[arg(long, default_value_t = 30, value_parser = parse_days)]
        days: u32,
    },
    /// List deliveries, newest first, or show one.
    ///
    /// Example: rowfire deliveries --rule billing_ticket --status failed
    Deliveries {
        /// Show one delivery in full.
        #[command(subcommand)]
        show: Option<DeliveriesCommand>,
        /// Only this rule's deliveries.
        #[arg(long)]
        rule: Option<String>,
        /// Only deliveries in this state (pending, sent, suppressed, failed, dead, …).
        #[arg(long)]
        status: Option<String>,
        /// At most this many (up to 10000).
        #[arg(long, default_value_t = 50, value_parser = parse_limit)]
        limit: i64,
    },
    /// Integrations: list them, browse the catalogue, add one, set a credential, enable one that
    /// a 410 disabled, or send one action once with a sample row.
    ///
    /// Example: rowfire integrations set-credential alerts token --from-env SLACK_BOT_TOKEN
    Integrations {
        #[command(subcommand)]
        command: Option<IntegrationsCommand>,
    },
    /// Sources: list where each source's DSN comes from, or store one encrypted.
    ///
    /// Example: rowfire sources add billing --url-env BILLING_DATABASE_URL
    Sources {
        #[command(subcommand)]
        command: Option<SourcesCommand>,
    },
    /// Print a new master key for ROWFIRE_MASTER_KEY (secrets are sealed under it).
    ///
    /// Example: rowfire keygen
    Keygen,
    /// Resume a halted workspace; rows that arrived meanwhile are evaluated.
    ///
    /// Example: rowfire resume
    Resume,
}

/// `--now`: an instant from 1970 to 9000 (so that ten years back and the sample's weeks ahead
/// stay inside the range the control plane stores).
pub(crate) fn parse_now(s: &str) -> Result<Timestamp, String> {
    let at = rowfire::row::parse_timestamp(s).ok_or_else(|| {
        format!("\"{s}\" is not a time; use RFC 3339 (2026-11-29T12:00:00Z) or a date (2026-11-29)")
    })?;
    let (earliest, latest) = (
        Timestamp::UNIX_EPOCH,
        Timestamp::constant(221_845_392_000, 0),
    );
    if !(earliest..=latest).contains(&at) {
        return Err(format!(
            "{at} is out of range; give a time from {earliest} to {latest}"
        ));
    }
    Ok(at)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("ROWFIRE_LOG"))
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Demo { dir, now, once } => demo(&dir, Clock::from_option(now), once).await,
        Command::Validate { file } => validate(&file).await,
        Command::Explain {
            trigger,
            file,
            days,
            now,
        } => explain(&trigger, &file, days, Clock::from_option(now)),
        Command::Backtest {
            rule,
            file,
            days,
            sample,
            now,
            json,
        } => {
            let defs = load(&file)?;
            let (_, trigger) = defs.rule_and_trigger(&rule)?;
            let def = defs.source(&trigger.source).expect("validated");
            let source = Source::from_env(def).await?;
            let opts = Options {
                days,
                sample,
                now: Clock::from_option(now).now(),
            };
            let report = backtest::run(&defs, &rule, &source, &opts).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate => {
            let store = Store::from_env().await?;
            let applied = store.migrate().await?;
            println!(
                "control plane {}: {applied} migration(s) applied, schema up to date",
                store.shown()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Push { file } => {
            let text = match rowfire::definitions::read_file(&file) {
                Ok(text) => text,
                Err(problems) => {
                    eprint!("{problems}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            let store = Store::from_env().await?;
            store.migrate().await?;
            let summary =
                match versions::push(&store, DEFAULT_WORKSPACE, &text, Timestamp::now()).await {
                    Err(versions::PushError::Definitions(problems)) => {
                        eprint!("{problems}");
                        return Ok(ExitCode::FAILURE);
                    }
                    other => other?,
                };
            print_push(&summary);
            if let Ok(defs) = rowfire::definitions::parse(&text) {
                cli::warn_unresolved_sources(&store, &defs).await?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Pull { version } => {
            let store = open_store().await?;
            match versions::get(&store, DEFAULT_WORKSPACE, version).await? {
                Some(v) => print!("{}", v.document),
                None if version.is_some() => bail!(
                    "there is no version {}; `rowfire status` shows the one in force",
                    version.unwrap_or(0)
                ),
                None => bail!(
                    "nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`"
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List => list(&open_store().await?).await,
        Command::Status => status(&open_store().await?).await,
        Command::Promote { rule } => set_mode(&rule, Mode::Live).await,
        Command::Demote { rule } => set_mode(&rule, Mode::Shadow).await,
        Command::Halt { reason } => {
            let store = open_store().await?;
            let reason = reason.join(" ");
            workspace::halt(&store, DEFAULT_WORKSPACE, &reason, Timestamp::now()).await?;
            println!(
                "workspace {DEFAULT_WORKSPACE} halted: {reason}. Nothing is sent and no watermark moves until `rowfire resume`."
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Resume => {
            let store = open_store().await?;
            workspace::resume(&store, DEFAULT_WORKSPACE).await?;
            println!(
                "workspace {DEFAULT_WORKSPACE} resumed; rows that arrived while halted are evaluated on the next polls."
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker {
            once,
            due_now,
            concurrency,
            poll_only,
            delivery_lease,
            trigger_lease,
        } => {
            let store = Store::from_env().await?;
            store.migrate().await?;
            let opts = cli::WorkerOptions {
                once,
                due_now,
                concurrency: concurrency.max(1),
                poll_only,
                delivery_lease,
                trigger_lease,
            };
            worker(store, opts).await
        }
        Command::Why { rule, key, days } => {
            let store = open_store().await?;
            let Some((_, defs)) = versions::in_force(&store, DEFAULT_WORKSPACE).await? else {
                bail!(
                    "nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`"
                );
            };
            let explained = rowfire::explanation::why(
                &store,
                DEFAULT_WORKSPACE,
                &defs,
                rowfire::explanation::Question {
                    rule: &rule,
                    key: &key,
                    days,
                    now: Timestamp::now(),
                },
                &poll::env_dsn(),
            )
            .await
            .map_err(|e| anyhow!(e))?;
            print!("{explained}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Deliveries {
            show,
            rule,
            status,
            limit,
        } => {
            let store = open_store().await?;
            let filter = match show {
                Some(DeliveriesCommand::Retry { id }) => {
                    rowfire::deliver::retry(&store, DEFAULT_WORKSPACE, id, Timestamp::now())
                        .await?;
                    println!("delivery {id} is pending again and due now");
                    return Ok(ExitCode::SUCCESS);
                }
                Some(DeliveriesCommand::Prune { older_than }) => {
                    let before = rowfire::store::earlier(Timestamp::now(), older_than);
                    let n = rowfire::deliver::prune(&store, DEFAULT_WORKSPACE, before).await?;
                    println!(
                        "pruned {n} finished deliveries created before {before}; pending deliveries and the ledger are kept"
                    );
                    return Ok(ExitCode::SUCCESS);
                }
                Some(DeliveriesCommand::Show { id }) => {
                    return cli::integrations::show_delivery(&store, id).await;
                }
                None => rowfire::deliver::Filter {
                    rule,
                    status,
                    id: None,
                    limit: Some(limit),
                },
            };
            let mut tx = store.begin(DEFAULT_WORKSPACE).await?;
            let found = rowfire::deliver::list(&mut tx, DEFAULT_WORKSPACE, &filter).await?;
            tx.rollback().await?;
            let rule_w = found.iter().map(|d| d.rule.chars().count()).max();
            let action_w = found.iter().map(|d| d.action.chars().count()).max();
            let (rule_w, action_w) = (rule_w.unwrap_or(0), action_w.unwrap_or(0));
            for d in &found {
                let reason = d
                    .reason
                    .as_deref()
                    .map(|r| format!("  ({r})"))
                    .unwrap_or_default();
                println!(
                    "#{:<7} {:<10} {:<6} {:<rule_w$} {:<action_w$} {}{reason}",
                    d.id,
                    d.status,
                    d.mode,
                    d.rule,
                    d.action,
                    d.recipient.as_deref().unwrap_or("-")
                );
            }
            if found.is_empty() {
                println!("no deliveries match");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Integrations { command } => {
            use cli::integrations as i;
            let store = open_store().await?;
            match command.unwrap_or(IntegrationsCommand::List) {
                IntegrationsCommand::List => i::list(&store).await,
                IntegrationsCommand::Catalog => Ok(i::catalog()),
                IntegrationsCommand::Add {
                    name,
                    catalog,
                    from,
                    base_url,
                } => {
                    let (entry, url) = (catalog.as_deref(), base_url.as_deref());
                    i::add(&store, &name, entry, url, from.as_deref()).await
                }
                IntegrationsCommand::SetCredential {
                    name,
                    credential,
                    from_env,
                } => i::set_credential(&store, &name, &credential, from_env.as_deref()).await,
                IntegrationsCommand::Enable { name } => i::enable(&store, &name).await,
                IntegrationsCommand::Disable { name, reason } => {
                    i::disable(&store, &name, &reason.join(" ")).await
                }
                IntegrationsCommand::Test {
                    name,
                    action,
                    row,
                    params,
                    recipient,
                } => i::test(&store, &name, &action, &row, &params, recipient).await,
            }
        }
        Command::Sources { command } => {
            let store = open_store().await?;
            match command.unwrap_or(SourcesCommand::List) {
                SourcesCommand::List => cli::integrations::sources(&store).await,
                SourcesCommand::Add { name, url_env } => {
                    cli::integrations::add_source(&store, &name, &url_env).await
                }
            }
        }
        Command::Keygen => {
            println!("{}", rowfire::secret::MasterKey::generate());
            eprintln!(
                "Set it as ROWFIRE_MASTER_KEY wherever Rowfire runs and keep a copy somewhere safe:"
            );
            eprintln!("secrets sealed under it cannot be opened without it.");
            Ok(ExitCode::SUCCESS)
        }
        Command::Rewind { trigger, days } => {
            let store = open_store().await?;
            let by = SignedDuration::from_hours(24 * i64::from(days));
            let now = Timestamp::now();
            if !poll::rewind(&store, DEFAULT_WORKSPACE, &trigger, by, now).await? {
                bail!(
                    "unknown trigger \"{trigger}\"; `rowfire status` lists the triggers in force"
                );
            }
            println!(
                "{trigger}: watermark moved back to {} and due now; rows that already fired will not fire again",
                rowfire::store::earlier(now, by)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Fixture(FixtureCommand::Simulate { into, rows }) => {
            let added = fixture::simulate(&into, Timestamp::now(), rows).await?;
            println!(
                "added {added} row(s) of fresh activity; a running worker fires on them at its next poll"
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Fixture(FixtureCommand::Load { into, now }) => {
            let data = fixture::load(&into, Clock::from_option(now).now()).await?;
            let counts: Vec<String> = data
                .tables
                .iter()
                .map(|t| format!("{} {}", t.rows.len(), t.name))
                .collect();
            println!(
                "sample data placed relative to {}: {}",
                data.now,
                counts.join(", ")
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
