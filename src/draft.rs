//! A first definitions file drafted from a source's catalogue (`rowfire init`): for each table
//! that looks like events (a time column, ideally indexed and named like `occurred_at`,
//! `created_at` or `updated_at`; a key from a foreign key, a column named like a reference to
//! another table, or the primary key), one trigger with its clock and key chosen and a comment
//! saying why, and one rule on it that starts in shadow and delivers to the Demo inbox. Tables
//! it cannot draft are listed with the reason.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::source::{Catalogue, CatalogueColumn, CatalogueTable};
use crate::sql_guard::Dialect;

/// The most tables one draft holds; the rest are listed as skipped.
pub const MAX_TABLES: usize = 500;

/// A drafted definitions file and what it left out.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The definitions file, as YAML with comments.
    pub yaml: String,
    /// The triggers drafted: (trigger, table).
    pub triggers: Vec<(String, String)>,
    /// Tables left out, each with why.
    pub skipped: Vec<(String, String)>,
}

/// How an engine's catalogue names the column types a clock may have.
fn is_time(dialect: Dialect, column: &CatalogueColumn) -> bool {
    let ty = column.type_name.to_ascii_lowercase();
    match dialect {
        Dialect::Postgres => matches!(
            ty.as_str(),
            "timestamp with time zone" | "timestamp without time zone" | "date"
        ),
        Dialect::Mysql => matches!(ty.as_str(), "datetime" | "timestamp" | "date"),
        // SQLite keeps times as text or numbers: a declared time type, or a time's name.
        Dialect::Sqlite => {
            ty.contains("date")
                || ty.contains("time")
                || (matches!(ty.as_str(), "" | "text" | "integer" | "real" | "numeric")
                    && named_like_time(&column.name))
        }
    }
}

fn named_like_time(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.ends_with("_at") || n.ends_with("_on") || n.ends_with("_time") || n.ends_with("_date")
}

/// Whether the engine reads a column of this type (as the catalogue names it) as a value.
fn is_readable(dialect: Dialect, column: &CatalogueColumn) -> bool {
    let ty = column.type_name.to_ascii_lowercase();
    match dialect {
        Dialect::Postgres => matches!(
            ty.as_str(),
            "boolean"
                | "smallint"
                | "integer"
                | "bigint"
                | "real"
                | "double precision"
                | "numeric"
                | "text"
                | "character varying"
                | "character"
                | "name"
                | "timestamp with time zone"
                | "timestamp without time zone"
                | "date"
                | "json"
                | "jsonb"
                | "uuid"
                | "bytea"
                | "user-defined"
        ),
        Dialect::Mysql => !matches!(
            ty.as_str(),
            "geometry"
                | "point"
                | "linestring"
                | "polygon"
                | "multipoint"
                | "multilinestring"
                | "multipolygon"
                | "geometrycollection"
        ),
        Dialect::Sqlite => true,
    }
}

/// How well a time column's name says "when this happened": lower is better.
fn clock_rank(name: &str) -> u8 {
    match name.to_ascii_lowercase().as_str() {
        "occurred_at" | "happened_at" | "event_time" => 0,
        "created_at" | "inserted_at" | "recorded_at" => 1,
        "updated_at" | "modified_at" => 2,
        n if n.ends_with("_at") => 3,
        _ => 4,
    }
}

/// A plain identifier a template can name (`{{ name }}`).
fn is_plain(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A definitions name for a table: letters, digits and `_`, starting with a letter.
fn name_for(table: &str, taken: &mut BTreeSet<String>) -> String {
    let mut base: String = table
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !base.starts_with(|c: char| c.is_ascii_alphabetic()) {
        base = format!("t_{base}");
    }
    base.truncate(60);
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

/// A string as YAML reads it back unchanged (a JSON string is a YAML string).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// A comment's text on one line.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

struct Choice<'a> {
    clock: &'a CatalogueColumn,
    clock_why: String,
    key: Vec<String>,
    key_why: String,
    columns: Vec<&'a CatalogueColumn>,
    left_out: Vec<&'a CatalogueColumn>,
}

fn choose<'a>(
    dialect: Dialect,
    table: &'a CatalogueTable,
    tables: &BTreeSet<&str>,
) -> Result<Choice<'a>, String> {
    let (columns, left_out): (Vec<&CatalogueColumn>, Vec<&CatalogueColumn>) =
        table.columns.iter().partition(|c| is_readable(dialect, c));
    let clock = columns
        .iter()
        .copied()
        .filter(|c| is_time(dialect, c))
        .min_by_key(|c| (clock_rank(&c.name), !table.indexed.contains(&c.name)))
        .ok_or_else(|| "no timestamp or date column to place its rows in time".to_string())?;
    let indexed = table.indexed.contains(&clock.name);
    let clock_why = format!(
        "{} is {}{}",
        clock.name,
        match clock_rank(&clock.name) {
            0 => "when the row's event happened",
            1 => "when the row was created",
            2 => "when the row last changed",
            _ => "the table's time column",
        },
        if indexed {
            ", and indexed"
        } else {
            " (not indexed: index it so polls stay cheap)"
        }
    );
    let readable = |name: &str| columns.iter().any(|c| c.name == name);
    let key_of_foreign = table
        .foreign_keys
        .iter()
        .find(|(col, _)| readable(col) && *col != clock.name);
    let named_reference = columns.iter().find(|c| {
        let n = c.name.to_ascii_lowercase();
        n.strip_suffix("_id").is_some_and(|stem| {
            !stem.is_empty()
                && stem != table.name.to_ascii_lowercase()
                && (tables.contains(stem) || tables.contains(format!("{stem}s").as_str()))
        })
    });
    let (key, key_why) = if let Some((col, references)) = key_of_foreign {
        (
            vec![col.clone()],
            format!("{col} is a foreign key to {references}: once per {references} row"),
        )
    } else if let Some(col) = named_reference {
        (
            vec![col.name.clone()],
            format!("{} is named like a reference to another table", col.name),
        )
    } else if !table.primary_key.is_empty() && table.primary_key.iter().all(|c| readable(c)) {
        (
            table.primary_key.clone(),
            format!(
                "{} is the primary key: once per row",
                table.primary_key.join(", ")
            ),
        )
    } else {
        return Err("no primary key, foreign key or reference column to key its rows by".into());
    };
    Ok(Choice {
        clock,
        clock_why,
        key,
        key_why,
        columns,
        left_out,
    })
}

/// Drafts a definitions file for `catalogue` (read from a source in `dialect`), whose default
/// source's DSN is in the environment variable `dsn_env`.
pub fn draft(catalogue: &Catalogue, dialect: Dialect, dsn_env: &str) -> Draft {
    let tables: BTreeSet<&str> = catalogue.tables.iter().map(|t| t.name.as_str()).collect();
    let mut taken = BTreeSet::new();
    let mut triggers_yaml = String::new();
    let mut rules_yaml = String::new();
    let mut triggers = Vec::new();
    let mut skipped = Vec::new();
    for table in &catalogue.tables {
        if triggers.len() >= MAX_TABLES {
            skipped.push((
                table.name.clone(),
                format!("the draft holds {MAX_TABLES} triggers at most"),
            ));
            continue;
        }
        let choice = match choose(dialect, table, &tables) {
            Ok(choice) => choice,
            Err(why) => {
                skipped.push((table.name.clone(), why));
                continue;
            }
        };
        let name = name_for(&table.name, &mut taken);
        let select: Vec<String> = choice
            .columns
            .iter()
            .map(|c| dialect.quote_ident(&c.name))
            .collect();
        let sql = format!(
            "SELECT {} FROM {}",
            select.join(", "),
            dialect.quote_ident(&table.name)
        );
        let _ = writeln!(triggers_yaml, "  {name}:");
        let _ = writeln!(
            triggers_yaml,
            "    description: {}",
            quoted(&format!(
                "Rows of {} (drafted by rowfire init).",
                table.name
            ))
        );
        let _ = writeln!(triggers_yaml, "    sql: {}", quoted(&sql));
        if !choice.left_out.is_empty() {
            let names: Vec<String> = choice
                .left_out
                .iter()
                .map(|c| format!("{} ({})", c.name, c.type_name))
                .collect();
            let _ = writeln!(
                triggers_yaml,
                "    # left out, a type Rowfire does not read: {}",
                one_line(&names.join(", "))
            );
        }
        let _ = writeln!(
            triggers_yaml,
            "    event_time: {}  # {}",
            quoted(&choice.clock.name),
            one_line(&choice.clock_why)
        );
        let key: Vec<String> = choice.key.iter().map(|k| quoted(k)).collect();
        let _ = writeln!(
            triggers_yaml,
            "    key: [{}]  # {}",
            key.join(", "),
            one_line(&choice.key_why)
        );
        let holes: Vec<String> = choice
            .key
            .iter()
            .chain(std::iter::once(&choice.clock.name))
            .filter(|n| is_plain(n))
            .map(|n| format!("{n} {{{{ {n} }}}}"))
            .collect();
        let text = format!("{}: {}", table.name, holes.join(", "));
        let _ = writeln!(rules_yaml, "  {name}_draft:");
        let _ = writeln!(rules_yaml, "    trigger: {name}");
        let _ = writeln!(
            rules_yaml,
            "    description: {}",
            quoted(&format!(
                "Draft: at most once a day per {}; starts in shadow (nothing is sent) until promoted.",
                choice.key.join(", ")
            ))
        );
        let _ = writeln!(rules_yaml, "    policy: once_per_period");
        let _ = writeln!(rules_yaml, "    period: day");
        let _ = writeln!(rules_yaml, "    actions:");
        let _ = writeln!(rules_yaml, "      - action: inbox.chat_message");
        let _ = writeln!(rules_yaml, "        params:");
        let _ = writeln!(rules_yaml, "          channel: \"#rowfire-draft\"");
        let _ = writeln!(rules_yaml, "          text: {}", quoted(&text));
        triggers.push((name, table.name.clone()));
    }
    let mut yaml = String::new();
    let _ = writeln!(
        yaml,
        "# A first draft of Rowfire definitions, written by `rowfire init` from the source's catalogue."
    );
    let _ = writeln!(
        yaml,
        "# Each trigger reads one table; check its clock and key, then backtest its rule:"
    );
    let _ = writeln!(yaml, "#   rowfire backtest RULE -f THIS_FILE --days 30");
    let _ = writeln!(
        yaml,
        "# Every rule starts in shadow and delivers to the Demo inbox: nothing leaves the machine."
    );
    for (table, why) in &skipped {
        let _ = writeln!(yaml, "# skipped {}: {}", one_line(table), one_line(why));
    }
    let _ = writeln!(yaml, "version: 2");
    let _ = writeln!(yaml);
    let _ = writeln!(yaml, "source:");
    let _ = writeln!(yaml, "  type: {dialect}");
    let _ = writeln!(yaml, "  dsn_env: {}", quoted(dsn_env));
    let _ = writeln!(yaml);
    let _ = writeln!(yaml, "integrations:");
    let _ = writeln!(yaml, "  inbox:");
    let _ = writeln!(yaml, "    catalog: demo_inbox");
    let _ = writeln!(yaml);
    if triggers.is_empty() {
        let _ = writeln!(yaml, "triggers: {{}}");
        let _ = writeln!(yaml);
        let _ = writeln!(yaml, "rules: {{}}");
    } else {
        let _ = writeln!(yaml, "triggers:");
        yaml.push_str(&triggers_yaml);
        let _ = writeln!(yaml);
        let _ = writeln!(yaml, "rules:");
        yaml.push_str(&rules_yaml);
    }
    Draft {
        yaml,
        triggers,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(rows: &[[&str; 4]]) -> Catalogue {
        Catalogue::from_facts(rows.iter().map(|r| r.map(str::to_string)))
    }

    #[test]
    fn an_events_table_gets_its_clock_and_key_and_a_table_without_time_is_skipped() {
        let catalogue = facts(&[
            ["column", "accounts", "id", "text"],
            [
                "column",
                "accounts",
                "created_at",
                "timestamp with time zone",
            ],
            ["primary", "accounts", "id", ""],
            ["column", "charges", "id", "bigint"],
            ["column", "charges", "account_id", "text"],
            [
                "column",
                "charges",
                "updated_at",
                "timestamp with time zone",
            ],
            [
                "column",
                "charges",
                "occurred_at",
                "timestamp with time zone",
            ],
            ["column", "charges", "shape", "point"],
            ["primary", "charges", "id", ""],
            ["foreign", "charges", "account_id", "accounts"],
            ["indexed", "charges", "occurred_at", ""],
            ["column", "plans", "id", "bigint"],
        ]);
        let d = draft(&catalogue, Dialect::Postgres, "DATABASE_URL");
        assert_eq!(d.triggers.len(), 2, "{}", d.yaml);
        assert_eq!(d.skipped.len(), 1);
        assert!(d.skipped[0].1.contains("no timestamp"), "{:?}", d.skipped);
        assert!(
            d.yaml.contains("event_time: \"occurred_at\"  # occurred_at is when the row's event happened, and indexed"),
            "{}",
            d.yaml
        );
        assert!(
            d.yaml
                .contains("key: [\"account_id\"]  # account_id is a foreign key to accounts"),
            "{}",
            d.yaml
        );
        assert!(
            d.yaml
                .contains("left out, a type Rowfire does not read: shape (point)")
        );
        assert!(d.yaml.contains("key: [\"id\"]  # id is the primary key"));
        crate::definitions::parse(&d.yaml).unwrap_or_else(|e| panic!("{e:?}\n{}", d.yaml));
    }
}
