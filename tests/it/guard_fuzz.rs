//! The SQL guard never panics, whatever it is given.

use jiff::Timestamp;
use proptest::prelude::*;
use rowfire::sql_guard::{self, Dialect, Placeholders, Shape, Window};

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
                let _ = q.window_sql(shape, window, Placeholders::Numbered, &[]);
                let _ = q.window_sql(shape, window, Placeholders::Inline, &[]);
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

/// A function name as written in generated SQL, and whether each dialect's database would call
/// a read-only built-in through it (decided here, independently of the guard's lists).
struct Name {
    written: &'static str,
    on_postgres: bool,
    on_sqlite: bool,
}

const fn name(written: &'static str, on_postgres: bool, on_sqlite: bool) -> Name {
    Name {
        written,
        on_postgres,
        on_sqlite,
    }
}

const NAMES: &[Name] = &[
    name("lower", true, true),
    name("LOWER", true, true),
    name("\"lower\"", true, true),
    name("\"LOWER\"", false, true),
    name("pg_catalog.lower", true, false),
    name("public.lower", false, false),
    name("abs", true, true),
    name("coalesce", true, true),
    name("max", true, true),
    name("count", true, true),
    name("row_number", true, true),
    name("generate_series", true, true),
    name("unnest", true, false),
    name("jsonb_array_elements", true, false),
    name("date_trunc", true, false),
    name("gen_random_uuid", true, false),
    name("json_each", true, true),
    name("json_group_array", false, true),
    name("datetime", false, true),
    name("strftime", false, true),
    name("pg_read_file", false, false),
    name("pg_catalog.pg_read_file", false, false),
    name("\"pg_read_file\"", false, false),
    name("PG_LS_DIR", false, false),
    name("dblink_exec", false, false),
    name("pg_sleep", false, false),
    name("set_config", false, false),
    name("pg_try_advisory_lock", false, false),
    name("pg_terminate_backend", false, false),
    name("query_to_xml", false, false),
    name("ts_stat", false, false),
    name("lo_export", false, false),
    name("my_schema.fn", false, false),
    name("readfile", false, false),
    name("WriteFile", false, false),
    name("load_extension", false, false),
    name("randomblob", false, false),
];

/// Builds SQL from a small grammar, steered by `choices`; records every function name written.
struct Gen<'a> {
    choices: &'a [u16],
    at: usize,
    used: Vec<&'static Name>,
}

impl Gen<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let c = self.choices.get(self.at).copied().unwrap_or(0) as usize;
        self.at += 1;
        c % n
    }

    fn call(&mut self, depth: usize) -> String {
        let n = &NAMES[self.pick(NAMES.len())];
        self.used.push(n);
        let args = match self.pick(3) {
            0 => self.expr(depth + 1),
            1 => format!("{}, {}", self.expr(depth + 1), self.expr(depth + 1)),
            _ => "'x'".to_string(),
        };
        format!("{}({args})", n.written)
    }

    fn expr(&mut self, depth: usize) -> String {
        if depth > 4 {
            return ["a", "1", "'s'"][self.pick(3)].to_string();
        }
        match self.pick(9) {
            0 => "a".into(),
            1 => "1".into(),
            2 | 3 => self.call(depth),
            4 => format!("({})", self.query(depth + 1)),
            5 => format!("EXISTS ({})", self.query(depth + 1)),
            6 => format!("{} + {}", self.expr(depth + 1), self.expr(depth + 1)),
            7 => format!(
                "CASE WHEN {} THEN {} END",
                self.expr(depth + 1),
                self.expr(depth + 1)
            ),
            _ => format!(
                "{} OVER (ORDER BY {})",
                self.call(depth),
                self.expr(depth + 1)
            ),
        }
    }

    fn relation(&mut self, depth: usize) -> String {
        if depth > 4 {
            return "t".into();
        }
        match self.pick(6) {
            0 => "t".into(),
            1 => format!("{} AS f", self.call(depth)),
            2 => format!("t, {} AS f", self.call(depth)),
            3 => format!("t CROSS JOIN LATERAL {} AS f", self.call(depth)),
            4 => format!("({}) AS s", self.query(depth + 1)),
            _ => format!(
                "t JOIN {} AS f ON {}",
                self.call(depth),
                self.expr(depth + 1)
            ),
        }
    }

    fn query(&mut self, depth: usize) -> String {
        if depth > 4 {
            return "SELECT a FROM t".into();
        }
        match self.pick(4) {
            0 => format!("WITH c AS ({}) SELECT * FROM c", self.query(depth + 1)),
            1 => format!(
                "{} UNION ALL {}",
                self.select(depth + 1),
                self.select(depth + 1)
            ),
            _ => self.select(depth),
        }
    }

    fn select(&mut self, depth: usize) -> String {
        let mut q = format!(
            "SELECT {}, {} FROM {}",
            self.expr(depth + 1),
            self.expr(depth + 1),
            self.relation(depth + 1)
        );
        if self.pick(2) == 0 {
            q.push_str(&format!(" WHERE {}", self.expr(depth + 1)));
        }
        q
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Every accepted query calls only read-only built-ins (judged by the generator's own
    /// record, not the guard's lists), and every refusal for a function names one it called.
    #[test]
    fn accepted_queries_call_only_read_only_functions(choices in prop::collection::vec(any::<u16>(), 1..80)) {
        let mut g = Gen { choices: &choices, at: 0, used: Vec::new() };
        let sql = g.query(0);
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            let admitted = |n: &Name| match dialect {
                Dialect::Postgres => n.on_postgres,
                Dialect::Sqlite => n.on_sqlite,
                // Not generated for MySQL here; `guard_fuzz_mysql` has its own grammar.
                Dialect::Mysql => false,
            };
            let all_admitted = g.used.iter().all(|n| admitted(n));
            match sql_guard::check(&sql, dialect) {
                Ok(_) => prop_assert!(all_admitted, "{dialect} accepted {sql}"),
                Err(sql_guard::GuardError::Function(name)) => {
                    prop_assert!(!all_admitted, "{dialect} refused {name} in {sql}");
                    let canon = |s: &str| {
                        let s = s.replace('"', "").to_ascii_lowercase();
                        s.strip_prefix("pg_catalog.").map(str::to_string).unwrap_or(s)
                    };
                    let called = g
                        .used
                        .iter()
                        .any(|n| !admitted(n) && canon(n.written) == canon(&name));
                    prop_assert!(called, "{dialect} refused {name}, not called in {sql}");
                }
                // The grammar stays inside what both parsers read, except LATERAL on SQLite.
                Err(sql_guard::GuardError::Parse { .. }) => prop_assert!(
                    dialect == Dialect::Sqlite && sql.contains("LATERAL"),
                    "{dialect} could not parse {sql}"
                ),
                Err(other) => prop_assert!(false, "{dialect}: {other} for {sql}"),
            }
        }
    }
}

/// The grammar is not vacuous: it produces queries the guard accepts and refuses on both engines.
#[test]
fn the_sql_grammar_reaches_both_acceptance_and_refusal() {
    let mut rng = fastrand::Rng::with_seed(8);
    for dialect in [Dialect::Postgres, Dialect::Sqlite] {
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..2000 {
            let choices: Vec<u16> = (0..rng.usize(1..80)).map(|_| rng.u16(..)).collect();
            let sql = Gen {
                choices: &choices,
                at: 0,
                used: Vec::new(),
            }
            .query(0);
            match sql_guard::check(&sql, dialect) {
                Ok(_) => accepted += 1,
                Err(sql_guard::GuardError::Function(_)) => refused += 1,
                Err(_) => {}
            }
        }
        assert!(
            accepted > 100 && refused > 100,
            "{dialect}: {accepted} accepted, {refused} refused"
        );
    }
}
