//! Reading a window: page after page in one read-only snapshot, each page ending where SQL says.

use crate::row::{Row, Value};
use crate::sql_guard::{CheckedQuery, Keyset, Placeholders, Rendered, Shape, Slice, Window};

use super::engine::Session;
use super::{Source, SourceError};

/// The most one page of rows may hold in memory, values counted by their size: 256 MiB.
pub(super) const MAX_PAGE_BYTES: usize = 256 << 20;

/// Reads a window page by page, in (clock, key) order, each row exactly once.
pub struct WindowReader<'a> {
    source: &'a Source,
    query: &'a CheckedQuery,
    shape: Shape<'a>,
    window: Window,
    session: Session,
    after: Option<Keyset>,
    done: bool,
    pages: u32,
}

/// A column's index in a page and its PostgreSQL type name (`None` on SQLite).
pub(crate) type ColumnAt = (usize, Option<String>);

/// A page of rows as decoded, with what is needed to continue after any of them.
pub(crate) struct Fetched {
    pub rows: Vec<Row>,
    /// SQLite only: per row, the normalised clock text compared in SQL.
    pub sort_clocks: Option<Vec<Value>>,
    /// The clock column's index and PostgreSQL type.
    pub clock: ColumnAt,
    /// The key columns' indices and PostgreSQL types.
    pub key: Vec<ColumnAt>,
}

impl Fetched {
    pub(super) fn empty() -> Fetched {
        Fetched {
            rows: Vec::new(),
            sort_clocks: None,
            clock: (0, None),
            key: Vec::new(),
        }
    }

    /// The (clock, key) values of row `i`, as compared in SQL.
    pub(super) fn keyset(&self, i: usize) -> Keyset {
        let row = &self.rows[i];
        let clock = match &self.sort_clocks {
            Some(clocks) => clocks[i].clone(),
            None => row.values[self.clock.0].clone(),
        };
        Keyset {
            clock,
            clock_type: self.clock.1.clone(),
            key: self
                .key
                .iter()
                .map(|(k, ty)| (row.values[*k].clone(), ty.clone()))
                .collect(),
        }
    }
}

/// Finds the clock and key columns of a page by name.
pub(super) fn positions(
    columns: &[String],
    shape: Shape<'_>,
    types: &[Option<String>],
) -> (ColumnAt, Vec<ColumnAt>) {
    let at = |name: &str| {
        let i = columns.iter().position(|c| c == name).unwrap_or(0);
        (i, types.get(i).cloned().flatten())
    };
    (at(shape.clock), shape.key.iter().map(|k| at(k)).collect())
}

impl<'a> WindowReader<'a> {
    pub(super) fn new(
        source: &'a Source,
        query: &'a CheckedQuery,
        shape: Shape<'a>,
        window: Window,
        session: Session,
    ) -> Self {
        WindowReader {
            source,
            query,
            shape,
            window,
            session,
            after: None,
            done: false,
            pages: 0,
        }
    }

    /// Pages read so far.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    async fn fetch(&mut self, rendered: &Rendered) -> Result<Fetched, SourceError> {
        let source = self.source;
        super::Sent::one(&source.sent.windowed);
        let fetched = self.session.fetch(source, rendered, self.shape).await;
        fetched.map_err(|e| match e {
            FetchError::Sql(e) => source.query_error(e),
            FetchError::Deadline => source.timeout_error(),
            FetchError::TooLarge { limit } => SourceError::Query {
                name: source.name.clone(),
                shown: source.shown.clone(),
                message: format!(
                    "one page of rows holds more than {} MiB; select fewer or smaller columns, or lower max_rows",
                    (limit >> 20).max(1)
                ),
            },
            FetchError::Unsupported { column, type_name } => SourceError::UnsupportedType {
                name: source.name.clone(),
                column,
                type_name,
            },
        })
    }

    /// The next page, or `None` when the window is exhausted. A page ends at the row `page size`
    /// rows in (found by a one-row probe) and includes every row SQL finds equal to it on
    /// (clock, key), so no row is split across pages, skipped or read twice, whatever the
    /// column's collation or type.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Row>>, SourceError> {
        if self.done {
            return Ok(None);
        }
        let after = self.after.take();
        let probe = Slice::Boundary {
            after: after.as_ref(),
            offset: self.source.page_size.max(1) - 1,
        };
        let rendered = self
            .query
            .page_sql(self.shape, self.window, probe, Placeholders::Numbered);
        let boundary = self.fetch(&rendered).await?;
        let upto = (!boundary.rows.is_empty()).then(|| boundary.keyset(0));
        let slice = Slice::Between {
            after: after.as_ref(),
            upto: upto.as_ref(),
        };
        let rendered = self
            .query
            .page_sql(self.shape, self.window, slice, Placeholders::Numbered);
        let page = self.fetch(&rendered).await?;
        self.pages += 1;
        match upto {
            Some(ks) => self.after = Some(ks),
            None => self.done = true,
        }
        if page.rows.is_empty() && self.done {
            return Ok(None);
        }
        Ok(Some(page.rows))
    }

    /// Ends the read-only snapshot.
    pub async fn finish(self) {
        self.session.finish().await
    }
}

pub(crate) enum FetchError {
    Sql(sqlx::Error),
    /// Rowfire's own deadline passed (the server's timeout was defeated).
    Deadline,
    /// A page held more than `limit` bytes of values.
    TooLarge {
        limit: usize,
    },
    Unsupported {
        column: String,
        type_name: String,
    },
}

impl From<sqlx::Error> for FetchError {
    fn from(e: sqlx::Error) -> Self {
        FetchError::Sql(e)
    }
}
