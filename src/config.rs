//! Rowfire's own settings, read from the environment in this one module: the control plane
//! (`ROWFIRE_DATABASE_URL`), the master key (`ROWFIRE_MASTER_KEY`), the egress policy
//! (`ROWFIRE_EGRESS_ALLOW`, `ROWFIRE_EGRESS`), the log filter (`ROWFIRE_LOG`), the log format
//! (`ROWFIRE_LOG_FORMAT`), the owner's connection for migrations (`ROWFIRE_MIGRATE_URL`), the workspace commands work in (`ROWFIRE_WORKSPACE`; `--workspace`
//! wins over it) and the host name that names a worker's pollers (`HOSTNAME`). Each
//! setting's owner parses it (`Store::open`, `MasterKey::parse`, `Policy::parse`,
//! [`LogFormat::parse`]) and names its variable in its own messages.
//!
//! Logs go to standard error. `ROWFIRE_LOG_FORMAT=json` writes them as one JSON object per line
//! for log collectors, each carrying the fields of the spans it happened in (the poll's workspace
//! and trigger, the claim's rule, the send's and settle's delivery ids, and `duration_ms` on the
//! `done` line each unit of work writes when it ends); `text`, empty or unset keeps the human format. Any other
//! value is refused: the command stops before doing anything and names the values accepted.
//!
//! Not here, because they are data rather than settings: the variables a definitions file names
//! for its sources' DSNs (`dsn_env`, read by `source` and `poll::env_dsn`), and a variable a
//! command names on its command line (`--from-env`, `--url-env`).

use crate::secret::{MASTER_KEY_ENV, MasterKey, SecretError};
use crate::send::egress::{self, Policy};
use crate::store::{BadWorkspaceId, DATABASE_URL_ENV, DEFAULT_DATABASE_URL, WorkspaceId};

/// The variable holding the log filter (`info`, `rowfire=debug`, …).
pub const LOG_ENV: &str = "ROWFIRE_LOG";
/// The variable choosing how logs are written: `json`, or `text` (the default).
pub const LOG_FORMAT_ENV: &str = "ROWFIRE_LOG_FORMAT";
/// The variable naming the control plane's owner connection for `rowfire migrate`, when it is
/// not the application's (`ROWFIRE_DATABASE_URL`).
pub const MIGRATE_URL_ENV: &str = "ROWFIRE_MIGRATE_URL";
/// The variable naming the workspace commands read and write (`default` when unset).
pub const WORKSPACE_ENV: &str = "ROWFIRE_WORKSPACE";
/// The variable listing host names, besides loopback ones, that `rowfire serve` answers for
/// (comma-separated).
pub const ALLOWED_HOSTS_ENV: &str = "ROWFIRE_ALLOWED_HOSTS";
/// The variable listing the workspaces, besides the process's own, that the operator runs
/// itself (comma-separated): their sources read this process's environment variables and may
/// reach files and addresses on this host. Every other workspace is a tenant's.
pub const OPERATOR_WORKSPACES_ENV: &str = "ROWFIRE_OPERATOR_WORKSPACES";
/// The variable naming this host, for the names of a worker's pollers.
pub const HOST_ENV: &str = "HOSTNAME";

/// Every setting Rowfire reads from its environment, each read once.
pub struct Config {
    /// The control plane's URL (`sqlite://rowfire.db` when the variable is unset or empty).
    pub database_url: String,
    /// The owner's connection for `rowfire migrate`, if it differs from the application's.
    pub migrate_url: Option<String>,
    /// Whether the control plane was named by the environment rather than defaulted.
    pub database_url_set: bool,
    /// The master key, or why there is none (a missing key is an error only where a secret is
    /// needed).
    pub master_key: Result<MasterKey, SecretError>,
    /// The egress policy, or which range could not be read.
    pub egress: Result<Policy, String>,
    /// The log filter, if one is set.
    pub log_filter: Option<String>,
    /// How logs are written, or why the value given is refused.
    pub log_format: Result<LogFormat, String>,
    /// The workspace commands read and write (the default one when the variable is unset), or
    /// why the variable's value is not a workspace id.
    pub workspace: Result<WorkspaceId, BadWorkspaceId>,
    /// This host's name (`local` when unknown).
    pub host: String,
    /// Host names, besides loopback ones, the server answers for, lower-cased.
    pub allowed_hosts: Vec<String>,
    /// Workspaces besides the process's own that the operator runs itself, or the first entry
    /// that is not a workspace id.
    pub operator_workspaces: Result<Vec<WorkspaceId>, BadWorkspaceId>,
}

impl Config {
    /// Reads the environment.
    pub fn from_env() -> Config {
        #[expect(
            clippy::disallowed_methods,
            reason = "the config module is the one place Rowfire's settings are read"
        )]
        let set = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let database_url = set(DATABASE_URL_ENV);
        let master_key = match set(MASTER_KEY_ENV) {
            Some(text) => MasterKey::parse(&text),
            None => Err(SecretError::MissingMasterKey),
        };
        let allow = set(egress::ALLOW_ENV).unwrap_or_default();
        let inbox_only = set(egress::MODE_ENV).is_some_and(|v| v == "inbox-only");
        let allowed_hosts = set(ALLOWED_HOSTS_ENV)
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .take(100)
            .collect();
        let operator_workspaces = set(OPERATOR_WORKSPACES_ENV)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .take(1000)
            .map(WorkspaceId::parse)
            .collect();
        Config {
            allowed_hosts,
            operator_workspaces,
            migrate_url: set(MIGRATE_URL_ENV),
            database_url_set: database_url.is_some(),
            database_url: database_url.unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string()),
            master_key,
            egress: Policy::parse(&allow, inbox_only),
            log_filter: set(LOG_ENV),
            log_format: LogFormat::parse(set(LOG_FORMAT_ENV).as_deref()),
            workspace: set(WORKSPACE_ENV)
                .map_or(Ok(WorkspaceId::DEFAULT), |w| WorkspaceId::parse(&w)),
            #[expect(
                clippy::disallowed_methods,
                reason = "the config module is the one place Rowfire's settings are read"
            )]
            host: std::env::var(HOST_ENV).unwrap_or_else(|_| "local".into()),
        }
    }
}

impl Config {
    /// The workspace commands work in, or why `ROWFIRE_WORKSPACE` names none.
    pub fn workspace(&self) -> Result<&WorkspaceId, BadWorkspaceId> {
        self.workspace.as_ref().map_err(Clone::clone)
    }

    /// The workspaces the operator runs: `own` (the process's) and those
    /// [`OPERATOR_WORKSPACES_ENV`] lists. Their sources read this process's environment.
    pub fn operator_workspaces(
        &self,
        own: &WorkspaceId,
    ) -> Result<Vec<WorkspaceId>, BadWorkspaceId> {
        let mut all = vec![own.clone()];
        all.extend(self.operator_workspaces.clone()?);
        Ok(all)
    }
}

/// How logs are written to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines for people (the default).
    Text,
    /// One JSON object per line, with the fields of the spans each event happened in.
    Json,
}

impl LogFormat {
    /// Reads [`LOG_FORMAT_ENV`]'s value: `json`, `text`, or nothing (text); anything else is
    /// refused with a message naming the variable and the values accepted.
    pub fn parse(value: Option<&str>) -> Result<LogFormat, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("text") => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("json") => Ok(LogFormat::Json),
            Some(other) => Err(format!(
                "{LOG_FORMAT_ENV}={other:?} is not a log format; use json (one JSON object per line) or text (the default), or unset it"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_format_is_text_unless_json_is_asked_for_and_refuses_anything_else() {
        assert_eq!(LogFormat::parse(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("text")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("json")), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse(Some("JSON")), Ok(LogFormat::Json));
        let refused = LogFormat::parse(Some("xml")).unwrap_err();
        assert!(
            refused.contains("ROWFIRE_LOG_FORMAT=\"xml\" is not a log format"),
            "{refused}"
        );
        assert!(refused.contains("use json"), "{refused}");
    }
}
