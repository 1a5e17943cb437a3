//! Walking rules, their cadences and anchors, integrations and bindings.

use jiff::SignedDuration;
use jiff::tz::TimeZone;
use serde_yaml_ng::{Mapping, Value as Yaml};

use super::headers::{framing_header, reserved_action_header, reserved_header};
use super::*;
use crate::cadence::{Anchor, Cadence, Period};

/// Keys that look like credentials when written into an integration's definition.
const CREDENTIAL_KEYS: &[&str] = &[
    "token",
    "username",
    "password",
    "signing_secret",
    "signing_secret_previous",
    "api_key",
    "secret",
    "credentials",
];

/// The longest expiry or frequency-cap window a rule may give.
const MAX_WINDOW: SignedDuration = SignedDuration::from_hours(24 * 366);

impl Cx {
    /// A catalogue entry with overrides (`catalog: slack`), or a custom integration given in
    /// full (`base_url`, `auth`, `actions` …), read by the catalogue's own code.
    pub(super) fn integration(&mut self, name: &str, v: &Yaml) -> Option<IntegrationDef> {
        let path = format!("integrations.{name}");
        // Credentials never belong in the definitions, at the top or inside `auth` (which names
        // only the kind of credential and where it goes): say so, and where they go instead.
        let mut without_secrets = v.clone();
        if let Yaml::Mapping(m) = &mut without_secrets {
            self.refuse_credentials(m, &path, name);
            if let Some(Yaml::Mapping(auth)) = m.get_mut("auth") {
                self.refuse_credentials(auth, &format!("{path}.auth"), name);
            }
        }
        let m = self.mapping(&without_secrets, &path, INTEGRATION_KEYS)?;
        let mut given = m.clone();
        given.remove("catalog");
        let spec = match self.string(m, "catalog", &path, false) {
            Some(catalog) => {
                let Some(entry) = crate::definitions::catalog::built_in(&catalog) else {
                    let known: Vec<String> = crate::definitions::catalog::all()
                        .into_iter()
                        .map(|i| i.name)
                        .collect();
                    self.problem(
                        format!("{path}.catalog"),
                        unknown(
                            "catalogue entry",
                            &catalog,
                            known.iter().map(String::as_str),
                        ),
                    );
                    return None;
                };
                // Overrides replace the entry's keys; the result is read as any entry is.
                let Ok(Yaml::Mapping(mut merged)) = serde_yaml_ng::to_value(&entry) else {
                    return None;
                };
                merged.extend(given);
                merged
            }
            None => {
                given.insert("name".into(), Yaml::String(name.to_string()));
                given
            }
        };
        match serde_path_to_error::deserialize::<_, crate::definitions::catalog::Integration>(
            Yaml::Mapping(spec),
        ) {
            Ok(spec) => {
                if !(1..=50_000).contains(&spec.timeout_ms) {
                    self.problem(
                        format!("{path}.timeout_ms"),
                        "expected milliseconds from 1 to 50000 (a request must finish well inside the 60 s delivery lease)",
                    );
                }
                self.base_url(&spec.base_url, &path);
                // The headers Rowfire itself writes may not be named as framing headers, nor
                // one as another (a credential sent as `Host`, a key as `Authorization`).
                if let crate::definitions::catalog::Auth::Header { header } = &spec.auth
                    && !self.stored
                    && let Some(why) = framing_header(&header.trim().to_ascii_lowercase())
                {
                    self.problem(
                        format!("{path}.auth.header"),
                        format!(
                            "{} is set by Rowfire ({why}); name another header for the credential",
                            crate::definitions::quoted(header)
                        ),
                    );
                }
                for (action, a) in &spec.actions {
                    if let Some(key) = a.idempotency_header.as_deref().filter(|_| !self.stored)
                        && let Some(why) = reserved_header(key, &spec)
                    {
                        self.problem(
                            format!("{path}.actions.{action}.idempotency_header"),
                            format!("{} is set by Rowfire ({why}); name another header for the idempotency key", crate::definitions::quoted(key)),
                        );
                    }
                    let stored = self.stored;
                    for header in a.headers.keys().filter(|_| !stored) {
                        if let Some(why) = reserved_action_header(header, &spec, a) {
                            self.problem(
                                format!("{path}.actions.{action}.headers"),
                                format!(
                                    "{} is set by Rowfire ({why}); remove it from the action's headers",
                                    crate::definitions::quoted(header)
                                ),
                            );
                        }
                    }
                    let token = |c: char| c.is_ascii_alphabetic() || c == '-';
                    if a.method.is_empty() || a.method.len() > 16 || !a.method.chars().all(token) {
                        self.problem(
                            format!("{path}.actions.{action}.method"),
                            "expected an HTTP method such as POST, PUT or PATCH",
                        );
                    }
                }
                if spec
                    .rate_limit
                    .is_some_and(|r| !(0.001..=100_000.0).contains(&r))
                {
                    self.problem(
                        format!("{path}.rate_limit"),
                        "expected requests per second from 0.001 to 100000",
                    );
                }
                Some(IntegrationDef {
                    name: name.to_string(),
                    spec,
                })
            }
            Err(e) => {
                // The key at fault, when its path is made of plain names (else the integration).
                let root = e.path().iter().next().is_none();
                let message = e.inner().to_string();
                let at = crate::definitions::serde_path(
                    &path,
                    e.path(),
                    &message,
                    crate::definitions::plain,
                );
                let mut said = without_values(&message);
                if root {
                    said.push_str(" (a custom integration needs base_url and actions; or name a catalogue entry with `catalog:`)");
                }
                self.problem(at.unwrap_or(path), said);
                None
            }
        }
    }

    /// Removes every credential key from `m`, each a problem at `path` saying where it goes.
    fn refuse_credentials(&mut self, m: &mut Mapping, path: &str, name: &str) {
        for key in CREDENTIAL_KEYS {
            if m.remove(*key).is_some() {
                self.problem(
                    format!("{path}.{key}"),
                    format!("credentials never go in the definitions file; remove it and run `rowfire integrations set-credential {name} {key}` (the value is stored encrypted)"),
                );
            }
        }
    }

    /// An integration's `base_url`: an http or https URL (or the Demo inbox's own), with no
    /// user name or password in it (credentials are stored apart, never in the definitions).
    fn base_url(&mut self, base: &str, path: &str) {
        if base == crate::definitions::catalog::INBOX_URL {
            return;
        }
        let problem = match reqwest::Url::parse(base) {
            Err(_) => Some("expected an http or https URL, e.g. https://api.example.com/v1"),
            Ok(u) if !matches!(u.scheme(), "http" | "https") || u.host().is_none() => {
                Some("expected an http or https URL, e.g. https://api.example.com/v1")
            }
            Ok(u) if !u.username().is_empty() || u.password().is_some() => Some(
                "a user name or password in the URL is a credential, and credentials never go in the definitions file; remove it and store it with `rowfire integrations set-credential`",
            ),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            self.problem(format!("{path}.base_url"), problem);
        }
    }

    pub(super) fn bindings(
        &mut self,
        m: &Mapping,
        path: &str,
        integrations: &[IntegrationDef],
    ) -> Vec<Binding> {
        let Some(v) = m.get("actions") else {
            return Vec::new();
        };
        let Yaml::Sequence(items) = v else {
            self.problem(
                format!("{path}.actions"),
                "expected a list of bindings, each with `action: INTEGRATION.ACTION`",
            );
            return Vec::new();
        };
        if items.len() > limits::MAX_ACTIONS_PER_RULE {
            self.problem(
                format!("{path}.actions"),
                format!(
                    "a rule may bind at most {} actions, found {}",
                    limits::MAX_ACTIONS_PER_RULE,
                    items.len()
                ),
            );
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}.actions[{i}]");
            let Some(b) = self.mapping(item, &p, BINDING_KEYS) else {
                continue;
            };
            let Some(action) = self.string(b, "action", &p, true) else {
                continue;
            };
            let Some((integration, action_name)) = action.split_once('.') else {
                self.problem(
                    format!("{p}.action"),
                    format!(
                        "{} is not INTEGRATION.ACTION, for example inbox.ticket",
                        crate::definitions::quoted(&action)
                    ),
                );
                continue;
            };
            let Some(def) = integrations.iter().find(|d| d.name == integration) else {
                self.problem(
                    format!("{p}.action"),
                    unknown(
                        "integration",
                        integration,
                        integrations.iter().map(|d| d.name.as_str()),
                    ),
                );
                continue;
            };
            let Some(spec) = def.spec.actions.get(action_name) else {
                self.problem(
                    format!("{p}.action"),
                    unknown(
                        "action",
                        action_name,
                        def.spec.actions.keys().map(String::as_str),
                    ),
                );
                continue;
            };
            let mut params = std::collections::BTreeMap::new();
            match b.get("params") {
                None | Some(Yaml::Null) => {}
                Some(Yaml::Mapping(given)) => {
                    for (k, v) in given {
                        let key = k.as_str().unwrap_or_default().to_string();
                        if !spec.params.contains_key(&key) {
                            let msg =
                                unknown("parameter", &key, spec.params.keys().map(String::as_str));
                            self.problem(format!("{p}.params.{key}"), msg);
                            continue;
                        }
                        params.insert(
                            key,
                            serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
                        );
                    }
                }
                Some(_) => self.problem(
                    format!("{p}.params"),
                    "expected a mapping from parameter names to templates",
                ),
            }
            for (name, declared) in &spec.params {
                if declared.required && !params.contains_key(name) {
                    self.problem(
                        format!("{p}.params.{name}"),
                        format!("required by {action}; add it"),
                    );
                }
            }
            let recipient = self.string(b, "recipient", &p, false);
            out.push(Binding {
                integration: integration.to_string(),
                action: action_name.to_string(),
                params,
                recipient,
            });
        }
        out
    }

    pub(super) fn rule(
        &mut self,
        name: &str,
        v: &Yaml,
        triggers: &[String],
        integrations: &[IntegrationDef],
    ) -> Option<Rule> {
        let path = format!("rules.{name}");
        let m = self.mapping(v, &path, RULE_KEYS)?;
        let trigger = self.string(m, "trigger", &path, true);
        if let Some(t) = &trigger
            && !triggers.contains(t)
        {
            let msg = unknown("trigger", t, triggers.iter().map(String::as_str));
            self.problem(format!("{path}.trigger"), msg);
        }
        let timezone = match self.string(m, "timezone", &path, false) {
            None => Some(self.default_zone.clone()),
            Some(tz) => match TimeZone::get(&tz) {
                Ok(zone) => Some(zone),
                Err(_) => {
                    self.problem(format!("{path}.timezone"), format!("unknown time zone {}; use an IANA name such as America/New_York or Europe/Berlin", zone_text(&tz)));
                    None
                }
            },
        };
        let cadence = self.cadence(m, &path, timezone.clone().unwrap_or(TimeZone::UTC));
        let description = self.description(m, &path);
        let actions = self.bindings(m, &path, integrations);
        let expire_after = self.optional_duration(m, "expire_after", &path, MAX_WINDOW);
        let frequency_cap = self.frequency_cap(m, &path);
        Some(Rule {
            name: name.to_string(),
            trigger: trigger?,
            description,
            cadence: cadence?,
            timezone: timezone?,
            actions,
            expire_after,
            frequency_cap,
        })
    }

    fn frequency_cap(&mut self, m: &Mapping, path: &str) -> Option<FrequencyCap> {
        let path = format!("{path}.frequency_cap");
        let cap = self.mapping(m.get("frequency_cap")?, &path, &["max", "per"])?;
        let per = self.optional_duration(cap, "per", &path, MAX_WINDOW);
        let max = cap
            .get("max")
            .and_then(Yaml::as_u64)
            .filter(|n| (1..=u64::from(u32::MAX)).contains(n));
        if max.is_none() {
            self.problem(
                format!("{path}.max"),
                "required: a whole number of at least 1, such as `max: 3`",
            );
        }
        if per.is_none() {
            self.problem(
                format!("{path}.per"),
                "required: the rolling window, such as `per: 24h`",
            );
        }
        Some(FrequencyCap {
            max: max? as u32,
            per: per?,
        })
    }

    pub(super) fn cadence(&mut self, m: &Mapping, path: &str, tz: TimeZone) -> Option<Cadence> {
        let policy = self.string(m, "policy", path, false);
        let period = self.string(m, "period", path, false);
        let n = m.get("n");
        if let Some(anchor) = m.get("anchor") {
            // A time-anchored rule sends once per anchor instant; a cadence beside it would
            // be silently ignored, so each is an error.
            for (key, present) in [
                ("policy", policy.is_some()),
                ("period", period.is_some()),
                ("n", n.is_some_and(|v| !v.is_null())),
            ] {
                if present {
                    self.problem(
                        format!("{path}.{key}"),
                        format!("a rule with `anchor` is time-anchored; remove `{key}`"),
                    );
                }
            }
            return self
                .anchor(anchor, &format!("{path}.anchor"))
                .map(Cadence::Anchored);
        }
        // No policy means once_ever, as in the original Rowfire's `version: 2` files (a policy
        // that is there but unreadable has been reported already).
        let policy = match policy {
            Some(policy) => policy,
            None if m.get("policy").is_some() => return None,
            None => "once_ever".to_string(),
        };
        for (key, needs, present) in [
            ("period", "once_per_period", period.is_some()),
            ("n", "once_per_n", n.is_some()),
        ] {
            if present && policy != needs {
                self.problem(
                    format!("{path}.{key}"),
                    format!(
                        "`{key}` applies only to {needs}, not {policy}; set `policy: {needs}` or remove it"
                    ),
                );
            }
        }
        match policy.as_str() {
            "once_ever" => Some(Cadence::OnceEver),
            "once_per_period" => {
                let Some(p) = period else {
                    self.problem(
                        format!("{path}.period"),
                        "required with once_per_period; use day, week or month",
                    );
                    return None;
                };
                match Period::parse(&p) {
                    Some(period) => Some(Cadence::OncePerPeriod { period, tz }),
                    None => {
                        self.problem(
                            format!("{path}.period"),
                            format!(
                                "unknown period {}; use day, week or month",
                                crate::definitions::quoted(&p)
                            ),
                        );
                        None
                    }
                }
            }
            "once_per_n" => match n.map(|v| (v, v.as_u64())) {
                Some((_, Some(n))) if (1..=u64::from(u32::MAX)).contains(&n) => {
                    Some(Cadence::OncePerN { n: n as u32 })
                }
                None => {
                    self.problem(
                        format!("{path}.n"),
                        "required with once_per_n; e.g. `n: 3` fires on occurrences 1, 4, 7 …",
                    );
                    None
                }
                Some((v, _)) => {
                    self.problem(
                        format!("{path}.n"),
                        format!(
                            "expected a whole number of at least 1, found {}",
                            yaml_text(v)
                        ),
                    );
                    None
                }
            },
            other => {
                self.problem(
                    format!("{path}.policy"),
                    format!(
                        "unknown policy {}; use once_ever, once_per_period or once_per_n",
                        crate::definitions::quoted(other)
                    ),
                );
                None
            }
        }
    }

    pub(super) fn anchor(&mut self, v: &Yaml, path: &str) -> Option<Anchor> {
        let m = self.mapping(v, path, ANCHOR_KEYS)?;
        let column = self.string(m, "column", path, true);
        let (ten_minutes, max) = (SignedDuration::from_mins(10), limits::MAX_LEAD);
        let lead = self.duration(m, "lead", path, ten_minutes, max);
        let lead_column = self.string(m, "lead_column", path, false);
        let (three_hours, max) = (SignedDuration::from_hours(3), limits::MAX_LOOK_AHEAD);
        let look_ahead = self.duration(m, "look_ahead", path, three_hours, max);
        let (fifteen_minutes, max) = (SignedDuration::from_mins(15), limits::MAX_SWEEP_INTERVAL);
        let interval = self.duration(m, "interval", path, fifteen_minutes, max);
        let (five_minutes, max) = (SignedDuration::from_mins(5), limits::MAX_GRACE);
        let grace = self.duration(m, "grace", path, five_minutes, max);
        let recheck = match m.get("recheck") {
            None => true,
            Some(Yaml::Bool(b)) => *b,
            Some(other) => {
                self.problem(
                    format!("{path}.recheck"),
                    format!("expected true or false, found {}", yaml_text(other)),
                );
                true
            }
        };
        // A sweep reads anchors up to `look_ahead` ahead, so an anchor is first seen at most
        // that long before it: a send `lead` before it must fall inside that window, or it
        // would already be late when first seen.
        if lead >= look_ahead {
            self.problem(
                format!("{path}.look_ahead"),
                format!(
                    "must be longer than the lead ({}): anchors are read only {} ahead, so every send would be late when first seen; raise look_ahead above the lead or shorten the lead",
                    limits::shown(lead),
                    limits::shown(look_ahead)
                ),
            );
        }
        Some(Anchor {
            column: column?,
            lead,
            lead_column,
            look_ahead,
            interval,
            grace,
            recheck,
        })
    }
}

/// A deserializer's message without the values it quotes: a `"…"` is a value from the file (a
/// token written where a setting goes, say) and is never shown; a `` `…` `` names a field or a
/// variant and is shown when it is [`crate::definitions::plain`].
fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let mark = &rest[open..open + 1];
        let Some(len) = rest[open + 1..].find(mark) else {
            break;
        };
        let inner = &rest[open + 1..open + 1 + len];
        out.push_str(&rest[..open]);
        if mark == "`" && crate::definitions::plain(inner) {
            out.push_str(&format!("`{inner}`"));
        } else {
            out.push_str("a value (not shown)");
        }
        rest = &rest[open + 2 + len..];
    }
    out.push_str(rest);
    out
}

/// A time zone name as a problem shows it: as written when it looks like one (letters, digits and
/// `_ - + /`, at most 40 characters), else only its length, as it may be a pasted secret.
fn zone_text(tz: &str) -> String {
    let looks_like_zone = tz.chars().count() <= 40
        && tz
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/'));
    if looks_like_zone {
        format!("\"{tz}\"")
    } else {
        crate::definitions::quoted(tz)
    }
}
