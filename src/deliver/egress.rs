//! The egress check: outbound requests go only to public addresses unless an operator allows a
//! range. It judges resolved addresses, so a name that resolves to a private address is refused
//! too; the sender connects to the address it checked.

use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// The environment variable listing allowed ranges (`127.0.0.1/32,10.0.0.0/8`).
pub const ALLOW_ENV: &str = "ROWFIRE_EGRESS_ALLOW";
/// The environment variable that, set to `inbox-only`, refuses every outbound address.
pub const MODE_ENV: &str = "ROWFIRE_EGRESS";

/// Ranges refused by default, with the name a refusal gives.
const REFUSED: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("169.254.0.0/16", "link-local (cloud metadata lives here)"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
    ("fd00:ec2::/32", "cloud metadata"),
];

/// An outbound address the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// In a range refused by default.
    #[error(
        "{addr} is {kind}; outbound requests go only to public addresses (allow a range with ROWFIRE_EGRESS_ALLOW)"
    )]
    Range {
        /// The address.
        addr: IpAddr,
        /// What kind of range it is in.
        kind: &'static str,
    },
    /// Everything is refused (`ROWFIRE_EGRESS=inbox-only`).
    #[error("{0} refused: ROWFIRE_EGRESS=inbox-only allows only the Demo inbox")]
    InboxOnly(IpAddr),
}

/// The egress policy in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Ranges allowed despite the defaults.
    pub allow: Vec<IpNet>,
    /// Refuse every outbound address.
    pub inbox_only: bool,
}

impl Policy {
    /// Reads `ROWFIRE_EGRESS_ALLOW` and `ROWFIRE_EGRESS`. An unreadable range is an error that
    /// names it.
    pub fn from_env() -> Result<Policy, String> {
        let allow = std::env::var(ALLOW_ENV).unwrap_or_default();
        let inbox_only = std::env::var(MODE_ENV).is_ok_and(|v| v == "inbox-only");
        Policy::parse(&allow, inbox_only)
    }

    /// A policy from a comma-separated list of ranges (a bare address is one host).
    pub fn parse(allow: &str, inbox_only: bool) -> Result<Policy, String> {
        let allow = allow
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                IpNet::from_str(s)
                    .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
                    .map_err(|_| {
                        format!(
                            "{ALLOW_ENV}: \"{s}\" is not an address or a range such as 10.0.0.0/8"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Policy { allow, inbox_only })
    }

    /// Whether a resolved address may be contacted.
    pub fn check(&self, addr: IpAddr) -> Result<(), Refused> {
        // An IPv4 address written as IPv6 (::ffff:127.0.0.1) is judged as the IPv4 address.
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        if self.inbox_only {
            return Err(Refused::InboxOnly(addr));
        }
        if self.allow.iter().any(|net| net.contains(&addr)) {
            return Ok(());
        }
        for (range, kind) in REFUSED {
            let net: IpNet = range.parse().expect("built-in ranges parse");
            if net.contains(&addr) {
                return Err(Refused::Range { addr, kind });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_refused_range_is_refused_by_default() {
        let p = Policy::default();
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.254", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("169.254.169.254", "link-local (cloud metadata lives here)"),
            ("fd00:ec2::254", "unique-local"),
            ("fc00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
        ] {
            match p.check(ip(addr)) {
                Err(Refused::Range { kind: k, .. }) => assert_eq!(k, kind, "{addr}"),
                other => panic!("{addr}: {other:?}"),
            }
        }
    }

    #[test]
    fn public_addresses_pass() {
        let p = Policy::default();
        for addr in [
            "93.184.215.14",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            assert_eq!(p.check(ip(addr)), Ok(()), "{addr}");
        }
    }

    #[test]
    fn an_allowed_range_passes_and_inbox_only_refuses_everything() {
        let p = Policy::parse("127.0.0.1, 10.0.0.0/8", false).unwrap();
        assert_eq!(p.check(ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check(ip("10.9.9.9")), Ok(()));
        assert!(p.check(ip("127.0.0.2")).is_err());
        let closed = Policy::parse("", true).unwrap();
        assert!(matches!(
            closed.check(ip("1.1.1.1")),
            Err(Refused::InboxOnly(_))
        ));
        assert!(
            Policy::parse("10.0.0.0/99", false)
                .unwrap_err()
                .contains("10.0.0.0/99")
        );
    }
}
