//! Inspecting a parsed trigger: exactly one query statement, walked node by node, refusing
//! writes, locks, functions off the dialect's list, custom operators, PostgreSQL system relations,
//! unknown placeholders and constructs the guard does not check; then re-rendered with the
//! builtins qualified and the window placeholders marked.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, InTarget, ObjectName, ObjectNamePart, Query, Select, SetExpr, Statement,
    TableFactor, Value as SqlValue, Visit, Visitor,
};

use super::{CheckedQuery, Dialect, GuardError, functions, mysql, qualify};

pub(super) fn inspect_statements(
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
    if dialect == Dialect::Mysql {
        mysql::variables(&query.to_string())?;
    }
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
        // MySQL resolves a quoted name (`` `lower`(x) ``) to a stored function of the current
        // database, not the built-in: only a name the source opted in to is admitted then.
        let builtin_shape = !(self.dialect == Dialect::Mysql && parts.iter().any(|(_, q)| *q));
        let admitted = if builtin_shape {
            functions::admitted(self.dialect, &normalised, &self.extra)
        } else {
            self.extra.contains(&normalised)
        };
        if admitted {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(GuardError::Function(functions::display(&normalised)))
        }
    }

    /// Refuses PostgreSQL's system catalogs and statistics views (`pg_catalog`, `pg_toast`, any
    /// `pg_*` relation): they show other sessions' queries, settings, password hashes and server
    /// files, none of which is a customer's row.
    fn relation(&self, name: &ObjectName) -> ControlFlow<GuardError> {
        match self.dialect {
            Dialect::Postgres => {}
            Dialect::Mysql => return mysql::relation(name),
            Dialect::Sqlite => return sqlite_relation(name),
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
    fn operator(&self, op: &BinaryOperator) -> ControlFlow<GuardError> {
        if self.dialect == Dialect::Mysql {
            return mysql::operator(op);
        }
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
        // `TABLE name` reads a relation the walk never sees as one; `SELECT * FROM name` says
        // the same and is checked.
        if reads_a_table(&query.body) {
            return construct("TABLE name (write SELECT * FROM name)");
        }
        if self.dialect == Dialect::Mysql {
            return mysql::query(query);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<GuardError> {
        if select.into.is_some() {
            return ControlFlow::Break(GuardError::SelectInto);
        }
        if self.dialect == Dialect::Mysql {
            return mysql::select(select);
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
            // SQLite's `x IN name` reads a relation (or a function used as one) as `FROM` does.
            Expr::In { target, .. } => match target {
                InTarget::Table { name, args: None } => self.relation(name),
                InTarget::Table {
                    name,
                    args: Some(_),
                } => self.function(name),
                InTarget::Unnest(_) => self.named_function("unnest"),
                InTarget::List(_) | InTarget::Subquery(_) => ControlFlow::Continue(()),
            },
            // MySQL reads these reserved words as calls to the session's account functions.
            Expr::Identifier(ident)
                if self.dialect == Dialect::Mysql
                    && ident.quote_style.is_none()
                    && ["current_user", "current_role"]
                        .contains(&ident.value.to_ascii_lowercase().as_str()) =>
            {
                ControlFlow::Break(GuardError::Function(ident.value.to_ascii_lowercase()))
            }
            Expr::BinaryOp { op, .. } => self.operator(op),
            Expr::AnyOp { compare_op, .. } | Expr::AllOp { compare_op, .. } => {
                self.operator(compare_op)
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
            | Expr::Between { .. }
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::SimilarTo { .. }
            | Expr::RLike { .. }
            | Expr::UnaryOp { .. }
            | Expr::Convert { .. }
            | Expr::Cast { .. }
            | Expr::TypedString(_)
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

/// Whether a query's body is, or combines, `TABLE name`.
fn reads_a_table(body: &SetExpr) -> bool {
    match body {
        SetExpr::Table(_) => true,
        SetExpr::SetOperation { left, right, .. } => reads_a_table(left) || reads_a_table(right),
        _ => false,
    }
}

/// SQLite's eponymous virtual tables (usable as tables without arguments) that show the
/// database rather than a customer's rows: its files, build, schema and pages.
const SQLITE_VIRTUAL: &[&str] = &[
    "carray",
    "completion",
    "dbstat",
    "fsdir",
    "generate_series",
    "json_each",
    "json_tree",
    "jsonb_each",
    "jsonb_tree",
    "zipfile",
];

/// Refuses SQLite's system tables (`sqlite_*`), pragma tables (`pragma_*`) and the virtual tables
/// of [`SQLITE_VIRTUAL`]: SQLite compares names without case, quoted or not.
fn sqlite_relation(name: &ObjectName) -> ControlFlow<GuardError> {
    let last = match name.0.last() {
        Some(ObjectNamePart::Identifier(ident)) => ident.value.to_ascii_lowercase(),
        _ => return ControlFlow::Break(GuardError::SystemRelation(name.to_string())),
    };
    let system = last.starts_with("sqlite_")
        || last.starts_with("pragma_")
        || SQLITE_VIRTUAL.contains(&last.as_str());
    if system {
        ControlFlow::Break(GuardError::SystemRelation(last))
    } else {
        ControlFlow::Continue(())
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
