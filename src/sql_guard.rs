//! The SQL guard: a trigger's SQL is parsed in its source's dialect, refused unless it is one
//! read-only query, and re-rendered from the checked syntax tree inside Rowfire's own window
//! and keyset-paging wrapper. The original string never runs.

use std::fmt;
use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Query, Select, Statement, Value as SqlValue, Visit, Visitor};
use sqlparser::dialect::{Dialect as SqlDialect, PostgreSqlDialect, SQLiteDialect};
use sqlparser::parser::Parser;

/// The SQL dialect of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    fn parser_dialect(self) -> Box<dyn SqlDialect> {
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

/// Why the guard refused a trigger's SQL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// Nothing to run.
    #[error("the SQL is empty; write one SELECT that returns the trigger's rows")]
    Empty,
    /// The parser rejected it.
    #[error("the SQL does not parse as {dialect} SQL ({message}); check the syntax near that spot")]
    Parse {
        /// The dialect it was parsed in.
        dialect: Dialect,
        /// The parser's message.
        message: String,
    },
    /// More than one statement.
    #[error("the SQL holds {0} statements; a trigger is exactly one SELECT (remove the others)")]
    MultipleStatements(usize),
    /// A statement that is not a query.
    #[error(
        "the SQL is a {0} statement; a trigger must be one read-only query (SELECT, UNION, VALUES)"
    )]
    NotAQuery(String),
    /// A data-modifying or DDL statement nested somewhere in the query.
    #[error("the SQL contains a {0} statement (inside a CTE or subquery); triggers may only read")]
    NestedStatement(String),
    /// `SELECT … INTO` creates a table.
    #[error("SELECT … INTO creates a table; remove the INTO clause")]
    SelectInto,
    /// `FOR UPDATE` / `FOR SHARE`.
    #[error("the SQL takes row locks ({0}); remove the locking clause, triggers only read")]
    Locking(String),
    /// Longer than [`MAX_SQL_BYTES`].
    #[error("the SQL is {0} bytes long; a trigger's SQL may be at most 256 KiB")]
    TooLong(usize),
    /// Too deeply nested to check.
    #[error(
        "the SQL is too deeply nested to check; simplify it (for example, use IN (…) instead of a long OR chain)"
    )]
    TooComplex,
    /// A function with effects outside a read-only query.
    #[error(
        "the SQL calls {0}(), which acts outside a read-only query (another session, a lock, a file, a setting or a notification); remove it"
    )]
    Function(String),
    /// A placeholder other than `:since` and `:until`.
    #[error("the SQL uses the placeholder {0}; Rowfire binds only :since and :until")]
    Placeholder(String),
}

/// A trigger's query that passed the guard. Only its syntax tree is kept.
#[derive(Debug, Clone)]
pub struct CheckedQuery {
    dialect: Dialect,
    /// The query re-rendered from its checked syntax tree, with `:since`/`:until` replaced by
    /// markers no SQL text can contain; the tree itself is dropped where it was built.
    inner: String,
    marker: String,
    names_window: bool,
}

/// Longest trigger SQL the guard reads.
pub const MAX_SQL_BYTES: usize = 256 * 1024;
/// The guard walks syntax trees recursively; a long chain such as `a = 1 OR a = 1 OR …` is as
/// deep as it is long, so checking runs on a thread with a stack sized for the longest SQL.
const GUARD_STACK_BYTES: usize = 512 << 20;

/// Runs `f` on a thread whose stack fits any tree [`MAX_SQL_BYTES`] of SQL can build.
fn on_big_stack<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GuardError> + Send + 'static,
) -> Result<T, GuardError> {
    std::thread::Builder::new()
        .name("sql-guard".into())
        .stack_size(GUARD_STACK_BYTES)
        .spawn(f)
        .map_err(|e| GuardError::Parse {
            dialect: Dialect::Postgres,
            message: format!("cannot start the SQL guard: {e}"),
        })?
        .join()
        .unwrap_or(Err(GuardError::TooComplex))
}

/// Parses `sql` in `dialect` and refuses anything but one read-only query.
pub fn check(sql: &str, dialect: Dialect) -> Result<CheckedQuery, GuardError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(GuardError::TooLong(sql.len()));
    }
    let sql = sql.to_string();
    on_big_stack(move || {
        let parser_dialect = dialect.parser_dialect();
        let statements =
            Parser::parse_sql(parser_dialect.as_ref(), &sql).map_err(|e| GuardError::Parse {
                dialect,
                message: e.to_string(),
            })?;
        inspect_statements(statements, dialect)
    })
}

/// Checks SQL whose source's engine is not known yet (no `type`, no DSN at hand): it passes when
/// it is one read-only query in any supported dialect. The real dialect is checked again when the
/// source is connected.
pub fn check_any_dialect(sql: &str) -> Result<(), GuardError> {
    match check(sql, Dialect::Postgres) {
        Ok(_) => Ok(()),
        Err(postgres @ GuardError::Parse { .. }) => match check(sql, Dialect::Sqlite) {
            Ok(_) => Ok(()),
            Err(GuardError::Parse { .. }) => Err(postgres),
            Err(refused) => Err(refused),
        },
        Err(refused) => Err(refused),
    }
}

fn inspect_statements(
    statements: Vec<Statement>,
    dialect: Dialect,
) -> Result<CheckedQuery, GuardError> {
    let statement = match statements.len() {
        0 => return Err(GuardError::Empty),
        1 => statements.into_iter().next().expect("one statement"),
        n => return Err(GuardError::MultipleStatements(n)),
    };
    let Statement::Query(query) = statement else {
        return Err(GuardError::NotAQuery(statement_kind(&statement)));
    };
    let mut inspector = Inspector::default();
    if let ControlFlow::Break(err) = query.visit(&mut inspector) {
        return Err(err);
    }
    let mut query = *query;
    let marker = format!("\u{1}{:016x}", fastrand::u64(..));
    let _ = sqlparser::ast::visit_expressions_mut(&mut query, |expr| {
        if let Expr::Value(v) = expr
            && let SqlValue::Placeholder(name) = &mut v.value
        {
            *name = format!("{marker}{}\u{1}", &name[1..]);
        }
        ControlFlow::<()>::Continue(())
    });
    Ok(CheckedQuery {
        dialect,
        inner: query.to_string(),
        marker,
        names_window: inspector.since || inspector.until,
    })
}

fn statement_kind(statement: &Statement) -> String {
    let text = statement.to_string();
    let mut words = text.split_whitespace().take(2).map(str::to_uppercase);
    let first = words.next().unwrap_or_default();
    match (first.as_str(), words.next()) {
        ("CREATE" | "DROP" | "ALTER", Some(second)) => format!("{first} {second}"),
        _ => first,
    }
}

#[derive(Default)]
struct Inspector {
    since: bool,
    until: bool,
}

impl Visitor for Inspector {
    type Break = GuardError;

    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<GuardError> {
        ControlFlow::Break(GuardError::NestedStatement(statement_kind(statement)))
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<GuardError> {
        if let Some(lock) = query.locks.first() {
            return ControlFlow::Break(GuardError::Locking(lock.to_string()));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<GuardError> {
        if select.into.is_some() {
            return ControlFlow::Break(GuardError::SelectInto);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<GuardError> {
        if let Expr::Function(f) = expr {
            let name = f
                .name
                .0
                .last()
                .map(|part| part.to_string().trim_matches('"').to_lowercase())
                .unwrap_or_default();
            if is_denied_function(&name) {
                return ControlFlow::Break(GuardError::Function(name));
            }
        }
        if let Expr::Value(v) = expr
            && let SqlValue::Placeholder(name) = &v.value
        {
            match name.as_str() {
                ":since" => self.since = true,
                ":until" => self.until = true,
                other => return ControlFlow::Break(GuardError::Placeholder(other.to_string())),
            }
        }
        ControlFlow::Continue(())
    }
}

/// Functions that act outside the read-only query that calls them: through another session
/// (dblink), on other sessions, with locks that outlive the transaction, on files, on settings,
/// or by notifying listeners. A read-only session does not stop these, so the guard does.
fn is_denied_function(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_promote",
        "pg_switch_wal",
        "pg_create_restore_point",
        "pg_notify",
        "set_config",
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_dir",
        "pg_stat_file",
        "pg_file_write",
        "pg_logical_emit_message",
        "load_extension",
        "writefile",
        "readfile",
    ];
    const PREFIXES: &[&str] = &[
        "dblink",
        "pg_advisory_",
        "pg_try_advisory_",
        "lo_",
        "pg_replication_origin_",
    ];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

mod render;

pub use render::{
    Bind, Keyset, Placeholders, Rendered, SQLITE_CLOCK_COLUMN, SQLITE_CLOCK_FN, Shape, Slice,
    Window, sqlite_clock_micros, sqlite_clock_text,
};

#[cfg(test)]
mod tests;
