//! The first run as a new user meets it: `rowfire demo` with a relative `--dir`, then every
//! command it suggests, typed as printed into a shell.

use std::process::Command;

use crate::support::now;

/// The commands after "Look closer", each printed as `  $ command`.
fn suggested(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("Look closer"))
        .skip(1)
        .map_while(|l| l.strip_prefix("  $ "))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_the_demo_suggests_runs_as_printed_in_the_directory_it_names() {
    let home = tempfile::tempdir().unwrap();
    let now = now().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_rowfire"))
        .args(["demo", "--dir", "my-demo", "--now", &now, "--once"])
        .current_dir(home.path())
        .env_remove("SAMPLE_DATABASE_URL")
        .env_remove("ROWFIRE_DATABASE_URL")
        .env_remove("ROWFIRE_MASTER_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `.ci/run` greps for these.
    assert!(stdout.contains("billing_ticket: ") && stdout.contains("Demo inbox: "));

    let steps = suggested(&stdout);
    assert!(steps.len() >= 4, "too few suggestions in\n{stdout}");
    let dir = steps[0]
        .strip_prefix("cd ")
        .unwrap_or_else(|| panic!("the first step changes into the demo directory: {steps:?}"));
    let dir = std::path::PathBuf::from(dir);
    assert!(dir.is_absolute(), "{}", dir.display());
    assert_eq!(
        dir.canonicalize().unwrap(),
        home.path().join("my-demo").canonicalize().unwrap()
    );
    assert!(
        steps.iter().any(|s| s.contains(" worker --once")),
        "the worker is among the suggestions: {steps:?}"
    );
    // The binary is not on this test's PATH, so the demo names it so that it runs anyway.
    assert!(
        stdout.contains("is not on your PATH"),
        "an install hint in\n{stdout}"
    );

    // A fresh shell with nothing set but what the line itself sets, started in the named
    // directory (as after the `cd`).
    for step in &steps[1..] {
        let run = Command::new("sh")
            .args(["-c", step])
            .current_dir(&dir)
            .env_remove("SAMPLE_DATABASE_URL")
            .env_remove("ROWFIRE_DATABASE_URL")
            .env_remove("ROWFIRE_MASTER_KEY")
            .output()
            .unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr),
        );
        assert!(run.status.success(), "`{step}` failed:\n{o}\n{e}");
        assert!(
            !o.contains("failed:") && !e.contains("SAMPLE_DATABASE_URL"),
            "`{step}`:\n{o}\n{e}"
        );
        if step.contains(" backtest billing_ticket ") {
            let headline = stdout
                .lines()
                .find(|l| l.starts_with("  billing_ticket: "))
                .unwrap();
            // "billing_ticket: M rows matched → F fires …": the backtest agrees.
            let words: Vec<&str> = headline.split_whitespace().collect();
            let (matched, fires) = (words[1], words[5]);
            for (label, n) in [("matched", matched), ("fires", fires)] {
                assert!(
                    o.lines()
                        .any(|l| l.split_whitespace().last() == Some(n) && l.contains(label)),
                    "{label} {n} missing in\n{o}"
                );
            }
        }
        if step.ends_with(" status") {
            assert!(o.contains("billing_ticket"), "{o}");
        }
    }
}
