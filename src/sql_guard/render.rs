//! Rendering what runs: the one-pass window statement and the count statements around a
//! checked query, with numbered placeholders (to run) or literals (to show a person).

use jiff::Timestamp;

use super::{CheckedQuery, Dialect};

/// A value bound to a rendered statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// A window bound the author's SQL names (`:since`, `:until`). On SQLite it is bound as
    /// `YYYY-MM-DD HH:MM:SS.SSS` UTC text, as documented for authors.
    Instant(Timestamp),
    /// A bound of Rowfire's own window, compared with the normalised clock (SQLite: integer
    /// microseconds).
    Clock(Timestamp),
}

/// A statement ready to run: SQL text with numbered placeholders and the values they take.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The SQL text.
    pub sql: String,
    /// Values for `$1…` (PostgreSQL), `?1…` (SQLite) or each `?` (MySQL), in order.
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

/// The column SQLite reads the normalised clock into, stripped before rows reach callers.
pub const SQLITE_CLOCK_COLUMN: &str = "__rowfire_clock";

/// The SQL function Rowfire registers on every SQLite source connection to read a clock as
/// integer microseconds since the Unix epoch (NULL when NULL or unreadable), with the same
/// parser Rowfire reads clocks with in Rust ([`crate::row::clock_micros`]), so comparisons,
/// window bounds and pages are exact to the microsecond.
pub const SQLITE_CLOCK_FN: &str = "rowfire_clock_us";

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
    clock_since: Option<String>,
    clock_until: Option<String>,
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
            clock_since: None,
            clock_until: None,
            window,
        }
    }

    fn push(&mut self, bind: Bind) -> String {
        let text = match self.mode {
            Placeholders::Inline => self.literal(&bind),
            Placeholders::Numbered => {
                let n = self.binds.len() + 1;
                match self.dialect {
                    Dialect::Postgres => format!("${n}"),
                    Dialect::Sqlite => format!("?{n}"),
                    Dialect::Mysql => "CAST(? AS DATETIME(6))".to_string(),
                }
            }
        };
        if self.mode == Placeholders::Numbered {
            self.binds.push(bind);
        }
        text
    }

    fn since(&mut self) -> String {
        // MySQL's placeholders are positional: every use takes a bind of its own.
        if self.dialect == Dialect::Mysql && self.mode == Placeholders::Numbered {
            return self.push(Bind::Instant(self.window.since));
        }
        if self.since.is_none() {
            self.since = Some(self.push(Bind::Instant(self.window.since)));
        }
        self.since.clone().expect("set above")
    }

    fn until(&mut self) -> String {
        // MySQL's placeholders are positional: every use takes a bind of its own.
        if self.dialect == Dialect::Mysql && self.mode == Placeholders::Numbered {
            return self.push(Bind::Instant(self.window.until));
        }
        if self.until.is_none() {
            self.until = Some(self.push(Bind::Instant(self.window.until)));
        }
        self.until.clone().expect("set above")
    }

    fn clock_since(&mut self) -> String {
        // MySQL's placeholders are positional: every use takes a bind of its own.
        if self.dialect == Dialect::Mysql && self.mode == Placeholders::Numbered {
            return self.push(Bind::Clock(self.window.since));
        }
        if self.clock_since.is_none() {
            self.clock_since = Some(self.push(Bind::Clock(self.window.since)));
        }
        self.clock_since.clone().expect("set above")
    }

    fn clock_until(&mut self) -> String {
        // MySQL's placeholders are positional: every use takes a bind of its own.
        if self.dialect == Dialect::Mysql && self.mode == Placeholders::Numbered {
            return self.push(Bind::Clock(self.window.until));
        }
        if self.clock_until.is_none() {
            self.clock_until = Some(self.push(Bind::Clock(self.window.until)));
        }
        self.clock_until.clone().expect("set above")
    }

    fn literal(&self, bind: &Bind) -> String {
        let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
        match (self.dialect, bind) {
            (Dialect::Postgres, Bind::Instant(ts) | Bind::Clock(ts)) => {
                format!("{}::timestamptz", quote(&ts.to_string()))
            }
            (Dialect::Sqlite, Bind::Instant(ts)) => quote(&sqlite_clock_text(*ts)),
            (Dialect::Sqlite, Bind::Clock(ts)) => format!(
                "{SQLITE_CLOCK_FN}({})",
                quote(&ts.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string())
            ),
            (Dialect::Mysql, Bind::Instant(ts) | Bind::Clock(ts)) => {
                format!("CAST({} AS DATETIME(6))", quote(&mysql_clock_text(*ts)))
            }
        }
    }
}

/// The text an author's `:since`/`:until` takes on SQLite: `YYYY-MM-DD HH:MM:SS.SSS` in UTC,
/// comparable with `strftime('%Y-%m-%d %H:%M:%f', clock)`.
pub fn sqlite_clock_text(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// An instant as MySQL reads a `DATETIME(6)` in the session's UTC: `YYYY-MM-DD
/// HH:MM:SS.ffffff`, rounded up to the microsecond (so `clock >= since` and `clock < until` keep
/// their meaning for sub-microsecond bounds) and held within the years `DATETIME` holds
/// (1000 to 9999).
pub fn mysql_clock_text(ts: Timestamp) -> String {
    let micros = sqlite_clock_micros(ts);
    // 1000-01-01T00:00:00Z; the latest instant is jiff's, inside year 9999.
    let earliest = Timestamp::from_second(-30_610_224_000).unwrap_or(Timestamp::MIN);
    let latest = Timestamp::MAX;
    let at = Timestamp::from_microsecond(micros)
        .unwrap_or(latest)
        .clamp(earliest, latest);
    at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

/// An instant as SQLite compares clocks: integer microseconds since the Unix epoch, rounded up
/// so that `clock >= since` and `clock < until` keep their meaning for sub-microsecond bounds.
pub fn sqlite_clock_micros(ts: Timestamp) -> i64 {
    let nanos = ts.as_nanosecond();
    let micros = nanos.div_euclid(1000) + i128::from(nanos.rem_euclid(1000) != 0);
    i64::try_from(micros).unwrap_or(i64::MAX)
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
        if self.dialect == Dialect::Mysql {
            return self.inner_in_order(b);
        }
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

    /// The query with each window placeholder replaced in the order it appears, so positional
    /// binds line up with their `?`.
    fn inner_in_order(&self, b: &mut Builder) -> String {
        let since = format!("{}since\u{1}", self.marker);
        let until = format!("{}until\u{1}", self.marker);
        let mut out = String::with_capacity(self.inner.len());
        let mut rest = self.inner.as_str();
        loop {
            let next = [(rest.find(&since), true), (rest.find(&until), false)]
                .into_iter()
                .filter_map(|(at, is_since)| at.map(|at| (at, is_since)))
                .min();
            let Some((at, is_since)) = next else {
                out.push_str(rest);
                return out;
            };
            out.push_str(&rest[..at]);
            let (bind, len) = if is_since {
                (b.since(), since.len())
            } else {
                (b.until(), until.len())
            };
            out.push_str(&bind);
            rest = &rest[at + len..];
        }
    }

    fn clock_expr(&self, clock: &str) -> String {
        let col = format!("t.{}", self.dialect.quote_ident(clock));
        match self.dialect {
            Dialect::Postgres | Dialect::Mysql => col,
            // Integer microseconds: text read as Rowfire reads it, numbers as Unix seconds.
            Dialect::Sqlite => format!("{SQLITE_CLOCK_FN}({col})"),
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
            format!(
                "{clock} >= {} AND {clock} < {}",
                b.clock_since(),
                b.clock_until()
            )
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

    /// The whole window in one ordered pass (a cursor's or a stepping statement's query): every
    /// row of the window (rows with a NULL key too: the reader counts and drops them, so no
    /// second statement counts them), ordered by the clock and then by the key columns
    /// `sorted` marks (one flag per key column; a missing flag counts as sorted). On SQLite the
    /// normalised clock ([`SQLITE_CLOCK_COLUMN`]) comes last. Pages cut this pass only between
    /// rows whose clocks differ or whose sorted key columns differ in a type with exact
    /// equality (see `source::window`), so rows SQL finds equal on (clock, key) are never
    /// split. Sorting by a key column pages cannot cut on (text under its collation, decimals)
    /// would only cost the server a sort, so the reader leaves those out.
    pub fn window_sql(
        &self,
        shape: Shape<'_>,
        window: Window,
        mode: Placeholders,
        sorted: &[bool],
    ) -> Rendered {
        let mut b = Builder::new(self.dialect, mode, window);
        let inner = self.inner(&mut b);
        let clock = self.clock_expr(shape.clock);
        let keys = self.key_exprs(shape.key);
        let tuple = std::iter::once(clock.clone())
            .chain(
                keys.iter()
                    .enumerate()
                    .filter(|(i, _)| sorted.get(*i).copied().unwrap_or(true))
                    .map(|(_, k)| k.clone()),
            )
            .collect::<Vec<_>>()
            .join(", ");
        let select = match self.dialect {
            Dialect::Postgres | Dialect::Mysql => "t.*".to_string(),
            Dialect::Sqlite => format!(
                "t.*, {clock} AS {}",
                self.dialect.quote_ident(SQLITE_CLOCK_COLUMN)
            ),
        };
        let mut sql = format!(
            "SELECT {select} FROM ({inner}) AS t WHERE {}",
            self.window_predicate(&mut b, shape.clock)
        );
        sql.push_str(&format!(" ORDER BY {tuple}"));
        Rendered {
            sql,
            binds: b.binds,
        }
    }

    /// Counts rows whose clock is NULL, over the unwindowed query (`:since`/`:until`, if named,
    /// still take the window). A clock that is there but cannot be read as a time is counted
    /// by [`CheckedQuery::unreadable_clock_sql`] instead.
    pub fn null_clock_count_sql(&self, shape: Shape<'_>, window: Window) -> Rendered {
        let mut b = Builder::new(self.dialect, Placeholders::Numbered, window);
        let inner = self.inner(&mut b);
        let clock = format!("t.{}", self.dialect.quote_ident(shape.clock));
        Rendered {
            sql: format!("SELECT count(*) FROM ({inner}) AS t WHERE {clock} IS NULL"),
            binds: b.binds,
        }
    }

    /// SQLite only (a PostgreSQL clock is a typed time, checked before reading): counts rows,
    /// over the unwindowed query, whose clock is not NULL but cannot be read as a time, and
    /// returns one such row's clock and key columns: `SELECT count(*), clock, key…`.
    pub fn unreadable_clock_sql(&self, shape: Shape<'_>, window: Window) -> Option<Rendered> {
        if self.dialect != Dialect::Sqlite {
            return None;
        }
        let mut b = Builder::new(self.dialect, Placeholders::Numbered, window);
        let inner = self.inner(&mut b);
        let raw = format!("t.{}", self.dialect.quote_ident(shape.clock));
        let clock = self.clock_expr(shape.clock);
        let columns = std::iter::once(raw.clone())
            .chain(self.key_exprs(shape.key))
            .collect::<Vec<_>>()
            .join(", ");
        // SQLite fills bare columns next to an aggregate from one of the counted rows.
        Some(Rendered {
            sql: format!(
                "SELECT count(*), {columns} FROM ({inner}) AS t WHERE {raw} IS NOT NULL AND {clock} IS NULL"
            ),
            binds: b.binds,
        })
    }
}
