//! The egress check: outbound requests go only to public addresses unless an operator allows a
//! range. It judges resolved addresses, so a name that resolves to a private address is refused
//! too; the sender connects to the address it checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;

/// The environment variable listing allowed ranges (`127.0.0.1/32,10.0.0.0/8`).
pub const ALLOW_ENV: &str = "ROWFIRE_EGRESS_ALLOW";
/// The environment variable that, set to `inbox-only`, refuses every outbound address.
pub const MODE_ENV: &str = "ROWFIRE_EGRESS";

/// Ranges refused by default, with the name a refusal gives (checked in order: the first that
/// holds the address names it). The IPv6 part follows the IANA special-purpose address registry;
/// beyond it, IPv6 outside global unicast `2000::/3` is refused, and addresses that wrap an IPv4
/// address (see [`embedded_ipv4`]) are judged by the IPv4 inside.
const REFUSED: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("169.254.0.0/16", "link-local (cloud metadata lives here)"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("198.18.0.0/15", "benchmarking"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy prefix"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "ORCHID"),
    ("2001:20::/28", "ORCHIDv2"),
    ("2001:db8::/32", "documentation"),
    // Teredo (2001::/32) is inside and is judged by the IPv4 addresses it wraps instead.
    ("2001::/23", "IETF protocol assignments"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
    ("fd00:ec2::/32", "cloud metadata"),
];

/// IPv6 global unicast: IPv6 outside it that wraps no IPv4 address is refused.
const GLOBAL_UNICAST: &str = "2000::/3";

/// Teredo, exempt from the IETF protocol assignments range it sits in.
const TEREDO: &str = "2001::/32";

/// The IPv4 addresses an IPv6 address wraps, with the name of the form: IPv4-compatible
/// (`::a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::/96`), 6to4
/// (`2002::/16`, bits 16..48) and Teredo (`2001::/32`: the server in bits 32..64, the client in the
/// last 32 bits, inverted). IPv4-mapped addresses are judged as IPv4 before this is asked.
pub fn embedded_ipv4(v6: Ipv6Addr) -> Option<(&'static str, Vec<Ipv4Addr>)> {
    let s = v6.segments();
    let o = v6.octets();
    let v4 = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    if s[..6] == [0; 6] {
        Some(("IPv4-compatible", vec![v4(&o[12..])]))
    } else if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        Some(("IPv4-translated", vec![v4(&o[12..])]))
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(("NAT64", vec![v4(&o[12..])]))
    } else if s[0] == 0x2002 {
        Some(("6to4", vec![v4(&o[2..6])]))
    } else if s[..2] == [0x2001, 0] {
        let client: Vec<u8> = o[12..].iter().map(|b| !b).collect();
        Some(("Teredo", vec![v4(&o[4..8]), v4(&client)]))
    } else {
        None
    }
}

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
    /// An IPv6 address wrapping an IPv4 address that is refused.
    #[error(
        "{addr} is {form} for {inner}, which is {kind}; outbound requests go only to public addresses (allow a range with ROWFIRE_EGRESS_ALLOW)"
    )]
    Wrapped {
        /// The address.
        addr: IpAddr,
        /// How it wraps IPv4 (`6to4`, `NAT64`, …).
        form: &'static str,
        /// The IPv4 address inside.
        inner: Ipv4Addr,
        /// What kind of range the IPv4 address is in.
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
        self.judge(addr)?;
        if let IpAddr::V6(v6) = addr
            && !self.allowed(addr)
            && let Some((form, inners)) = embedded_ipv4(v6)
        {
            for inner in inners {
                if let Err(Refused::Range { kind, .. }) = self.judge(IpAddr::V4(inner)) {
                    return Err(Refused::Wrapped {
                        addr,
                        form,
                        inner,
                        kind,
                    });
                }
            }
        }
        Ok(())
    }

    fn allowed(&self, addr: IpAddr) -> bool {
        self.allow.iter().any(|net| net.contains(&addr))
    }

    /// The address alone, as written: allowed ranges, then the refused ranges, then (IPv6) global
    /// unicast unless it wraps an IPv4 address.
    fn judge(&self, addr: IpAddr) -> Result<(), Refused> {
        if self.allowed(addr) {
            return Ok(());
        }
        let net = |range: &str| range.parse::<IpNet>().expect("built-in ranges parse");
        for (range, kind) in REFUSED {
            if net(range).contains(&addr)
                && !(*kind == "IETF protocol assignments" && net(TEREDO).contains(&addr))
            {
                return Err(Refused::Range { addr, kind });
            }
        }
        if let IpAddr::V6(v6) = addr
            && !net(GLOBAL_UNICAST).contains(&addr)
            && embedded_ipv4(v6).is_none()
        {
            return Err(Refused::Range {
                addr,
                kind: "outside IPv6 global unicast (2000::/3)",
            });
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

    #[test]
    fn ipv6_ranges_not_meant_for_the_public_internet_are_refused() {
        let p = Policy::default();
        for (addr, kind) in [
            ("fec0::1", "site-local"),
            ("feff::1", "site-local"),
            ("100::1", "discard-only"),
            ("100:0:0:1::1", "dummy prefix"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "ORCHID"),
            ("2001:20::1", "ORCHIDv2"),
            ("2001:1::1", "IETF protocol assignments"),
            ("5f00::1", "segment routing (SRv6) SIDs"),
            ("64:ff9b:1::808:808", "local-use IPv4/IPv6 translation"),
            ("4000::1", "outside IPv6 global unicast (2000::/3)"),
            ("::1:2:3:4:5", "outside IPv6 global unicast (2000::/3)"),
            ("192.0.2.1", "documentation"),
            ("198.18.0.1", "benchmarking"),
        ] {
            match p.check(ip(addr)) {
                Err(Refused::Range { kind: k, .. }) => assert_eq!(k, kind, "{addr}"),
                other => panic!("{addr}: {other:?}"),
            }
        }
    }

    #[test]
    fn ipv6_that_wraps_a_refused_ipv4_is_refused_by_the_ipv4_inside() {
        let p = Policy::default();
        for (addr, form, inner, kind) in [
            ("::127.0.0.1", "IPv4-compatible", "127.0.0.1", "loopback"),
            ("::10.1.2.3", "IPv4-compatible", "10.1.2.3", "private"),
            (
                "::ffff:0:7f00:1",
                "IPv4-translated",
                "127.0.0.1",
                "loopback",
            ),
            (
                "::ffff:0:a9fe:a9fe",
                "IPv4-translated",
                "169.254.169.254",
                "link-local (cloud metadata lives here)",
            ),
            ("64:ff9b::7f00:1", "NAT64", "127.0.0.1", "loopback"),
            ("64:ff9b::192.168.0.1", "NAT64", "192.168.0.1", "private"),
            ("2002:7f00:1::1", "6to4", "127.0.0.1", "loopback"),
            (
                "2002:a9fe:a9fe:1::2",
                "6to4",
                "169.254.169.254",
                "link-local (cloud metadata lives here)",
            ),
            // Teredo: server 10.0.0.1, client 1.1.1.1 (inverted: fefe:fefe).
            ("2001:0:a00:1::fefe:fefe", "Teredo", "10.0.0.1", "private"),
            // Teredo: server 8.8.8.8, client 127.0.0.1 (inverted: 80ff:fffe).
            (
                "2001:0:808:808::80ff:fffe",
                "Teredo",
                "127.0.0.1",
                "loopback",
            ),
        ] {
            match p.check(ip(addr)) {
                Err(Refused::Wrapped {
                    form: f,
                    inner: i,
                    kind: k,
                    ..
                }) => {
                    assert_eq!(
                        (f, i.to_string().as_str(), k),
                        (form, inner, kind),
                        "{addr}"
                    );
                }
                other => panic!("{addr}: {other:?}"),
            }
        }
        let shown = p.check(ip("::127.0.0.1")).unwrap_err().to_string();
        assert!(
            shown.contains("::7f00:1 is IPv4-compatible for 127.0.0.1, which is loopback")
                && shown.contains(ALLOW_ENV),
            "{shown}"
        );
    }

    #[test]
    fn ipv6_that_wraps_a_public_ipv4_passes_as_the_ipv4_would() {
        let p = Policy::default();
        for addr in [
            "::8.8.8.8",
            "::ffff:0:808:808",
            "64:ff9b::808:808",
            "2002:808:808::1",
            // Teredo: server 8.8.8.8, client 1.1.1.1.
            "2001:0:808:808::fefe:fefe",
        ] {
            assert_eq!(p.check(ip(addr)), Ok(()), "{addr}");
        }
    }

    #[test]
    fn an_allowed_range_covers_the_ipv4_inside_or_the_ipv6_as_written() {
        let p = Policy::parse("127.0.0.1", false).unwrap();
        for addr in [
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
        ] {
            assert_eq!(p.check(ip(addr)), Ok(()), "{addr}");
        }
        assert!(
            p.check(ip("2002:7f00:2::1")).is_err(),
            "127.0.0.2 is not allowed"
        );
        let p = Policy::parse("2002::/16", false).unwrap();
        assert_eq!(p.check(ip("2002:7f00:1::1")), Ok(()));
        let p = Policy::parse("fec0::/10", false).unwrap();
        assert_eq!(p.check(ip("fec0::1")), Ok(()));
    }
}
