//! On PostgreSQL, the built-in functions a checked query calls are run as `pg_catalog.name`.
//!
//! An unqualified name resolves through the session's `search_path`, and PostgreSQL prefers a
//! function whose argument types match exactly in any schema on the path: with
//! `public.lower(varchar)` created by anyone who may create objects in `public` (every role,
//! before PostgreSQL 15), `lower(v)` on a `varchar` column ran that function, with Rowfire's
//! privileges, although the guard had admitted it as the built-in. Naming the schema makes the
//! call the built-in the allowlist vouches for. Names that are SQL syntax rather than functions
//! (`COALESCE`, `ROW`, `CURRENT_TIMESTAMP`, …) are resolved by the parser, not the path, and stay
//! as written; so do the functions a source opted in to (`allow_functions`).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, ObjectNamePart,
    TableFactor, VisitMut, VisitorMut,
};

use super::{Dialect, functions};

/// Names on PostgreSQL's allowlist that are SQL syntax, not functions in `pg_catalog`.
const SYNTAX: &[&str] = &[
    "array",
    "coalesce",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "greatest",
    "grouping",
    "json_table",
    "least",
    "localtime",
    "localtimestamp",
    "nullif",
    "row",
    "session_user",
    "system_user",
    "trim",
    "user",
    "xmltable",
];

/// Qualifies, in place, every call to a PostgreSQL built-in on the allowlist with `pg_catalog`.
pub(super) fn builtins<T: VisitMut>(dialect: Dialect, tree: &mut T) {
    if dialect == Dialect::Postgres {
        let _ = tree.visit(&mut Qualifier);
    }
}

struct Qualifier;

/// `name` as `pg_catalog.name` when it is one unqualified part naming an allowlisted built-in.
fn qualify(name: &mut ObjectName) {
    let [ObjectNamePart::Identifier(ident)] = name.0.as_slice() else {
        return;
    };
    let normalised = functions::normalise(
        Dialect::Postgres,
        &[(ident.value.clone(), ident.quote_style.is_some())],
    );
    let Some(builtin) = normalised.first() else {
        return;
    };
    if !functions::is_allowlisted(Dialect::Postgres, builtin) || SYNTAX.contains(&builtin.as_str())
    {
        return;
    }
    let ident = ident.clone();
    name.0 = vec![
        ObjectNamePart::Identifier(Ident::new("pg_catalog")),
        ObjectNamePart::Identifier(ident),
    ];
}

impl VisitorMut for Qualifier {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = expr
            && !matches!(f.args, FunctionArguments::None)
        {
            qualify(&mut f.name);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            }
            | TableFactor::Function { name, .. } => qualify(name),
            // `UNNEST(a)` is parsed as its own kind but is a call like any other: written as
            // one, with one array, so that it can be qualified. With several arrays it must stay
            // unqualified (PostgreSQL expands only a bare `unnest(a, b)` into `ROWS FROM`).
            TableFactor::UNNEST {
                alias,
                array_exprs,
                with_offset: false,
                with_offset_alias: None,
                with_ordinality,
            } if array_exprs.len() == 1 => {
                let mut name = ObjectName::from(vec![Ident::new("unnest")]);
                qualify(&mut name);
                *factor = TableFactor::Function {
                    lateral: false,
                    name,
                    args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(
                        array_exprs.remove(0),
                    ))],
                    with_ordinality: *with_ordinality,
                    alias: alias.take(),
                };
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use crate::sql_guard::{Dialect, Window, check};

    fn inner(sql: &str, dialect: Dialect) -> String {
        let window = Window {
            since: jiff::Timestamp::UNIX_EPOCH,
            until: jiff::Timestamp::UNIX_EPOCH,
        };
        check(sql, dialect).unwrap().columns_sql(window).sql
    }

    #[test]
    fn postgres_builtins_are_called_through_pg_catalog_and_syntax_is_kept() {
        let got = inner(
            "SELECT lower(v), \"upper\"(v), pg_catalog.length(v), count(*), \
             row_number() OVER (ORDER BY id), coalesce(v, 'x'), nullif(v, ''), \
             greatest(id, 1), current_timestamp, ROW(1, 2), ARRAY(SELECT 1) \
             FROM t, generate_series(1, 2) AS g, LATERAL unnest(ARRAY[1]) AS u",
            Dialect::Postgres,
        );
        for part in [
            "pg_catalog.lower(v)",
            "pg_catalog.\"upper\"(v)",
            "pg_catalog.length(v)",
            "pg_catalog.count(*)",
            "pg_catalog.row_number() OVER",
            "pg_catalog.generate_series(1, 2)",
            " coalesce(v, 'x')",
            " nullif(v, '')",
            " greatest(id, 1)",
            " current_timestamp,",
            " ROW(1, 2)",
        ] {
            assert!(got.contains(part), "{part} in {got}");
        }
        assert!(!got.contains("pg_catalog.pg_catalog"), "{got}");
    }

    #[test]
    fn sqlite_calls_and_opted_in_functions_stay_as_written() {
        let got = inner("SELECT lower(v) FROM t", Dialect::Sqlite);
        assert!(got.contains("SELECT lower(v)"), "{got}");
        let checked = crate::sql_guard::check_allowing(
            "SELECT my_fn(v) FROM t",
            Dialect::Postgres,
            &["my_fn".to_string()],
        )
        .unwrap();
        let window = Window {
            since: jiff::Timestamp::UNIX_EPOCH,
            until: jiff::Timestamp::UNIX_EPOCH,
        };
        let got = checked.columns_sql(window).sql;
        assert!(got.contains("SELECT my_fn(v)"), "{got}");
    }
}
