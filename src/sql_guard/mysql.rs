//! What the guard checks only in the MySQL dialect (MySQL and MariaDB): the system schemas, the
//! operators it admits, the clauses of a query that act outside it (optimizer hints that lift the
//! statement timeout or change settings, `SQL_CALC_FOUND_ROWS`), and user or system variables
//! (`@x`, `@@session.sql_mode`), read or assigned (`@x := 1`), anywhere in the re-rendered text.
//!
//! `SELECT … INTO @x | OUTFILE | DUMPFILE`, `FOR UPDATE`, `FOR SHARE` and `LOCK IN SHARE MODE`
//! are refused by the shared walk (`INTO`, locks) or do not parse; `HANDLER`, `DO`, `SET` and
//! every other statement are not a query; functions go through `functions/mysql.rs`.

use std::any::TypeId;
use std::ops::ControlFlow;

use sqlparser::ast::{BinaryOperator, ObjectName, ObjectNamePart, Query, Select};
use sqlparser::dialect::{Dialect as SqlDialect, MySqlDialect};
use sqlparser::tokenizer::{Token, Tokenizer};

use super::{Dialect, GuardError, functions};

/// The schemas a MySQL or MariaDB server keeps its own state in: accounts and password hashes,
/// other sessions' statements, settings and server files.
pub(crate) const SYSTEM_SCHEMAS: &[&str] =
    &["information_schema", "mysql", "performance_schema", "sys"];

fn construct(what: &str) -> ControlFlow<GuardError> {
    ControlFlow::Break(GuardError::Construct(what.to_string()))
}

/// Refuses a relation in one of [`SYSTEM_SCHEMAS`] (schema names compared without case, as
/// MySQL does on most systems).
pub(super) fn relation(name: &ObjectName) -> ControlFlow<GuardError> {
    let mut parts = Vec::with_capacity(name.0.len());
    for part in &name.0 {
        match part {
            ObjectNamePart::Identifier(ident) => parts.push(ident.value.to_ascii_lowercase()),
            ObjectNamePart::Function(_) => {
                return ControlFlow::Break(GuardError::SystemRelation(name.to_string()));
            }
        }
    }
    let schemas = &parts[..parts.len().saturating_sub(1)];
    if schemas.iter().any(|s| SYSTEM_SCHEMAS.contains(&s.as_str())) {
        ControlFlow::Break(GuardError::SystemRelation(functions::display(&parts)))
    } else {
        ControlFlow::Continue(())
    }
}

/// Admits MySQL's arithmetic, comparison, logical, bitwise and JSON-path operators; refuses
/// every other (`:=` assigns a user variable).
pub(super) fn operator(op: &BinaryOperator) -> ControlFlow<GuardError> {
    use BinaryOperator as B;
    match op {
        B::Plus
        | B::Minus
        | B::Multiply
        | B::Divide
        | B::Modulo
        | B::MyIntegerDivide
        | B::StringConcat
        | B::Gt
        | B::Lt
        | B::GtEq
        | B::LtEq
        | B::Spaceship
        | B::Eq
        | B::NotEq
        | B::And
        | B::Or
        | B::Xor
        | B::BitwiseOr
        | B::BitwiseAnd
        | B::BitwiseXor
        | B::PGBitwiseShiftLeft
        | B::PGBitwiseShiftRight
        | B::Arrow
        | B::LongArrow => ControlFlow::Continue(()),
        B::Assignment => construct("a user variable assignment (:=)"),
        other => ControlFlow::Break(GuardError::Operator(other.to_string())),
    }
}

/// Refuses the clauses of a query that only other dialects give meaning to.
pub(super) fn query(query: &Query) -> ControlFlow<GuardError> {
    if query.for_clause.is_some() {
        return construct("a FOR clause");
    }
    if query.settings.is_some() {
        return construct("SETTINGS");
    }
    if query.format_clause.is_some() {
        return construct("FORMAT");
    }
    if !query.pipe_operators.is_empty() {
        return construct("a pipe operator");
    }
    ControlFlow::Continue(())
}

/// Refuses optimizer hints (`/*+ MAX_EXECUTION_TIME(0) */` lifts the statement timeout,
/// `SET_VAR` changes settings) and `SQL_CALC_FOUND_ROWS` (it leaves a count in the session).
/// The other select modifiers only steer the plan of this statement.
pub(super) fn select(select: &Select) -> ControlFlow<GuardError> {
    if !select.optimizer_hints.is_empty() {
        return construct("an optimizer hint (/*+ … */)");
    }
    if select
        .select_modifiers
        .as_ref()
        .is_some_and(|m| m.sql_calc_found_rows)
    {
        return construct("SQL_CALC_FOUND_ROWS");
    }
    ControlFlow::Continue(())
}

/// Unquoted words a checked query never holds: they begin `SELECT … INTO`, a lock or `HANDLER`.
const UNQUOTED_NEVER: &[&str] = &["dumpfile", "handler", "into", "lock", "outfile"];

/// MySQL's lexer as a source session reads the rendered text: `NO_BACKSLASH_ESCAPES`, so a
/// backslash in a string literal is a character and never escapes its closing quote. Every other
/// lexical rule is MySQL's own. Tokenizing the rendered text with the author's dialect (where
/// `\'` escapes) would let a literal ending in a backslash hide the text after it from the scan
/// below, text the server runs as code.
#[derive(Debug)]
pub struct MysqlAsRun;

impl SqlDialect for MysqlAsRun {
    fn dialect(&self) -> TypeId {
        TypeId::of::<MySqlDialect>()
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        MySqlDialect {}.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        MySqlDialect {}.is_identifier_part(ch)
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        MySqlDialect {}.is_delimited_identifier_start(ch)
    }
    fn supports_string_literal_backslash_escape(&self) -> bool {
        false
    }
    fn ignores_wildcard_escapes(&self) -> bool {
        MySqlDialect {}.ignores_wildcard_escapes()
    }
    fn supports_numeric_prefix(&self) -> bool {
        MySqlDialect {}.supports_numeric_prefix()
    }
    fn supports_literal_prefix_in_qualified_name(&self) -> bool {
        MySqlDialect {}.supports_literal_prefix_in_qualified_name()
    }
    fn supports_multiline_comment_hints(&self) -> bool {
        MySqlDialect {}.supports_multiline_comment_hints()
    }
    fn requires_single_line_comment_whitespace(&self) -> bool {
        MySqlDialect {}.requires_single_line_comment_whitespace()
    }
    fn supports_hash_comment(&self) -> bool {
        MySqlDialect {}.supports_hash_comment()
    }
}

/// Refuses user and system variables (`@x`, `@@hostname`, `@@session.max_execution_time`)
/// wherever they stand in `rendered` (the checked query as it will run), by its tokens: a
/// variable read shows session or server state, and one assigned outlives the read. Also
/// refuses the unquoted words of [`UNQUOTED_NEVER`].
pub(super) fn variables(rendered: &str) -> Result<(), GuardError> {
    let tokens = Tokenizer::new(&MysqlAsRun, rendered)
        .tokenize()
        .map_err(|e| GuardError::Parse {
            dialect: Dialect::Mysql,
            message: e.to_string(),
        })?;
    for token in tokens {
        let variable = match &token {
            Token::Word(w) => w.quote_style.is_none() && w.value.contains('@'),
            Token::AtSign => true,
            _ => false,
        };
        if variable {
            return Err(GuardError::Construct(
                "a user or system variable (@name, @@name)".to_string(),
            ));
        }
        // Words that only ever begin a write or a lock in MySQL; the parser may have read one
        // as a name (`SELECT into`), which MySQL would not.
        if let Token::Word(w) = &token
            && w.quote_style.is_none()
            && UNQUOTED_NEVER.contains(&w.value.to_ascii_lowercase().as_str())
        {
            return Err(GuardError::Construct(format!(
                "the word {} (quote a name that is spelled so with backticks)",
                w.value.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}
