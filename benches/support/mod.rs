//! What the benchmarks share: fresh PostgreSQL databases on the benchmark server.

#![allow(
    dead_code,
    reason = "each benchmark is its own crate and uses only part of this"
)]

pub mod receiver;

/// The allocator the `rowfire` binary runs with (src/main.rs), so each benchmark measures the
/// library as the binary runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The server's admin URL: `ROWFIRE_BENCH_PG`, or PostgreSQL on 127.0.0.1:5432.
#[allow(
    clippy::disallowed_methods,
    reason = "the benchmarks' own setting, not Rowfire's"
)]
pub fn admin_url() -> String {
    std::env::var("ROWFIRE_BENCH_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The URL of database `db` on the admin URL's server, with the admin URL's query (such as
/// `sslmode`) kept, so every connection a benchmark makes uses the same transport.
pub fn url_for(admin: &str, db: &str) -> String {
    let o = PgConnectOptions::from_str(admin).unwrap();
    format!(
        "postgres://{}@{}:{}/{db}{}",
        o.get_username(),
        o.get_host(),
        o.get_port(),
        query_of(admin)
    )
}

/// `url` with `sslmode=disable` added when it names no `sslmode`: a benchmark that compares
/// Rowfire with a peer on this machine's server gives both the same transport, and the peers'
/// drivers (node-postgres) use TLS only when asked, where Rowfire's (sqlx) prefers it.
pub fn plaintext_unless_named(url: &str) -> String {
    if query_of(url).contains("sslmode=") {
        return url.to_string();
    }
    let joint = if query_of(url).is_empty() { '?' } else { '&' };
    format!("{url}{joint}sslmode=disable")
}

/// Whether a connection to `url` from Rowfire's driver is encrypted (TLS).
pub async fn uses_tls(url: &str) -> bool {
    let mut c = PgConnection::connect(url).await.unwrap();
    let tls: Option<bool> =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_optional(&mut c)
            .await
            .unwrap();
    tls.unwrap_or(false)
}

/// `url` for node-postgres with the transport Rowfire's driver got: TLS without checking the
/// server's certificate (as sqlx's default `prefer` does), or plaintext.
pub fn node_url(url: &str, tls: bool) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let mode = if tls { "no-verify" } else { "disable" };
    format!("{base}?sslmode={mode}")
}

/// The query of `url` with its `?`, or nothing.
fn query_of(url: &str) -> &str {
    url.find('?').map_or("", |at| &url[at..])
}

/// Drops and recreates database `db`; returns its URL.
pub async fn fresh_database(admin: &str, db: &str) -> String {
    let mut c = PgConnection::connect(admin).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&mut c)
        .await
        .unwrap();
    url_for(admin, db)
}

/// The URL of database `db` on the admin URL's server, connecting as `role`.
pub fn url_as(admin: &str, db: &str, role: &str) -> String {
    let o = PgConnectOptions::from_str(admin).unwrap();
    format!(
        "postgres://{role}@{}:{}/{db}{}",
        o.get_host(),
        o.get_port(),
        query_of(admin)
    )
}

/// Drops and recreates database `db` owned by `role`, a login role that is neither a superuser
/// nor `BYPASSRLS` (created if missing), with `role` owning the `public` schema too, as
/// production's control-plane owner would be. A control plane migrated through the returned URL
/// is owned by `role`, so its forced row-level security binds every statement made through it
/// (a superuser is never bound). Returns the admin's URL of the database and the role's URL.
/// The role is left in place for the next run; it owns nothing once its databases are dropped.
pub async fn fresh_owned_database(admin: &str, db: &str, role: &str) -> (String, String) {
    let admin_db = fresh_database(admin, db).await;
    let mut c = PgConnection::connect(admin).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{role}') THEN
                 CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
             END IF;
         END $$;
         ALTER ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
         ALTER DATABASE {db} OWNER TO {role};"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let mut c = PgConnection::connect(&admin_db).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER SCHEMA public OWNER TO {role}"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    (admin_db, url_as(admin, db, role))
}

/// Logs warnings (and sqlx errors) to stderr, or what `RUST_LOG` asks for.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,sqlx=error")),
        )
        .init();
}

/// Clock ticks a second in `/proc` (USER_HZ).
const TICKS: f64 = 100.0;

/// CPU seconds (user and system) in a `/proc/…/stat` file: a process's or one thread's.
fn stat_cpu_seconds(path: &std::path::Path) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = after_name
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) / TICKS
}

/// CPU seconds (user and system) spent so far by this process's threads named `name`.
pub fn thread_cpu_seconds(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .map(|t| stat_cpu_seconds(&t.path().join("stat")))
        .sum()
}

/// CPU seconds used so far by this process, and by the whole machine (every core, busy time).
pub fn cpu_seconds() -> (f64, f64) {
    let own = stat_cpu_seconds(std::path::Path::new("/proc/self/stat"));
    let machine = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<f64> = machine
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    let idle = cpu.get(3).unwrap_or(&0.0) + cpu.get(4).unwrap_or(&0.0);
    let busy = (cpu.iter().take(8).sum::<f64>() - idle) / TICKS;
    (own, busy)
}

/// The median of `xs` (the mean of the two middle values when their number is even).
pub fn median(xs: &[f64]) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}
