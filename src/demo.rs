//! The first run: a sample database and definitions in a directory, a backtest headline for
//! every sample rule, and an embedded control plane (`DIR/rowfire.db`) with the sample rules
//! bound to the Demo inbox, ready for the worker. Needs no database server.

use std::path::{Path, PathBuf};

use jiff::Timestamp;

use std::sync::Arc;

use jiff::SignedDuration;

use crate::backtest::{self, BacktestError, Options, Report};
use crate::clock::Clock;
use crate::definitions::{self, Problems};
use crate::fixture::{self, FixtureError, SAMPLE_DEFINITIONS};
use crate::poll::{self, Poller};
use crate::push::{self, PushError};
use crate::rules::{self, Mode};
use crate::send::client::Client;
use crate::send::egress::Policy;
use crate::send::sender::{self, Sender};
use crate::source::{Source, SourceError};
use crate::store::{DEFAULT_WORKSPACE, Store, StoreError};

/// Days every demo headline covers.
pub const DEMO_DAYS: u32 = 120;

/// What the demo could not do.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The directory could not be written.
    #[error("cannot write the demo directory {path}: {message}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The sample database could not be written.
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    /// The sample definitions are invalid (a bug).
    #[error(transparent)]
    Definitions(#[from] Problems),
    /// The sample source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A backtest failed.
    #[error(transparent)]
    Backtest(#[from] BacktestError),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sample definitions could not be pushed.
    #[error(transparent)]
    Push(#[from] PushError),
    /// A mode change failed.
    #[error(transparent)]
    Mode(#[from] rules::ModeError),
    /// The sample source could not be stored in the control plane.
    #[error(transparent)]
    StoredSource(#[from] crate::secret::StoredSecretError),
}

/// What the demo made.
#[derive(Debug)]
pub struct Demo {
    /// The demo directory, absolute.
    pub dir: PathBuf,
    /// The sample database's URL.
    pub sample_url: String,
    /// The copy of the sample definitions.
    pub definitions: PathBuf,
    /// One backtest per sample rule, in file order.
    pub reports: Vec<Report>,
    /// The embedded control plane's URL (`sqlite://DIR/rowfire.db`).
    pub control_plane_url: String,
    /// The control plane, with the sample definitions pushed, every trigger rewound over the
    /// demo window and every rule live (its only destination is the Demo inbox).
    pub store: Store,
}

impl Demo {
    /// A sender on the demo's control plane: it delivers the reminders to the Demo inbox when
    /// they fall due (the sample's only destination, so every outbound address is refused).
    /// It rechecks a reminder's row on the sample database just before sending.
    pub fn sender(&self, clock: Clock) -> Sender {
        let url = self.sample_url.clone();
        Sender::new(
            self.store.clone(),
            Client::new(Policy::parse("", true).expect("the inbox-only policy")),
            clock,
            Err("the demo sends only to the Demo inbox".into()),
            sender::Config::default(),
        )
        .with_recheck(Arc::new(move |_, _| Some(url.clone().into())))
    }

    /// A worker's poller on the demo's control plane, reading the sample database.
    pub fn poller(&self, clock: Clock) -> Poller {
        let url = self.sample_url.clone();
        Poller::new(
            self.store.clone(),
            "demo",
            clock,
            Arc::new(move |_, _| Some(url.clone().into())),
        )
    }
}

/// Creates the sample database and definitions in `dir` and backtests every sample rule over
/// the last [`DEMO_DAYS`] days before `now`.
pub async fn run(dir: &Path, now: Timestamp) -> Result<Demo, DemoError> {
    let dir_error = |e: std::io::Error| DemoError::Dir {
        path: dir.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(dir_error)?;
    // Absolute from here on: every path the demo prints works from any directory.
    let dir = &std::fs::canonicalize(dir).map_err(dir_error)?;
    let definitions_path = dir.join("definitions.yaml");
    std::fs::write(&definitions_path, SAMPLE_DEFINITIONS).map_err(dir_error)?;
    let sample_url = format!("sqlite://{}", dir.join("sample.db").display());
    fixture::load(&format!("{sample_url}?mode=rwc"), now).await?;

    let defs = definitions::parse(SAMPLE_DEFINITIONS)?;
    let source_def = defs
        .source(definitions::DEFAULT_SOURCE)
        .expect("the default source always exists");
    let source = Source::connect(source_def, &sample_url).await?;
    let opts = Options {
        days: DEMO_DAYS,
        sample: 0,
        now,
    };
    let mut reports = Vec::new();
    for rule in &defs.rules {
        reports.push(backtest::run(&defs, &rule.name, &source, &opts).await?);
    }
    // A fresh embedded control plane next to the sample, so `rowfire` run inside DIR acts on it.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("rowfire.db{suffix}")));
    }
    let control_plane_url = format!("sqlite://{}", dir.join("rowfire.db").display());
    let store = Store::open(&control_plane_url).await?;
    store.migrate().await?;
    push::push(&store, DEFAULT_WORKSPACE, SAMPLE_DEFINITIONS, now).await?;
    // The sample is a file, so its URL holds no credential: stored with the control plane, a
    // worker started in DIR reads it without SAMPLE_DATABASE_URL or a master key.
    crate::secret::put_file_url(
        &store,
        DEFAULT_WORKSPACE,
        definitions::DEFAULT_SOURCE,
        &sample_url,
        now,
    )
    .await?;
    // New triggers start at now so history never fires; the demo looks back on purpose, and its
    // rules go live because their only destination is the Demo inbox.
    let by = SignedDuration::from_hours(24 * i64::from(DEMO_DAYS));
    for trigger in &defs.triggers {
        poll::rewind(&store, DEFAULT_WORKSPACE, &trigger.name, by, now).await?;
    }
    for rule in &defs.rules {
        rules::set_mode(&store, DEFAULT_WORKSPACE, &rule.name, Mode::Live, now).await?;
    }
    Ok(Demo {
        dir: dir.clone(),
        sample_url,
        definitions: definitions_path,
        reports,
        control_plane_url,
        store,
    })
}

impl Demo {
    /// The commands the demo suggests next, each to type as it is into a POSIX shell, in order:
    /// the first changes into the demo directory. `rowfire` is this program as `invocation`
    /// names it.
    pub fn next_steps(&self, invocation: &str, now: Timestamp) -> Vec<String> {
        vec![
            format!("cd {}", shell_word(&self.dir.display().to_string())),
            format!("{invocation} status"),
            format!("{invocation} worker --once"),
            format!("{invocation} schedule --within 3h --now {now}"),
            format!(
                "SAMPLE_DATABASE_URL={} {invocation} backtest billing_ticket -f definitions.yaml --days {DEMO_DAYS} --now {now}",
                shell_word(&self.sample_url)
            ),
        ]
    }
}

/// How to run this program from a shell: `rowfire` when the `rowfire` on the `PATH` is this
/// program, else this program's absolute path (for example after `cargo run`), with a note on
/// installing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// What to type.
    pub command: String,
    /// Said when `rowfire` is not on the `PATH`: how to install it.
    pub install_hint: Option<String>,
}

/// How this process can be run again from a shell (see [`Invocation`]).
pub fn invocation() -> Invocation {
    let exe = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    #[expect(
        clippy::disallowed_methods,
        reason = "whether this build is the `rowfire` on the PATH decides how the printed commands name it"
    )]
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            let found = std::fs::canonicalize(d.join("rowfire")).ok();
            found.is_some() && found == exe
        })
    });
    match exe {
        Some(_) if on_path => Invocation {
            command: "rowfire".into(),
            install_hint: None,
        },
        Some(exe) => {
            // `cargo run` tells the program where its checkout is.
            #[expect(
                clippy::disallowed_methods,
                reason = "`cargo run` names the checkout, for the install hint"
            )]
            let install = match std::env::var("CARGO_MANIFEST_DIR") {
                Ok(checkout) => format!("`cargo install --path {}`", shell_word(&checkout)),
                Err(_) => "`cargo install --path .` in the Rowfire checkout".into(),
            };
            Invocation {
                command: shell_word(&exe.display().to_string()),
                install_hint: Some(format!(
                    "rowfire is not on your PATH, so the commands name this build by its path; {install} installs it as rowfire"
                )),
            }
        }
        None => Invocation {
            command: "rowfire".into(),
            install_hint: Some(
                "rowfire is not on your PATH: install it with `cargo install --path .` in the Rowfire checkout".into(),
            ),
        },
    }
}

/// `word` as one POSIX shell word: as it is when made only of characters a shell leaves alone,
/// else single-quoted.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:+=@%,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_a_shell_would_change_them() {
        assert_eq!(shell_word("/tmp/demo-1/sample.db"), "/tmp/demo-1/sample.db");
        assert_eq!(shell_word("/tmp/my demo"), "'/tmp/my demo'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
