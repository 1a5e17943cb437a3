//! Holes an adversarial review found after issues 8 and 9, each shown closed: YAML aliases that
//! expand a small file to gigabytes, credentials echoed in hex or encoded twice, and PostgreSQL
//! sources whose server reads backslashes in strings differently from the guard.

use std::time::{Duration, Instant};

use rowfire::definitions;
use rowfire::fixture::SAMPLE_DEFINITIONS;

#[test]
fn yaml_aliases_that_would_expand_a_small_file_to_a_gigabyte_are_refused_quickly() {
    // 500 KB anchored once and aliased 2,000 times: under the 1 MiB file limit, about 1 GB
    // once the parser copies every alias.
    let bomb = format!(
        "x-big: &s \"{}\"\nx-copies: [{}]\n",
        "A".repeat(500_000),
        ["*s"; 2_000].join(",")
    );
    let text = SAMPLE_DEFINITIONS.replacen("version: 2\n", &format!("version: 2\n{bomb}"), 1);
    assert!(text.len() < definitions::limits::MAX_FILE_BYTES);
    let started = Instant::now();
    let problems = match definitions::parse(&text) {
        Ok(_) => panic!("the document was accepted"),
        Err(p) => p.to_string(),
    };
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(problems.contains("YAML aliases"), "{problems}");
    assert!(problems.contains("line 5"), "{problems}");
}

#[test]
fn small_yaml_aliases_still_parse() {
    let text = SAMPLE_DEFINITIONS.replacen(
        "version: 2\n",
        "version: 2\nx-note: &n \"shared\"\nx-again: [*n, *n]\n",
        1,
    );
    if let Err(p) = definitions::parse(&text) {
        let p = p.to_string();
        assert!(!p.contains("YAML aliases"), "{p}");
    }
}

/// A source database whose server reads backslashes in plain strings as escapes
/// (`standard_conforming_strings = off`, still settable per database or role).
async fn backslash_escaping_pg() -> Option<crate::support::TestPg> {
    use sqlx::Executor;
    let pg = crate::support::TestPg::new().await?;
    let mut admin = pg.admin().await;
    admin
        .execute(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET standard_conforming_strings = off', \
             current_database()); END $$",
        )
        .await
        .unwrap();
    Some(pg)
}

#[tokio::test]
async fn a_postgres_source_reads_string_literals_as_the_guard_checked_them_whatever_the_server_default()
 {
    use jiff::SignedDuration;
    use rowfire::definitions::{self, DEFAULT_SOURCE};
    use rowfire::row::Value;
    use rowfire::source::Source;
    use rowfire::sql_guard::{Shape, Window};

    let Some(pg) = backslash_escaping_pg().await else {
        return;
    };
    let defs = definitions::parse("version: 2\n").unwrap();
    let def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    let source = Source::connect(&def, &pg.url).await.unwrap();
    let now = crate::support::now();
    // The guard reads 'C:\' as a complete literal; a server reading \' as an escaped quote
    // would see an open string running into Rowfire's wrapper, and text the guard checked as
    // a literal would run as SQL.
    let sql = format!(
        "SELECT g AS k, timestamptz '{}' AS at, 'C:\\' AS path FROM generate_series(1, 3) AS g",
        now - SignedDuration::from_hours(1)
    );
    let query = source.check("backslash", &sql).unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let window = Window {
        since: now - SignedDuration::from_hours(24),
        until: now,
    };
    let mut reader = source.read_window(&query, shape, window).await.unwrap();
    let mut rows = Vec::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        rows.extend(page);
    }
    reader.finish().await;
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row.get("path"), Some(&Value::Text("C:\\".into())));
    }
}

#[tokio::test]
async fn a_postgres_page_larger_than_the_memory_bound_is_refused_with_advice() {
    use jiff::SignedDuration;
    use rowfire::definitions::{self, DEFAULT_SOURCE};
    use rowfire::source::Source;
    use rowfire::sql_guard::{Shape, Window};

    let Some(pg) = crate::support::TestPg::new().await else {
        return;
    };
    let defs = definitions::parse("version: 2\n").unwrap();
    let mut def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    let now = crate::support::now();
    // Twenty values of 100 kB each from allowlisted functions: every value is allowed, a page of
    // all of them is not. (With 200 MB values, the same SQL held gigabytes in Rowfire.)
    let sql = format!(
        "SELECT g AS k, timestamptz '{}' AS at, repeat('x', 100000 + g) AS big \
         FROM generate_series(1, 20) AS g",
        now - SignedDuration::from_hours(1)
    );
    let window = Window {
        since: now - SignedDuration::from_hours(24),
        until: now,
    };
    let key = vec!["k".to_string()];
    let read = |source: Source| {
        let (sql, key) = (sql.clone(), key.clone());
        async move {
            let query = source.check("big", &sql).unwrap();
            let shape = Shape {
                clock: "at",
                key: &key,
            };
            let mut reader = source.read_window(&query, shape, window).await?;
            let mut rows = Vec::new();
            while let Some(page) = reader.next_page().await? {
                rows.extend(page);
            }
            reader.finish().await;
            Ok::<_, rowfire::source::SourceError>(rows.len())
        }
    };
    let mut source = Source::connect(&def, &pg.url).await.unwrap();
    // The bound is 256 MiB; shown here at 1 MiB so the test stays small.
    source.limit_page_bytes(1 << 20);
    let msg = read(source).await.unwrap_err().to_string();
    assert!(
        msg.contains("more than 1 MiB") && msg.contains("lower max_rows"),
        "{msg}"
    );
    def.page_size = 5;
    let mut source = Source::connect(&def, &pg.url).await.unwrap();
    source.limit_page_bytes(1 << 20);
    assert_eq!(read(source).await.unwrap(), 20, "smaller pages are read");
}

#[tokio::test]
async fn a_postgres_key_of_a_user_type_whose_name_needs_quoting_pages_without_running_the_name() {
    use jiff::SignedDuration;
    use rowfire::definitions::{self, DEFAULT_SOURCE};
    use rowfire::source::Source;
    use rowfire::sql_guard::{Shape, Window};
    use sqlx::Executor;

    let Some(pg) = crate::support::TestPg::new().await else {
        return;
    };
    // A type whose name is not a plain identifier: keyset paging (since replaced by one ordered
    // pass) cast the last key back to the column's type, pasting the name into the SQL as it was.
    let mut admin = pg.admin().await;
    admin
        .execute(
            "CREATE TYPE \"Mood\" AS ENUM ('a', 'b', 'c', 'd', 'e'); \
             CREATE TYPE \"int4) IS NULL OR (1\" AS ENUM ('x', 'y', 'z', 'w', 'v')",
        )
        .await
        .unwrap();
    let defs = definitions::parse("version: 2\n").unwrap();
    let mut def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    def.page_size = 2;
    let source = Source::connect(&def, &pg.url).await.unwrap();
    let now = crate::support::now();
    let window = Window {
        since: now - SignedDuration::from_hours(24),
        until: now,
    };
    for (ty, values) in [
        ("\"Mood\"", "a,b,c,d,e"),
        ("\"int4) IS NULL OR (1\"", "x,y,z,w,v"),
    ] {
        let sql = format!(
            "SELECT m AS k, timestamptz '{}' AS at \
             FROM unnest(string_to_array('{values}', ',')::{ty}[]) AS m",
            now - SignedDuration::from_hours(1)
        );
        let query = source.check("typed", &sql).unwrap();
        let key = vec!["k".to_string()];
        let shape = Shape {
            clock: "at",
            key: &key,
        };
        let mut reader = source.read_window(&query, shape, window).await.unwrap();
        let mut rows = 0;
        while let Some(page) = reader.next_page().await.unwrap() {
            rows += page.len();
        }
        reader.finish().await;
        assert_eq!(rows, 5, "{ty}");
    }
}

#[tokio::test]
async fn an_allowlisted_function_runs_the_builtin_even_when_a_schema_on_the_path_shadows_it() {
    use jiff::SignedDuration;
    use rowfire::definitions::{self, DEFAULT_SOURCE};
    use rowfire::row::Value;
    use rowfire::source::Source;
    use rowfire::sql_guard::{Shape, Window};
    use sqlx::Executor;

    let Some(pg) = crate::support::TestPg::new().await else {
        return;
    };
    // Anyone who may create objects in `public` (every role before PostgreSQL 15) can add
    // functions whose argument types match better than the built-ins': `lower(v)` on varchar
    // and `unnest` of a varchar array would then run them with Rowfire's privileges.
    let mut admin = pg.admin().await;
    admin
        .execute(
            "CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql \
               AS $$ SELECT 'hijacked' $$; \
             CREATE FUNCTION public.unnest(varchar[]) RETURNS SETOF text LANGUAGE sql \
               AS $$ SELECT 'hijacked' $$",
        )
        .await
        .unwrap();
    let defs = definitions::parse("version: 2\n").unwrap();
    let def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    let source = Source::connect(&def, &pg.url).await.unwrap();
    let now = crate::support::now();
    let sql = format!(
        "SELECT lower(u.v) AS k, timestamptz '{}' AS at \
         FROM unnest(ARRAY['A', 'B']::varchar[]) AS u(v)",
        now - SignedDuration::from_hours(1)
    );
    let query = source.check("shadowed", &sql).unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let window = Window {
        since: now - SignedDuration::from_hours(24),
        until: now,
    };
    let mut reader = source.read_window(&query, shape, window).await.unwrap();
    let mut keys = Vec::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        keys.extend(page.iter().map(|r| r.get("k").cloned()));
    }
    reader.finish().await;
    assert_eq!(
        keys,
        vec![Some(Value::Text("a".into())), Some(Value::Text("b".into()))]
    );
}

#[tokio::test]
async fn control_characters_in_what_a_command_prints_are_escaped_not_sent_to_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let db = crate::support::TestSqlite::new();
    crate::support::sample_source(&db.url, 100).await;
    let env = [
        ("ROWFIRE_DATABASE_URL", url.as_str()),
        ("SAMPLE_DATABASE_URL", db.url.as_str()),
    ];
    let push = crate::cli::rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    assert!(push.status.success(), "{}", crate::cli::text(&push).1);
    // A key (as a row value would be) that clears the screen and sets the clipboard (OSC 52).
    let key = "acct\u{1b}[2J\u{1b}]52;c;aGk=\u{7}";
    let out = crate::cli::rowfire(&["why", "billing_ticket", key], &env);
    let (stdout, stderr) = crate::cli::text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("acct\\u{1b}[2J\\u{1b}]52;c;aGk=\\u{7}"),
        "{stdout}"
    );
    assert!(!stdout.contains(['\u{1b}', '\u{7}', '\r']), "{stdout:?}");
}
