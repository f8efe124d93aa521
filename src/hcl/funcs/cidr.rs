//! IP network functions: `cidrhost`, `cidrnetmask`, `cidrsubnet`, `cidrsubnets`, for IPv4 and
//! IPv6 prefixes, as go-cty-funcs has them (with go-cidr's arithmetic and its messages).
//! An address is a `u128` of the family's width; nothing here touches the network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;

use super::{fixed, int, string, variadic};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("cidrhost", fixed(2, cidrhost)),
        ("cidrnetmask", fixed(1, cidrnetmask)),
        ("cidrsubnet", fixed(3, cidrsubnet)),
        ("cidrsubnets", variadic(1, cidrsubnets)),
    ]
}

/// A network prefix: its first address (host bits cleared), its length and the family's width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    addr: u128,
    len: u32,
    bits: u32,
}

impl Net {
    /// Reads `a.b.c.d/n` or `x:y::/n` as Go's `net.ParseCIDR` does (host bits may be set).
    fn parse(text: &str) -> Result<Net, String> {
        let bad = || format!("invalid CIDR expression: invalid CIDR address: {text}");
        let (ip, len) = text.split_once('/').ok_or_else(bad)?;
        if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let len: u32 = len.parse().map_err(|_| bad())?;
        let (addr, bits) = match ip.parse::<IpAddr>().map_err(|_| bad())? {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        };
        if len > bits {
            return Err(bad());
        }
        Ok(Net {
            addr: addr & mask(len, bits),
            len,
            bits,
        })
    }

    /// The last address of the network.
    fn last(&self) -> u128 {
        self.addr | (full(self.bits) & !mask(self.len, self.bits))
    }

    fn contains(&self, addr: u128) -> bool {
        addr & mask(self.len, self.bits) == self.addr
    }

    /// The network of length `len` that `addr` is in.
    fn of(addr: u128, len: u32, bits: u32) -> Net {
        Net {
            addr: addr & mask(len, bits),
            len,
            bits,
        }
    }
}

impl std::fmt::Display for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", address(self.addr, self.bits), self.len)
    }
}

/// Every bit of a `bits`-wide address.
fn full(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// The mask of a prefix of `len` bits in a `bits`-wide address.
fn mask(len: u32, bits: u32) -> u128 {
    if len == 0 {
        0
    } else {
        full(bits) & !(full(bits - len.min(bits)))
    }
}

fn address(addr: u128, bits: u32) -> String {
    if bits == 32 {
        Ipv4Addr::from(addr as u32).to_string()
    } else {
        Ipv6Addr::from(addr).to_string()
    }
}

/// The address of host number `hostnum` in a prefix; a negative number counts back from its
/// last address (-1 is the last).
fn cidrhost(args: FuncArgs) -> Result<Value, String> {
    let hostnum = int(&args, 1)?;
    let net = Net::parse(&string(&args, 0)?)?;
    let max = full(net.bits - net.len);
    let offset = if hostnum < 0 {
        let back = u128::from(hostnum.unsigned_abs() - 1);
        max.checked_sub(back)
    } else {
        Some(u128::from(hostnum.unsigned_abs())).filter(|n| *n <= max)
    };
    let offset = offset.ok_or_else(|| {
        format!(
            "prefix of {} does not accommodate a host numbered {hostnum}",
            net.len
        )
    })?;
    Ok(Value::String(address(net.addr | offset, net.bits)))
}

/// The netmask of a prefix, as an address.
fn cidrnetmask(args: FuncArgs) -> Result<Value, String> {
    let net = Net::parse(&string(&args, 0)?)?;
    Ok(Value::String(address(mask(net.len, net.bits), net.bits)))
}

/// Subnet number `netnum` of those `newbits` longer than a prefix.
fn cidrsubnet(args: FuncArgs) -> Result<Value, String> {
    let newbits = int(&args, 1)?;
    let netnum = int(&args, 2)?;
    let net = Net::parse(&string(&args, 0)?)?;
    if newbits > 32 {
        return Err("may not extend prefix by more than 32 bits".into());
    }
    if newbits < 0 {
        return Err(format!("cannot extend a prefix by {newbits} bits"));
    }
    let newbits = newbits as u32;
    let len = net.len + newbits;
    if len > net.bits {
        return Err(format!(
            "insufficient address space to extend prefix of {} by {newbits}",
            net.len
        ));
    }
    if netnum < 0 || (netnum as u128) > full(newbits) {
        return Err(format!(
            "prefix extension of {newbits} does not accommodate a subnet numbered {netnum}"
        ));
    }
    // `checked_shl`: a shift by the whole width (`cidrsubnet("::/0", 0, 0)`) is no bits.
    let addr = net.addr | (netnum as u128).checked_shl(net.bits - len).unwrap_or(0);
    Ok(Value::String(Net::of(addr, len, net.bits).to_string()))
}

/// Consecutive subnets of a prefix, one per argument, each that many bits longer than it.
fn cidrsubnets(args: FuncArgs) -> Result<Value, String> {
    let net = Net::parse(&string(&args, 0)?)?;
    let lens = (1..args.len())
        .map(|i| int(&args, i).map(|n| (i, n)))
        .collect::<Result<Vec<_>, _>>()?;
    // The subnet before the next one; none before the first, which starts where the prefix does.
    let mut current: Option<Net> = None;
    let mut out = Vec::with_capacity(lens.len());
    for (i, newbits) in lens {
        if newbits < 1 {
            return Err(format!(
                "argument {}: must extend prefix by at least one bit",
                i + 1
            ));
        }
        if newbits > 32 {
            return Err(format!(
                "argument {}: may not extend prefix by more than 32 bits",
                i + 1
            ));
        }
        let len = net.len + newbits as u32;
        if len > net.bits {
            let family = if net.bits == 32 { "IPv4" } else { "IPv6" };
            return Err(format!(
                "argument {}: would extend prefix to {len} bits, which is too long for an {family} address",
                i + 1
            ));
        }
        // go-cidr's NextSubnet: the subnet of `len` after the one of `len` holding the end of
        // the current one.
        let start = match current {
            None => net.addr,
            Some(c) => Net::of(c.last(), len, net.bits).last().wrapping_add(1) & full(net.bits),
        };
        let next = Net::of(start, len, net.bits);
        if let Some(c) = current.filter(|_| start == 0 || !net.contains(next.addr)) {
            return Err(format!(
                "argument {}: not enough remaining address space for a subnet with a prefix of {len} bits after {c}",
                i + 1
            ));
        }
        current = Some(next);
        out.push(Value::String(next.to_string()));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, same};

    #[test]
    fn hosts() {
        same("cidrhost(\"10.12.112.0/20\", 16)", "\"10.12.112.16\"");
        same("cidrhost(\"10.12.112.0/20\", 268)", "\"10.12.113.12\"");
        same("cidrhost(\"10.12.112.0/20\", -1)", "\"10.12.127.255\"");
        same("cidrhost(\"10.1.2.3/24\", 0)", "\"10.1.2.0\"");
        same(
            "cidrhost(\"fd00:fd12:3456:7890:00a2::/72\", 34)",
            "\"fd00:fd12:3456:7890::22\"",
        );
        same("cidrhost(\"192.168.1.0/32\", 0)", "\"192.168.1.0\"");
        fails(
            "cidrhost(\"192.168.1.0/24\", 256)",
            "prefix of 24 does not accommodate a host numbered 256",
        );
        fails(
            "cidrhost(\"192.168.1.0/24\", -257)",
            "prefix of 24 does not accommodate a host numbered -257",
        );
        fails(
            "cidrhost(\"1.2.3.4\", 1)",
            "invalid CIDR expression: invalid CIDR address: 1.2.3.4",
        );
        fails("cidrhost(\"1.2.3.4/33\", 1)", "invalid CIDR address");
        fails("cidrhost(\"1.2.3.4/24\", 1.5)", "must be a whole number");
    }

    #[test]
    fn netmasks() {
        same("cidrnetmask(\"172.16.0.0/12\")", "\"255.240.0.0\"");
        same("cidrnetmask(\"10.0.0.0/0\")", "\"0.0.0.0\"");
        same("cidrnetmask(\"1.2.3.4/32\")", "\"255.255.255.255\"");
        same("cidrnetmask(\"2001:db8::/33\")", "\"ffff:ffff:8000::\"");
        fails("cidrnetmask(\"not-a-cidr\")", "invalid CIDR expression");
    }

    #[test]
    fn subnets() {
        same("cidrsubnet(\"172.16.0.0/12\", 4, 2)", "\"172.18.0.0/16\"");
        same("cidrsubnet(\"10.1.2.0/24\", 4, 15)", "\"10.1.2.240/28\"");
        same(
            "cidrsubnet(\"fd00:fd12:3456:7890::/56\", 16, 162)",
            "\"fd00:fd12:3456:7800:a200::/72\"",
        );
        same("cidrsubnet(\"10.0.0.0/8\", 0, 0)", "\"10.0.0.0/8\"");
        // No new bits of a whole-width prefix: a shift by the whole width, no panic.
        same("cidrsubnet(\"::/0\", 0, 0)", "\"::/0\"");
        same("cidrsubnet(\"0.0.0.0/0\", 0, 0)", "\"0.0.0.0/0\"");
        fails(
            "cidrsubnet(\"10.0.0.0/8\", 4, 16)",
            "prefix extension of 4 does not accommodate a subnet numbered 16",
        );
        fails(
            "cidrsubnet(\"10.0.0.0/30\", 4, 0)",
            "insufficient address space to extend prefix of 30 by 4",
        );
        fails(
            "cidrsubnet(\"::/0\", 33, 0)",
            "may not extend prefix by more than 32 bits",
        );
    }

    #[test]
    fn consecutive_subnets() {
        same(
            "cidrsubnets(\"10.1.0.0/16\", 4, 4, 8, 4)",
            "[\"10.1.0.0/20\", \"10.1.16.0/20\", \"10.1.32.0/24\", \"10.1.48.0/20\"]",
        );
        same(
            "cidrsubnets(\"fd00:fd12:3456:7890::/56\", 16, 16, 16, 32)",
            "[\"fd00:fd12:3456:7800::/72\", \"fd00:fd12:3456:7800:100::/72\", \"fd00:fd12:3456:7800:200::/72\", \"fd00:fd12:3456:7800:300::/88\"]",
        );
        same(
            "cidrsubnets(\"0.0.0.0/0\", 1, 1)",
            "[\"0.0.0.0/1\", \"128.0.0.0/1\"]",
        );
        same("cidrsubnets(\"10.0.0.0/8\")", "[]");
        fails(
            "cidrsubnets(\"10.0.0.0/30\", 1, 1, 1)",
            "argument 4: not enough remaining address space for a subnet with a prefix of 31 bits after 10.0.0.2/31",
        );
        fails(
            "cidrsubnets(\"10.0.0.0/30\", 3)",
            "argument 2: would extend prefix to 33 bits, which is too long for an IPv4 address",
        );
        fails(
            "cidrsubnets(\"10.0.0.0/8\", 0)",
            "argument 2: must extend prefix by at least one bit",
        );
    }
}
