//! The first run: a sample database and definitions in a directory, a backtest headline for
//! every sample rule, and an embedded control plane (`DIR/rowfire.db`) with the sample rules
//! bound to the Demo inbox, ready for the worker. Needs no database server.

use std::path::{Path, PathBuf};

use jiff::Timestamp;

use std::sync::Arc;

use jiff::SignedDuration;

use crate::backtest::{self, BacktestError, Options, Report};
use crate::clock::Clock;
use crate::definitions::versions::{self, PushError};
use crate::definitions::{self, Problems};
use crate::fixture::{self, FixtureError, SAMPLE_DEFINITIONS};
use crate::poll::{self, Poller};
use crate::rules::{self, Mode};
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
}

/// What the demo made.
#[derive(Debug)]
pub struct Demo {
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
    /// A worker's poller on the demo's control plane, reading the sample database.
    pub fn poller(&self, clock: Clock) -> Poller {
        let url = self.sample_url.clone();
        Poller::new(
            self.store.clone(),
            "demo",
            clock,
            Arc::new(move |_| Some(url.clone())),
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
    versions::push(&store, DEFAULT_WORKSPACE, SAMPLE_DEFINITIONS, now).await?;
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
        sample_url,
        definitions: definitions_path,
        reports,
        control_plane_url,
        store,
    })
}
