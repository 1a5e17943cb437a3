//! Integrations at run time (the `integration_state` table): whether one is enabled (a 410
//! disables it, and its deliveries wait, unlost, until it is enabled again) and its shared pace
//! (the next slot of a rate limit, or the pause a 429 asked for), which every worker honours
//! through the delivery claim.

use jiff::{SignedDuration, Timestamp};
use sqlx::Row as _;

use crate::store::{DbTime, Store, StoreError, StoreTx, execute, fetch_all};

/// One integration's run-time state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The integration's name.
    pub name: String,
    /// When it was disabled, if it is.
    pub disabled_at: Option<Timestamp>,
    /// Why it was disabled.
    pub disabled_reason: Option<String>,
    /// No request goes before this.
    pub paused_until: Option<Timestamp>,
}

/// Disables an integration: its deliveries stay pending and are not claimed until it is enabled.
pub async fn disable(
    store: &Store,
    workspace: &str,
    name: &str,
    reason: &str,
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO integration_state (workspace_id, name, disabled_at, disabled_reason) VALUES ($1, $2, $3, $4)
         ON CONFLICT (workspace_id, name) DO UPDATE SET disabled_at = excluded.disabled_at, disabled_reason = excluded.disabled_reason",
        [workspace, name, DbTime(now), reason]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))
}

/// Enables an integration again; its waiting deliveries become claimable at once. Returns whether
/// it was disabled.
pub async fn enable(store: &Store, workspace: &str, name: &str) -> Result<bool, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE integration_state SET disabled_at = NULL, disabled_reason = NULL
         WHERE workspace_id = $1 AND name = $2 AND disabled_at IS NOT NULL",
        [workspace, name]
    )
    .map_err(|e| store.error(e))?;
    if changed > 0 {
        // Workers in other processes hear of the waiting deliveries at once.
        crate::deliver::queue::announce(&mut tx)
            .await
            .map_err(|e| store.error(e))?;
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    if changed > 0 {
        store.wake();
    }
    Ok(changed > 0)
}

/// Holds every request to an integration until `until` (never shortening a longer pause): what
/// a 429 does, so one destination's "slow down" slows every worker.
pub async fn pause(
    store: &Store,
    workspace: &str,
    name: &str,
    until: Timestamp,
) -> Result<(), StoreError> {
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO integration_state (workspace_id, name, paused_until) VALUES ($1, $2, $3)
         ON CONFLICT (workspace_id, name) DO UPDATE SET paused_until = CASE
             WHEN integration_state.paused_until IS NULL OR integration_state.paused_until < excluded.paused_until
             THEN excluded.paused_until ELSE integration_state.paused_until END",
        [workspace, name, DbTime(until)]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))
}

/// A rate-limit reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// This request may go at this time (within the horizon asked for).
    Granted(Timestamp),
    /// Nothing free before this time; nothing was reserved.
    Full(Timestamp),
}

/// Reserves the next request slot of an integration limited to one request per `interval`,
/// shared by every worker, if it falls within `horizon` of now. A request that would have to
/// wait longer reserves nothing, so a backlog never books the integration's future.
pub async fn reserve(
    store: &Store,
    workspace: &str,
    name: &str,
    interval: SignedDuration,
    now: Timestamp,
    horizon: SignedDuration,
) -> Result<Slot, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let slot = async {
        let lock = match &tx {
            StoreTx::Postgres(_) => " FOR UPDATE",
            StoreTx::Sqlite(_) => "",
        };
        execute!(
            &mut tx,
            "INSERT INTO integration_state (workspace_id, name) VALUES ($1, $2) ON CONFLICT (workspace_id, name) DO NOTHING",
            [workspace, name]
        )?;
        let next = fetch_all!(
            &mut tx,
            &format!(
                "SELECT paused_until FROM integration_state WHERE workspace_id = $1 AND name = $2{lock}"
            ),
            [workspace, name],
            |r| r.try_get::<Option<DbTime>, _>(0)
        )?;
        let slot = next
            .into_iter()
            .flatten()
            .map(|t| t.0)
            .max()
            .map_or(now, |t| t.max(now));
        if slot > crate::store::later(now, horizon) {
            tx.rollback().await?;
            return Ok(Slot::Full(slot));
        }
        execute!(
            &mut tx,
            "UPDATE integration_state SET paused_until = $3 WHERE workspace_id = $1 AND name = $2",
            [workspace, name, DbTime(crate::store::later(slot, interval))]
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(Slot::Granted(slot))
    };
    slot.await.map_err(|e| store.error(e))
}

/// Every integration with a recorded state, by name.
pub async fn states(store: &Store, workspace: &str) -> Result<Vec<State>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT name, disabled_at, disabled_reason, paused_until FROM integration_state WHERE workspace_id = $1 ORDER BY name",
        [workspace],
        |r| Ok(State {
            name: r.try_get(0)?,
            disabled_at: r.try_get::<Option<DbTime>, _>(1)?.map(|t| t.0),
            disabled_reason: r.try_get(2)?,
            paused_until: r.try_get::<Option<DbTime>, _>(3)?.map(|t| t.0),
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// The owner under which an integration's credentials are stored.
pub fn secret_owner(name: &str) -> String {
    format!("integration:{name}")
}

/// What would hold an integration's deliveries back, as sentences for an operator: requests
/// that cannot finish inside the delivery `lease`, credentials with no master key to open them
/// (`key` is the master key or why there is none), or credentials never set.
pub async fn readiness(
    store: &Store,
    workspace: &str,
    defs: &crate::definitions::Definitions,
    key: Result<&crate::secret::MasterKey, &crate::secret::SecretError>,
    lease: SignedDuration,
) -> Result<Vec<String>, StoreError> {
    let mut warnings = Vec::new();
    for i in &defs.integrations {
        if !crate::deliver::sender::fits_in_lease(&i.spec, lease) {
            warnings.push(format!(
                "{}'s requests (timeout {} ms) do not fit in the {lease:#} delivery lease and will wait; raise --delivery-lease",
                i.name, i.spec.timeout_ms
            ));
        }
        let needed = i.spec.credentials();
        if needed.is_empty() {
            continue;
        }
        if let Err(e) = &key {
            warnings.push(format!("{}'s deliveries will wait: {e}", i.name));
            continue;
        }
        let stored = crate::secret::names(store, workspace, &secret_owner(&i.name)).await?;
        for c in needed.iter().filter(|c| !stored.iter().any(|s| s == *c)) {
            warnings.push(format!(
                "{}'s deliveries will wait: no credential {c}; `rowfire integrations set-credential {} {c}`",
                i.name, i.name
            ));
        }
    }
    Ok(warnings)
}

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
    let defs = crate::definitions::parse(doc).map_err(|e| e.to_string())?;
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
    match crate::definitions::parse(&text) {
        Ok(d) if d.integration(name).is_some() => Ok(text),
        Err(crate::definitions::Problems(problems))
            if problems.iter().any(|p| p.path.starts_with(&ours)) =>
        {
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

#[cfg(test)]
mod tests {
    use super::{add_to_document, settings};

    const DOC: &str = "version: 2\n# the team's rules\ntriggers:\n  t:\n    sql: SELECT id, at FROM x\n    event_time: at\n    key: [id]\nrules: {}\n";

    #[test]
    fn adding_an_integration_keeps_the_rest_of_the_document_and_its_comments() {
        let added = add_to_document(DOC, "alerts", &settings(&[("catalog", "slack")])).unwrap();
        assert!(added.starts_with(DOC.trim_end()), "{added}");
        let defs = crate::definitions::parse(&added).unwrap();
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
        let defs = crate::definitions::parse(&again).unwrap();
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
        let defs = crate::definitions::parse(&with_custom).unwrap();
        assert_eq!(
            defs.integration("crm").unwrap().spec.actions["note"].path,
            "/notes"
        );
    }
}
