//! A tenant's source (a workspace the operator does not run): reached only at an address the
//! egress policy admits, checked when it connects and pinned so the driver does not look the name
//! up again, with nothing from this process's environment (no `PG*` variable, no `~/.pgpass`,
//! no file named by a parameter).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::sql_guard::Dialect;

/// Judges one address a tenant's source resolves to (the egress policy); `Err` says why not.
pub type AddressCheck = Arc<dyn Fn(IpAddr) -> Result<(), String> + Send + Sync>;

/// The parameters a tenant's PostgreSQL DSN may carry: none names a file or another host.
const PG_PARAMS: &[&str] = &["sslmode", "application_name", "connect_timeout"];
/// The parameters a tenant's MySQL DSN may carry.
const MYSQL_PARAMS: &[&str] = &["ssl-mode", "charset", "collation"];
/// Variables the PostgreSQL driver applies to every connection and that cannot be undone for
/// one: while one is set, no tenant's PostgreSQL source is connected.
const PG_ENV: &[&str] = &["PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGOPTIONS"];
/// How long a tenant's host may take to resolve.
const RESOLVE_WITHIN: Duration = Duration::from_secs(5);

/// Where a tenant's DSN connects: the checked address, and the credential the DSN itself gives
/// (an empty password when it gives none, so none is looked up elsewhere).
#[derive(Debug, Clone)]
pub struct Pinned {
    /// The address every resolved address was checked against; the one connected to.
    pub addr: IpAddr,
    /// The DSN's password, decoded; empty when it has none.
    pub password: String,
}

/// Checks a tenant's DSN and pins it: PostgreSQL or MySQL, a host and a user in the URL, only
/// known parameters, and every address the host resolves to admitted by `check`. The reasons
/// never quote the DSN, and say the same whether a name fails to resolve or is refused.
pub async fn pin(dsn: &str, check: &AddressCheck) -> Result<Pinned, String> {
    let (default_port, params) = match crate::sql_guard::dialect_of(dsn) {
        Some(Dialect::Postgres) => (5432, PG_PARAMS),
        Some(Dialect::Mysql) => (3306, MYSQL_PARAMS),
        Some(Dialect::Sqlite) => {
            return Err("a SQLite file on the server is not a source another workspace may read; use a PostgreSQL or MySQL source".into());
        }
        None => return Err("the DSN must be a postgres:// or mysql:// URL".into()),
    };
    let url = reqwest::Url::parse(dsn.trim())
        .map_err(|_| "the DSN is not a URL such as postgres://user@host:5432/db".to_string())?;
    if let Some((name, _)) = url
        .query_pairs()
        .find(|(k, _)| !params.contains(&k.as_ref()))
    {
        let name = crate::definitions::quoted(&name);
        return Err(format!(
            "the DSN's parameter {name} is not one another workspace's source may set (it may name a file or another host on the server); allowed: {}",
            params.join(", ")
        ));
    }
    let host = url
        .host_str()
        .unwrap_or("")
        .trim_matches(['[', ']'])
        .to_string();
    if host.is_empty() || host.contains(',') {
        return Err(
            "the DSN must name one server's host in the URL (not a Unix socket or a list of hosts)"
                .into(),
        );
    }
    if url.username().is_empty() {
        return Err("the DSN must name its user (postgres://user@host/db)".into());
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "the PostgreSQL driver reads these from the environment itself: checked, never read"
    )]
    let driver_env = PG_ENV.iter().find(|v| std::env::var_os(v).is_some());
    if default_port == 5432
        && let Some(var) = driver_env
    {
        return Err(format!(
            "this server's environment sets {var}, which the PostgreSQL driver applies to every connection: no other workspace's PostgreSQL source is connected while it is set (the operator can unset it)"
        ));
    }
    let port = url.port().unwrap_or(default_port);
    let unreachable = || {
        "the DSN's host does not resolve to an address this server may reach (public ones, or those ROWFIRE_EGRESS_ALLOW lists)".to_string()
    };
    let addrs: Vec<IpAddr> = match tokio::time::timeout(
        RESOLVE_WITHIN,
        tokio::net::lookup_host((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
        _ => return Err(unreachable()),
    };
    let Some(&addr) = addrs.first() else {
        return Err(unreachable());
    };
    for a in &addrs {
        if check(*a).is_err() {
            return Err(unreachable());
        }
    }
    Ok(Pinned {
        addr,
        password: super::redact::percent_decode(url.password().unwrap_or("")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public_only() -> AddressCheck {
        Arc::new(|ip: IpAddr| {
            if ip.is_loopback() {
                Err("loopback".into())
            } else {
                Ok(())
            }
        })
    }

    #[tokio::test]
    async fn a_tenant_dsn_names_one_host_a_user_and_no_file_and_resolves_where_it_may_go() {
        let check = public_only();
        for (dsn, says) in [
            ("sqlite:///etc/passwd", "SQLite file"),
            (
                "postgres://u@127.0.0.1/db",
                "does not resolve to an address",
            ),
            (
                "postgres://u@localhost/db",
                "does not resolve to an address",
            ),
            ("postgres://u@a.example,127.0.0.1/db", "one server's host"),
            ("postgres:///db", "one server's host"),
            ("postgres://1.2.3.4/db", "name its user"),
            (
                "postgres://u@1.2.3.4/db?sslrootcert=/etc/passwd",
                "\"sslrootcert\"",
            ),
            ("postgres://u@1.2.3.4/db?host=/tmp", "\"host\""),
            ("postgres://u@1.2.3.4/db?port=5432", "\"port\""),
            ("mysql://u@1.2.3.4/db?ssl-ca=/etc/passwd", "\"ssl-ca\""),
            ("mysql://u@1.2.3.4/db?socket=/run/mysqld.sock", "\"socket\""),
        ] {
            let why = pin(dsn, &check).await.unwrap_err();
            assert!(why.contains(says), "{dsn}: {why}");
        }
        let pinned = pin(
            "postgres://u:p%40ss@1.2.3.4:6543/db?sslmode=require",
            &check,
        )
        .await
        .unwrap();
        assert_eq!(pinned.addr, "1.2.3.4".parse::<IpAddr>().unwrap());
        assert_eq!(pinned.password, "p@ss");
        let pinned = pin("mysql://u@1.2.3.4/db", &check).await.unwrap();
        assert_eq!(pinned.password, "");
    }
}
