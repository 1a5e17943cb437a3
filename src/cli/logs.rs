//! Where logs go: standard error, filtered by `ROWFIRE_LOG` (errors only by default), in the
//! format `ROWFIRE_LOG_FORMAT` chooses (see `rowfire::config`). Every unit of work ends with a
//! `done` line in its span, with its fields (`duration_ms` among them; `rowfire::telemetry`).

use rowfire::config::{Config, LogFormat};

/// Installs the log subscriber `config` describes, or says why its format is refused.
pub(crate) fn init(config: &Config) -> Result<(), String> {
    let format = config.log_format.clone()?;
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing_subscriber::filter::LevelFilter::ERROR.into())
        .parse_lossy(config.log_filter.as_deref().unwrap_or_default());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        // Each line carries the innermost span's fields (`span`) and every enclosing span's
        // (`spans`), so a claim's line names its poll's workspace and trigger too.
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
    Ok(())
}
