//! Sources as an operator sees them: where each one's DSN comes from (never the DSN), storing one
//! (sealed under the master key, or a SQLite file's URL in the clear), and trying a connection.

use jiff::Timestamp;
use serde::Serialize;
use utoipa::ToSchema;

use super::{OperatorError, in_force};
use crate::secret::{self, MasterKey, SecretError};
use crate::send::egress::Policy;
use crate::source::Source;
use crate::sql_guard::Dialect;
use crate::store::{Store, WorkspaceId};

/// Who sets a workspace's sources up, and so what they may reach.
#[derive(Debug, Clone, Copy)]
pub enum Reach<'a> {
    /// The operator (the command line, or the server's own workspace): the process's environment
    /// variables, SQLite files on this host and any address.
    Operator,
    /// A tenant (another workspace, through the API): only the DSNs it stored, no file on this
    /// host, and only the addresses the egress policy admits (public ones, unless the operator
    /// allowed a range with `ROWFIRE_EGRESS_ALLOW`).
    Tenant(&'a Result<Policy, String>),
}

impl Reach<'_> {
    fn reads_env(&self) -> bool {
        matches!(self, Reach::Operator)
    }
}

/// The check a tenant's source addresses pass: the egress policy's (none, when it is invalid).
pub fn tenant_check(policy: &Result<Policy, String>) -> crate::source::AddressCheck {
    match policy {
        Ok(policy) => {
            let policy = policy.clone();
            std::sync::Arc::new(move |ip| policy.check(ip).map_err(|e| e.to_string()))
        }
        Err(e) => {
            let e = e.clone();
            std::sync::Arc::new(move |_| Err(format!("the egress policy is not valid ({e})")))
        }
    }
}

/// Refuses, for a tenant, a DSN that reaches this host: a SQLite file, a Unix socket, a
/// parameter that names a file or another host, or an address the egress policy refuses
/// ([`crate::source::pin`], which every connection of a tenant's source passes again).
pub async fn check_reach(reach: Reach<'_>, dsn: &str) -> Result<(), OperatorError> {
    let Reach::Tenant(policy) = reach else {
        return Ok(());
    };
    crate::source::pin(dsn, &tenant_check(policy))
        .await
        .map(|_| ())
        .map_err(|why| OperatorError::invalid("dsn", why))
}

/// Where a source's DSN comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DsnOrigin {
    /// Stored in the control plane, sealed under the master key.
    Stored,
    /// A SQLite file's URL stored in the clear (a path, no credential).
    StoredFileUrl,
    /// The environment variable the definitions name, which is set.
    Env,
    /// The environment variable the definitions name, which is not set.
    EnvNotSet,
    /// Not declared in the definitions and not stored.
    Missing,
}

/// One source in force, without its DSN.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SourceView {
    /// Its name.
    pub name: String,
    /// `postgres`, `mysql` or `sqlite` when the definitions say, else `null`.
    pub engine: Option<String>,
    /// Where its DSN comes from.
    pub dsn_from: DsnOrigin,
    /// The environment variable the definitions name for it.
    pub dsn_env: String,
    /// What to do about it, for a person.
    pub note: String,
}

fn owner(name: &str) -> String {
    format!("source:{name}")
}

fn engine_name(d: Dialect) -> String {
    format!("{d:?}").to_ascii_lowercase()
}

/// Each source in force and where its DSN comes from.
pub async fn list(
    store: &Store,
    ws: &WorkspaceId,
    reach: Reach<'_>,
) -> Result<Vec<SourceView>, OperatorError> {
    let (_, defs) = in_force(store, ws).await?;
    let files = secret::file_urls(store, ws).await?;
    let mut out = Vec::new();
    for s in &defs.sources {
        let stored = secret::names(store, ws, &owner(&s.name))
            .await?
            .iter()
            .any(|n| n == "dsn");
        #[expect(
            clippy::disallowed_methods,
            reason = "a definitions file's dsn_env is data: the variable it names holds a source's DSN"
        )]
        let env_set = reach.reads_env()
            && crate::definitions::may_hold_dsn(&s.dsn_env)
            && std::env::var(&s.dsn_env).is_ok_and(|v| !v.is_empty());
        let (dsn_from, note) = if stored {
            (DsnOrigin::Stored, "stored DSN (encrypted)".to_string())
        } else if files.contains_key(&s.name) {
            (
                DsnOrigin::StoredFileUrl,
                "stored SQLite file URL (no credential, not encrypted)".to_string(),
            )
        } else if !s.declared {
            (
                DsnOrigin::Missing,
                format!(
                    "not declared in the definitions and NOT STORED; `rowfire sources add {} --url-env VAR`",
                    s.name
                ),
            )
        } else if env_set {
            (DsnOrigin::Env, format!("${} (set)", s.dsn_env))
        } else if !reach.reads_env() {
            (
                DsnOrigin::Missing,
                "NOT STORED: store its DSN (POST /api/sources); this workspace does not read the server's environment".to_string(),
            )
        } else {
            (
                DsnOrigin::EnvNotSet,
                format!(
                    "${} (NOT SET; or `rowfire sources add {} --url-env VAR`)",
                    s.dsn_env, s.name
                ),
            )
        };
        out.push(SourceView {
            name: s.name.clone(),
            engine: s.kind.map(engine_name),
            dsn_from,
            dsn_env: s.dsn_env.clone(),
            note,
        });
    }
    Ok(out)
}

/// How [`add`] stored a DSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Sealed under the master key with this id.
    Sealed {
        /// The master key's id.
        key_id: String,
    },
    /// A SQLite file's URL, in the clear (no master key was set).
    FileUrl,
}

/// The longest DSN accepted.
pub const MAX_DSN_BYTES: usize = 4096;

/// Checks a source name as [`add`] accepts it: 1 to 64 letters, digits, `_` or `-`.
pub fn check_name(name: &str) -> Result<(), OperatorError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(OperatorError::invalid(
            "name",
            "a source name is 1 to 64 letters, digits, _ or -",
        ))
    }
}

/// Stores source `name`'s DSN: sealed under `key`; without a master key, a SQLite file's URL (no
/// credential) is stored as it is, and anything else is refused.
pub async fn add(
    store: &Store,
    key: &Result<MasterKey, SecretError>,
    ws: &WorkspaceId,
    name: &str,
    dsn: &str,
    now: Timestamp,
    reach: Reach<'_>,
) -> Result<Stored, OperatorError> {
    check_name(name)?;
    if dsn.len() > MAX_DSN_BYTES {
        return Err(OperatorError::invalid(
            "dsn",
            format!("a DSN is at most {MAX_DSN_BYTES} bytes"),
        ));
    }
    let Some(dialect) = crate::source::dialect_of(dsn) else {
        return Err(OperatorError::invalid(
            "dsn",
            "the DSN must be a postgres://, mysql:// or sqlite: URL",
        ));
    };
    check_reach(reach, dsn).await?;
    match key {
        Ok(key) => {
            secret::put(store, key, ws, &owner(name), "dsn", dsn, now).await?;
            Ok(Stored::Sealed {
                key_id: key.id().to_string(),
            })
        }
        Err(SecretError::MissingMasterKey) if dialect == Dialect::Sqlite => {
            secret::put_file_url(store, ws, name, dsn, now).await?;
            Ok(Stored::FileUrl)
        }
        Err(e) => Err(secret::StoredSecretError::Secret(e.clone()).into()),
    }
}

/// What trying a source's connection found.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Tested {
    /// The source.
    pub name: String,
    /// Whether a read-only session opened.
    pub ok: bool,
    /// Where it is, without secrets (`host:port/db`, `sqlite:file`), when it connected.
    pub shown: Option<String>,
    /// Why it failed, with advice, never the password.
    pub error: Option<String>,
}

/// Opens a read-only session on source `name` with its DSN (stored, else the environment's) and
/// reports whether it connected. The error never holds the DSN's password.
pub async fn test(
    store: &Store,
    key: &Result<MasterKey, SecretError>,
    ws: &WorkspaceId,
    name: &str,
    reach: Reach<'_>,
) -> Result<Tested, OperatorError> {
    let (_, defs) = in_force(store, ws).await?;
    let Some(def) = defs.source(name) else {
        return Err(OperatorError::UnknownSource(name.to_string()));
    };
    let mut stored = secret::file_urls(store, ws).await?;
    if let Ok(key) = key {
        stored.extend(secret::open_named(store, key, ws, "source:", "dsn").await?);
    }
    // A tenant's DSN is checked where it connects (`Source::connect_resolved`), once.
    let result = match stored.get(name).cloned() {
        Some(url) => {
            let tenant = match reach {
                Reach::Operator => None,
                Reach::Tenant(policy) => Some(tenant_check(policy)),
            };
            Source::connect_resolved(def, &crate::source::Dsn { url, tenant }).await
        }
        None if reach.reads_env() && crate::definitions::may_hold_dsn(&def.dsn_env) => {
            Source::from_env(def).await
        }
        None => Err(crate::source::SourceError::NotStored {
            name: def.name.clone(),
        }),
    };
    Ok(match result {
        Ok(source) => Tested {
            name: name.to_string(),
            ok: true,
            shown: Some(source.shown().to_string()),
            error: None,
        },
        Err(e) => Tested {
            name: name.to_string(),
            ok: false,
            shown: None,
            error: Some(format!(
                "{e}; check the host, the database and the account (use a SELECT-only account)"
            )),
        },
    })
}
