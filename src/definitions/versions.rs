//! Definition versions in the control plane (the `definition_version` table): reading the
//! version in force or an older one. Storing a new version is [`crate::push`]'s, which also
//! reconciles trigger and rule state.

use jiff::Timestamp;

use jiff::tz::TimeZone;

use super::{Definitions, Problems, parse_stored};
use crate::store::WorkspaceId;
use crate::store::{DbTime, Store, StoreError, fetch_all};

/// A stored version of the definitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Its number (1, 2, …).
    pub version: i64,
    /// The document exactly as pushed.
    pub document: String,
    /// When it was pushed.
    pub pushed_at: Timestamp,
    /// The workspace's time zone when it was pushed (an IANA name): the zone of its rules that
    /// name none.
    pub zone: String,
}

/// Parsed versions by (zone, document): the same text in the same zone always parses to the same
/// definitions, and parsing runs the SQL guard over every trigger, which every API request and
/// every sender's refresh would otherwise pay again. Keyed by the whole text, never a digest, so
/// no two documents share an entry; emptied when it holds more than [`PARSED_BYTES`] of text.
static PARSED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<(String, String), Definitions>>,
> = std::sync::LazyLock::new(Default::default);

/// The most document text [`PARSED`] keeps.
const PARSED_BYTES: usize = 32 << 20;

impl Version {
    /// The version's definitions, its rules that name no time zone in the zone it was pushed in.
    pub fn definitions(&self) -> Result<Definitions, Problems> {
        let key = (self.zone.clone(), self.document.clone());
        let cache = || {
            PARSED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(defs) = cache().get(&key) {
            return Ok(defs.clone());
        }
        let defs = self.parse()?;
        let mut cached = cache();
        let held: usize = cached.keys().map(|(_, d)| d.len()).sum();
        if held + key.1.len() > PARSED_BYTES {
            cached.clear();
        }
        cached.insert(key, defs.clone());
        Ok(defs)
    }

    fn parse(&self) -> Result<Definitions, Problems> {
        let zone = TimeZone::get(&self.zone).map_err(|_| {
            Problems::one(
                "(workspace)".into(),
                format!(
                    "version {} was pushed in time zone \"{}\", which this Rowfire does not know; set the workspace's with `rowfire workspaces rename` and push again",
                    self.version, self.zone
                ),
            )
        })?;
        parse_stored(&self.document, &zone)
    }
}

/// The version in force (`None`: nothing pushed yet), or an older one by number.
pub async fn get(
    store: &Store,
    workspace: &WorkspaceId,
    version: Option<i64>,
) -> Result<Option<Version>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT version, document, pushed_at, timezone FROM definition_version WHERE workspace_id = $1 AND ($2 < 0 OR version = $2) ORDER BY version DESC LIMIT 1",
        [workspace, version.unwrap_or(-1)],
        |r| Ok(Version {
            version: r.try_get("version")?,
            document: r.try_get("document")?,
            pushed_at: r.try_get::<DbTime, _>("pushed_at")?.0,
            // Versions pushed before zones were stored were read in UTC.
            zone: r.try_get::<Option<String>, _>("timezone")?.unwrap_or_else(|| "UTC".into()),
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows.into_iter().next())
}

/// Why the definitions in force could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InForceError {
    /// The stored document no longer parses (for example after an upgrade tightened a limit);
    /// push a corrected file.
    #[error(transparent)]
    Definitions(#[from] Problems),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The definitions in force, parsed.
pub async fn in_force(
    store: &Store,
    workspace: &WorkspaceId,
) -> Result<Option<(i64, Definitions)>, InForceError> {
    match get(store, workspace, None).await? {
        None => Ok(None),
        Some(v) => Ok(Some((v.version, v.definitions()?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(zone: &str, document: &str) -> Version {
        Version {
            version: 1,
            document: document.into(),
            pushed_at: Timestamp::UNIX_EPOCH,
            zone: zone.into(),
        }
    }

    /// A version is parsed once per text and zone: the same text read in another zone is parsed
    /// in that zone, and another text is never answered from the cache.
    #[test]
    fn a_version_read_again_is_the_same_and_each_zone_and_text_is_its_own() {
        let doc = "triggers:\n  t: { sql: \"SELECT id, at FROM x\", event_time: at, key: [id] }\nrules:\n  r: { trigger: t, policy: once_per_period, period: day }\n";
        let zone_of = |v: &Version| v.definitions().unwrap().rules[0].timezone.clone();
        let utc = version("UTC", doc);
        let (first, again) = (utc.definitions().unwrap(), utc.definitions().unwrap());
        assert_eq!(first.rules, again.rules);
        assert_eq!(zone_of(&utc), TimeZone::UTC);
        let berlin = version("Europe/Berlin", doc);
        assert_eq!(zone_of(&berlin), TimeZone::get("Europe/Berlin").unwrap());
        let other = version("UTC", &doc.replace("period: day", "period: week"));
        assert_ne!(other.definitions().unwrap().rules, first.rules);
    }
}
