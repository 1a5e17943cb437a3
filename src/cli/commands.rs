//! The commands' arguments (`rowfire …`, and the subcommands of `integrations`, `sources`,
//! `deliveries` and `fixture`), parsed by clap in `main.rs`, and the parsers that bound every
//! number where it enters.

use std::path::PathBuf;

use clap::Subcommand;
use jiff::{SignedDuration, Timestamp};
use rowfire::outbox::DeliveryStatus;

/// Rowfire's commands.
#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// Poll once and exit instead of running the worker and the server until ctrl-c.
        #[arg(long)]
        once: bool,
        /// Where the demo's server listens (another port is picked if this one is in use).
        #[arg(long, default_value = rowfire::http::DEFAULT_LISTEN, value_parser = super::serve::parse_listen)]
        listen: std::net::SocketAddr,
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
        /// Pollers in this process, and requests in flight in units of 64 (1 to 64).
        #[arg(long, default_value_t = 1, value_parser = parse_concurrency)]
        concurrency: usize,
        /// Do not LISTEN for work (for connection poolers): an idle sender looks every second.
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
        /// Serve /metrics (Prometheus text format) on this address, e.g. 127.0.0.1:9464.
        #[arg(long, value_parser = super::serve::parse_listen)]
        metrics: Option<std::net::SocketAddr>,
        /// How often a trigger's rows with a NULL or unreadable clock are counted over its whole
        /// query (0s to 7d; 0s counts on every poll). Polls read only their window; between
        /// counts they report the last one and when it was taken.
        #[arg(long, default_value = "1h", value_parser = parse_count_clocks_every)]
        count_clocks_every: jiff::SignedDuration,
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
    /// Upcoming sends of time-anchored rules, soonest first, and each anchored rule's sweep.
    ///
    /// Example: rowfire schedule meeting_nudge --within 3h
    Schedule {
        /// Only this anchored rule.
        rule: Option<String>,
        /// How far ahead from now to list sends due (at most 90d).
        #[arg(long, default_value = "3h", value_parser = parse_within)]
        within: SignedDuration,
        /// At most this many sends (up to 10000).
        #[arg(long, default_value_t = 100, value_parser = parse_limit)]
        limit: i64,
        /// The start of the window (RFC 3339 or YYYY-MM-DD); default now.
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
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
        /// Only deliveries in this state (pending, sent, skipped, suppressed, failed, dead,
        /// expired, cancelled).
        #[arg(long, value_parser = parse_status)]
        status: Option<DeliveryStatus>,
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
    /// Draft a first definitions file from a source's catalogue: one trigger per table that
    /// looks like events (its clock and key chosen, with why) and one shadow rule on each,
    /// delivering to the Demo inbox. Tables it skips are listed with the reason. A DSN with a
    /// password goes in an environment variable (--source-env), never on the command line.
    ///
    /// Example: rowfire init --source sqlite://rowfire-demo/sample.db --out definitions.yaml
    Init {
        /// The source's URL (postgres://…, mysql://… or sqlite://path), without a password.
        #[arg(
            long,
            conflicts_with = "source_env",
            required_unless_present = "source_env"
        )]
        source: Option<String>,
        /// The environment variable that holds the source's URL (with its password, if any).
        #[arg(long, value_name = "VAR")]
        source_env: Option<String>,
        /// The environment variable the draft names for the source's DSN (default: the
        /// --source-env variable, else DATABASE_URL).
        #[arg(long, value_name = "VAR")]
        dsn_env: Option<String>,
        /// Where to write the draft.
        #[arg(long, default_value = "definitions.yaml")]
        out: PathBuf,
        /// Replace the --out file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Print a new master key for ROWFIRE_MASTER_KEY (secrets are sealed under it).
    ///
    /// Example: rowfire keygen
    Keygen,
    /// Resume a halted workspace; rows that arrived meanwhile are evaluated.
    ///
    /// Example: rowfire resume
    Resume,
    /// Serve the web UI, the HTTP API (/api, described at /api/openapi.json) and /metrics.
    /// Beyond loopback every request needs a token (`rowfire tokens create`).
    ///
    /// Example: rowfire serve --listen 127.0.0.1:8000 --with-worker
    Serve {
        /// The address to listen on.
        #[arg(long, default_value = rowfire::http::DEFAULT_LISTEN, value_parser = super::serve::parse_listen)]
        listen: std::net::SocketAddr,
        /// Run the worker (pollers and a sender) in the same process.
        #[arg(long)]
        with_worker: bool,
    },
    /// Create, list or revoke the API tokens of a workspace (each acts in that workspace only).
    ///
    /// Example: rowfire tokens create ci-bot
    Tokens {
        /// What to do.
        #[command(subcommand)]
        command: super::serve::TokensCommand,
    },
    /// Create, list, rename or delete workspaces (tenants).
    ///
    /// Example: rowfire workspaces create acme --timezone Europe/Berlin
    Workspaces {
        /// What to do (default: list).
        #[command(subcommand)]
        command: Option<super::workspaces::WorkspacesCommand>,
    },
}

#[derive(Subcommand)]
pub(crate) enum IntegrationsCommand {
    /// Each integration in force: its actions, which credentials are set, and its state.
    ///
    /// Example: rowfire integrations list
    List,
    /// The built-in catalogue: Slack, Zendesk, Braze, a signed webhook and the Demo inbox.
    ///
    /// Example: rowfire integrations catalog
    Catalog,
    /// Add an integration to the definitions in force (a new version): a catalogue entry, or a
    /// custom one described in a YAML file (base_url, auth, actions), read by the same code.
    ///
    /// Example: rowfire integrations add alerts --catalog slack
    /// Example: rowfire integrations add crm --from crm.yaml
    Add {
        /// The name rules bind to.
        name: String,
        /// The catalogue entry (`rowfire integrations catalog` lists them).
        #[arg(long, conflicts_with = "from", required_unless_present = "from")]
        catalog: Option<String>,
        /// A custom integration's YAML: base_url, auth, timeout_ms, rate_limit, actions.
        #[arg(long)]
        from: Option<std::path::PathBuf>,
        /// Where its requests go, if not the entry's default.
        #[arg(long)]
        base_url: Option<String>,
    },
    /// Store a credential, encrypted under ROWFIRE_MASTER_KEY. The value comes from an
    /// environment variable or standard input, never the command line, and is never printed.
    ///
    /// Example: rowfire integrations set-credential alerts token --from-env SLACK_BOT_TOKEN
    SetCredential {
        /// The integration.
        name: String,
        /// The credential (token, username, password, signing_secret, signing_secret_previous).
        credential: String,
        /// Read the value from this environment variable (else from standard input).
        #[arg(long)]
        from_env: Option<String>,
    },
    /// Disable an integration by hand: its deliveries wait, unlost, until it is enabled.
    ///
    /// Example: rowfire integrations disable alerts "Slack workspace migration tonight"
    Disable {
        /// The integration.
        name: String,
        /// Why, for the people who will see it.
        #[arg(num_args = 0..)]
        reason: Vec<String>,
    },
    /// Enable an integration a 410 (or a person) disabled; its waiting deliveries go at once.
    ///
    /// Example: rowfire integrations enable alerts
    Enable {
        /// The integration.
        name: String,
    },
    /// Render one action with a sample row and send it once, printing the answer.
    ///
    /// Example: rowfire integrations test alerts post_message --row '{"id": 1}' --param channel=#ops --param 'text=hello {{ id }}'
    Test {
        /// The integration.
        name: String,
        /// The action.
        action: String,
        /// The sample row, as a JSON object.
        #[arg(long, default_value = "{}")]
        row: String,
        /// A parameter template, NAME=TEMPLATE (repeatable).
        #[arg(long = "param")]
        params: Vec<String>,
        /// The recipient (default: the key, here `test`).
        #[arg(long)]
        recipient: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum SourcesCommand {
    /// Each source in force and where its DSN comes from.
    ///
    /// Example: rowfire sources list
    List,
    /// Store a source's DSN encrypted under ROWFIRE_MASTER_KEY, read from an environment
    /// variable; workers prefer it to the variable the definitions name.
    ///
    /// Example: rowfire sources add billing --url-env BILLING_DATABASE_URL
    Add {
        /// The source's name (`default` for the top-level `source`).
        name: String,
        /// The environment variable holding the DSN now.
        #[arg(long)]
        url_env: String,
    },
}

pub(crate) use super::deliveries::DeliveriesCommand;

/// An age such as `30d`, `12h` or `90m`, of at most [`MAX_DAYS`] days.
pub(crate) fn parse_age(s: &str) -> Result<SignedDuration, String> {
    let too_old = || format!("an age may be at most {MAX_DAYS}d (ten years), found {s}");
    let age = match s.strip_suffix('d') {
        Some(n) if !n.is_empty() && n.trim().bytes().all(|b| b.is_ascii_digit()) => {
            let days: i64 = n.trim().parse().map_err(|_| too_old())?;
            SignedDuration::from_secs(days.checked_mul(86_400).ok_or_else(too_old)?)
        }
        _ => s
            .parse::<SignedDuration>()
            .map_err(|_| format!("\"{s}\" is not an age; use 30d, 12h or 90m"))?,
    };
    if age.is_negative() {
        return Err(format!("\"{s}\" is not an age; use 30d, 12h or 90m"));
    }
    if age > SignedDuration::from_hours(24 * i64::from(MAX_DAYS)) {
        return Err(too_old());
    }
    Ok(age)
}

#[derive(Subcommand)]
pub(crate) enum FixtureCommand {
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
    /// Add fresh activity (declined payments, a detractor) to a sample database, stamped within
    /// the last minute, so a running worker has something new to fire on.
    ///
    /// Example: rowfire fixture simulate --into sqlite://rowfire-demo/sample.db --rows 5
    Simulate {
        /// The sample database: postgres://… or sqlite://path.
        #[arg(long)]
        into: String,
        /// Declined payments to add.
        #[arg(long, default_value_t = 5, value_parser = parse_rows)]
        rows: usize,
    },
}

/// The most days any command reaches back (`--days`, `--older-than`): ten years.
pub(crate) const MAX_DAYS: u32 = 3650;
/// The longest `--delivery-lease`.
pub(crate) const MAX_DELIVERY_LEASE: SignedDuration = SignedDuration::from_hours(1);

/// A whole number from `min` to `max`, or an error that names both.
fn bounded(s: &str, what: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(n) if n > max => Err(format!("{what} may be at most {max}, found {n}")),
        _ => Err(format!(
            "\"{s}\" is not a whole number of {what} from {min} to {max}"
        )),
    }
}

/// `--days`: 1 to [`MAX_DAYS`].
pub(crate) fn parse_days(s: &str) -> Result<u32, String> {
    bounded(s, "days", 1, u64::from(MAX_DAYS)).map(|n| n as u32)
}

/// `--concurrency`: 1 to 64 pollers, and 64 requests in flight for each.
pub(crate) fn parse_concurrency(s: &str) -> Result<usize, String> {
    bounded(s, "workers", 1, 64).map(|n| n as usize)
}

/// `--limit`: 1 to 10000 rows listed.
pub(crate) fn parse_limit(s: &str) -> Result<i64, String> {
    bounded(s, "rows", 1, 10_000).map(|n| n as i64)
}

/// `--status`: one of the delivery states.
pub(crate) fn parse_status(s: &str) -> Result<DeliveryStatus, String> {
    s.parse().map_err(|_| {
        let known: Vec<&str> = DeliveryStatus::ALL.iter().map(|d| d.as_str()).collect();
        format!("a delivery state is one of {}", known.join(", "))
    })
}

/// `--sample`: 0 to 1000 sample fires.
pub(crate) fn parse_sample(s: &str) -> Result<usize, String> {
    bounded(s, "sample fires", 0, 1_000).map(|n| n as usize)
}

/// `fixture simulate --rows`: 1 to 100000 rows.
pub(crate) fn parse_rows(s: &str) -> Result<usize, String> {
    bounded(s, "rows", 1, 100_000).map(|n| n as usize)
}

/// `schedule --within`: `90m`, `3h`, `2d` …, from one second to 90 days.
pub(crate) fn parse_within(s: &str) -> Result<SignedDuration, String> {
    match parse_age(s).map_err(|_| format!("\"{s}\" is not a duration; use 90m, 3h or 2d"))? {
        w if w > SignedDuration::from_hours(24 * 90) => {
            Err(format!("--within may be at most 90d, found {s}"))
        }
        w if w < SignedDuration::from_secs(1) => {
            Err(format!("--within must be from 1s to 90d, found {s}"))
        }
        w => Ok(w),
    }
}

/// `--delivery-lease`: a duration of at most [`MAX_DELIVERY_LEASE`].
pub(crate) fn parse_lease(s: &str) -> Result<SignedDuration, String> {
    let lease: SignedDuration = s
        .parse()
        .map_err(|_| format!("\"{s}\" is not a duration; use 60s, 5m or 1h"))?;
    if lease > MAX_DELIVERY_LEASE {
        return Err(format!(
            "the delivery lease may be at most {:#}, found {s}",
            MAX_DELIVERY_LEASE
        ));
    }
    Ok(lease)
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

/// `--count-clocks-every`: a duration from zero to 7 days.
pub(crate) fn parse_count_clocks_every(s: &str) -> Result<SignedDuration, String> {
    let max = SignedDuration::from_hours(24 * 7);
    let every: SignedDuration = s
        .parse()
        .map_err(|_| format!("\"{s}\" is not a duration; use 0s, 15m or 1h"))?;
    if every.is_negative() || every > max {
        return Err(format!(
            "--count-clocks-every must be from 0s to {max:#}, found {s}"
        ));
    }
    Ok(every)
}

/// `--trigger-lease`: a duration from [`rowfire::poll::MIN_LEASE`] to [`rowfire::poll::MAX_LEASE`].
pub(crate) fn parse_trigger_lease(s: &str) -> Result<SignedDuration, String> {
    let (min, max) = (rowfire::poll::MIN_LEASE, rowfire::poll::MAX_LEASE);
    let lease: SignedDuration = s
        .parse()
        .map_err(|_| format!("\"{s}\" is not a duration; use 30s, 2m or 1h"))?;
    if lease < min || lease > max {
        return Err(format!(
            "the trigger lease must be from {min:#} to {max:#}, found {s}"
        ));
    }
    Ok(lease)
}
