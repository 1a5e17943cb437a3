//! Sources a trigger names without declaring them. Files written for the original Rowfire do
//! this (sources there were saved connections): such a name is resolved to a source stored in
//! the control plane (`rowfire sources add`), and when nothing resolves it only that trigger's
//! rules wait, with the fix; the rest of the file validates, pushes and runs.

use super::{Definitions, Problem, SourceDef};

impl SourceDef {
    /// What to say when this source's DSN cannot be found: the variable to set for a declared
    /// source; for one the file does not declare, how to declare or store it.
    pub fn missing_dsn(&self) -> String {
        if self.declared {
            format!(
                "source {name}: the environment variable {var} is not set, or is not read for this workspace (only the workspaces the operator runs read this process's environment: the process's own and those ROWFIRE_OPERATOR_WORKSPACES lists); set it, or store the DSN with `rowfire sources add {name} --url-env VAR` (POST /api/sources)",
                name = self.name,
                var = self.dsn_env
            )
        } else {
            format!(
                "source \"{name}\" is not declared in the definitions and not stored in the control plane; declare it under `sources:` or store it with `rowfire sources add {name} --url-env VAR`",
                name = self.name
            )
        }
    }
}

impl Definitions {
    /// One problem per trigger whose source is not declared in the file and for which
    /// `resolves(source name)` is false, naming the rules that cannot run until it is declared or
    /// stored. Nothing else in the file is affected.
    pub fn unresolved_sources(&self, resolves: impl Fn(&str) -> bool) -> Vec<Problem> {
        let declared: Vec<&str> = self
            .sources
            .iter()
            .filter(|s| s.declared)
            .map(|s| s.name.as_str())
            .collect();
        self.triggers
            .iter()
            .filter_map(|t| {
                let def = self.source(&t.source)?;
                if def.declared || resolves(&def.name) {
                    return None;
                }
                let waiting = self.waiting_rules(&t.name);
                Some(Problem {
                    path: format!("triggers.{}.source", t.name),
                    message: format!(
                        "{}; {waiting} (declared sources: {})",
                        def.missing_dsn(),
                        declared.join(", ")
                    ),
                })
            })
            .collect()
    }

    /// What holds back some rules and not the rest of the file: triggers whose source resolves
    /// nowhere ([`Definitions::unresolved_sources`]), and triggers that name no clock column
    /// (accepted, as the original Rowfire accepts them, but never read).
    pub fn held_back(&self, resolves: impl Fn(&str) -> bool) -> Vec<Problem> {
        let mut out = self.unresolved_sources(resolves);
        for t in self.triggers.iter().filter(|t| !t.has_clock()) {
            let waiting = self.waiting_rules(&t.name);
            out.push(Problem {
                path: format!("triggers.{}.event_time", t.name),
                message: format!(
                    "not given: the column that places each row in time, which Rowfire polls, backtests and explains the trigger by; {waiting} (add `event_time: COLUMN`)"
                ),
            });
        }
        out
    }

    /// Which rules of `trigger` wait while it cannot be read, as a phrase.
    fn waiting_rules(&self, trigger: &str) -> String {
        let rules: Vec<&str> = self
            .rules
            .iter()
            .filter(|r| r.trigger == trigger)
            .map(|r| r.name.as_str())
            .collect();
        match rules.as_slice() {
            [] => "no rule uses this trigger".to_string(),
            [one] => format!("rule {one} will not run until then"),
            many => format!("rules {} will not run until then", many.join(", ")),
        }
    }
}
