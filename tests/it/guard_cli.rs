//! `rowfire validate` refuses a function off the read-only list with the fix, and shows the
//! functions a source opted in to.

use crate::cli::{rowfire, text};

fn document(allow: &str) -> String {
    format!(
        "version: 2\n\
         sources:\n  files:\n    type: sqlite\n    dsn_env: GUARD_CLI_UNSET_URL\n{allow}\
         triggers:\n  t:\n    source: files\n    sql: \"SELECT id, at, readfile(path) AS body FROM t\"\n    event_time: at\n    key: id\n"
    )
}

#[test]
fn validate_refuses_an_unlisted_function_and_shows_a_sources_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("defs.yaml");
    std::fs::write(&file, document("")).unwrap();
    let out = rowfire(&["validate", file.to_str().unwrap()], &[]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("triggers.t.sql: the SQL calls readfile(), which is not on Rowfire's list of read-only functions"),
        "{err}"
    );
    assert!(err.contains("allow_functions"), "{err}");

    std::fs::write(&file, document("    allow_functions: [readfile]\n")).unwrap();
    let out = rowfire(&["validate", file.to_str().unwrap()], &[]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{stdout}{err}");
    assert!(
        stdout.contains("source files admits extra functions: readfile"),
        "{stdout}"
    );
}
