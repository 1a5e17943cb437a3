//! Rowfire's own settings, read from the environment in this one module: the control plane
//! (`ROWFIRE_DATABASE_URL`), the master key (`ROWFIRE_MASTER_KEY`), the egress policy
//! (`ROWFIRE_EGRESS_ALLOW`, `ROWFIRE_EGRESS`), the log filter (`ROWFIRE_LOG`) and the host name
//! that names a worker's pollers (`HOSTNAME`). Each setting's owner parses it (`Store::open`,
//! `MasterKey::parse`, `Policy::parse`) and names its variable in its own messages.
//!
//! Not here, because they are data rather than settings: the variables a definitions file names
//! for its sources' DSNs (`dsn_env`, read by `source` and `poll::env_dsn`), and a variable a
//! command names on its command line (`--from-env`, `--url-env`).

use crate::secret::{MASTER_KEY_ENV, MasterKey, SecretError};
use crate::send::egress::{self, Policy};
use crate::store::{DATABASE_URL_ENV, DEFAULT_DATABASE_URL};

/// The variable holding the log filter (`info`, `rowfire=debug`, …).
pub const LOG_ENV: &str = "ROWFIRE_LOG";
/// The variable naming this host, for the names of a worker's pollers.
pub const HOST_ENV: &str = "HOSTNAME";

/// Every setting Rowfire reads from its environment, each read once.
pub struct Config {
    /// The control plane's URL (`sqlite://rowfire.db` when the variable is unset or empty).
    pub database_url: String,
    /// Whether the control plane was named by the environment rather than defaulted.
    pub database_url_set: bool,
    /// The master key, or why there is none (a missing key is an error only where a secret is
    /// needed).
    pub master_key: Result<MasterKey, SecretError>,
    /// The egress policy, or which range could not be read.
    pub egress: Result<Policy, String>,
    /// The log filter, if one is set.
    pub log_filter: Option<String>,
    /// This host's name (`local` when unknown).
    pub host: String,
}

impl Config {
    /// Reads the environment.
    pub fn from_env() -> Config {
        let set = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let database_url = set(DATABASE_URL_ENV);
        let master_key = match set(MASTER_KEY_ENV) {
            Some(text) => MasterKey::parse(&text),
            None => Err(SecretError::MissingMasterKey),
        };
        let allow = set(egress::ALLOW_ENV).unwrap_or_default();
        let inbox_only = set(egress::MODE_ENV).is_some_and(|v| v == "inbox-only");
        Config {
            database_url_set: database_url.is_some(),
            database_url: database_url.unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string()),
            master_key,
            egress: Policy::parse(&allow, inbox_only),
            log_filter: set(LOG_ENV),
            host: std::env::var(HOST_ENV).unwrap_or_else(|_| "local".into()),
        }
    }
}
