//! Hash and UUID functions: `md5`, `sha1`, `sha256`, `sha512` (the lowercase hex digest of the
//! string's UTF-8 bytes), `bcrypt`, `uuidv4`, `uuidv5`.

use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;
use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use uuid::Uuid;

use super::{fixed, int, string, variadic};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("md5", fixed(1, md5)),
        ("sha1", fixed(1, sha1)),
        ("sha256", fixed(1, sha256)),
        ("sha512", fixed(1, sha512)),
        ("bcrypt", variadic(1, bcrypt)),
        ("uuidv4", fixed(0, uuidv4)),
        ("uuidv5", fixed(2, uuidv5)),
    ]
}

/// `bcrypt(str, cost)`: the string's bcrypt hash with a random salt, in the `$2a$` form Go's
/// bcrypt writes. The cost is 10 unless given; one under 4 is 10 too, as in Go.
fn bcrypt(args: FuncArgs) -> Result<Value, String> {
    if args.len() > 2 {
        return Err("bcrypt() takes no more than two arguments".into());
    }
    let input = string(&args, 0)?;
    let cost = if args.len() > 1 { int(&args, 1)? } else { 10 };
    let cost = if cost < 4 { 10 } else { cost };
    if cost > 31 {
        return Err(format!(
            "error occurred generating password crypto/bcrypt: cost {cost} is outside allowed range (4,31)"
        ));
    }
    let parts =
        ::bcrypt::non_truncating_hash_with_result(input.as_bytes(), cost as u32).map_err(|e| {
            match e {
                ::bcrypt::BcryptError::Truncation(_) => {
                    "error occurred generating password bcrypt: password length exceeds 72 bytes"
                        .to_string()
                }
                other => format!("error occurred generating password {other}"),
            }
        })?;
    Ok(Value::String(
        parts.format_for_version(::bcrypt::Version::TwoA),
    ))
}

fn hex_digest<D: Digest>(args: &FuncArgs) -> Result<Value, String> {
    let digest = D::digest(string(args, 0)?.as_bytes());
    Ok(Value::String(
        digest.iter().map(|b| format!("{b:02x}")).collect(),
    ))
}

fn md5(args: FuncArgs) -> Result<Value, String> {
    hex_digest::<Md5>(&args)
}

fn sha1(args: FuncArgs) -> Result<Value, String> {
    hex_digest::<Sha1>(&args)
}

fn sha256(args: FuncArgs) -> Result<Value, String> {
    hex_digest::<Sha256>(&args)
}

fn sha512(args: FuncArgs) -> Result<Value, String> {
    hex_digest::<Sha512>(&args)
}

fn uuidv4(_: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(Uuid::new_v4().to_string()))
}

/// `uuidv5(namespace, name)`: the namespace is `"dns"`, `"url"`, `"oid"`, `"x500"` or a UUID.
/// RFC 4122's version 5: the first 16 bytes of SHA-1 over the namespace's bytes and the name.
fn uuidv5(args: FuncArgs) -> Result<Value, String> {
    let ns = string(&args, 0)?;
    let namespace = match ns.as_str() {
        "dns" => Uuid::NAMESPACE_DNS,
        "url" => Uuid::NAMESPACE_URL,
        "oid" => Uuid::NAMESPACE_OID,
        "x500" => Uuid::NAMESPACE_X500,
        other => Uuid::parse_str(other).map_err(|_| {
            format!("namespace {other:?} must be \"dns\", \"url\", \"oid\", \"x500\" or a UUID")
        })?,
    };
    let mut hasher = Sha1::new();
    hasher.update(namespace.as_bytes());
    hasher.update(string(&args, 1)?.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Ok(Value::String(
        uuid::Builder::from_sha1_bytes(bytes)
            .into_uuid()
            .to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eval, fails, same};

    #[test]
    fn digests_match_the_known_values() {
        same(
            "md5(\"hello world\")",
            "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"",
        );
        same(
            "sha1(\"hello world\")",
            "\"2aae6c35c94fcfb415dbe95f408b9ce91ee846ed\"",
        );
        same(
            "sha256(\"hello world\")",
            "\"b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9\"",
        );
        same(
            "sha512(\"\")",
            "\"cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e\"",
        );
    }

    #[test]
    fn bcrypt_hashes_verify() {
        let Ok(hcl::Value::String(h)) = eval("bcrypt(\"s3cret\", 4)") else {
            panic!("bcrypt")
        };
        assert!(h.starts_with("$2a$04$") && h.len() == 60, "{h}");
        assert!(::bcrypt::verify("s3cret", &h).unwrap());
        assert!(!::bcrypt::verify("other", &h).unwrap());
        // A random salt: two hashes differ.
        assert_ne!(
            eval("bcrypt(\"s3cret\", 4)").unwrap(),
            hcl::Value::String(h)
        );
        let Ok(hcl::Value::String(d)) = eval("bcrypt(\"x\")") else {
            panic!("bcrypt")
        };
        assert!(d.starts_with("$2a$10$"), "{d}");
        let Ok(hcl::Value::String(low)) = eval("bcrypt(\"x\", 1)") else {
            panic!("bcrypt")
        };
        assert!(low.starts_with("$2a$10$"), "{low}");
        fails(
            "bcrypt(\"x\", 32)",
            "cost 32 is outside allowed range (4,31)",
        );
        fails(
            "bcrypt(\"x\", 4, 5)",
            "bcrypt() takes no more than two arguments",
        );
        fails(
            &format!("bcrypt({:?}, 4)", "a".repeat(73)),
            "password length exceeds 72 bytes",
        );
    }

    #[test]
    fn uuids() {
        // RFC 4122's own example, as Terraform documents it.
        same(
            "uuidv5(\"dns\", \"www.example.com\")",
            "\"2ed6657d-e927-568b-95e1-2665a8aea6a2\"",
        );
        same(
            "uuidv5(\"6ba7b810-9dad-11d1-80b4-00c04fd430c8\", \"www.example.com\")",
            "uuidv5(\"dns\", \"www.example.com\")",
        );
        fails("uuidv5(\"ldap\", \"x\")", "namespace \"ldap\"");
        let a = eval("uuidv4()").unwrap();
        let text = a.as_str().unwrap();
        assert_eq!(uuid::Uuid::parse_str(text).unwrap().get_version_num(), 4);
        assert_ne!(eval("uuidv4()").unwrap(), a);
    }
}
