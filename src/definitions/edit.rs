//! Editing a definitions document as text: adding an integration or a rule while keeping the rest of the
//! document (and its comments) as written. The result is always parsed before it is returned.

/// A YAML mapping of scalar settings, each value quoted.
pub fn settings(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}: {}\n",
                serde_json::to_string(v).expect("strings serialise")
            )
        })
        .collect()
}

/// Adds an integration to a definitions document, keeping the rest of the text as written: the
/// entry goes under the top-level `integrations:` key (added if missing). `entry` is its YAML
/// mapping (`catalog: slack`, or a custom integration's `base_url`, `auth` and `actions`). The result is parsed before it is returned, so a document this
/// cannot edit safely is refused with the reason, never pushed half-right.
pub fn add_to_document(doc: &str, name: &str, entry: &str) -> Result<String, String> {
    let defs = super::parse(doc).map_err(|e| e.to_string())?;
    if defs.integration(name).is_some() {
        return Err(format!("an integration named {name} is already defined"));
    }
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if !is_name(name) {
        return Err(format!(
            "\"{name}\" is not a usable name; use letters, digits, _ and -"
        ));
    }
    let mut block = format!("  {name}:\n");
    for line in entry.lines().filter(|l| !l.trim().is_empty()) {
        block.push_str(&format!("    {line}\n"));
    }
    let mut lines: Vec<&str> = doc.lines().collect();
    let text = match lines.iter().position(|l| l.trim_end() == "integrations:") {
        Some(at) => {
            lines.insert(at + 1, block.trim_end_matches('\n'));
            lines.join("\n") + "\n"
        }
        None => format!("{}\nintegrations:\n{block}", doc.trim_end()),
    };
    let ours = format!("integrations.{name}");
    match super::parse(&text) {
        Ok(d) if d.integration(name).is_some() => Ok(text),
        Err(super::Problems(problems)) if problems.iter().any(|p| p.path.starts_with(&ours)) => {
            Err(problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("\n"))
        }
        Ok(_) | Err(_) => Err(format!(
            "the definitions in force are laid out in a way this command cannot edit safely; add `{name}` under `integrations:` in your file and push it"
        )),
    }
}

/// Adds a rule to a definitions document, keeping the rest of the text as written: the entry
/// goes under the top-level `rules:` key (added if missing). `entry` is its YAML mapping
/// (`trigger`, `policy`, `actions`, …). The result is parsed before it is returned, so a rule
/// that is wrong is refused with its problems (paths under `rules.NAME`), never pushed.
pub fn add_rule(doc: &str, name: &str, entry: &str) -> Result<String, String> {
    let defs = super::parse(doc).map_err(|e| e.to_string())?;
    if defs.rule(name).is_some() {
        return Err(format!("a rule named {name} is already defined"));
    }
    let usable = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !usable {
        return Err(format!(
            "\"{name}\" is not a usable name; use up to 100 letters, digits, _ and -"
        ));
    }
    let mut block = format!("  {name}:\n");
    for line in entry.lines().filter(|l| !l.trim().is_empty()) {
        block.push_str(&format!("    {line}\n"));
    }
    let mut lines: Vec<&str> = doc.lines().collect();
    let text = match lines.iter().position(|l| l.trim_end() == "rules:") {
        Some(at) => {
            lines.insert(at + 1, block.trim_end_matches('\n'));
            lines.join("\n") + "\n"
        }
        None if !lines.iter().any(|l| l.starts_with("rules:")) => {
            format!("{}\nrules:\n{block}", doc.trim_end())
        }
        None => {
            return Err(format!(
                "the definitions in force are laid out in a way this cannot edit safely; add `{name}` under `rules:` in your file and push it"
            ));
        }
    };
    let ours = format!("rules.{name}");
    match super::parse(&text) {
        Ok(d) if d.rule(name).is_some() => Ok(text),
        Err(super::Problems(problems)) if problems.iter().any(|p| p.path.starts_with(&ours)) => {
            Err(problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("\n"))
        }
        Ok(_) | Err(_) => Err(format!(
            "the definitions in force are laid out in a way this cannot edit safely; add `{name}` under `rules:` in your file and push it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{add_rule, add_to_document, settings};

    const DOC: &str = "version: 2\n# the team's rules\ntriggers:\n  t:\n    sql: SELECT id, at FROM x\n    event_time: at\n    key: [id]\nrules: {}\n";

    #[test]
    fn adding_an_integration_keeps_the_rest_of_the_document_and_its_comments() {
        let added = add_to_document(DOC, "alerts", &settings(&[("catalog", "slack")])).unwrap();
        assert!(added.starts_with(DOC.trim_end()), "{added}");
        let defs = super::super::parse(&added).unwrap();
        assert_eq!(
            defs.integration("alerts").unwrap().spec.auth.credentials(),
            ["token"]
        );
        let again = add_to_document(
            &added,
            "hooks",
            &settings(&[
                ("catalog", "webhook"),
                ("base_url", "https://example.com/in"),
            ]),
        )
        .unwrap();
        assert!(again.contains("# the team's rules"));
        let defs = super::super::parse(&again).unwrap();
        assert_eq!(
            defs.integration("hooks").unwrap().spec.base_url,
            "https://example.com/in"
        );
        assert!(defs.integration("alerts").is_some());
        assert!(
            add_to_document(&again, "hooks", &settings(&[("catalog", "webhook")]))
                .unwrap_err()
                .contains("already defined")
        );
        let unknown = add_to_document(DOC, "x", &settings(&[("catalog", "nope")])).unwrap_err();
        assert!(unknown.starts_with("integrations.x.catalog: "), "{unknown}");
        let custom = "base_url: https://crm.example.com\nauth: { kind: bearer }\nactions:\n  note:\n    method: POST\n    path: /notes\n    body: { text: hi }\n";
        let with_custom = add_to_document(DOC, "crm", custom).unwrap();
        let defs = super::super::parse(&with_custom).unwrap();
        assert_eq!(
            defs.integration("crm").unwrap().spec.actions["note"].path,
            "/notes"
        );
    }

    #[test]
    fn adding_a_rule_keeps_the_document_and_refuses_a_wrong_rule_with_its_path() {
        let doc = "version: 2\ntriggers:\n  t:\n    sql: SELECT id, at FROM x\n    event_time: at\n    key: [id]\nrules:\n  old:\n    trigger: t\n    policy: once_ever\n";
        let added = add_rule(
            doc,
            "weekly",
            "trigger: t\npolicy: once_per_period\nperiod: week\n",
        )
        .unwrap();
        let defs = super::super::parse(&added).unwrap();
        assert!(defs.rule("weekly").is_some() && defs.rule("old").is_some());
        assert!(
            add_rule(&added, "weekly", "trigger: t\npolicy: once_ever\n")
                .unwrap_err()
                .contains("already defined")
        );
        let wrong = add_rule(doc, "bad", "trigger: t\npolicy: sometimes\n").unwrap_err();
        assert!(wrong.contains("rules.bad"), "{wrong}");
    }
}
