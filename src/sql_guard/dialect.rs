//! The SQL dialects a source speaks, told apart by a DSN's scheme, and the parser each one uses.

use std::fmt;

use sqlparser::dialect::{Dialect as SqlDialect, MySqlDialect, PostgreSqlDialect, SQLiteDialect};

/// The SQL dialect of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
    /// MySQL or MariaDB.
    Mysql,
}

/// The engine a DSN names, from its scheme.
pub fn dialect_of(dsn: &str) -> Option<Dialect> {
    let scheme = dsn.split(':').next()?.to_ascii_lowercase();
    match scheme.as_str() {
        "postgres" | "postgresql" => Some(Dialect::Postgres),
        "sqlite" => Some(Dialect::Sqlite),
        "mysql" => Some(Dialect::Mysql),
        _ => None,
    }
}

impl Dialect {
    pub(super) fn parser_dialect(self) -> Box<dyn SqlDialect> {
        match self {
            Dialect::Postgres => Box::new(PostgreSqlDialect {}),
            Dialect::Sqlite => Box::new(SQLiteDialect {}),
            Dialect::Mysql => Box::new(MySqlDialect {}),
        }
    }

    /// Quotes an identifier for this dialect.
    pub fn quote_ident(self, name: &str) -> String {
        match self {
            // MySQL reads a double-quoted name as a string unless `ANSI_QUOTES` is on.
            Dialect::Mysql => format!("`{}`", name.replace('`', "``")),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// Every dialect, in the order SQL of unknown origin is tried.
    pub const ALL: [Dialect; 3] = [Dialect::Postgres, Dialect::Sqlite, Dialect::Mysql];
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
            Dialect::Mysql => "mysql",
        })
    }
}
