//! Shared test parts: a PostgreSQL database per test, SQLite files, the sample data at a fixed now.

use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};

use jiff::Timestamp;
use rowfire::definitions::{self, Definitions, SourceDef};
use rowfire::fixture::{self, Dataset, SAMPLE_DEFINITIONS};
use rowfire::source::Source;
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The fixed "now" every sample-data test uses: 2026-11-29T12:00Z, or `ROWFIRE_TEST_NOW` (RFC 3339)
/// to prove the suite never mixes the machine's or the database's clock with this one.
#[expect(
    clippy::disallowed_methods,
    reason = "the suite's own setting, not Rowfire's"
)]
pub fn now() -> Timestamp {
    std::env::var("ROWFIRE_TEST_NOW")
        .unwrap_or_else(|_| "2026-11-29T12:00:00Z".into())
        .parse()
        .expect("ROWFIRE_TEST_NOW must be an RFC 3339 instant such as 2027-11-29T12:00:00Z")
}

/// Whether the suite runs at its own fixed now (`ROWFIRE_TEST_NOW` unset). Snapshots of answers
/// whose rows depend on the date (which rows fire first in a week, which messages are newest)
/// are taken there; runs at a moved clock check the same answers' invariants instead.
#[expect(
    clippy::disallowed_methods,
    reason = "the suite's own setting, not Rowfire's"
)]
pub fn at_the_default_now() -> bool {
    std::env::var("ROWFIRE_TEST_NOW").is_err()
}

#[expect(
    clippy::disallowed_methods,
    reason = "the suite's own setting, not Rowfire's"
)]
fn admin_url() -> String {
    std::env::var("ROWFIRE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A fresh PostgreSQL database, dropped when the test ends.
pub struct TestPg {
    pub url: String,
    name: String,
}

impl TestPg {
    /// Creates a database for one test. Without a server, the test is skipped locally and fails
    /// under CI (`CI=true`), where PostgreSQL must be running.
    pub async fn new() -> Option<TestPg> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let admin = admin_url();
        let mut conn = match PgConnection::connect(&admin).await {
            Ok(c) => c,
            Err(e) => {
                #[expect(
                    clippy::disallowed_methods,
                    reason = "whether the suite runs under CI, where PostgreSQL must be up"
                )]
                let under_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                if under_ci {
                    panic!("PostgreSQL is required under CI but {admin} is unreachable: {e}");
                }
                eprintln!(
                    "skipping: PostgreSQL at {admin} is unreachable ({e}); set ROWFIRE_TEST_PG"
                );
                return None;
            }
        };
        let name = format!(
            "rowfire_t_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst),
            fastrand::u32(..)
        );
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        let opts = PgConnectOptions::from_str(&admin).unwrap().database(&name);
        let url = format!(
            "postgres://{}@{}:{}/{}",
            opts.get_username(),
            opts.get_host(),
            opts.get_port(),
            name
        );
        Some(TestPg { url, name })
    }

    /// The database's URL as a role that owns it and its tables but is neither a superuser nor
    /// `BYPASSRLS`, the way production runs: forced row-level security binds it (a superuser
    /// is never bound, so a control-plane test connected as one would prove nothing about it).
    pub async fn owner_url(&self) -> String {
        let role = format!("{}_owner", self.name);
        let mut admin = self.admin().await;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
             ALTER DATABASE {name} OWNER TO {role};
             ALTER SCHEMA public OWNER TO {role};",
            name = self.name
        )))
        .execute(&mut admin)
        .await
        .unwrap();
        self.url
            .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1)
    }

    /// A read-write connection for setting up test data.
    pub async fn admin(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.unwrap()
    }
}

impl Drop for TestPg {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        run_sql_while_dropping(&admin_url(), sql);
        // The owner role (if `owner_url` made one) owns nothing once the database is gone.
        let sql = format!("DROP ROLE IF EXISTS {}_owner", self.name);
        run_sql_while_dropping(&admin_url(), sql);
    }
}

/// Runs `sql` at `url` from a thread of its own, as a `Drop` may (it cannot await), ignoring
/// failures: for cleaning up what a test made.
pub fn run_sql_while_dropping(url: &str, sql: String) {
    let url = url.to_string();
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            if let Ok(mut c) = PgConnection::connect(&url).await {
                let _ = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut c).await;
            }
        });
    })
    .join();
}

#[expect(
    clippy::disallowed_methods,
    reason = "the suite's own setting, not Rowfire's"
)]
fn mysql_admin_url() -> String {
    std::env::var("ROWFIRE_TEST_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// A fresh MariaDB (or MySQL) database, dropped when the test ends.
pub struct TestMy {
    /// The database's URL, as the server's administrator.
    pub url: String,
    /// The database's name.
    pub name: String,
}

impl TestMy {
    /// Creates a database for one test. Without a server, the test is skipped locally and fails
    /// under CI (`CI=true`), where MariaDB must be running.
    pub async fn new() -> Option<TestMy> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let admin = mysql_admin_url();
        let mut conn = match sqlx::MySqlConnection::connect(&admin).await {
            Ok(c) => c,
            Err(e) => {
                #[expect(
                    clippy::disallowed_methods,
                    reason = "whether the suite runs under CI, where MariaDB must be up"
                )]
                let under_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                if under_ci {
                    panic!("MariaDB is required under CI but {admin} is unreachable: {e}");
                }
                eprintln!(
                    "skipping: MariaDB at {admin} is unreachable ({e}); set ROWFIRE_TEST_MYSQL"
                );
                return None;
            }
        };
        let name = format!(
            "rowfire_t_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst),
            fastrand::u32(..)
        );
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        let url = format!("{}/{name}", admin.trim_end_matches('/'));
        Some(TestMy { url, name })
    }

    /// A read-write connection for setting up test data, in UTC with backslashes as plain
    /// characters, as Rowfire's sessions read.
    pub async fn admin(&self) -> sqlx::MySqlConnection {
        use std::str::FromStr;
        let opts = sqlx::mysql::MySqlConnectOptions::from_str(&self.url)
            .unwrap()
            .timezone(Some("+00:00".to_string()));
        let mut conn = sqlx::MySqlConnection::connect_with(&opts).await.unwrap();
        sqlx::raw_sql("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES'")
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    }

    /// A user that may only read this database, and its URL (with `password`).
    pub async fn reader_url(&self, password: &str) -> String {
        let user = format!("{}_r", self.name);
        let mut admin = self.admin().await;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY '{password}';
             GRANT SELECT ON {name}.* TO '{user}'@'%';",
            name = self.name
        )))
        .execute(&mut admin)
        .await
        .unwrap();
        let host = mysql_admin_url();
        let host = host
            .rsplit('@')
            .next()
            .unwrap_or("127.0.0.1:3306")
            .trim_end_matches('/');
        format!("mysql://{user}:{password}@{host}/{}", self.name)
    }
}

impl Drop for TestMy {
    fn drop(&mut self) {
        let url = mysql_admin_url();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut c) = sqlx::MySqlConnection::connect(&url).await {
                    // The test's own connections may still be open (their pool's runtime is
                    // the one this drop blocks) and hold locks the DROP would wait on forever:
                    // end them first, as PostgreSQL's `WITH (FORCE)` does.
                    let ids: Vec<i64> = sqlx::query_scalar(
                        "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST \
                         WHERE (DB = ? OR USER = ?) AND ID <> CONNECTION_ID()",
                    )
                    .bind(&name)
                    .bind(format!("{name}_r"))
                    .fetch_all(&mut c)
                    .await
                    .unwrap_or_default();
                    for id in ids {
                        let _ = sqlx::raw_sql(AssertSqlSafe(format!("KILL {id}")))
                            .execute(&mut c)
                            .await;
                    }
                    let _ = sqlx::raw_sql(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name}; DROP USER IF EXISTS '{name}_r'@'%'"
                    )))
                    .execute(&mut c)
                    .await;
                }
            });
        })
        .join();
    }
}

/// A SQLite file in a temporary directory.
pub struct TestSqlite {
    pub url: String,
    _dir: tempfile::TempDir,
}

impl TestSqlite {
    pub fn new() -> TestSqlite {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("sample.db").display());
        TestSqlite { url, _dir: dir }
    }
}

/// The sample definitions.
pub fn sample_definitions() -> Definitions {
    definitions::parse(SAMPLE_DEFINITIONS).unwrap()
}

/// The default source of `defs`, with another page size.
pub fn source_def(defs: &Definitions, page_size: usize) -> SourceDef {
    let mut def = defs.source(definitions::DEFAULT_SOURCE).unwrap().clone();
    def.page_size = page_size;
    def
}

/// Loads the sample data at [`now`] into `url` and connects to it as the sample source.
pub async fn sample_source(url: &str, page_size: usize) -> (Dataset, Definitions, Source) {
    let load_url = if url.starts_with("sqlite") {
        format!("{url}?mode=rwc")
    } else {
        url.to_string()
    };
    let data = fixture::load(&load_url, now()).await.unwrap();
    let defs = sample_definitions();
    let source = Source::connect(&source_def(&defs, page_size), url)
        .await
        .unwrap();
    (data, defs, source)
}

/// Runs one async check (taking a control-plane URL) against a fresh SQLite file and a fresh
/// PostgreSQL database, connected as its non-superuser owner, so forced row-level security binds
/// every statement: the control plane's conformance suite.
macro_rules! on_both_engines {
    ($name:ident, $check:ident) => {
        mod $name {
            #[tokio::test]
            async fn on_sqlite() {
                let db = crate::support::TestSqlite::new();
                super::$check(&db.url).await;
            }

            #[tokio::test]
            async fn on_postgres() {
                let Some(pg) = crate::support::TestPg::new().await else {
                    return;
                };
                super::$check(&pg.owner_url().await).await;
            }
        }
    };
}
