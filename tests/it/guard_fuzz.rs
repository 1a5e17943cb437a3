//! The SQL guard never panics, whatever it is given.

use jiff::Timestamp;
use proptest::prelude::*;
use rowfire::sql_guard::{self, Dialect, Placeholders, Shape, Slice, Window};

const FRAGMENTS: &[&str] = &[
    "SELECT",
    "*",
    "FROM",
    "t",
    "WHERE",
    "(",
    ")",
    ",",
    "WITH",
    "RECURSIVE",
    "AS",
    "DELETE",
    "INSERT",
    "INTO",
    "UPDATE",
    "SET",
    "VALUES",
    ":since",
    ":until",
    ":x",
    "$1",
    "?",
    "'",
    "''",
    "\"",
    ";",
    "--",
    "/*",
    "*/",
    "FOR",
    "SHARE",
    "UNION",
    "ALL",
    "EXCEPT",
    "1",
    "1.5e9",
    "a",
    "::",
    "[",
    "]",
    "\\",
    "é",
    "東",
    "%",
    "OVER",
    "PARTITION",
    "BY",
    "ORDER",
    "LIMIT",
    "JOIN",
    "ON",
    "=",
    "<",
    "NOT",
    "NULL",
    "CASE",
    "WHEN",
    "THEN",
    "END",
    "CREATE",
    "TABLE",
    "DROP",
    "RETURNING",
    "LATERAL",
    "\n",
    "\t",
];

fn sqlish() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|v| v.join(" ")),
        prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|v| v.concat()),
        prop::collection::vec(any::<char>(), 0..120).prop_map(|v| v.into_iter().collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_guard_never_panics_on_arbitrary_input(sql in sqlish()) {
        let window = Window { since: Timestamp::UNIX_EPOCH, until: Timestamp::UNIX_EPOCH };
        let key = vec!["k".to_string()];
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            if let Ok(q) = sql_guard::check(&sql, dialect) {
                let shape = Shape { clock: "at", key: &key };
                let _ = q.page_sql(shape, window, Slice::Boundary { after: None, offset: 9 }, Placeholders::Numbered);
                let _ = q.page_sql(shape, window, Slice::Between { after: None, upto: None }, Placeholders::Inline);
            }
        }
        let _ = sql_guard::check_any_dialect(&sql);
    }

    #[test]
    fn deeply_nested_input_is_refused_not_overflowed(depth in 1usize..400) {
        let sql = format!("SELECT {}1{}", "(".repeat(depth), ")".repeat(depth));
        let _ = sql_guard::check(&sql, Dialect::Postgres);
    }
}
