//! Who may call the API: the checks the server makes on a request's head, before it reads a body
//! or runs a handler.
//!
//! - A protocol upgrade (`Connection: upgrade`) is refused: the API has no such endpoint, and
//!   the rest of the socket would otherwise be the request's body.
//! - With a token configured, writes (and reads with `acl_reads`) need it; the comparison takes
//!   the same time whatever the bytes.
//!
//! Pure functions of the head and the policy; the server calls them in this order: upgrade,
//! route, shutdown, token.

use std::fmt;

use super::router::{ApiError, Method};

/// What the server lets in.
#[derive(Clone, Default)]
pub struct Admission {
    token: Option<Vec<u8>>,
    acl_reads: bool,
}

impl fmt::Debug for Admission {
    // By hand so that the token never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("acl_reads", &self.acl_reads)
            .finish()
    }
}

impl Admission {
    pub fn new(token: Option<String>, acl_reads: bool) -> Admission {
        Admission {
            token: token.map(String::into_bytes),
            acl_reads,
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

    #[test]
    fn upgrades_are_refused() {
        let p = Admission::new(None, false);
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
        let open = Admission::new(None, false);
        assert!(open.check_token(&Method::Put, None).is_ok());
        let p = Admission::new(Some("s3cret".into()), false);
        assert_eq!(p.check_token(&Method::Put, None), Err(ApiError::Forbidden));
        assert_eq!(
            p.check_token(&Method::Put, Some("s3creT")),
            Err(ApiError::Forbidden)
        );
        assert!(p.check_token(&Method::Put, Some("s3cret")).is_ok());
        assert!(p.check_token(&Method::Get, None).is_ok());
        let reads = Admission::new(Some("s3cret".into()), true);
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
