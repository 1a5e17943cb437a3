//! The `rowfire` command line: parses arguments and dispatches to the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use jiff::{SignedDuration, Timestamp};

use rowfire::backtest::{self, Options};
use rowfire::clock::Clock;
use rowfire::definitions::{self, Definitions};
use rowfire::source::{Source, dialect_of};
use rowfire::sql_guard::{self, Shape, Window};
use rowfire::validation::{self, TriggerCheck};
use rowfire::{demo, fixture};

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
        /// Window length in days, ending now.
        #[arg(long, default_value_t = 1)]
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
        /// Days back from now.
        #[arg(long, default_value_t = 30)]
        days: u32,
        /// Sample fires to show, spread across the window.
        #[arg(long, default_value_t = 5)]
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
}

#[derive(Subcommand)]
enum FixtureCommand {
    /// Write the deterministic sample B2B SaaS database into SQLite or PostgreSQL.
    ///
    /// Example: rowfire fixture load --into sqlite://sample.db --now 2026-11-29T12:00:00Z
    Load {
        /// postgres://… or sqlite://path (created if missing).
        #[arg(long)]
        into: String,
        /// Place every timestamp relative to this instant (RFC 3339 or YYYY-MM-DD); default now.
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
    },
}

fn parse_now(s: &str) -> Result<Timestamp, String> {
    rowfire::row::parse_timestamp(s).ok_or_else(|| {
        format!("\"{s}\" is not a time; use RFC 3339 (2026-11-29T12:00:00Z) or a date (2026-11-29)")
    })
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
        Command::Demo { dir, now } => demo(&dir, Clock::from_option(now)).await,
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

fn load(file: &Path) -> Result<Definitions> {
    Ok(definitions::load_file(file)?)
}

async fn demo(dir: &Path, clock: Clock) -> Result<ExitCode> {
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
    println!("Look closer:");
    println!("  export SAMPLE_DATABASE_URL={}", made.sample_url);
    println!(
        "  rowfire backtest billing_ticket -f {} --days {} --now {now}",
        made.definitions.display(),
        demo::DEMO_DAYS
    );
    println!(
        "  rowfire explain declined_charge -f {} --now {now}",
        made.definitions.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn validate(file: &Path) -> Result<ExitCode> {
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
    let mut failed = false;
    for check in validation::check_against_sources(&defs, Timestamp::now()).await {
        match check {
            TriggerCheck::Ok { trigger, source } => {
                println!("  trigger {trigger}: columns ok on {source}")
            }
            TriggerCheck::NotChecked { trigger, var } => {
                println!("  trigger {trigger}: columns not checked ({var} is not set)")
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

fn explain(name: &str, file: &Path, days: u32, clock: Clock) -> Result<ExitCode> {
    let defs = load(file)?;
    let trigger = defs.trigger_named(name)?;
    let def = defs.source(&trigger.source).expect("validated");
    let from_env = std::env::var(&def.dsn_env)
        .ok()
        .and_then(|dsn| dialect_of(&dsn));
    let dialect = def.kind.or(from_env).ok_or_else(|| {
        anyhow!("source {} declares no `type` and {} is not set; set one so Rowfire knows the SQL dialect", def.name, def.dsn_env)
    })?;
    let query =
        sql_guard::check(&trigger.sql, dialect).map_err(|e| anyhow!("trigger {name}: {e}"))?;
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
    let sql = query
        .page_sql(
            shape,
            window,
            sql_guard::Slice::First,
            Some(def.page_size),
            sql_guard::Placeholders::Inline,
        )
        .sql;
    println!("-- trigger {name} on source {} ({dialect})", def.name);
    if query.names_window() {
        println!("-- window {since} → {now}, bound to the query's own :since and :until");
    } else {
        println!("-- window {since} ≤ {} < {now}", trigger.event_time);
    }
    println!(
        "-- pages of {} rows in ({}, {}) order; rows with a NULL key are counted, not paged",
        def.page_size,
        trigger.event_time,
        trigger.key.join(", ")
    );
    println!("{sql};");
    println!(
        "-- each further page adds: AND ({}, {}) > (the previous page's last row)",
        trigger.event_time,
        trigger.key.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
