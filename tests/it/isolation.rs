//! Tenancy enforced by PostgreSQL itself, tested the way production runs: the shipped migrations
//! and policies, and a worker connected as an application role the test creates, which is
//! neither a superuser nor `BYPASSRLS` (a superuser is never bound by row-level security, so a
//! suite connected as one would pass whatever the policies said).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::send::queue::{self, Settlement};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store, WorkspaceId};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

use crate::support::{TestPg, TestSqlite, now, run_sql_while_dropping, sample_source};

/// An application role for one test database, dropped (with its grants) when the test ends.
struct AppRole {
    name: String,
    admin_url: String,
}

impl Drop for AppRole {
    fn drop(&mut self) {
        let sql = format!("DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}", self.name);
        run_sql_while_dropping(&self.admin_url, sql);
    }
}

/// Two workspaces on one PostgreSQL control plane, with the same sample definitions (the same
/// trigger names, rule names and keys), polled by a worker connected as the application role.
struct Tenants {
    app: Store,
    app_url: String,
    _role: AppRole,
    pg: TestPg,
    _sample: TestSqlite,
}

fn other() -> WorkspaceId {
    WorkspaceId::parse("other").unwrap()
}

/// Every table of Rowfire's schema that holds a workspace's rows, from the catalogue: those with
/// a `workspace_id` column, and `workspace` itself.
const TENANT_TABLES: &str = "SELECT c.relname::text AS name, c.relrowsecurity AS enabled, c.relforcerowsecurity AS forced,
            EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polcmd = '*'
                    AND p.polqual IS NOT NULL AND p.polwithcheck IS NOT NULL) AS policed
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
       AND (c.relname = 'workspace' OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                                              AND a.attname = 'workspace_id' AND NOT a.attisdropped))
     ORDER BY 1";

async fn tenants() -> Option<Tenants> {
    let pg = TestPg::new().await?;
    let owner = Store::open(&pg.url).await.unwrap();
    owner.migrate().await.unwrap();
    let mut admin = pg.admin().await;
    sqlx::query("INSERT INTO workspace (id, name) VALUES ('other', 'Other workspace')")
        .execute(&mut admin)
        .await
        .unwrap();
    let db: String = sqlx::query("SELECT current_database()::text AS db")
        .fetch_one(&mut admin)
        .await
        .unwrap()
        .get("db");
    let role = format!("{db}_app");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
         GRANT CONNECT ON DATABASE {db} TO {role};
         GRANT USAGE ON SCHEMA public TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
         GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role};"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    let role = AppRole {
        name: role,
        admin_url: pg.url.clone(),
    };
    let app_url = pg.url.replacen(
        "postgres://postgres@",
        &format!("postgres://{}@", role.name),
        1,
    );
    assert_ne!(
        app_url, pg.url,
        "the test database's URL names the postgres user"
    );

    // The same sample in both workspaces: in `other`, its integration points outside the
    // machine, so its live fires leave pending deliveries for the claim.
    let sample = TestSqlite::new();
    sample_source(&sample.url, 10_000).await;
    let outside = SAMPLE_DEFINITIONS.replace(
        "    catalog: demo_inbox\n",
        "    catalog: demo_inbox\n    base_url: http://127.0.0.1:9\n",
    );
    for (ws, doc) in [
        (WS.clone(), SAMPLE_DEFINITIONS.to_string()),
        (other(), outside),
    ] {
        push::push(&owner, &ws, &doc, now()).await.unwrap();
        rules::set_mode(&owner, &ws, "billing_ticket", Mode::Live, now())
            .await
            .unwrap();
        let by = SignedDuration::from_hours(24 * 120);
        poll::rewind(&owner, &ws, "declined_charge", by, now())
            .await
            .unwrap();
    }
    let app = Store::open(&app_url).await.unwrap();
    let url = sample.url.clone();
    let poller = Poller::new(
        app.clone(),
        "app-worker",
        Clock::fixed(now()),
        Arc::new(move |_, _| Some(url.clone().into())),
    );
    let reports = poller.poll_due().await.unwrap();
    // One declined_charge trigger per workspace, each leased under the bypass and claimed in
    // its own scope.
    let fired = reports
        .iter()
        .filter(|r| r.trigger == "declined_charge" && r.fired > 0)
        .count();
    assert_eq!(
        fired, 2,
        "the application role's poller claimed in both workspaces: {reports:?}"
    );
    Some(Tenants {
        app,
        app_url,
        _role: role,
        pg,
        _sample: sample,
    })
}

/// Rows per tenant table as the superuser sees them: (table, workspace) → count.
async fn true_counts(pg: &TestPg) -> BTreeMap<(String, String), i64> {
    let mut admin = pg.admin().await;
    let tables: Vec<String> = sqlx::query(TENANT_TABLES)
        .fetch_all(&mut admin)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("name"))
        .collect();
    let mut counts = BTreeMap::new();
    for t in tables {
        let ws = if t == "workspace" {
            "id"
        } else {
            "workspace_id"
        };
        let sql = format!("SELECT {ws} AS ws, count(*) AS n FROM {t} GROUP BY {ws}");
        for r in sqlx::query(AssertSqlSafe(sql))
            .fetch_all(&mut admin)
            .await
            .unwrap()
        {
            counts.insert((t.clone(), r.get::<String, _>("ws")), r.get::<i64, _>("n"));
        }
        counts.entry((t.clone(), "default".into())).or_insert(0);
        counts.entry((t.clone(), "other".into())).or_insert(0);
    }
    counts
}

/// Rows of `table` the application role sees in a transaction with `settings` applied.
async fn seen(conn: &mut PgConnection, table: &str, settings: &[(&str, &str)]) -> i64 {
    let mut tx = conn.begin().await.unwrap();
    for (name, value) in settings {
        sqlx::query("SELECT set_config($1, $2, true)")
            .bind(name)
            .bind(value)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let sql = format!("SELECT count(*) AS n FROM {table}");
    let n = sqlx::query(AssertSqlSafe(sql))
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get("n");
    tx.rollback().await.unwrap();
    n
}

#[tokio::test]
async fn every_tenant_table_has_forced_row_level_security_and_a_policy() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let store = Store::open(&pg.url).await.unwrap();
    store.migrate().await.unwrap();
    let mut admin = pg.admin().await;
    let rows = sqlx::query(TENANT_TABLES)
        .fetch_all(&mut admin)
        .await
        .unwrap();
    assert!(rows.len() >= 13, "the catalogue lists the tenant tables");
    let unbound: Vec<String> = rows
        .iter()
        .filter(|r| {
            !(r.get::<bool, _>("enabled")
                && r.get::<bool, _>("forced")
                && r.get::<bool, _>("policed"))
        })
        .map(|r| r.get("name"))
        .collect();
    assert!(
        unbound.is_empty(),
        "tables holding workspace rows without forced row-level security and a policy for reading and writing: {unbound:?}"
    );
}

/// Every table holding workspace rows has an index whose first column is `workspace_id`, so a
/// scoped read (or deleting a workspace) is a range of one index, not a scan past every other
/// workspace's rows. `workspace` itself is keyed by its id.
#[tokio::test]
async fn every_table_holding_workspace_rows_has_an_index_leading_with_workspace_id() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let store = Store::open(&pg.url).await.unwrap();
    store.migrate().await.unwrap();
    let mut admin = pg.admin().await;
    let unindexed: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped
         WHERE n.nspname = 'public' AND c.relkind = 'r'
           AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indkey[0] = a.attnum)
         ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(
        unindexed.is_empty(),
        "tables holding workspace rows with no index leading with workspace_id: {unindexed:?}"
    );
}

#[tokio::test]
async fn the_application_role_sees_its_own_workspace_scoped_nothing_unscoped_and_everything_only_under_the_bypass()
 {
    let Some(t) = tenants().await else {
        return;
    };
    let truth = true_counts(&t.pg).await;
    assert!(
        truth[&("fire".to_string(), "default".to_string())] > 0
            && truth[&("fire".to_string(), "other".to_string())] > 0,
        "both workspaces fired: {truth:?}"
    );
    let mut app = PgConnection::connect(&t.app_url).await.unwrap();
    let tables: std::collections::BTreeSet<&String> = truth.keys().map(|(t, _)| t).collect();
    for table in tables {
        let count = |ws: &str| truth[&(table.clone(), ws.to_string())];
        assert_eq!(seen(&mut app, table, &[]).await, 0, "{table}, unscoped");
        for ws in ["default", "other"] {
            assert_eq!(
                seen(&mut app, table, &[("app.workspace_id", ws)]).await,
                count(ws),
                "{table}, scoped to {ws}"
            );
        }
        assert_eq!(
            seen(&mut app, table, &[("app.bypass_rls", "on")]).await,
            count("default") + count("other"),
            "{table}, under the bypass"
        );
        assert_eq!(
            seen(
                &mut app,
                table,
                &[("app.workspace_id", "default"), ("app.bypass_rls", "off")]
            )
            .await,
            count("default"),
            "{table}, bypass off"
        );
    }
}

#[tokio::test]
async fn a_row_naming_another_workspace_is_refused_and_another_workspaces_rows_cannot_be_touched() {
    let Some(t) = tenants().await else {
        return;
    };
    let mut app = PgConnection::connect(&t.app_url).await.unwrap();
    let forge = |scope: Option<&'static str>, sql: &'static str| {
        let url = t.app_url.clone();
        async move {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            if let Some(ws) = scope {
                sqlx::query("SELECT set_config('app.workspace_id', $1, true)")
                    .bind(ws)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
            }
            sqlx::query(sql).execute(&mut *tx).await
        }
    };
    let insert = "INSERT INTO rule_state (workspace_id, rule_name, trigger_name, checksum, mode, mode_changed_at)
                  VALUES ('other', 'forged', 'declined_charge', 'x', 'live', now())";
    for scope in [Some("default"), None] {
        let err = forge(scope, insert).await.unwrap_err();
        let code = err
            .as_database_error()
            .and_then(|d| d.code())
            .map(|c| c.to_string());
        assert_eq!(code.as_deref(), Some("42501"), "{scope:?}: {err}");
    }
    // Moving a row of one's own into another workspace is refused too (WITH CHECK).
    let moved = forge(
        Some("default"),
        "UPDATE rule_state SET workspace_id = 'other', rule_name = 'moved' WHERE rule_name = 'billing_ticket'",
    )
    .await
    .unwrap_err();
    assert!(moved.to_string().contains("row-level security"), "{moved}");
    // Another workspace's rows are invisible to a scoped update or delete: nothing changes.
    for sql in [
        "UPDATE rule_state SET mode = 'shadow' WHERE workspace_id = 'other'",
        "DELETE FROM fire WHERE workspace_id = 'other'",
    ] {
        assert_eq!(
            forge(Some("default"), sql).await.unwrap().rows_affected(),
            0,
            "{sql}"
        );
    }
    let still: i64 = {
        let mut tx = app.begin().await.unwrap();
        sqlx::query("SELECT set_config('app.workspace_id', 'other', true)")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query("SELECT count(*) AS n FROM rule_state WHERE mode = 'live'")
            .fetch_one(&mut *tx)
            .await
            .unwrap()
            .get("n")
    };
    assert_eq!(still, 1, "the other workspace's live rule is untouched");
}

#[tokio::test]
async fn the_application_roles_claim_finds_every_workspaces_due_deliveries_and_settles_them_in_scope()
 {
    let Some(t) = tenants().await else {
        return;
    };
    let claimed = queue::claim_due(&t.app, now(), 1_000, SignedDuration::from_secs(60))
        .await
        .unwrap();
    assert!(
        !claimed.is_empty(),
        "the claim under the bypass sees the pending deliveries"
    );
    assert!(
        claimed.iter().all(|c| c.workspace == other()),
        "only `other` has deliveries that wait for a sender"
    );
    let first = &claimed[0];
    assert!(
        queue::settle(&t.app, first, &Settlement::Sent, now())
            .await
            .unwrap(),
        "the settle, scoped to the delivery's own workspace, takes effect"
    );
    // A settle scoped to the wrong workspace cannot see the delivery: it changes nothing.
    let mut forged = claimed[1].clone();
    forged.workspace = WS.clone();
    assert!(
        !queue::settle(&t.app, &forged, &Settlement::Sent, now())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_isolation_check_passes_for_the_application_role_and_names_the_fix_for_a_superuser() {
    use rowfire::store::tenancy::{self, Isolation};
    let Some(t) = tenants().await else {
        return;
    };
    assert_eq!(tenancy::check(&t.app).await.unwrap(), Isolation::Enforced);
    let owner = Store::open(&t.pg.url).await.unwrap();
    let superuser = tenancy::check(&owner).await.unwrap();
    assert_eq!(
        superuser,
        Isolation::Unbound {
            role: "postgres".into()
        }
    );
    assert!(
        superuser
            .problem()
            .unwrap()
            .contains("connect workers and commands as an application role"),
        "{superuser:?}"
    );
    // A table whose row-level security is switched off by hand is named.
    let mut admin = t.pg.admin().await;
    sqlx::query("ALTER TABLE fire NO FORCE ROW LEVEL SECURITY")
        .execute(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        tenancy::check(&t.app).await.unwrap(),
        Isolation::Unforced {
            tables: vec!["fire".into()]
        }
    );
    // A policy that no longer admits the bypass would leave every claim empty: refused as such.
    sqlx::raw_sql(
        "ALTER TABLE fire FORCE ROW LEVEL SECURITY;
         DROP POLICY tenant_isolation ON workspace;
         CREATE POLICY tenant_isolation ON workspace USING (id = current_setting('app.workspace_id', true));",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    assert_eq!(
        tenancy::check(&t.app).await.unwrap(),
        Isolation::BypassBroken
    );
    let sqlite = TestSqlite::new();
    let embedded = Store::open(&sqlite.url).await.unwrap();
    embedded.migrate().await.unwrap();
    assert_eq!(
        tenancy::check(&embedded).await.unwrap(),
        Isolation::Embedded
    );
}

#[tokio::test]
async fn migrate_as_the_owner_grants_the_application_role_and_without_the_right_prints_the_statements()
 {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut admin = pg.admin().await;
    let db: String = sqlx::query("SELECT current_database()::text AS db")
        .fetch_one(&mut admin)
        .await
        .unwrap()
        .get("db");
    let (owner, app) = (format!("{db}_owner"), format!("{db}_app"));
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE ROLE {owner} LOGIN NOSUPERUSER NOBYPASSRLS;
         CREATE ROLE {app} LOGIN NOSUPERUSER NOBYPASSRLS;
         ALTER DATABASE {db} OWNER TO {owner};
         ALTER SCHEMA public OWNER TO {owner};
         REVOKE CREATE ON SCHEMA public FROM PUBLIC;"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    let _roles = OwnerAndApp {
        sql: format!(
            "ALTER DATABASE {db} OWNER TO postgres; ALTER SCHEMA public OWNER TO postgres;
             DROP OWNED BY {owner}, {app}; DROP ROLE {owner}; DROP ROLE {app}"
        ),
        admin_url: pg.url.clone(),
    };
    let as_role = |role: &str| {
        pg.url
            .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1)
    };
    let (owner_url, app_url) = (as_role(&owner), as_role(&app));
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = crate::cli::rowfire(args, env);
        let (stdout, stderr) = crate::cli::text(&out);
        (out.status.success(), stdout, stderr)
    };

    // The application role may not create tables: nothing happens, and the owner's statements
    // are printed, grants included.
    let (ok, _, stderr) = run(&["migrate"], &[("ROWFIRE_DATABASE_URL", &app_url)]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("ROWFIRE_MIGRATE_URL")
            && stderr.contains("CREATE TABLE IF NOT EXISTS rowfire_migration")
            && stderr.contains("ENABLE ROW LEVEL SECURITY")
            && stderr.contains(&format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \"{app}\""
            )),
        "{stderr}"
    );

    // As the owner: migrated, the application role granted, and bound by row-level security.
    let env = [
        ("ROWFIRE_DATABASE_URL", app_url.as_str()),
        ("ROWFIRE_MIGRATE_URL", owner_url.as_str()),
    ];
    let (ok, stdout, stderr) = run(&["migrate"], &env);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("role {app} may read and write"))
            && stdout.contains(&format!("isolation: row-level security binds role {app}")),
        "{stdout}{stderr}"
    );
    // The application role works from then on: push migrates first, and has nothing to do.
    let app_only = [("ROWFIRE_DATABASE_URL", app_url.as_str())];
    let (ok, _, stderr) = run(&["push", "-f", "examples/saas/definitions.yaml"], &app_only);
    assert!(ok, "{stderr}");
    let (ok, status, stderr) = run(&["status"], &app_only);
    assert!(ok, "{stderr}");
    assert!(
        status.contains("isolation: enforced by PostgreSQL's row-level security"),
        "{status}"
    );
}

/// Gives the test database back to the superuser and drops its owner and application roles.
struct OwnerAndApp {
    sql: String,
    admin_url: String,
}

impl Drop for OwnerAndApp {
    fn drop(&mut self) {
        run_sql_while_dropping(&self.admin_url, std::mem::take(&mut self.sql));
    }
}

#[tokio::test]
async fn a_worker_connected_as_a_superuser_refuses_to_start_and_says_why() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let env = [("ROWFIRE_DATABASE_URL", pg.url.as_str())];
    let out = crate::cli::rowfire(&["worker", "--once"], &env);
    let (stdout, stderr) = crate::cli::text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("refusing to start")
            && stderr.contains("\"postgres\" is a superuser or has BYPASSRLS")
            && stderr.contains("ROWFIRE_MIGRATE_URL"),
        "{stderr}"
    );
    assert!(!stdout.contains("matched="), "nothing was polled: {stdout}");
    // The same worker on a database of its own owner's, which row-level security binds,
    // migrates, starts and finds nothing due.
    let Some(other) = TestPg::new().await else {
        return;
    };
    let owner = other.owner_url().await;
    let out = crate::cli::rowfire(
        &["worker", "--once"],
        &[("ROWFIRE_DATABASE_URL", owner.as_str())],
    );
    let (stdout, stderr) = crate::cli::text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("no trigger is due"), "{stdout}");
}
