//! The functions a trigger's SQL may call: per dialect, only those known to act on their
//! arguments and the query's snapshot alone. Everything else is refused by name unless the
//! source opts in to it (`allow_functions`).
//!
//! Never on these lists, whatever the dialect: functions that run SQL written in a string
//! (`query_to_xml` and its family, `ts_stat`, `dblink*`), touch files (`pg_read_file`,
//! `pg_ls_dir`, `lo_*`, `readfile`, `writefile`, `load_extension`), act on other sessions
//! (`pg_cancel_backend`, `pg_terminate_backend`), take locks that outlive the statement
//! (`pg_advisory_*`), change settings (`set_config`, `setseed`), touch replication or WAL,
//! notify listeners, reset statistics, sleep, or assign transaction ids or sequence values.
//!
//! The lists live one file per dialect (`functions/postgres.rs`, `functions/sqlite.rs`,
//! `functions/mysql.rs`; the window functions all share are here). Each group is sorted (checked
//! by a test) so lookups are binary searches; a new dialect is a new file of groups and an arm in
//! [`allowlist`].

use super::Dialect;

mod mysql;
mod postgres;
mod sqlite;

/// Window functions, the same in every dialect: rank and look across the rows of the query's own
/// window frame.
const WINDOW: &[&str] = &[
    "cume_dist",
    "dense_rank",
    "first_value",
    "lag",
    "last_value",
    "lead",
    "nth_value",
    "ntile",
    "percent_rank",
    "rank",
    "row_number",
];

/// The groups of built-in functions a trigger's SQL may call in `dialect`, each sorted.
pub(crate) fn allowlist(dialect: Dialect) -> &'static [&'static [&'static str]] {
    match dialect {
        Dialect::Postgres => postgres::POSTGRES,
        Dialect::Sqlite => sqlite::SQLITE,
        Dialect::Mysql => mysql::MYSQL,
    }
}

/// Whether `name` (lower case, unqualified) is one of `dialect`'s read-only built-ins.
pub fn is_allowlisted(dialect: Dialect, name: &str) -> bool {
    allowlist(dialect)
        .iter()
        .any(|group| group.binary_search(&name).is_ok())
}

/// A function's name as the database resolves it: one part per identifier, unquoted parts
/// folded to lower case (SQLite folds every part: its function names ignore case), and on
/// PostgreSQL a leading `pg_catalog` dropped, since the unqualified name resolves there first.
pub(crate) fn normalise(dialect: Dialect, parts: &[(String, bool)]) -> Vec<String> {
    let mut out: Vec<String> = parts
        .iter()
        .map(|(value, quoted)| match (dialect, quoted) {
            (Dialect::Postgres, true) => value.clone(),
            _ => value.to_ascii_lowercase(),
        })
        .collect();
    if dialect == Dialect::Postgres && out.len() == 2 && out[0] == "pg_catalog" {
        out.remove(0);
    }
    out
}

/// Shows a normalised name: parts joined by `.`, a part that is not a plain identifier quoted,
/// control characters escaped, and a very long name cut (it is echoed in an error).
pub(crate) fn display(parts: &[String]) -> String {
    const SHOWN: usize = 120;
    let text = parts
        .iter()
        .map(|p| {
            if is_identifier(p) && p.bytes().all(|b| !b.is_ascii_uppercase()) {
                p.clone()
            } else {
                let escaped: String = p
                    .chars()
                    .flat_map(|c| {
                        if c.is_control() {
                            c.escape_unicode().collect::<Vec<_>>()
                        } else if c == '"' {
                            vec!['"', '"']
                        } else {
                            vec![c]
                        }
                    })
                    .collect();
                format!("\"{escaped}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".");
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Longest part of a name listed in `allow_functions` (PostgreSQL's identifier limit).
pub const MAX_NAME_PART: usize = 63;

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && s.len() <= MAX_NAME_PART
}

/// Parses a name listed in a source's `allow_functions` (`fn` or `schema.fn`, plain
/// identifiers of at most 63 bytes each) into its normalised parts, or `None` if it is not one.
pub fn parse_allowed_name(dialect: Dialect, name: &str) -> Option<Vec<String>> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| is_identifier(p)) {
        return None;
    }
    let parts: Vec<(String, bool)> = parts.iter().map(|p| (p.to_string(), false)).collect();
    Some(normalise(dialect, &parts))
}

/// Whether a call to the normalised `name` is admitted: a built-in on the dialect's list (called
/// unqualified, or through `pg_catalog` on PostgreSQL), or a name the source opted in to.
pub(crate) fn admitted(dialect: Dialect, name: &[String], extra: &[Vec<String>]) -> bool {
    (name.len() == 1 && is_allowlisted(dialect, &name[0])) || extra.iter().any(|e| e == name)
}
