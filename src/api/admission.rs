//! Who may call the API: the checks the server makes on a request's head, before it reads a body
//! or runs a handler (docs/security.md "Who can reach the API").
//!
//! - `Host` names this agent: an IP address, `localhost`, or a name configured for it. A web page
//!   whose own name an attacker points at 127.0.0.1 (DNS rebinding) sends its own name and is
//!   refused, reads included.
//! - A write (anything but GET) from a web page of another site is refused, token or not: an
//!   `Origin` other than the agent itself, `Sec-Fetch-Site: cross-site` or `same-site`, or a
//!   `Content-Type` other than `application/json` (the types a page can send without asking the
//!   server first are form and text types). A request without `Content-Type` is accepted: Nomad's
//!   own API client sends none, and a page that leaves it out still sends `Origin`.
//! - A protocol upgrade (`Connection: upgrade`) is refused: the API has no such endpoint, and
//!   the rest of the socket would otherwise be the request's body.
//! - With a token configured, writes (and reads with `acl_reads`) need it; the comparison takes
//!   the same time whatever the bytes.
//!
//! Pure functions of the head and the policy; the server calls them in this order: upgrade, host,
//! route, origin, content type, shutdown, token.

use std::fmt;
use std::net::IpAddr;

use super::router::{ApiError, Method};

/// The one content type a write may declare.
pub const JSON: &str = "application/json";

/// What the server lets in.
#[derive(Clone, Default)]
pub struct Admission {
    token: Option<Vec<u8>>,
    acl_reads: bool,
    /// Host names (lowercase, without a trailing dot) the API answers to besides IP addresses
    /// and `localhost`.
    hosts: Vec<String>,
}

impl fmt::Debug for Admission {
    // By hand so that the token never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("acl_reads", &self.acl_reads)
            .field("hosts", &self.hosts)
            .finish()
    }
}

impl Admission {
    /// `hosts`: the names the agent answers to besides IP addresses and `localhost`.
    pub fn new(token: Option<String>, acl_reads: bool, hosts: &[String]) -> Admission {
        let mut names: Vec<String> = hosts.iter().map(|h| normalise(h)).collect();
        names.sort();
        names.dedup();
        Admission {
            token: token.map(String::into_bytes),
            acl_reads,
            hosts: names,
        }
    }

    /// Refuses a protocol upgrade (400).
    pub fn check_upgrade(&self, headers: &[tiny_http::Header]) -> Result<(), ApiError> {
        let upgrade = headers.iter().any(|h| {
            h.field.equiv("Upgrade")
                || (h.field.equiv("Connection")
                    && h.value.as_str().to_ascii_lowercase().contains("upgrade"))
        });
        if upgrade {
            return Err(ApiError::BadRequest(
                "protocol upgrades are not supported".into(),
            ));
        }
        Ok(())
    }

    /// `Host` must name this agent (403).
    pub fn check_host(&self, headers: &[tiny_http::Header]) -> Result<(), ApiError> {
        // Every browser sends Host; a client without one is no web page.
        let Some(host) = header(headers, "Host") else {
            return Ok(());
        };
        if self.is_own(host_part(host)) {
            return Ok(());
        }
        Err(ApiError::Denied(format!(
            "Host {host:?} is not an address or a name of this agent (add it to http_allowed_hosts)"
        )))
    }

    /// A write from a web page of another site is refused (403): `Origin` other than the agent
    /// (the `Host` the request names), `Sec-Fetch-Site` other than `same-origin` or `none`.
    pub fn check_origin(
        &self,
        method: &Method,
        headers: &[tiny_http::Header],
    ) -> Result<(), ApiError> {
        if !method.is_write() {
            return Ok(());
        }
        if let Some(site) = header(headers, "Sec-Fetch-Site") {
            let site = site.trim().to_ascii_lowercase();
            if site != "same-origin" && site != "none" {
                return Err(ApiError::Denied(format!(
                    "writes from a web page of another site are refused (Sec-Fetch-Site: {site})"
                )));
            }
        }
        if let Some(origin) = header(headers, "Origin") {
            let same =
                header(headers, "Host").is_some_and(|host| same_origin(origin.trim(), host.trim()));
            if !same {
                return Err(ApiError::Denied(format!(
                    "writes from a web page of another site are refused (Origin {origin:?})"
                )));
            }
        }
        Ok(())
    }

    /// A write that declares a body type must declare JSON (403).
    pub fn check_content_type(
        &self,
        method: &Method,
        headers: &[tiny_http::Header],
    ) -> Result<(), ApiError> {
        if !method.is_write() {
            return Ok(());
        }
        match header(headers, "Content-Type") {
            None => Ok(()),
            Some(ct) if media_type(ct) == JSON => Ok(()),
            Some(ct) => Err(ApiError::Denied(format!(
                "a write must be sent as Content-Type: {JSON}, not {:?}",
                ct.trim()
            ))),
        }
    }

    /// With a token configured: the request's token must match it for a write, and for a read
    /// when reads are guarded too (403 `Permission denied`).
    pub fn check_token(&self, method: &Method, given: Option<&str>) -> Result<(), ApiError> {
        match &self.token {
            Some(expected)
                if (method.is_write() || self.acl_reads) && !token_matches(expected, given) =>
            {
                Err(ApiError::Forbidden)
            }
            _ => Ok(()),
        }
    }

    /// An IP address, `localhost` (a browser resolves it to loopback itself), or a configured name.
    fn is_own(&self, host: &str) -> bool {
        let host = normalise(host);
        if host.is_empty() {
            return false;
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().is_ok() {
            // A browser that names an IP address connects to that address: it cannot be a name
            // that was pointed at this host.
            return true;
        }
        host == "localhost" || host.ends_with(".localhost") || self.hosts.contains(&host)
    }
}

/// The first header of that name, if any.
fn header<'a>(headers: &'a [tiny_http::Header], name: &'static str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// Lowercase, without surrounding spaces and one trailing dot (`localhost.` is `localhost`).
fn normalise(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    host.strip_suffix('.').map(str::to_string).unwrap_or(host)
}

/// The host of `host[:port]` or `[v6]:port`.
fn host_part(authority: &str) -> &str {
    let authority = authority.trim();
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        // One colon: host and port. More: a bare IPv6 address (not valid in Host, but harmless).
        Some((h, _)) if !h.contains(':') => h,
        _ => authority,
    }
}

/// `(host, port)` of an authority, the port defaulting to `default_port`.
fn host_and_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let host = host_part(authority);
    let rest = &authority[host.len()..];
    let port = match rest.strip_prefix(':') {
        Some(p) => p.parse().ok()?,
        None if rest.is_empty() => default_port,
        None => return None,
    };
    Some((normalise(host), port))
}

/// Whether `origin` (`scheme://host[:port]`) is the origin `host` (a `Host` value) names on this
/// plain-HTTP server.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        // `null` (a sandboxed page, a file) and anything else that is not an origin.
        return false;
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return false;
    }
    match (host_and_port(authority, 80), host_and_port(host, 80)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `application/json; charset=utf-8` is `application/json`.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// `X-Nomad-Token`, or `Authorization: Bearer <token>`.
pub fn request_token(headers: &[tiny_http::Header]) -> Option<String> {
    let mut bearer = None;
    for h in headers {
        if h.field.equiv("X-Nomad-Token") {
            return Some(h.value.as_str().trim().to_string());
        }
        if h.field.equiv("Authorization") {
            let value = h.value.as_str().trim();
            if let Some((scheme, token)) = value.split_once(' ') {
                if scheme.eq_ignore_ascii_case("bearer") {
                    bearer = Some(token.trim().to_string());
                }
            }
        }
    }
    bearer
}

/// Compares in time that depends only on the lengths, so the token cannot be guessed byte by byte.
fn token_matches(expected: &[u8], given: Option<&str>) -> bool {
    let Some(given) = given else {
        return false;
    };
    let given = given.as_bytes();
    if given.len() != expected.len() {
        return false;
    }
    let diff = expected
        .iter()
        .zip(given)
        .fold(0u8, |acc, (a, b)| std::hint::black_box(acc | (a ^ b)));
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(list: &[(&str, &str)]) -> Vec<tiny_http::Header> {
        list.iter()
            .map(|(k, v)| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap())
            .collect()
    }

    fn policy() -> Admission {
        Admission::new(None, false, &["Node-1.Example.com.".to_string()])
    }

    #[test]
    fn host_must_be_an_address_localhost_or_a_configured_name() {
        let p = policy();
        for ok in [
            "127.0.0.1:4656",
            "127.0.0.1",
            "10.1.2.3:80",
            "[::1]:4656",
            "[fe80::1]",
            "localhost:4656",
            "LOCALHOST.",
            "app.localhost",
            "node-1.example.com:4656",
            "NODE-1.example.com",
        ] {
            assert!(p.check_host(&headers(&[("Host", ok)])).is_ok(), "{ok}");
        }
        assert!(p.check_host(&[]).is_ok(), "no Host: not a browser");
        for bad in [
            "evil.example:4656",
            "evil.example",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "",
        ] {
            let e = p.check_host(&headers(&[("Host", bad)])).unwrap_err();
            assert_eq!(e.status(), 403, "{bad}");
        }
        let e = p
            .check_host(&headers(&[("Host", "evil.example:4656")]))
            .unwrap_err();
        assert_eq!(
            e.body(),
            "Permission denied: Host \"evil.example:4656\" is not an address or a name of this agent (add it to http_allowed_hosts)"
        );
    }

    #[test]
    fn writes_from_another_site_are_refused_reads_are_not() {
        let p = policy();
        let host = ("Host", "127.0.0.1:4656");
        let post = Method::Post;
        let refused = |h: &[(&str, &str)]| p.check_origin(&post, &headers(h)).unwrap_err();
        let e = refused(&[host, ("Origin", "http://evil.example")]);
        assert_eq!(
            e.body(),
            "Permission denied: writes from a web page of another site are refused (Origin \"http://evil.example\")"
        );
        assert_eq!(refused(&[host, ("Origin", "null")]).status(), 403);
        assert_eq!(
            refused(&[host, ("Origin", "http://127.0.0.1:8080")]).status(),
            403,
            "another port is another origin"
        );
        assert_eq!(
            refused(&[host, ("Origin", "https://127.0.0.1:4656")]).status(),
            403
        );
        let e = refused(&[host, ("Sec-Fetch-Site", "cross-site")]);
        assert_eq!(
            e.body(),
            "Permission denied: writes from a web page of another site are refused (Sec-Fetch-Site: cross-site)"
        );
        assert_eq!(
            refused(&[host, ("Sec-Fetch-Site", "same-site")]).status(),
            403
        );
        assert_eq!(
            refused(&[("Origin", "http://127.0.0.1:4656")]).status(),
            403
        );

        for ok in [
            vec![host],
            vec![host, ("Origin", "http://127.0.0.1:4656")],
            vec![("Host", "localhost"), ("Origin", "http://LOCALHOST:80")],
            vec![host, ("Sec-Fetch-Site", "same-origin")],
            vec![host, ("Sec-Fetch-Site", "none")],
        ] {
            assert!(p.check_origin(&post, &headers(&ok)).is_ok(), "{ok:?}");
        }
        let foreign = headers(&[host, ("Origin", "http://evil.example")]);
        assert!(p.check_origin(&Method::Get, &foreign).is_ok());
        assert!(p.check_origin(&Method::Delete, &foreign).is_err());
    }

    #[test]
    fn a_write_declares_json_or_nothing() {
        let p = policy();
        let ct = |v: &str| headers(&[("Content-Type", v)]);
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            " Application/JSON ",
        ] {
            assert!(p.check_content_type(&Method::Put, &ct(ok)).is_ok(), "{ok}");
        }
        assert!(p.check_content_type(&Method::Put, &[]).is_ok());
        for bad in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
        ] {
            let e = p.check_content_type(&Method::Post, &ct(bad)).unwrap_err();
            assert_eq!(e.status(), 403, "{bad}");
        }
        let e = p
            .check_content_type(&Method::Post, &ct("text/plain"))
            .unwrap_err();
        assert_eq!(
            e.body(),
            "Permission denied: a write must be sent as Content-Type: application/json, not \"text/plain\""
        );
        assert!(p
            .check_content_type(&Method::Get, &ct("text/plain"))
            .is_ok());
    }

    #[test]
    fn upgrades_are_refused() {
        let p = policy();
        for h in [
            vec![("Connection", "Upgrade"), ("Upgrade", "websocket")],
            vec![("Connection", "keep-alive, upgrade")],
            vec![("Upgrade", "h2c")],
        ] {
            let e = p.check_upgrade(&headers(&h)).unwrap_err();
            assert_eq!(
                (e.status(), e.body().as_str()),
                (400, "protocol upgrades are not supported")
            );
        }
        assert!(p
            .check_upgrade(&headers(&[("Connection", "keep-alive")]))
            .is_ok());
    }

    #[test]
    fn the_token_guards_writes_and_optionally_reads() {
        let open = Admission::new(None, false, &[]);
        assert!(open.check_token(&Method::Put, None).is_ok());
        let p = Admission::new(Some("s3cret".into()), false, &[]);
        assert_eq!(p.check_token(&Method::Put, None), Err(ApiError::Forbidden));
        assert_eq!(
            p.check_token(&Method::Put, Some("s3creT")),
            Err(ApiError::Forbidden)
        );
        assert!(p.check_token(&Method::Put, Some("s3cret")).is_ok());
        assert!(p.check_token(&Method::Get, None).is_ok());
        let reads = Admission::new(Some("s3cret".into()), true, &[]);
        assert_eq!(
            reads.check_token(&Method::Get, None),
            Err(ApiError::Forbidden)
        );
        assert!(!format!("{reads:?}").contains("s3cret"));
    }

    #[test]
    fn tokens_come_from_either_header() {
        let t = request_token(&headers(&[("Authorization", "Bearer abc ")]));
        assert_eq!(t.as_deref(), Some("abc"));
        let t = request_token(&headers(&[
            ("Authorization", "Bearer abc"),
            ("X-Nomad-Token", "xyz"),
        ]));
        assert_eq!(t.as_deref(), Some("xyz"));
        assert_eq!(
            request_token(&headers(&[("Authorization", "Basic x")])),
            None
        );
    }
}
