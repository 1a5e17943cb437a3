//! The SQL guard in the MySQL dialect never panics and never accepts a write, whatever it is
//! given: arbitrary MySQL-flavoured input, and every accepted query re-read as it will run.

use jiff::Timestamp;
use proptest::prelude::*;
use rowfire::sql_guard::{self, Dialect, Placeholders, Shape, Window};
use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

const FRAGMENTS: &[&str] = &[
    "SELECT",
    "*",
    "FROM",
    "t",
    "u",
    "WHERE",
    "(",
    ")",
    ",",
    "AS",
    "INTO",
    "OUTFILE",
    "DUMPFILE",
    "'/tmp/x'",
    "@x",
    "@@hostname",
    "@@session.max_execution_time",
    ":=",
    "=",
    "FOR",
    "UPDATE",
    "SHARE",
    "LOCK",
    "IN",
    "MODE",
    "HANDLER",
    "OPEN",
    "READ",
    "FIRST",
    "DO",
    "SET",
    "SLEEP(1)",
    "BENCHMARK(9, 1)",
    "GET_LOCK('a', 1)",
    "LOAD_FILE('/etc/passwd')",
    "RELEASE_ALL_LOCKS()",
    "lower(a)",
    "count(*)",
    "NOW()",
    "/*!",
    "/*+",
    "MAX_EXECUTION_TIME(0)",
    "*/",
    "#",
    "--",
    "`",
    "`a`",
    "'",
    "\\'",
    "\\",
    "\"",
    ";",
    "mysql.user",
    "information_schema.tables",
    "performance_schema.threads",
    "sys.session",
    "UNION",
    "ALL",
    "JOIN",
    "ON",
    "1",
    "0x41",
    "b'101'",
    "X'ff'",
    "_utf8mb4'a'",
    "DIV",
    "<=>",
    "->>",
    "'$.a'",
    "INSERT",
    "DELETE",
    "REPLACE",
    "VALUES",
    "CREATE",
    "TABLE",
    "DROP",
    "TEMPORARY",
    "WITH",
    "RECURSIVE",
    "LIMIT",
    "ORDER",
    "BY",
    ":since",
    ":until",
    "?",
    "東",
    "\n",
];

fn sqlish() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|v| v.join(" ")),
        prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|v| v.concat()),
        prop::collection::vec(any::<char>(), 0..120).prop_map(|v| v.into_iter().collect()),
    ]
}

/// Functions that wait, lock, read files or report session state: never in an accepted query.
const NEVER: &[&str] = &[
    "sleep",
    "benchmark",
    "get_lock",
    "release_lock",
    "release_all_locks",
    "is_used_lock",
    "is_free_lock",
    "load_file",
    "master_pos_wait",
    "connection_id",
];

/// Checks what will run: re-parsed in MySQL's dialect it is one query, with no `INTO`, no
/// lock, no hint, no variable, no system schema, and no function from [`NEVER`].
fn assert_read_only(rendered: &str) -> Result<(), TestCaseError> {
    // Read as the source session reads it: NO_BACKSLASH_ESCAPES.
    let tokens = Tokenizer::new(&sql_guard::MysqlAsRun, rendered)
        .tokenize()
        .map_err(|e| TestCaseError::fail(format!("{rendered}: {e}")))?;
    let statements = Parser::new(&MySqlDialect {})
        .with_tokens(tokens.clone())
        .parse_statements()
        .map_err(|e| TestCaseError::fail(format!("{rendered}: {e}")))?;
    prop_assert_eq!(statements.len(), 1, "{}", rendered);
    prop_assert!(matches!(statements[0], Statement::Query(_)), "{}", rendered);
    let words: Vec<String> = tokens
        .iter()
        .filter_map(|t| match t {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    for w in &words {
        prop_assert!(!w.contains('@'), "a variable in {}", rendered);
        prop_assert!(!NEVER.contains(&w.as_str()), "{} in {}", w, rendered);
        prop_assert!(
            !["into", "outfile", "dumpfile", "lock", "handler"].contains(&w.as_str()),
            "{} in {}",
            w,
            rendered
        );
    }
    for pair in words.windows(2) {
        prop_assert!(
            !(pair[0] == "for" && (pair[1] == "update" || pair[1] == "share")),
            "a lock in {}",
            rendered
        );
    }
    // A comment mark inside a string literal or a quoted name is text; outside one it is a
    // comment or an executable hint (`/*! … */`, `/*+ … */`).
    prop_assert!(
        !tokens.iter().any(|t| matches!(
            t,
            Token::Whitespace(
                Whitespace::MultiLineComment(_) | Whitespace::SingleLineComment { .. }
            )
        )),
        "a comment or hint in {}",
        rendered
    );
    prop_assert!(
        !tokens.iter().any(|t| matches!(t, Token::AtSign)),
        "{}",
        rendered
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn the_mysql_guard_never_panics_nor_accepts_a_write_on_arbitrary_input(sql in sqlish()) {
        let window = Window { since: Timestamp::UNIX_EPOCH, until: Timestamp::UNIX_EPOCH };
        let key = vec!["k".to_string()];
        if let Ok(q) = sql_guard::check(&sql, Dialect::Mysql) {
            let shape = Shape { clock: "at", key: &key };
            let columns = q.columns_sql(window).sql;
            assert_read_only(&columns)?;
            let _ = q.window_sql(shape, window, Placeholders::Numbered, &[]);
            let _ = q.window_sql(shape, window, Placeholders::Inline, &[]);
        }
    }

    #[test]
    fn deeply_nested_mysql_input_is_refused_not_overflowed(depth in 1usize..400) {
        let sql = format!("SELECT {}1{}", "(".repeat(depth), ")".repeat(depth));
        let _ = sql_guard::check(&sql, Dialect::Mysql);
    }
}

/// The fragments are not vacuous: some of their joins are accepted, and none of those writes.
#[test]
fn the_mysql_fragments_reach_acceptance() {
    let mut rng = fastrand::Rng::with_seed(14);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let n = rng.usize(1..12);
        let sql: Vec<&str> = (0..n)
            .map(|_| FRAGMENTS[rng.usize(..FRAGMENTS.len())])
            .collect();
        let sql = format!("SELECT {}", sql.join(" "));
        if sql_guard::check(&sql, Dialect::Mysql).is_ok() {
            accepted += 1;
        }
    }
    assert!(accepted > 20, "{accepted} accepted");
}
