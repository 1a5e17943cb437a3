//! Whether the database keeps workspaces apart for this connection: on PostgreSQL, whether
//! row-level security binds the role Rowfire connects as (not a superuser, not `BYPASSRLS`,
//! every tenant table forced) and whether the bypass of `store::unscoped` works. Checked by
//! behaviour as well as by flags, because the failure to fear is a silent zero: a claim that
//! cannot see rows succeeds and looks exactly like a quiet minute.

use super::{Store, StoreError, StoreTx, Unscoped, fetch_all};

/// How workspaces are kept apart on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// PostgreSQL enforces it: a transaction without a workspace sees no tenant row, and the
    /// bypass sees them.
    Enforced,
    /// SQLite: by Rowfire's own scoping only.
    Embedded,
    /// The role is a superuser or has `BYPASSRLS`: row-level security does not bind it.
    Unbound {
        /// The role.
        role: String,
    },
    /// Tenant tables whose row-level security is not enabled and forced.
    Unforced {
        /// The tables.
        tables: Vec<String>,
    },
    /// The bypass does not reveal the rows it must (a policy changed by hand?): claims would
    /// find nothing.
    BypassBroken,
}

impl Isolation {
    /// What is wrong and what to do, when something is.
    pub fn problem(&self) -> Option<String> {
        match self {
            Isolation::Enforced | Isolation::Embedded => None,
            Isolation::Unbound { role } => Some(format!(
                "the control plane role \"{role}\" is a superuser or has BYPASSRLS, so row-level security does not keep workspaces apart; connect workers and commands as an application role that is neither (`rowfire migrate` with ROWFIRE_MIGRATE_URL naming the owner grants it what it needs)"
            )),
            Isolation::Unforced { tables } => Some(format!(
                "row-level security is not enabled and forced on {}; run `rowfire migrate` as the tables' owner",
                tables.join(", ")
            )),
            Isolation::BypassBroken => Some(
                "the row-level-security bypass does not reveal the workspace table, so claims would find nothing; check the tenant_isolation policies (rowfire migrate creates them)".to_string(),
            ),
        }
    }
}

/// Checks how workspaces are kept apart on this connection.
pub async fn check(store: &Store) -> Result<Isolation, StoreError> {
    let checked = async {
        let mut tx = store.begin_unscoped(Unscoped::Probe).await?;
        if matches!(tx, StoreTx::Sqlite(_)) {
            tx.rollback().await?;
            return Ok(Isolation::Embedded);
        }
        let unbound = fetch_all!(
            &mut tx,
            "SELECT current_user::text AS role, (rolsuper OR rolbypassrls) AS unbound
             FROM pg_catalog.pg_roles WHERE rolname = current_user",
            [],
            |r| Ok((
                r.try_get::<String, _>("role")?,
                r.try_get::<bool, _>("unbound")?
            ))
        )?;
        let unforced = fetch_all!(
            &mut tx,
            "SELECT c.relname::text AS name FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
               AND (c.relname = 'workspace' OR EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                    WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped))
               AND NOT (c.relrowsecurity AND c.relforcerowsecurity)
             ORDER BY 1",
            [],
            |r| r.try_get::<String, _>("name")
        )?;
        // Without a workspace or the bypass, a bound role sees no workspace at all.
        let seen_unscoped =
            fetch_all!(&mut tx, "SELECT count(*) AS n FROM workspace", [], |r| r
                .try_get::<i64, _>("n"))?[0];
        tx.rollback().await?;
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let seen_bypassed =
            fetch_all!(&mut tx, "SELECT count(*) AS n FROM workspace", [], |r| r
                .try_get::<i64, _>("n"))?[0];
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(match unbound.into_iter().next() {
            Some((role, true)) => Isolation::Unbound { role },
            _ if !unforced.is_empty() => Isolation::Unforced { tables: unforced },
            // The default workspace always exists: the bypass must show it, and nothing else may.
            _ if seen_bypassed == 0 => Isolation::BypassBroken,
            None => Isolation::Unbound {
                role: "unknown".into(),
            },
            _ if seen_unscoped > 0 => Isolation::Unforced {
                tables: vec!["workspace".into()],
            },
            Some(_) => Isolation::Enforced,
        })
    };
    checked.await.map_err(|e| store.error(e))
}
