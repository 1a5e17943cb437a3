//! The subcommands' arguments (`rowfire integrations …`, `sources …`, `deliveries …`,
//! `fixture …`), parsed by clap in `main.rs`.

use clap::Subcommand;
use jiff::{SignedDuration, Timestamp};

use crate::parse_now;

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

#[derive(Subcommand)]
pub(crate) enum DeliveriesCommand {
    /// One delivery: its rule, state, reason, recipient, recorded request and every attempt.
    ///
    /// Example: rowfire deliveries show 42
    Show {
        /// The delivery's id.
        id: i64,
    },
    /// Re-queue a failed or dead delivery, due now, with the same id (its idempotency key).
    ///
    /// Example: rowfire deliveries retry 42
    Retry {
        /// The delivery's id.
        id: i64,
    },
    /// Delete finished deliveries older than an age; pending ones and the ledger are kept.
    ///
    /// Example: rowfire deliveries prune --older-than 30d
    Prune {
        /// Age such as 30d, 12h or 90m.
        #[arg(long, value_parser = parse_age)]
        older_than: SignedDuration,
    },
}

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

/// `--concurrency`: 1 to 64 pollers and senders.
pub(crate) fn parse_concurrency(s: &str) -> Result<usize, String> {
    bounded(s, "workers", 1, 64).map(|n| n as usize)
}

/// `--limit`: 1 to 10000 rows listed.
pub(crate) fn parse_limit(s: &str) -> Result<i64, String> {
    bounded(s, "rows", 1, 10_000).map(|n| n as i64)
}

/// `--sample`: 0 to 1000 sample fires.
pub(crate) fn parse_sample(s: &str) -> Result<usize, String> {
    bounded(s, "sample fires", 0, 1_000).map(|n| n as usize)
}

/// `fixture simulate --rows`: 1 to 100000 rows.
pub(crate) fn parse_rows(s: &str) -> Result<usize, String> {
    bounded(s, "rows", 1, 100_000).map(|n| n as usize)
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
