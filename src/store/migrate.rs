//! Migrations: the control plane's schema per engine (`migrations/{postgres,sqlite}`), applied
//! in order, each once, in its own transaction.

use sqlx::{AssertSqlSafe, Row as _};

use super::{Store, StoreError, StoreTx, Unscoped, execute, fetch_all};

/// Migrations per engine, applied in order; each runs once, in its own transaction.
const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "control_plane",
        include_str!("../../migrations/postgres/0001_control_plane.sql"),
        include_str!("../../migrations/sqlite/0001_control_plane.sql"),
    ),
    (
        2,
        "ledger",
        include_str!("../../migrations/postgres/0002_ledger.sql"),
        include_str!("../../migrations/sqlite/0002_ledger.sql"),
    ),
    (
        3,
        "delivery",
        include_str!("../../migrations/postgres/0003_delivery.sql"),
        include_str!("../../migrations/sqlite/0003_delivery.sql"),
    ),
    (
        4,
        "sending",
        include_str!("../../migrations/postgres/0004_sending.sql"),
        include_str!("../../migrations/sqlite/0004_sending.sql"),
    ),
    (
        5,
        "unreadable_clocks",
        include_str!("../../migrations/postgres/0005_unreadable_clocks.sql"),
        include_str!("../../migrations/sqlite/0005_unreadable_clocks.sql"),
    ),
    (
        6,
        "worker_leases",
        include_str!("../../migrations/postgres/0006_worker_leases.sql"),
        include_str!("../../migrations/sqlite/0006_worker_leases.sql"),
    ),
    (
        7,
        "delivery_capped",
        include_str!("../../migrations/postgres/0007_delivery_capped.sql"),
        include_str!("../../migrations/sqlite/0007_delivery_capped.sql"),
    ),
    (
        8,
        "row_level_security",
        include_str!("../../migrations/postgres/0008_row_level_security.sql"),
        include_str!("../../migrations/sqlite/0008_row_level_security.sql"),
    ),
    (
        9,
        "workspace_zone_and_keys",
        include_str!("../../migrations/postgres/0009_workspace_zone_and_keys.sql"),
        include_str!("../../migrations/sqlite/0009_workspace_zone_and_keys.sql"),
    ),
    (
        10,
        "scheduled_sends",
        include_str!("../../migrations/postgres/0010_scheduled_sends.sql"),
        include_str!("../../migrations/sqlite/0010_scheduled_sends.sql"),
    ),
    (
        11,
        "bypass_estimate",
        include_str!("../../migrations/postgres/0011_bypass_estimate.sql"),
        include_str!("../../migrations/sqlite/0011_bypass_estimate.sql"),
    ),
    (
        12,
        "api_tokens",
        include_str!("../../migrations/postgres/0012_api_tokens.sql"),
        include_str!("../../migrations/sqlite/0012_api_tokens.sql"),
    ),
    (
        13,
        "what_is_new",
        include_str!("../../migrations/postgres/0013_what_is_new.sql"),
        include_str!("../../migrations/sqlite/0013_what_is_new.sql"),
    ),
    (
        14,
        "attempts_unchecked",
        include_str!("../../migrations/postgres/0014_attempts_unchecked.sql"),
        include_str!("../../migrations/sqlite/0014_attempts_unchecked.sql"),
    ),
    (
        15,
        "delivery_lanes",
        include_str!("../../migrations/postgres/0015_delivery_lanes.sql"),
        include_str!("../../migrations/sqlite/0015_delivery_lanes.sql"),
    ),
];

impl Store {
    /// Applies the migrations this Rowfire has that the database lacks; returns how many ran.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        self.migrate_inner().await.map_err(|e| self.error(e))
    }

    async fn migrate_inner(&self) -> Result<usize, sqlx::Error> {
        let mut applied = 0;
        // Up to date: nothing to write, so a role that may not create tables (Rowfire's
        // application role) starts without needing that right.
        if self.schema_version().await.is_ok_and(|v| v >= latest()) {
            return Ok(0);
        }
        for (version, name, pg_sql, lite_sql) in MIGRATIONS {
            let mut tx = self.begin_unscoped(Unscoped::Migrate).await?;
            if let StoreTx::Postgres(t) = &mut tx {
                // Many workers may start at once: one migrates, the others wait and find it done.
                sqlx::query("SELECT pg_advisory_xact_lock(7270601)")
                    .execute(&mut **t)
                    .await?;
            }
            execute!(
                &mut tx,
                "CREATE TABLE IF NOT EXISTS rowfire_migration (version BIGINT PRIMARY KEY, name TEXT NOT NULL)",
                []
            )?;
            let done = fetch_all!(
                &mut tx,
                "SELECT version FROM rowfire_migration WHERE version = $1",
                [*version],
                |r| r.try_get::<i64, _>("version")
            )?;
            if done.is_empty() {
                let sql = match &tx {
                    StoreTx::Postgres(_) => *pg_sql,
                    StoreTx::Sqlite(_) => *lite_sql,
                };
                match &mut tx {
                    StoreTx::Postgres(t) => sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(&mut **t)
                        .await
                        .map(|_| ())?,
                    StoreTx::Sqlite(t) => sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(&mut **t)
                        .await
                        .map(|_| ())?,
                }
                execute!(
                    &mut tx,
                    "INSERT INTO rowfire_migration (version, name) VALUES ($1, $2)",
                    [*version, *name]
                )?;
                applied += 1;
            }
            tx.commit().await?;
        }
        Ok(applied)
    }

    /// The schema version the control plane holds (0 when it has none), read without writing
    /// anything, so an application role without the right to create tables can ask.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let have = async {
            let mut tx = self.begin_unscoped(Unscoped::Migrate).await?;
            let exists = match &mut tx {
                StoreTx::Postgres(t) => {
                    sqlx::query("SELECT to_regclass('rowfire_migration') IS NOT NULL AS found")
                        .fetch_one(&mut **t)
                        .await?
                        .try_get::<bool, _>("found")?
                }
                StoreTx::Sqlite(t) => sqlx::query(
                    "SELECT count(*) AS found FROM sqlite_master WHERE name = 'rowfire_migration'",
                )
                .fetch_one(&mut **t)
                .await?
                .try_get::<i64, _>("found")?
                    > 0,
            };
            let have = if exists {
                fetch_all!(
                    &mut tx,
                    "SELECT coalesce(max(version), 0) AS version FROM rowfire_migration",
                    [],
                    |r| r.try_get::<i64, _>("version")
                )?[0]
            } else {
                0
            };
            tx.rollback().await?;
            Ok::<i64, sqlx::Error>(have)
        };
        have.await.map_err(|e| self.error(e))
    }

    /// Fails with advice when the schema is older than this Rowfire.
    pub async fn check_migrated(&self) -> Result<(), StoreError> {
        let want = latest();
        let have = self.schema_version().await?;
        if have < want {
            return Err(StoreError::NotMigrated {
                shown: self.shown.clone(),
                have,
                want,
            });
        }
        Ok(())
    }

    /// The statements that bring this control plane's schema up to date, for an operator to run
    /// as the tables' owner when Rowfire's own role may not (`rowfire migrate` prints them).
    pub async fn pending_statements(&self) -> Result<String, StoreError> {
        let have = self.schema_version().await?;
        let mut out = String::from(
            "CREATE TABLE IF NOT EXISTS rowfire_migration (version BIGINT PRIMARY KEY, name TEXT NOT NULL);\n",
        );
        for (version, name, pg_sql, lite_sql) in MIGRATIONS.iter().filter(|m| m.0 > have) {
            let sql = match self.engine() {
                super::Engine::Postgres => pg_sql,
                super::Engine::Sqlite => lite_sql,
            };
            out.push_str(&format!(
                "-- migration {version}: {name}\n{}\nINSERT INTO rowfire_migration (version, name) VALUES ({version}, '{name}');\n",
                sql.trim_end()
            ));
        }
        Ok(out)
    }

    /// On PostgreSQL, the statements that let `role` (Rowfire's application role) read and write
    /// the control plane's tables, and nothing more: no ownership, no DDL, no `BYPASSRLS`.
    pub fn grant_statements(role: &str) -> String {
        let role = format!("\"{}\"", role.replace('"', "\"\""));
        format!(
            "GRANT USAGE ON SCHEMA public TO {role};\n\
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};\n\
             GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role};\n"
        )
    }

    /// Runs [`Store::grant_statements`] for `role` (the migrating role must own the tables).
    pub async fn grant_to(&self, role: &str) -> Result<(), StoreError> {
        let granted = async {
            let mut tx = self.begin_unscoped(Unscoped::Migrate).await?;
            if let StoreTx::Postgres(t) = &mut tx {
                sqlx::raw_sql(AssertSqlSafe(Store::grant_statements(role)))
                    .execute(&mut **t)
                    .await?;
            }
            tx.commit().await
        };
        granted.await.map_err(|e| self.error(e))
    }
}

/// The schema version this Rowfire writes.
fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}
