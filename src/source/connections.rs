//! The sources a poller or a sender has connected, reused while their definition and DSN stay
//! the same.

use std::collections::HashMap;

use tokio::sync::Mutex;

use super::{DsnResolver, Source, Statements};
use crate::definitions::SourceDef;
use crate::store::WorkspaceId;

/// A source as connected: the definition and DSN it was connected with.
struct Open {
    def: SourceDef,
    url: String,
    source: Source,
}

/// Connected sources by workspace and source name. The DSN is resolved at every use (a running
/// worker reads stored DSNs again each minute), and a changed DSN or definition connects anew;
/// the old pool closes when its last reader lets go of it.
#[derive(Default)]
pub struct Connections {
    open: Mutex<HashMap<(WorkspaceId, String), Open>>,
}

impl Connections {
    /// The workspace's source `def`, connected through the DSN `resolve` gives for it now.
    pub async fn get(
        &self,
        workspace: &WorkspaceId,
        def: &SourceDef,
        resolve: &DsnResolver,
    ) -> Result<Source, String> {
        let dsn = resolve(workspace, def).ok_or_else(|| def.missing_dsn())?;
        let key = (workspace.clone(), def.name.clone());
        if let Some(open) = self.open.lock().await.get(&key)
            && open.def == *def
            && open.url == dsn.url
        {
            return Ok(open.source.clone());
        }
        // Connected without the lock held: resolving a tenant's host may take seconds, and the
        // other sources stay reachable meanwhile.
        let source = Source::connect_resolved(def, &dsn)
            .await
            .map_err(|e| e.to_string())?;
        let open = Open {
            def: def.clone(),
            url: dsn.url,
            source: source.clone(),
        };
        self.open.lock().await.insert(key, open);
        Ok(source)
    }

    /// What the sources held were sent, by kind, summed.
    pub async fn statements(&self) -> Statements {
        self.open
            .lock()
            .await
            .values()
            .fold(Default::default(), |sum, o| sum + o.source.statements())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, RwLock};

    #[tokio::test]
    async fn a_source_is_reused_until_its_dsn_changes_then_connected_anew() {
        let dir = tempfile::tempdir().unwrap();
        // Two databases (an empty file is an empty SQLite database).
        let url = |name: &str| {
            let path = dir.path().join(name);
            std::fs::File::create(&path).unwrap();
            format!("sqlite://{}", path.display())
        };
        let current = Arc::new(RwLock::new(url("first.db")));
        let read = current.clone();
        let resolve: DsnResolver = Arc::new(move |_, _| Some(read.read().unwrap().clone().into()));
        let defs = crate::definitions::parse(
            "version: 2\nsource: { type: sqlite, dsn_env: X }\ntriggers: {}\nrules: {}\n",
        )
        .unwrap();
        let def = defs.source(crate::definitions::DEFAULT_SOURCE).unwrap();
        let ws = WorkspaceId::parse("default").unwrap();
        let open = Connections::default();

        let first = open.get(&ws, def, &resolve).await.unwrap();
        assert!(first.shown().contains("first.db"), "{}", first.shown());
        let again = open.get(&ws, def, &resolve).await.unwrap();
        assert_eq!(again.shown(), first.shown());

        // A DSN stored again reaches the next use.
        *current.write().unwrap() = url("second.db");
        let second = open.get(&ws, def, &resolve).await.unwrap();
        assert!(second.shown().contains("second.db"), "{}", second.shown());
    }
}
