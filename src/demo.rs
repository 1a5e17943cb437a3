//! The first run: a sample database and definitions in a directory, and a backtest headline for
//! every sample rule. Needs no database server.

use std::path::{Path, PathBuf};

use jiff::Timestamp;

use crate::backtest::{self, BacktestError, Options, Report};
use crate::definitions::{self, Problems};
use crate::fixture::{self, FixtureError, SAMPLE_DEFINITIONS};
use crate::source::{Source, SourceError};

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
    Ok(Demo {
        sample_url,
        definitions: definitions_path,
        reports,
    })
}
