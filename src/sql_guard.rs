//! The SQL guard: a trigger's SQL is parsed in its source's dialect, refused unless it is one
//! read-only query that calls only functions known to read nothing but their arguments (see
//! `sql_guard/functions.rs`; a source may opt in to more), and re-rendered from the checked syntax tree
//! inside Rowfire's own window and keyset-paging wrapper. The original string never runs.

use std::fmt;
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, ObjectName, ObjectNamePart, Query, Select, Statement, TableFactor,
    Value as SqlValue, Visit, Visitor,
};
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
    /// A function that is not on the dialect's list of read-only functions and that the source
    /// did not opt in to. Holds the name as the database resolves it.
    #[error(
        "the SQL calls {0}(), which is not on Rowfire's list of read-only functions; if it only reads its arguments, add it to the source's `allow_functions`"
    )]
    Function(String),
    /// An operator Rowfire does not know to be built in (it may call any function).
    #[error(
        "the SQL uses the operator {0}, which is not one of the database's built-in operators Rowfire knows; write the function it stands for instead, and allow that function"
    )]
    Operator(String),
    /// A construct outside the read-only subset Rowfire checks (for example `PIVOT`).
    #[error(
        "the SQL uses {0}, which Rowfire does not check for this database; rewrite it with plain SELECT, joins and functions"
    )]
    Construct(String),
    /// A PostgreSQL system catalog or statistics view.
    #[error(
        "the SQL reads {0}, a PostgreSQL system catalog or statistics view (other sessions, settings, credentials); a trigger reads the application's own tables"
    )]
    SystemRelation(String),
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

/// Parses `sql` in `dialect` and refuses anything but one read-only query that calls only the
/// dialect's read-only functions.
pub fn check(sql: &str, dialect: Dialect) -> Result<CheckedQuery, GuardError> {
    check_allowing(sql, dialect, &[])
}

/// Like [`check`], also admitting calls to the functions a source opted in to
/// (`allow_functions`: `fn` or `schema.fn`). Names that are not identifiers admit nothing.
pub fn check_allowing(
    sql: &str,
    dialect: Dialect,
    allow_functions: &[String],
) -> Result<CheckedQuery, GuardError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(GuardError::TooLong(sql.len()));
    }
    let sql = sql.to_string();
    let extra: Vec<Vec<String>> = allow_functions
        .iter()
        .filter_map(|name| functions::parse_allowed_name(dialect, name))
        .collect();
    on_big_stack(move || {
        let parser_dialect = dialect.parser_dialect();
        let statements =
            Parser::parse_sql(parser_dialect.as_ref(), &sql).map_err(|e| GuardError::Parse {
                dialect,
                message: e.to_string(),
            })?;
        inspect_statements(statements, dialect, extra)
    })
}

/// Checks SQL whose source's engine is not known yet (no `type`, no DSN at hand): it passes when
/// it is one read-only query in any supported dialect. The real dialect is checked again when the
/// source is connected.
pub fn check_any_dialect(sql: &str) -> Result<(), GuardError> {
    check_any_dialect_allowing(sql, &[])
}

/// Like [`check_any_dialect`], with the source's `allow_functions`.
pub fn check_any_dialect_allowing(sql: &str, allow_functions: &[String]) -> Result<(), GuardError> {
    let postgres = match check_allowing(sql, Dialect::Postgres, allow_functions) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    match check_allowing(sql, Dialect::Sqlite, allow_functions) {
        Ok(_) => Ok(()),
        // Report PostgreSQL's finding unless only PostgreSQL failed to read the SQL at all.
        Err(sqlite)
            if matches!(postgres, GuardError::Parse { .. })
                && !matches!(sqlite, GuardError::Parse { .. }) =>
        {
            Err(sqlite)
        }
        Err(_) => Err(postgres),
    }
}

/// Whether a source's `allow_functions` entry is a function name Rowfire can match: `fn` or
/// `schema.fn`, each part an identifier of at most 63 bytes.
pub fn is_allowable_function_name(name: &str) -> bool {
    functions::parse_allowed_name(Dialect::Postgres, name).is_some()
}

fn inspect_statements(
    statements: Vec<Statement>,
    dialect: Dialect,
    extra: Vec<Vec<String>>,
) -> Result<CheckedQuery, GuardError> {
    let statement = match statements.len() {
        0 => return Err(GuardError::Empty),
        1 => statements.into_iter().next().expect("one statement"),
        n => return Err(GuardError::MultipleStatements(n)),
    };
    let Statement::Query(query) = statement else {
        return Err(GuardError::NotAQuery(statement_kind(&statement)));
    };
    let mut inspector = Inspector {
        dialect,
        extra,
        since: false,
        until: false,
    };
    if let ControlFlow::Break(err) = query.visit(&mut inspector) {
        return Err(err);
    }
    let mut query = *query;
    qualify::builtins(dialect, &mut query);
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

struct Inspector {
    dialect: Dialect,
    /// Functions the source opted in to, normalised.
    extra: Vec<Vec<String>>,
    since: bool,
    until: bool,
}

impl Inspector {
    /// Refuses a call to `name` unless it is admitted in this dialect or by the source.
    fn function(&self, name: &ObjectName) -> ControlFlow<GuardError> {
        let mut parts = Vec::with_capacity(name.0.len());
        for part in &name.0 {
            match part {
                ObjectNamePart::Identifier(ident) => {
                    parts.push((ident.value.clone(), ident.quote_style.is_some()))
                }
                // A name computed by a function (`IDENTIFIER(…)`) cannot be checked.
                ObjectNamePart::Function(_) => {
                    return ControlFlow::Break(GuardError::Function(name.to_string()));
                }
            }
        }
        let normalised = functions::normalise(self.dialect, &parts);
        if functions::admitted(self.dialect, &normalised, &self.extra) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(GuardError::Function(functions::display(&normalised)))
        }
    }

    /// Refuses PostgreSQL's system catalogs and statistics views (`pg_catalog`, `pg_toast`, any
    /// `pg_*` relation): they show other sessions' queries, settings, password hashes and server
    /// files, none of which is a customer's row.
    fn relation(&self, name: &ObjectName) -> ControlFlow<GuardError> {
        if self.dialect != Dialect::Postgres {
            return ControlFlow::Continue(());
        }
        let mut parts = Vec::with_capacity(name.0.len());
        for part in &name.0 {
            match part {
                ObjectNamePart::Identifier(ident) => parts.push(match ident.quote_style {
                    Some(_) => ident.value.clone(),
                    None => ident.value.to_ascii_lowercase(),
                }),
                ObjectNamePart::Function(_) => {
                    return ControlFlow::Break(GuardError::SystemRelation(name.to_string()));
                }
            }
        }
        // The relation and, when qualified, its schema: PostgreSQL searches `pg_catalog`
        // first, so an unqualified `pg_*` name resolves there.
        let system = parts.iter().rev().take(2).any(|p| p.starts_with("pg_"));
        if system {
            ControlFlow::Break(GuardError::SystemRelation(functions::display(&parts)))
        } else {
            ControlFlow::Continue(())
        }
    }

    /// Refuses operators that are not built in: a custom operator may stand for any function.
    fn operator(op: &BinaryOperator) -> ControlFlow<GuardError> {
        match op {
            BinaryOperator::Custom(_) | BinaryOperator::PGCustomBinaryOperator(_) => {
                ControlFlow::Break(GuardError::Operator(op.to_string()))
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

fn construct(what: &str) -> ControlFlow<GuardError> {
    ControlFlow::Break(GuardError::Construct(what.to_string()))
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

    /// Every relation in `FROM`: a plain table or a subquery passes (the subquery is walked),
    /// a function used as a table is checked like any other call, and constructs Rowfire does
    /// not check are refused. The match names every kind, so a new one must be judged here.
    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<GuardError> {
        match factor {
            TableFactor::Table {
                name, args: None, ..
            } => self.relation(name),
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            }
            | TableFactor::Function { name, .. } => self.function(name),
            TableFactor::UNNEST { .. } => self.named_function("unnest"),
            TableFactor::JsonTable { .. } => self.named_function("json_table"),
            TableFactor::XmlTable { .. } => self.named_function("xmltable"),
            TableFactor::Derived { .. }
            | TableFactor::NestedJoin { .. }
            | TableFactor::TableFunction { .. } => ControlFlow::Continue(()),
            TableFactor::OpenJsonTable { .. } => construct("OPENJSON"),
            TableFactor::Pivot { .. } => construct("PIVOT"),
            TableFactor::Unpivot { .. } | TableFactor::UnpivotExpr { .. } => construct("UNPIVOT"),
            TableFactor::MatchRecognize { .. } => construct("MATCH_RECOGNIZE"),
            TableFactor::SemanticView { .. } => construct("SEMANTIC_VIEW"),
        }
    }

    /// Every expression: calls are checked against the allowlist, operators must be built in,
    /// placeholders must be `:since`/`:until`, and expression kinds from other dialects are
    /// refused. The match names every kind, so a new one must be judged here.
    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<GuardError> {
        match expr {
            Expr::Function(f) => self.function(&f.name),
            Expr::BinaryOp { op, .. } => Self::operator(op),
            Expr::AnyOp { compare_op, .. } | Expr::AllOp { compare_op, .. } => {
                Self::operator(compare_op)
            }
            Expr::Value(v) => match &v.value {
                SqlValue::Placeholder(name) => match name.as_str() {
                    ":since" => {
                        self.since = true;
                        ControlFlow::Continue(())
                    }
                    ":until" => {
                        self.until = true;
                        ControlFlow::Continue(())
                    }
                    other => ControlFlow::Break(GuardError::Placeholder(other.to_string())),
                },
                _ => ControlFlow::Continue(()),
            },
            Expr::Identifier(_)
            | Expr::CompoundIdentifier(_)
            | Expr::CompoundFieldAccess { .. }
            | Expr::JsonAccess { .. }
            | Expr::IsFalse(_)
            | Expr::IsNotFalse(_)
            | Expr::IsTrue(_)
            | Expr::IsNotTrue(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotUnknown(_)
            | Expr::IsDistinctFrom(..)
            | Expr::IsNotDistinctFrom(..)
            | Expr::IsJson { .. }
            | Expr::IsNormalized { .. }
            | Expr::In { .. }
            | Expr::Between { .. }
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::SimilarTo { .. }
            | Expr::RLike { .. }
            | Expr::UnaryOp { .. }
            | Expr::Convert { .. }
            | Expr::Cast { .. }
            | Expr::AtTimeZone { .. }
            | Expr::Extract { .. }
            | Expr::Ceil { .. }
            | Expr::Floor { .. }
            | Expr::Position { .. }
            | Expr::Substring { .. }
            | Expr::Trim { .. }
            | Expr::Overlay { .. }
            | Expr::Collate { .. }
            | Expr::Nested(_)
            | Expr::TypedString(_)
            | Expr::Case { .. }
            | Expr::Exists { .. }
            | Expr::Subquery(_)
            | Expr::GroupingSets(_)
            | Expr::Cube(_)
            | Expr::Rollup(_)
            | Expr::Tuple(_)
            | Expr::Array(_)
            | Expr::Interval(_)
            | Expr::Wildcard(_)
            | Expr::QualifiedWildcard(..) => ControlFlow::Continue(()),
            Expr::Prefixed { .. } => construct("a character set introducer"),
            Expr::Struct { .. } | Expr::Named { .. } => construct("STRUCT"),
            Expr::Dictionary(_) | Expr::Map(_) => construct("a map literal"),
            Expr::MatchAgainst { .. } => construct("MATCH … AGAINST"),
            Expr::OuterJoin(_) => construct("the (+) outer join"),
            Expr::Prior(_) => construct("PRIOR"),
            Expr::Lambda(_) => construct("a lambda"),
            Expr::MemberOf(_) => construct("MEMBER OF"),
        }
    }
}

impl Inspector {
    fn named_function(&self, name: &str) -> ControlFlow<GuardError> {
        let parts = vec![name.to_string()];
        if functions::admitted(self.dialect, &parts, &self.extra) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(GuardError::Function(name.to_string()))
        }
    }
}

mod functions;
mod qualify;
mod render;

pub use functions::{MAX_NAME_PART, is_allowlisted};
pub use render::{
    Bind, Keyset, Placeholders, Rendered, SQLITE_CLOCK_COLUMN, SQLITE_CLOCK_FN, Shape, Slice,
    Window, sqlite_clock_micros, sqlite_clock_text,
};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod admission_tests;
#[cfg(test)]
mod allowlist_tests;
