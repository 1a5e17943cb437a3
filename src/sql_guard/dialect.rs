//! The SQL dialects a source speaks, told apart by a DSN's scheme, and the parser each one uses.

use std::fmt;

use sqlparser::dialect::{Dialect as SqlDialect, PostgreSqlDialect, SQLiteDialect};

/// The SQL dialect of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
}

/// The engine a DSN names, from its scheme.
pub fn dialect_of(dsn: &str) -> Option<Dialect> {
    let scheme = dsn.split(':').next()?.to_ascii_lowercase();
    match scheme.as_str() {
        "postgres" | "postgresql" => Some(Dialect::Postgres),
        "sqlite" => Some(Dialect::Sqlite),
        _ => None,
    }
}

impl Dialect {
    pub(super) fn parser_dialect(self) -> Box<dyn SqlDialect> {
        match self {
            Dialect::Postgres => Box::new(PostgreSqlDialect {}),
            Dialect::Sqlite => Box::new(SQLiteDialect {}),
        }
    }

    /// Quotes an identifier for this dialect.
    pub fn quote_ident(self, name: &str) -> String {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        })
    }
}
