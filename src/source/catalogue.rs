//! A source's catalogue as its read-only user sees it: tables, their columns and types, primary
//! and foreign keys, and the columns that lead an index. Each engine reads it with one
//! statement of Rowfire's own (`CATALOGUE_SQL` in `postgres.rs`, `sqlite.rs`, `mysql.rs`) that
//! returns one fact per row (`kind`, `tbl`, `col`, `extra`); [`Catalogue::from_facts`] puts the
//! facts together.

use std::collections::BTreeSet;

/// The most facts (columns, key columns, indexed columns) a catalogue is read with: a schema
/// past it is refused rather than read into memory whole.
pub const MAX_FACTS: usize = 200_000;

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueColumn {
    /// Its name.
    pub name: String,
    /// Its type as the catalogue names it (`timestamp with time zone`, `datetime`, `TEXT`, …).
    pub type_name: String,
}

/// One table (or view) of the source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CatalogueTable {
    /// Its name.
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<CatalogueColumn>,
    /// The primary key's columns, in order (empty when it has none).
    pub primary_key: Vec<String>,
    /// Foreign keys, one entry per column: (column, the table it references).
    pub foreign_keys: Vec<(String, String)>,
    /// The columns that lead an index.
    pub indexed: BTreeSet<String>,
}

/// The tables of a source, by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Catalogue {
    /// The tables, sorted by name.
    pub tables: Vec<CatalogueTable>,
}

impl Catalogue {
    /// Puts together facts `(kind, table, column, extra)`: kind `column` (extra: the type),
    /// `primary`, `foreign` (extra: the referenced table) or `indexed`, in table order, each
    /// table's key columns in key order. Facts of an unknown kind are ignored.
    pub fn from_facts(facts: impl IntoIterator<Item = [String; 4]>) -> Catalogue {
        let mut tables: Vec<CatalogueTable> = Vec::new();
        for [kind, table, column, extra] in facts {
            let at = match tables.iter().position(|t| t.name == table) {
                Some(at) => at,
                None => {
                    tables.push(CatalogueTable {
                        name: table,
                        ..CatalogueTable::default()
                    });
                    tables.len() - 1
                }
            };
            let t = &mut tables[at];
            match kind.as_str() {
                "column" => t.columns.push(CatalogueColumn {
                    name: column,
                    type_name: extra,
                }),
                "primary" if !t.primary_key.contains(&column) => t.primary_key.push(column),
                "foreign" => t.foreign_keys.push((column, extra)),
                "indexed" => {
                    t.indexed.insert(column);
                }
                _ => {}
            }
        }
        // A table whose columns the user cannot read is not there for it.
        tables.retain(|t| !t.columns.is_empty());
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Catalogue { tables }
    }
}
