//! The node's address on its default network: the IPv4 address of the interface that the
//! default route leaves by (`/proc/net/route`, then `getifaddrs(3)`), which is how Nomad
//! fingerprints a node's network when it is not told an interface.

use std::net::Ipv4Addr;

/// The interface of the default IPv4 route with the lowest metric, from `/proc/net/route`'s text.
fn default_route_interface(routes: &str) -> Option<String> {
    routes
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ...; flag 1 is RTF_UP.
            let up = u32::from_str_radix(f.get(3)?, 16).ok()? & 1 == 1;
            let default = *f.get(1)? == "00000000" && *f.get(7)? == "00000000";
            let metric: u64 = f.get(6)?.parse().ok()?;
            (up && default).then(|| (metric, f[0].to_string()))
        })
        .min()
        .map(|(_, iface)| iface)
}

/// The first IPv4 address of interface `name`.
fn interface_ipv4(name: &str) -> Option<Ipv4Addr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list that freeifaddrs releases below; each node's
    // name and address point into it and are read before it is freed.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut found = None;
        let mut node = list;
        while !node.is_null() {
            let ifa = &*node;
            node = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            if i32::from((*ifa.ifa_addr).sa_family) != libc::AF_INET {
                continue;
            }
            if std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes() != name.as_bytes() {
                continue;
            }
            let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
            found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            break;
        }
        libc::freeifaddrs(list);
        found
    }
}

/// The IPv4 address of the default route's interface; `None` without a default route.
pub fn default_route_ipv4() -> Option<Ipv4Addr> {
    let routes = std::fs::read_to_string("/proc/net/route").ok()?;
    interface_ipv4(&default_route_interface(&routes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_route_with_the_lowest_metric_wins() {
        let routes =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n\
            eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
            eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_route_interface(routes).as_deref(), Some("eth0"));
        let none = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
            eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\n";
        assert_eq!(default_route_interface(none), None);
    }

    #[test]
    fn loopback_has_its_address() {
        assert_eq!(interface_ipv4("lo"), Some(Ipv4Addr::LOCALHOST));
        assert_eq!(interface_ipv4("no-such-interface"), None);
    }
}
