//! The SQL guard: a trigger's SQL is parsed in its source's dialect, refused unless it is one
//! read-only query that calls only functions known to read nothing but their arguments (see
//! `sql_guard/functions.rs`; a source may opt in to more), and re-rendered from the checked syntax tree
//! inside Rowfire's own window and ordering wrapper. The original string never runs.
//!
//! Here: the entry points ([`check`] and its variants), [`GuardError`] and [`CheckedQuery`].
//! The dialects and DSN schemes are in `sql_guard/dialect.rs`, the walk that refuses or admits
//! each node in `sql_guard/inspect.rs` (with the MySQL-only checks in `sql_guard/mysql.rs`),
//! `pg_catalog` qualification in `sql_guard/qualify.rs`, and the one-pass window and count
//! statements in `sql_guard/render.rs`.

use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

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
    /// More tokens than [`MAX_SQL_TOKENS`].
    #[error(
        "the SQL has {0} tokens; a trigger's SQL may have at most 20,000 (for example, use IN (…) instead of a long OR chain)"
    )]
    TooManyTokens(usize),
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
    /// A system catalog or statistics view (PostgreSQL's `pg_*`; MySQL's `mysql`,
    /// `information_schema`, `performance_schema` and `sys` schemas).
    #[error(
        "the SQL reads {0}, a system catalog or statistics view (other sessions, settings, credentials); a trigger reads the application's own tables"
    )]
    SystemRelation(String),
    /// The source names no engine, and each engine that reads the SQL refuses it for another
    /// reason: each, with its engine.
    #[error("{}", per_dialect(.0))]
    PerDialect(Vec<(Dialect, GuardError)>),
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
/// Most tokens a trigger's SQL may have: far more than any hand-written query, and few enough that
/// its syntax tree, however shaped, is checked in bounded time and memory.
pub const MAX_SQL_TOKENS: usize = 20_000;
/// The guard walks syntax trees recursively; a long chain such as `a = 1 OR a = 1 OR …` is as
/// deep as it is long, so checking runs on a thread with a stack sized for the longest SQL.
const GUARD_STACK_BYTES: usize = 512 << 20;

/// Runs `f` on a thread whose stack fits any tree [`MAX_SQL_BYTES`] of SQL can build.
fn on_big_stack<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GuardError> + Send + 'static,
) -> Result<T, GuardError> {
    let checking = std::thread::Builder::new()
        .name("sql-guard".into())
        .stack_size(GUARD_STACK_BYTES)
        .spawn(f)
        .map_err(|e| GuardError::Parse {
            dialect: Dialect::Postgres,
            message: format!("cannot start the SQL guard: {e}"),
        })?;
    let wait = move || checking.join().unwrap_or(Err(GuardError::TooComplex));
    // Long SQL takes a while to check. Called on a worker of a multi-threaded runtime (the
    // server's, a worker's), the runtime hands that thread's other tasks to another thread while
    // this one waits, so one request's check does not hold back the others. A single-threaded
    // runtime has no thread to hand them to (and would refuse), so there it just waits.
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
        _ => wait(),
    }
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
        let parse_error = |message: String| GuardError::Parse { dialect, message };
        let tokens = Tokenizer::new(parser_dialect.as_ref(), &sql)
            .tokenize_with_location()
            .map_err(|e| parse_error(e.to_string()))?;
        let counted = tokens
            .iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .count();
        if counted > MAX_SQL_TOKENS {
            return Err(GuardError::TooManyTokens(counted));
        }
        let statements = Parser::new(parser_dialect.as_ref())
            .with_tokens_with_locations(tokens)
            .parse_statements()
            .map_err(|e| parse_error(e.to_string()))?;
        inspect::inspect_statements(statements, dialect, extra)
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
    let mut findings = Vec::with_capacity(Dialect::ALL.len());
    for dialect in Dialect::ALL {
        match check_allowing(sql, dialect, allow_functions) {
            Ok(_) => return Ok(()),
            Err(e) => findings.push(e),
        }
    }
    // The findings of the dialects that read the SQL: one when they agree, each with its
    // dialect when they do not (what one engine admits, another may refuse); PostgreSQL's parse
    // error when none read it.
    let read: Vec<(Dialect, GuardError)> = Dialect::ALL
        .into_iter()
        .zip(findings.iter().cloned())
        .filter(|(_, e)| !matches!(e, GuardError::Parse { .. }))
        .collect();
    match read.as_slice() {
        [] => Err(findings.remove(0)),
        [(_, first), rest @ ..] if rest.iter().all(|(_, e)| e == first) => Err(first.clone()),
        _ => Err(GuardError::PerDialect(read)),
    }
}

/// The findings of [`GuardError::PerDialect`], in a sentence.
fn per_dialect(findings: &[(Dialect, GuardError)]) -> String {
    let each: Vec<String> = findings
        .iter()
        .map(|(d, e)| format!("as {d}: {e}"))
        .collect();
    format!(
        "the source names no type, and each engine's rules refuse the SQL differently ({}); give the source its `type` to check it against one",
        each.join("; ")
    )
}

/// Whether a source's `allow_functions` entry is a function name Rowfire can match: `fn` or
/// `schema.fn`, each part an identifier of at most 63 bytes.
pub fn is_allowable_function_name(name: &str) -> bool {
    functions::parse_allowed_name(Dialect::Postgres, name).is_some()
}

mod dialect;
mod functions;
mod inspect;
mod mysql;
mod qualify;
mod render;

pub use dialect::{Dialect, dialect_of};
pub use functions::{MAX_NAME_PART, is_allowlisted};
pub use mysql::MysqlAsRun;
pub use render::{
    Bind, Placeholders, Rendered, SQLITE_CLOCK_COLUMN, SQLITE_CLOCK_FN, Shape, Window,
    mysql_clock_text, sqlite_clock_micros, sqlite_clock_text,
};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod admission_tests;
#[cfg(test)]
mod allowlist_tests;
#[cfg(test)]
mod mysql_tests;
