//! Address blocks the operator trusts for priority markings ([`Exemptions::priority_peers`]).

use std::net::IpAddr;

/// An IPv4 or IPv6 address block (`192.0.2.0/24`, `2001:db8::/32`, or one address). An
/// IPv4-mapped IPv6 address (`::ffff:192.0.2.7`, as a dual-stack socket reports IPv4 peers)
/// is the IPv4 address it maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses `ADDRESS[/PREFIX]`; `None` for anything else (a prefix longer than the address,
    /// bits set past the prefix, a host name).
    pub fn parse(s: &str) -> Option<Network> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                (a, Some(p.parse::<u8>().ok()?))
            }
            Some(_) => return None,
            None => (s, None),
        };
        let written = addr.parse::<IpAddr>().ok()?;
        let width = width(written);
        let prefix = prefix.unwrap_or(width);
        if prefix > width {
            return None;
        }
        let addr = canonical(written);
        // A block of IPv4-mapped addresses is the IPv4 block it maps.
        let prefix = match (written, addr) {
            (IpAddr::V6(_), IpAddr::V4(_)) => prefix.checked_sub(96)?,
            _ => prefix,
        };
        let n = Network { addr, prefix };
        (bits_of(addr) & !n.host_mask() == bits_of(addr)).then_some(n)
    }

    /// The blocks of a list separated by commas and/or white space (`192.0.2.0/24,
    /// 2001:db8::/32 198.51.100.7`); an empty list is none. The error names the first entry that
    /// is not a block.
    pub fn parse_list(list: &str) -> Result<Vec<Network>, String> {
        list.split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|b| !b.is_empty())
            .map(|b| {
                Network::parse(b)
                    .ok_or_else(|| format!("{b:?} is not an address block (ADDRESS[/PREFIX])"))
            })
            .collect()
    }

    /// Whether `addr` is in the block.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        addr.is_ipv4() == self.addr.is_ipv4()
            && bits_of(addr) & !self.host_mask() == bits_of(self.addr)
    }

    /// The bits past the prefix.
    fn host_mask(&self) -> u128 {
        let host = u32::from(width(self.addr) - self.prefix);
        if host == 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The address as compared: an IPv4-mapped IPv6 address is its IPv4 address.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn width(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn bits_of(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test input")
    }

    #[test]
    fn blocks_contain_their_addresses_only() {
        let n = Network::parse("192.0.2.0/24").expect("test input");
        assert!(n.contains(ip("192.0.2.0")) && n.contains(ip("192.0.2.255")));
        assert!(!n.contains(ip("192.0.3.0")) && !n.contains(ip("2001:db8::1")));
        assert!(n.contains(ip("::ffff:192.0.2.7")), "IPv4-mapped");
        let one = Network::parse("198.51.100.7").expect("test input");
        assert!(one.contains(ip("198.51.100.7")) && !one.contains(ip("198.51.100.6")));
        let v6 = Network::parse("2001:db8::/32").expect("test input");
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        let all = Network::parse("0.0.0.0/0").expect("test input");
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("2001:db8::1")));
        assert!(
            Network::parse("::/0")
                .expect("test input")
                .contains(ip("2001:db8::1"))
        );
        assert!(
            Network::parse("10.1.2.3/31").is_none(),
            "a bit set past the prefix"
        );
        assert!(Network::parse("10.0.0.0/33").is_none());
        assert!(Network::parse("10.0.0.0/").is_none());
        assert!(Network::parse("example.net").is_none());
        assert!(Network::parse("10.0.0.0/+8").is_none());
        assert_eq!(
            Network::parse("::ffff:10.0.0.0/104").map(|n| n.to_string()),
            Some("10.0.0.0/8".into())
        );
        assert!(Network::parse("::ffff:10.0.0.0/8").is_none());
        assert_eq!(
            Network::parse_list(" 192.0.2.0/24,2001:db8::/32\t198.51.100.7 ,").map(|l| l.len()),
            Ok(3)
        );
        assert_eq!(Network::parse_list(""), Ok(vec![]));
        assert!(
            Network::parse_list("192.0.2.0/24, peer.example")
                .is_err_and(|e| e.contains("peer.example"))
        );
    }
}
