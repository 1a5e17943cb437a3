//! The `rowfire` command line: parses arguments and dispatches to the commands in `cli/`, which
//! call the library and print what it returns.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::rules::Mode;

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

/// The allocator: the senders allocate per request, and glibc's malloc spent a sixth of their
/// CPU doing it (BENCHMARKS.md, deliver_queue, twentieth session).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;
use cli::commands::Command;
use cli::{
    definitions, deliveries, demo, init, integrations, schedule, serve, sources, worker, workspace,
    workspaces,
};

/// Rowfire turns rows in your database into actions, exactly once per rule, per key, per period.
#[derive(Parser)]
#[command(name = "rowfire", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The workspace to work in (default: ROWFIRE_WORKSPACE, else `default`).
    #[arg(long, global = true, value_parser = cli::workspaces::parse_workspace)]
    workspace: Option<rowfire::store::WorkspaceId>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::from_env();
    if let Err(e) = cli::logs::init(&config) {
        eprintln!("error: {}", cli::out::printable(&e));
        return ExitCode::FAILURE;
    }
    match run(Cli::parse(), config).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", cli::out::printable(&cli::out::error_line(&e)));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli, mut config: Config) -> Result<ExitCode> {
    if let Some(workspace) = cli.workspace {
        config.workspace = Ok(workspace);
    }
    let at = Clock::from_option;
    match cli.command {
        Command::Demo {
            dir,
            now,
            once,
            listen,
        } => demo::demo(&config, &dir, at(now), once, listen).await,
        Command::Fixture(command) => demo::fixture(command).await,
        Command::Validate { file } => definitions::validate(&config, &file).await,
        Command::Explain {
            trigger,
            file,
            days,
            now,
        } => definitions::explain(&trigger, &file, days, at(now)),
        Command::Backtest {
            rule,
            file,
            days,
            sample,
            now,
            json,
        } => definitions::backtest(&config, &rule, &file, days, sample, at(now), json).await,
        Command::Push { file } => definitions::push(&config, &file).await,
        Command::Pull { version } => definitions::pull(&config, version).await,
        Command::List => definitions::list(&config).await,
        Command::Promote { rule } => definitions::set_mode(&config, &rule, Mode::Live).await,
        Command::Demote { rule } => definitions::set_mode(&config, &rule, Mode::Shadow).await,
        Command::Why { rule, key, days } => definitions::why(&config, &rule, &key, days).await,
        Command::Migrate => workspace::migrate(&config).await,
        Command::Status => workspace::status(&config).await,
        Command::Halt { reason } => workspace::halt(&config, &reason.join(" ")).await,
        Command::Resume => workspace::resume(&config).await,
        Command::Rewind { trigger, days } => workspace::rewind(&config, &trigger, days).await,
        Command::Keygen => Ok(workspace::keygen()),
        Command::Init {
            source,
            source_env,
            dsn_env,
            out,
            force,
        } => init::init(source, source_env, dsn_env, &out, force).await,
        Command::Worker {
            once,
            due_now,
            concurrency,
            poll_only,
            delivery_lease,
            trigger_lease,
            metrics,
            count_clocks_every,
        } => {
            let opts = worker::WorkerOptions {
                metrics,
                once,
                due_now,
                concurrency: concurrency.max(1),
                poll_only,
                delivery_lease,
                trigger_lease,
                count_clocks_every,
            };
            worker::worker(&config, opts).await
        }
        Command::Schedule {
            rule,
            within,
            limit,
            now,
        } => schedule::run(&config, rule.as_deref(), within, limit, at(now)).await,
        Command::Deliveries {
            show,
            rule,
            status,
            limit,
        } => deliveries::run(&config, show, rule, status, limit).await,
        Command::Integrations { command } => integrations::run(&config, command).await,
        Command::Sources { command } => sources::run(&config, command).await,
        Command::Workspaces { command } => workspaces::run(&config, command).await,
        Command::Serve {
            listen,
            with_worker,
        } => serve::serve(&config, listen, with_worker).await,
        Command::Tokens { command } => serve::tokens(&config, command).await,
    }
}
