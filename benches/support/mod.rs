//! What the benchmarks share: fresh PostgreSQL databases on the benchmark server.

#![allow(
    dead_code,
    reason = "each benchmark is its own crate and uses only part of this"
)]

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

/// The URL of database `db` on the admin URL's server.
pub fn url_for(admin: &str, db: &str) -> String {
    let o = PgConnectOptions::from_str(admin).unwrap();
    format!(
        "postgres://{}@{}:{}/{db}",
        o.get_username(),
        o.get_host(),
        o.get_port()
    )
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
