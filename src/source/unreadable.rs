//! Rows whose clock is there but cannot be read as a time: how many, and one example.

/// Rows whose clock cannot be read as a time, and one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableClocks {
    /// How many rows, over the whole query.
    pub rows: u64,
    /// One such row, when there is any.
    pub example: Option<UnreadableExample>,
}

/// One row whose clock cannot be read as a time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableExample {
    /// The clock's value as stored (cut to 80 characters).
    pub clock: String,
    /// The row's key, encoded as dedup keys are (a JSON array).
    pub key: String,
}

impl std::fmt::Display for UnreadableClocks {
    /// `3 row(s) with an unreadable clock, e.g. 'yesterday' (key ["a"])`, or nothing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} row(s) with an unreadable clock", self.rows)?;
        if let Some(e) = &self.example {
            write!(f, ", e.g. {:?} (key {})", e.clock, e.key)?;
        }
        Ok(())
    }
}

/// Cuts `s` to at most `max` characters, marking the cut.
pub(super) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}
