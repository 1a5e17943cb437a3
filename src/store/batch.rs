//! Statements over many rows, written once for both engines. A batch of rows is bound as one
//! relation `u` with named columns: on PostgreSQL `unnest` over one array per column (one
//! statement, however many rows), on SQLite a multi-row `VALUES` (in chunks under its limit on
//! bound values). The statement itself (an `INSERT … SELECT … FROM u`, an `UPDATE … FROM u`) is
//! the same text on both, so `ledger`, `send` and `poll` hold one version of each.

use jiff::Timestamp;
use sqlx::{AssertSqlSafe, Postgres, Sqlite};

use super::{Arg, DbTime, StoreRow, StoreTx, sqlite_sql};

/// Most values one SQLite statement binds (its limit is 32,766).
const SQLITE_BINDS: usize = 30_000;
/// Most rows in one SQLite statement.
const SQLITE_ROWS: usize = 1_000;

/// One column of a batch: a name, a type and one value per row.
#[derive(Debug, Clone)]
enum Values {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Time(Vec<Option<Timestamp>>),
}

impl Values {
    fn pg_type(&self) -> &'static str {
        match self {
            Values::Text(_) => "text[]",
            Values::Int(_) => "bigint[]",
            Values::Time(_) => "timestamptz[]",
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::Text(v) => v.len(),
            Values::Int(v) => v.len(),
            Values::Time(v) => v.len(),
        }
    }
}

/// Rows to bind as the relation `u`, column by column. Every column has one value per row.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rows {
    columns: Vec<(&'static str, Values)>,
}

impl Rows {
    /// No columns yet.
    pub(crate) fn new() -> Rows {
        Rows::default()
    }

    /// A text column.
    pub(crate) fn text<S: Into<String>>(
        self,
        name: &'static str,
        values: impl IntoIterator<Item = S>,
    ) -> Rows {
        self.opt_text(name, values.into_iter().map(Some))
    }

    /// A text column that may hold NULLs.
    pub(crate) fn opt_text<S: Into<String>>(
        self,
        name: &'static str,
        values: impl IntoIterator<Item = Option<S>>,
    ) -> Rows {
        let values = values.into_iter().map(|v| v.map(Into::into)).collect();
        self.with(name, Values::Text(values))
    }

    /// An integer column.
    pub(crate) fn int(self, name: &'static str, values: impl IntoIterator<Item = i64>) -> Rows {
        self.opt_int(name, values.into_iter().map(Some))
    }

    /// An integer column that may hold NULLs.
    pub(crate) fn opt_int(
        self,
        name: &'static str,
        values: impl IntoIterator<Item = Option<i64>>,
    ) -> Rows {
        self.with(name, Values::Int(values.into_iter().collect()))
    }

    /// An instant column.
    pub(crate) fn time(
        self,
        name: &'static str,
        values: impl IntoIterator<Item = Timestamp>,
    ) -> Rows {
        self.opt_time(name, values.into_iter().map(Some))
    }

    /// An instant column that may hold NULLs.
    pub(crate) fn opt_time(
        self,
        name: &'static str,
        values: impl IntoIterator<Item = Option<Timestamp>>,
    ) -> Rows {
        self.with(name, Values::Time(values.into_iter().collect()))
    }

    fn with(mut self, name: &'static str, values: Values) -> Rows {
        debug_assert!(
            self.columns
                .first()
                .is_none_or(|(_, c)| c.len() == values.len()),
            "every column of a batch has one value per row"
        );
        self.columns.push((name, values));
        self
    }

    /// How many rows.
    pub(crate) fn len(&self) -> usize {
        self.columns.first().map_or(0, |(_, c)| c.len())
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(n, _)| *n).collect();
        names.join(", ")
    }
}

/// Runs `sql`, which reads the batch as the relation `u` and its `fixed` values as `$1…$k`, and
/// maps every row it returns (by column name). Nothing runs for an empty batch. `sql` follows
/// `WITH u (…) AS (…)`, so it may begin with `, name AS (…)` to add common table expressions.
pub(crate) async fn fetch_with_rows<T>(
    tx: &mut StoreTx,
    rows: &Rows,
    fixed: &[Arg],
    sql: &str,
    map: impl Fn(&StoreRow<'_>) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    let mut out = Vec::new();
    if rows.is_empty() {
        return Ok(out);
    }
    match tx {
        StoreTx::Postgres(t) => {
            let arrays: Vec<String> = rows
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, c))| format!("${}::{}", fixed.len() + 1 + i, c.pg_type()))
                .collect();
            let full = format!(
                "WITH u ({}) AS (SELECT * FROM unnest({})) {sql}",
                rows.names(),
                arrays.join(", ")
            );
            let mut q = sqlx::query::<Postgres>(AssertSqlSafe(full));
            for arg in fixed {
                q = arg.bind_pg(q);
            }
            for (_, column) in &rows.columns {
                q = match column {
                    Values::Text(v) => q.bind(v.clone()),
                    Values::Int(v) => q.bind(v.clone()),
                    Values::Time(v) => q.bind(
                        v.iter()
                            .map(|t| t.map(jiff_sqlx::Timestamp::from))
                            .collect::<Vec<_>>(),
                    ),
                };
            }
            for row in q.fetch_all(&mut **t).await? {
                out.push(map(&StoreRow::Postgres(&row))?);
            }
        }
        StoreTx::Sqlite(t) => {
            let width = rows.columns.len();
            let per = ((SQLITE_BINDS - fixed.len()) / width).clamp(1, SQLITE_ROWS);
            let sql = sqlite_sql(sql);
            let mut start = 0;
            while start < rows.len() {
                let end = (start + per).min(rows.len());
                let values: Vec<String> = (0..end - start)
                    .map(|r| {
                        let first = fixed.len() + 1 + r * width;
                        let marks: Vec<String> =
                            (first..first + width).map(|n| format!("?{n}")).collect();
                        format!("({})", marks.join(", "))
                    })
                    .collect();
                let full = format!(
                    "WITH u ({}) AS (VALUES {}) {sql}",
                    rows.names(),
                    values.join(", ")
                );
                let mut q = sqlx::query::<Sqlite>(AssertSqlSafe(full));
                for arg in fixed {
                    q = arg.bind_sqlite(q);
                }
                for r in start..end {
                    for (_, column) in &rows.columns {
                        q = match column {
                            Values::Text(v) => q.bind(v[r].clone()),
                            Values::Int(v) => q.bind(v[r]),
                            Values::Time(v) => q.bind(v[r].map(DbTime)),
                        };
                    }
                }
                for row in q.fetch_all(&mut **t).await? {
                    out.push(map(&StoreRow::Sqlite(&row))?);
                }
                start = end;
            }
        }
    }
    Ok(out)
}
