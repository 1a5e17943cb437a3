//! The SQL guard: a trigger's SQL is parsed in its source's dialect, refused unless it is one
//! read-only query, and re-rendered from the checked syntax tree inside Rowfire's own window
//! and keyset-paging wrapper. The original string never runs.

use std::fmt;
use std::ops::ControlFlow;

use jiff::Timestamp;
use sqlparser::ast::{Expr, Query, Select, Statement, Value as SqlValue, Visit, Visitor};
use sqlparser::dialect::{Dialect as SqlDialect, PostgreSqlDialect, SQLiteDialect};
use sqlparser::parser::Parser;

use crate::row::Value;

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

/// Checks SQL whose source's engine is not known yet (no `type`, no DSN at hand), with a
/// dialect that accepts the syntax of every supported engine. The real dialect is checked again
/// when the source is connected.
pub fn check_any_dialect(sql: &str) -> Result<(), GuardError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(GuardError::TooLong(sql.len()));
    }
    let sql = sql.to_string();
    on_big_stack(move || {
        let statements =
            Parser::parse_sql(&sqlparser::dialect::GenericDialect {}, &sql).map_err(|e| {
                GuardError::Parse {
                    dialect: Dialect::Postgres,
                    message: e.to_string(),
                }
            })?;
        inspect_statements(statements, Dialect::Postgres).map(|_| ())
    })
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

/// A value bound to a rendered statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// A window bound (`:since`, `:until`, or Rowfire's own window).
    Instant(Timestamp),
    /// A keyset value from the previous page, with the PostgreSQL type to cast it to.
    Value {
        /// The value, as read from the last row of the previous page.
        value: Value,
        /// The column's PostgreSQL type name (ignored on SQLite).
        pg_type: Option<String>,
    },
}

/// A statement ready to run: SQL text with numbered placeholders and the values they take.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The SQL text.
    pub sql: String,
    /// Values for `$1…` (PostgreSQL) or `?1…` (SQLite), in order.
    pub binds: Vec<Bind>,
}

/// Whether binds become placeholders (to run) or literals (to show a person).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    /// `$1` / `?1`, with values bound separately.
    Numbered,
    /// Literals written into the text, for `rowfire explain`.
    Inline,
}

/// The half-open time window a poll or backtest reads: `since <= clock < until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Inclusive start.
    pub since: Timestamp,
    /// Exclusive end.
    pub until: Timestamp,
}

/// Where the previous page ended: the last row's clock and key values.
#[derive(Debug, Clone, PartialEq)]
pub struct Keyset {
    /// The clock as compared in SQL (PostgreSQL: the column's value; SQLite: normalised text).
    pub clock: Value,
    /// The clock column's PostgreSQL type.
    pub clock_type: Option<String>,
    /// Key values with their PostgreSQL types.
    pub key: Vec<(Value, Option<String>)>,
}

/// Which rows of the window a statement selects, in (clock, key) order.
#[derive(Debug, Clone, PartialEq)]
pub enum Slice<'a> {
    /// Every row after `after` (from the start when `None`) up to and including `upto` (to the
    /// end when `None`). Rows that compare equal to `upto` in SQL are all included, so a page
    /// never splits them.
    Between {
        /// Exclusive lower bound.
        after: Option<&'a Keyset>,
        /// Inclusive upper bound.
        upto: Option<&'a Keyset>,
    },
    /// The single row `offset` rows past `after`: where a page of `offset + 1` rows ends.
    Boundary {
        /// Exclusive lower bound.
        after: Option<&'a Keyset>,
        /// Rows to skip.
        offset: usize,
    },
}

/// The column SQLite reads the normalised clock into, stripped before rows reach callers.
pub const SQLITE_CLOCK_COLUMN: &str = "__rowfire_clock";

/// The clock and key columns a trigger pages by.
#[derive(Debug, Clone, Copy)]
pub struct Shape<'a> {
    /// The clock (`event_time`) column.
    pub clock: &'a str,
    /// The key columns.
    pub key: &'a [String],
}

struct Builder {
    dialect: Dialect,
    mode: Placeholders,
    binds: Vec<Bind>,
    since: Option<String>,
    until: Option<String>,
    window: Window,
}

impl Builder {
    fn new(dialect: Dialect, mode: Placeholders, window: Window) -> Self {
        Builder {
            dialect,
            mode,
            binds: Vec::new(),
            since: None,
            until: None,
            window,
        }
    }

    fn push(&mut self, bind: Bind) -> String {
        let text = match self.mode {
            Placeholders::Inline => self.literal(&bind),
            Placeholders::Numbered => {
                let n = self.binds.len() + 1;
                match (self.dialect, &bind) {
                    (
                        Dialect::Postgres,
                        Bind::Value {
                            pg_type: Some(ty), ..
                        },
                    ) => {
                        format!("CAST(${n} AS {ty})")
                    }
                    (Dialect::Postgres, _) => format!("${n}"),
                    (Dialect::Sqlite, _) => format!("?{n}"),
                }
            }
        };
        if self.mode == Placeholders::Numbered {
            self.binds.push(bind);
        }
        text
    }

    fn since(&mut self) -> String {
        if self.since.is_none() {
            self.since = Some(self.push(Bind::Instant(self.window.since)));
        }
        self.since.clone().expect("set above")
    }

    fn until(&mut self) -> String {
        if self.until.is_none() {
            self.until = Some(self.push(Bind::Instant(self.window.until)));
        }
        self.until.clone().expect("set above")
    }

    fn literal(&self, bind: &Bind) -> String {
        let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
        match (self.dialect, bind) {
            (Dialect::Postgres, Bind::Instant(ts)) => {
                format!("{}::timestamptz", quote(&ts.to_string()))
            }
            (Dialect::Sqlite, Bind::Instant(ts)) => quote(&sqlite_clock_text(*ts)),
            (
                _,
                Bind::Value {
                    value: Value::Null, ..
                },
            ) => "NULL".into(),
            (Dialect::Postgres, Bind::Value { value, pg_type }) => {
                let text = quote(&value.to_sql_text().unwrap_or_default());
                match pg_type {
                    Some(ty) => format!("CAST({text} AS {ty})"),
                    None => text,
                }
            }
            (Dialect::Sqlite, Bind::Value { value, .. }) => match value {
                Value::Int(_) | Value::Float(_) | Value::Decimal(_) => value.to_string(),
                Value::Bool(b) => (*b as i32).to_string(),
                other => quote(&other.to_sql_text().unwrap_or_default()),
            },
        }
    }
}

/// The text SQLite compares clocks as: `strftime('%Y-%m-%d %H:%M:%f')` of the instant in UTC.
pub fn sqlite_clock_text(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

impl CheckedQuery {
    /// The dialect the query was checked in.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether the author's SQL names `:since` or `:until` itself (then Rowfire binds them
    /// directly instead of wrapping the query in its window).
    pub fn names_window(&self) -> bool {
        self.names_window
    }

    fn inner(&self, b: &mut Builder) -> String {
        let mut text = self.inner.clone();
        let since = format!("{}since\u{1}", self.marker);
        if text.contains(&since) {
            text = text.replace(&since, &b.since());
        }
        let until = format!("{}until\u{1}", self.marker);
        if text.contains(&until) {
            text = text.replace(&until, &b.until());
        }
        text
    }

    fn clock_expr(&self, clock: &str) -> String {
        let col = format!("t.{}", self.dialect.quote_ident(clock));
        match self.dialect {
            Dialect::Postgres => col,
            // Text clocks are read as SQLite's date functions read them; numbers as Unix seconds.
            Dialect::Sqlite => format!(
                "CASE WHEN typeof({col}) IN ('integer', 'real') THEN strftime('%Y-%m-%d %H:%M:%f', {col}, 'unixepoch') \
                 ELSE strftime('%Y-%m-%d %H:%M:%f', {col}) END"
            ),
        }
    }

    fn key_exprs(&self, key: &[String]) -> Vec<String> {
        key.iter()
            .map(|k| format!("t.{}", self.dialect.quote_ident(k)))
            .collect()
    }

    /// Rowfire's window predicate over the wrapped query, or only "clock is not NULL" when the
    /// author binds `:since`/`:until` themselves.
    fn window_predicate(&self, b: &mut Builder, clock: &str) -> String {
        let clock = self.clock_expr(clock);
        if self.names_window {
            format!("{clock} IS NOT NULL")
        } else {
            format!("{clock} >= {} AND {clock} < {}", b.since(), b.until())
        }
    }

    /// `SELECT * FROM (<query>) AS t LIMIT 0`: the query's output columns, without rows.
    pub fn columns_sql(&self, window: Window) -> Rendered {
        let mut b = Builder::new(self.dialect, Placeholders::Numbered, window);
        let inner = self.inner(&mut b);
        Rendered {
            sql: format!("SELECT * FROM ({inner}) AS t LIMIT 0"),
            binds: b.binds,
        }
    }

    /// A slice of the window, ordered by (clock, key), NULL keys excluded (they are counted
    /// separately).
    pub fn page_sql(
        &self,
        shape: Shape<'_>,
        window: Window,
        slice: Slice<'_>,
        mode: Placeholders,
    ) -> Rendered {
        let mut b = Builder::new(self.dialect, mode, window);
        let inner = self.inner(&mut b);
        let clock = self.clock_expr(shape.clock);
        let keys = self.key_exprs(shape.key);
        let select = match self.dialect {
            Dialect::Postgres => "t.*".to_string(),
            Dialect::Sqlite => format!(
                "t.*, {clock} AS {}",
                self.dialect.quote_ident(SQLITE_CLOCK_COLUMN)
            ),
        };
        let mut sql = format!(
            "SELECT {select} FROM ({inner}) AS t WHERE {}",
            self.window_predicate(&mut b, shape.clock)
        );
        for k in &keys {
            sql.push_str(&format!(" AND {k} IS NOT NULL"));
        }
        let tuple = std::iter::once(clock.clone())
            .chain(keys.iter().cloned())
            .collect::<Vec<_>>()
            .join(", ");
        let mut bound = |b: &mut Builder, ks: &Keyset, op: &str| {
            let mut values = vec![b.push(Bind::Value {
                value: ks.clock.clone(),
                pg_type: ks.clock_type.clone(),
            })];
            for (value, pg_type) in &ks.key {
                values.push(b.push(Bind::Value {
                    value: value.clone(),
                    pg_type: pg_type.clone(),
                }));
            }
            sql.push_str(&format!(" AND ({tuple}) {op} ({})", values.join(", ")));
        };
        let (after, upto, offset) = match slice {
            Slice::Between { after, upto } => (after, upto, None),
            Slice::Boundary { after, offset } => (after, None, Some(offset)),
        };
        if let Some(ks) = after {
            bound(&mut b, ks, ">");
        }
        if let Some(ks) = upto {
            bound(&mut b, ks, "<=");
        }
        sql.push_str(&format!(" ORDER BY {tuple}"));
        if let Some(offset) = offset {
            sql.push_str(&format!(" LIMIT 1 OFFSET {offset}"));
        }
        Rendered {
            sql,
            binds: b.binds,
        }
    }

    /// Counts rows whose clock is NULL (or, on SQLite, not a readable time), over the
    /// unwindowed query (`:since`/`:until`, if named, still take the window).
    pub fn null_clock_count_sql(&self, shape: Shape<'_>, window: Window) -> Rendered {
        let mut b = Builder::new(self.dialect, Placeholders::Numbered, window);
        let inner = self.inner(&mut b);
        let clock = self.clock_expr(shape.clock);
        Rendered {
            sql: format!("SELECT count(*) FROM ({inner}) AS t WHERE {clock} IS NULL"),
            binds: b.binds,
        }
    }

    /// Counts rows in the window whose key has a NULL column.
    pub fn null_key_count_sql(&self, shape: Shape<'_>, window: Window) -> Rendered {
        let mut b = Builder::new(self.dialect, Placeholders::Numbered, window);
        let inner = self.inner(&mut b);
        let any_null = self
            .key_exprs(shape.key)
            .iter()
            .map(|k| format!("{k} IS NULL"))
            .collect::<Vec<_>>()
            .join(" OR ");
        let predicate = self.window_predicate(&mut b, shape.clock);
        Rendered {
            sql: format!("SELECT count(*) FROM ({inner}) AS t WHERE {predicate} AND ({any_null})"),
            binds: b.binds,
        }
    }
}

#[cfg(test)]
mod tests;
