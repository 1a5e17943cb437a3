//! MySQL and MariaDB sources: connecting with a read-only, UTC session whose string literals
//! and identifiers read as the guard rendered them, the one-shot statements (columns, counts)
//! run through a session (`mysql/session.rs`), and a window's one streamed pass
//! (`mysql/stream.rs`), whose values `mysql/decode.rs` decodes.

mod decode;
mod session;
mod stream;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{
    MySql, MySqlArguments, MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow,
};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Column as _, Row as _, TypeInfo};

use super::engine::{ConnectError, open_pool};
use super::{Column, FetchError, Fetched, positions};
use crate::row::{Row, Value};
use crate::sql_guard::{Bind, Rendered, Shape, mysql_clock_text};
use decode::{decode, kind_of};
pub(super) use session::{MyFail, MySession, error_number, execute, timed_out};
pub(super) use stream::start as start_pass;

/// The schemas a source's DSN may not name as its database: the server's own.
const SYSTEM_DATABASES: &[&str] = &["information_schema", "mysql", "performance_schema", "sys"];

pub(super) async fn connect(
    dsn: &str,
    timeout: Duration,
    pinned: Option<&super::Pinned>,
) -> Result<(MySqlPool, String), ConnectError> {
    let mut opts = MySqlConnectOptions::from_str(dsn).map_err(|_| ConnectError::Dsn)?;
    // A tenant's source: to the address checked (the driver would look the name up again).
    if let Some(pinned) = pinned {
        opts = opts.host(&pinned.addr.to_string());
    }
    let database = opts.get_database().unwrap_or("").to_string();
    let shown = format!("{}:{}/{}", opts.get_host(), opts.get_port(), database);
    if database.is_empty() || SYSTEM_DATABASES.contains(&database.to_ascii_lowercase().as_str()) {
        let message = format!(
            "the DSN names {}; name the application's database in the DSN's path (mysql://user@host/app)",
            if database.is_empty() {
                "no database".to_string()
            } else {
                format!("the server's own schema {database}")
            }
        );
        return Err(ConnectError::Connect { shown, message });
    }
    // sqlx's own session settings are replaced by `session::apply` on every connection.
    let opts = opts
        .pipes_as_concat(false)
        .no_engine_substitution(false)
        .timezone(Some("+00:00".to_string()))
        .charset("utf8mb4");
    let options = MySqlPoolOptions::new()
        .acquire_timeout(timeout.min(Duration::from_secs(10)))
        .after_connect(move |conn, _| Box::pin(async move { session::apply(conn, timeout).await }));
    open_pool(options, opts, shown).await
}

fn bound(rendered: &Rendered) -> Query<'_, MySql, MySqlArguments> {
    let mut q = sqlx::query(AssertSqlSafe(rendered.sql.clone()));
    for b in &rendered.binds {
        q = match b {
            Bind::Instant(ts) | Bind::Clock(ts) => q.bind(mysql_clock_text(*ts)),
        };
    }
    q
}

/// The query's output columns (from the prepared statement's description), after running it
/// with `LIMIT 0` in a read.
pub(super) async fn columns(
    pool: &MySqlPool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<Vec<Column>, MyFail> {
    let mut session = MySession::open(pool, timeout).await?;
    let described = session.describe(&rendered.sql).await?;
    session.fetch_all(rendered).await?;
    session.close().await;
    Ok(described)
}

pub(super) async fn count(
    pool: &MySqlPool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<u64, MyFail> {
    let mut session = MySession::open(pool, timeout).await?;
    let rows = session.fetch_all(rendered).await?;
    session.close().await;
    let row = rows.first().ok_or(MyFail::Sql(sqlx::Error::RowNotFound))?;
    Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
}

/// How a statement's rows decode: column names shared by every row, each column's kind, and
/// where the clock and key are. Built from the first row.
struct Decoder {
    columns: Arc<[String]>,
    kinds: Vec<decode::Kind>,
    clock: usize,
    key: Vec<usize>,
}

impl Decoder {
    fn new(first: &MySqlRow, shape: Shape<'_>) -> Result<Decoder, FetchError> {
        let cols = first.columns();
        let columns: Arc<[String]> = cols.iter().map(|c| c.name().to_string()).collect();
        let kinds = cols
            .iter()
            .map(|c| {
                kind_of(c.type_info()).ok_or_else(|| FetchError::Unsupported {
                    column: c.name().to_string(),
                    type_name: c.type_info().name().to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (clock, key) = positions(&columns, shape);
        Ok(Decoder {
            columns,
            kinds,
            clock,
            key,
        })
    }

    fn row(&self, r: &MySqlRow) -> Result<Row, FetchError> {
        let mut values = Vec::with_capacity(self.kinds.len());
        for (i, k) in self.kinds.iter().enumerate() {
            values.push(decode(r, i, *k)?);
        }
        let clock = values.get(self.clock).and_then(Value::as_timestamp);
        Ok(Row {
            columns: self.columns.clone(),
            values,
            clock,
        })
    }

    /// A chunk of decoded rows and their sizes, with where the clock and key are.
    fn fetched(&self, rows: Vec<Row>, sizes: Vec<usize>) -> Fetched {
        Fetched {
            rows,
            sizes,
            key: self.key.clone(),
        }
    }
}

/// The catalogue of the DSN's database, as its user sees it (`information_schema` shows only
/// what the user may read), one fact per row.
const CATALOGUE_SQL: &str = "SELECT kind, tbl, col, extra FROM (\
     SELECT 'column' AS kind, TABLE_NAME AS tbl, COLUMN_NAME AS col, DATA_TYPE AS extra, \
            ORDINAL_POSITION AS pos \
       FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
     UNION ALL \
     SELECT CASE WHEN CONSTRAINT_NAME = 'PRIMARY' THEN 'primary' ELSE 'foreign' END, \
            TABLE_NAME, COLUMN_NAME, COALESCE(REFERENCED_TABLE_NAME, ''), ORDINAL_POSITION \
       FROM information_schema.KEY_COLUMN_USAGE \
      WHERE TABLE_SCHEMA = DATABASE() \
        AND (CONSTRAINT_NAME = 'PRIMARY' OR REFERENCED_TABLE_NAME IS NOT NULL) \
     UNION ALL \
     SELECT 'indexed', TABLE_NAME, COLUMN_NAME, '', 0 \
       FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND SEQ_IN_INDEX = 1\
   ) AS f ORDER BY tbl, kind, pos LIMIT 200001";

/// Reads the catalogue's facts in a read.
pub(super) async fn catalogue(
    pool: &MySqlPool,
    timeout: Duration,
) -> Result<Vec<[String; 4]>, MyFail> {
    let mut session = MySession::open(pool, timeout).await?;
    let rows = session
        .fetch_all(&Rendered {
            sql: CATALOGUE_SQL.to_string(),
            binds: Vec::new(),
        })
        .await?;
    session.close().await;
    let text = |r: &sqlx::mysql::MySqlRow, name: &str| -> Result<String, sqlx::Error> {
        // information_schema's text may come as binary strings on some servers.
        match r.try_get::<String, _>(name) {
            Ok(s) => Ok(s),
            Err(_) => {
                let bytes: Vec<u8> = r.try_get(name)?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    };
    rows.iter()
        .map(|r| {
            Ok([
                text(r, "kind")?,
                text(r, "tbl")?,
                text(r, "col")?,
                text(r, "extra")?,
            ])
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(MyFail::Sql)
}
