//! `rsadecrypt(ciphertext, privatekey)`, as Nomad's jobspec2 has it (go-cty-funcs): the
//! ciphertext is the standard base64 of an RSA encryption with PKCS#1 v1.5 padding, the key a
//! PEM `RSA PRIVATE KEY` (PKCS#1, not encrypted); the result is the plaintext, which must be
//! UTF-8 text.
//!
//! The key and the plaintext are secrets of the jobspec's author: no error of this function
//! names them, nor any part of them (not even the input of a base64 error, which Nomad quotes:
//! arguments given the wrong way round would put the key there). What an error may say is where
//! and what kind of fault it found. An error of a later expression may quote a value (`binary
//! operator + is not applicable to "..."`): [`redact`] takes the keys and plaintexts of this
//! evaluation out of every evaluation error.
//!
//! The RSA operation is RustCrypto's `rsa`, with blinding. Its PKCS#1 v1.5 decryption rejects
//! bad padding *implicitly* (a synthetic plaintext instead of an error, against an attacker who
//! sends ciphertexts to a key they do not hold and watches for failures); Nomad, with Go's
//! `DecryptPKCS1v15`, reports `decryption error`. Whoever evaluates a jobspec supplies the key
//! in it, so there is no one to hide padding failures from, and a ciphertext for another key
//! must be an error rather than garbage in a task's environment: [`unpad`] removes the padding
//! as Go does after the raw operation.

use std::cell::RefCell;
use std::collections::BTreeSet;

use base64::alphabet;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;
use rsa::pkcs1::der::pem;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::traits::PublicKeyParts;
use rsa::{BoxedUint, PrivateKey};

use super::{fixed, string};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![("rsadecrypt", fixed(2, rsadecrypt))]
}

fn rsadecrypt(args: FuncArgs) -> Result<Value, String> {
    let ciphertext = decode_ciphertext(&string(&args, 0)?)?;
    let key = string(&args, 1)?;
    remember(&key);
    let key = parse_key(&key)?;
    let plaintext = decrypt(&key, &ciphertext)?;
    let plaintext = String::from_utf8(plaintext)
        .map_err(|_| "the decrypted bytes are not UTF-8 text".to_string())?;
    remember(&plaintext);
    Ok(Value::String(plaintext))
}

thread_local! {
    /// The keys and plaintexts `rsadecrypt` has handled in this thread's parse ([`keep_secrets`]).
    static SECRETS: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

/// Pieces shorter than this are not redacted: they would take ordinary words out of messages.
const MIN_REDACTED: usize = 4;

fn remember(secret: &str) {
    SECRETS.with(|s| s.borrow_mut().insert(secret.to_string()));
}

fn forget() {
    SECRETS.with(|s| s.borrow_mut().clear());
}

/// Runs `f`, a whole parse (evaluation, then the schema's checks, which quote values too), with
/// the secrets `rsadecrypt` gives kept for [`redact`]; they are forgotten when it ends, however.
pub fn keep_secrets<T>(f: impl FnOnce() -> T) -> T {
    struct Forget;
    impl Drop for Forget {
        fn drop(&mut self) {
            forget();
        }
    }
    forget();
    let _forget = Forget;
    f()
}

/// `text` with each key and plaintext of this evaluation, and each of their lines (an error
/// quotes a value on one line, as HCL writes it: `"a \"b\""`), replaced by `(sensitive value)`.
pub fn redact(text: String) -> String {
    SECRETS.with(|s| {
        let secrets = s.borrow();
        if secrets.is_empty() {
            return text;
        }
        let mut needles = BTreeSet::new();
        for secret in secrets.iter() {
            for piece in std::iter::once(secret.as_str()).chain(secret.lines()) {
                let piece = piece.trim();
                if piece.chars().count() >= MIN_REDACTED {
                    needles.insert(piece.to_string());
                    needles.insert(hcl_quoted(piece));
                }
            }
        }
        let mut needles: Vec<String> = needles.into_iter().collect();
        // The longest first, so that a line does not leave the rest of its secret behind.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        needles.iter().fold(text, |text, n| {
            text.replace(n.as_str(), "(sensitive value)")
        })
    })
}

/// `s` as it reads inside an HCL string literal.
fn hcl_quoted(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\t', "\\t")
        .replace("${", "$${")
        .replace("%{", "%%{")
}

/// Standard base64 with padding, as Go's `StdEncoding` reads it: line ends are skipped (so that
/// a file written by `base64` or `openssl base64`, in lines and with a final newline, reads) and
/// unused bits in the last character are not an error.
fn decode_ciphertext(text: &str) -> Result<Vec<u8>, String> {
    const GO_STD: GeneralPurpose = GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    GO_STD.decode(compact).map_err(|e| {
        // The offending character is left out: it is the caller's input.
        let what = match e {
            base64::DecodeError::InvalidByte(at, _) => {
                format!("a character that is not base64 at offset {at}, not counting line ends")
            }
            base64::DecodeError::InvalidLength(n) => {
                format!("{n} base64 characters: not a whole number of groups of four")
            }
            base64::DecodeError::InvalidLastSymbol { offset: at, .. } => {
                format!("an impossible last character at offset {at}, not counting line ends")
            }
            base64::DecodeError::InvalidPadding => "its `=` padding is wrong".to_string(),
        };
        format!("failed to decode input: cipher text must be base64-encoded ({what})")
    })
}

/// The first PEM block of `text` (text before and after it is skipped, as Go's `pem.Decode`
/// skips it), read as a PKCS#1 RSA private key whatever its label, as Go reads it; the label
/// only makes the error clearer when it is not one.
fn parse_key(text: &str) -> Result<PrivateKey, String> {
    const NONE: &str = "failed to parse key: no key found (the private key must be PEM-encoded: \
                        -----BEGIN RSA PRIVATE KEY-----)";
    let begin = text.find("-----BEGIN ").ok_or(NONE)?;
    let block = &text[begin..];
    let end = block
        .find("-----END ")
        .and_then(|at| {
            let close = block[at + 9..].find("-----")?;
            Some(at + 9 + close + 5)
        })
        .ok_or(NONE)?;
    let block = &block[..end];
    if block.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(
            "failed to parse key: password protected keys are not supported. \
                    Please decrypt the key prior to use"
                .into(),
        );
    }
    let (label, der) = pem::decode_vec(block.as_bytes())
        .map_err(|e| format!("failed to parse key: not a valid PEM block ({e})"))?;
    PrivateKey::from_pkcs1_der(&der).map_err(|e| match label {
        "RSA PRIVATE KEY" => {
            format!("failed to parse key: not a valid PKCS#1 RSA private key ({e})")
        }
        "PRIVATE KEY" | "ENCRYPTED PRIVATE KEY" => format!(
            "failed to parse key: the key is PKCS#8 (-----BEGIN {label}-----); rsadecrypt reads \
             an unencrypted PKCS#1 key (-----BEGIN RSA PRIVATE KEY-----), which `openssl rsa \
             -traditional` writes"
        ),
        other => format!(
            "failed to parse key: the PEM block is a {other:?}, not an RSA private key \
             (-----BEGIN RSA PRIVATE KEY-----)"
        ),
    })
}

/// RSA decryption (RFC 8017 RSADP, blinded, checked) and the removal of its PKCS#1 v1.5 padding.
fn decrypt(key: &PrivateKey, ciphertext: &[u8]) -> Result<Vec<u8>, String> {
    let k = key.size();
    if ciphertext.len() != k {
        return Err(format!(
            "decryption error: the cipher text is {} bytes, and one for this {}-bit key is {k}",
            ciphertext.len(),
            key.n().bit_width()
        ));
    }
    let failed = || {
        "decryption error: the cipher text is not one this key encrypted (RSA with PKCS#1 v1.5 \
         padding)"
            .to_string()
    };
    let c = BoxedUint::from_be_slice(ciphertext, key.n_bits_precision()).map_err(|_| failed())?;
    let m = rsa::hazmat::rsa_decrypt_and_check(key, Some(&mut getrandom::SysRng), &c)
        .map_err(|_| failed())?;
    let bytes = m.to_be_bytes();
    // The integer is below the modulus, so it fits in k bytes; its storage may be wider.
    let em = &bytes[bytes.len().saturating_sub(k)..];
    unpad(em).map(<[u8]>::to_vec).ok_or_else(failed)
}

/// EME-PKCS1-v1_5 decoding (RFC 8017 7.2.2 step 3): `00 02`, at least eight non-zero padding
/// bytes, `00`, then the message. Not constant-time: see the module's comment.
fn unpad(em: &[u8]) -> Option<&[u8]> {
    if em.len() < 11 || em[0] != 0 || em[1] != 2 {
        return None;
    }
    let zero = 2 + em[2..].iter().position(|&b| b == 0)?;
    (zero >= 10).then(|| &em[zero + 1..])
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eval, fails};
    use super::unpad;

    const KEY: &str = include_str!("../../../tests/data/rsa/key.pem");
    const OTHER_KEY: &str = include_str!("../../../tests/data/rsa/other-key.pem");
    const KEY_PKCS8: &str = include_str!("../../../tests/data/rsa/key-pkcs8.pem");
    const KEY_ENCRYPTED: &str = include_str!("../../../tests/data/rsa/key-encrypted.pem");
    const PUBLIC: &str = include_str!("../../../tests/data/rsa/public.pem");
    /// `hunter2 and a café`, for KEY.
    const CIPHERTEXT: &str = include_str!("../../../tests/data/rsa/ciphertext.b64");
    /// For OTHER_KEY.
    const OTHER_CIPHERTEXT: &str = include_str!("../../../tests/data/rsa/other-key-ciphertext.b64");
    /// The bytes ff fe, for KEY.
    const BINARY_CIPHERTEXT: &str = include_str!("../../../tests/data/rsa/binary-ciphertext.b64");
    const PLAINTEXT: &str = "hunter2 and a café";

    fn call(ciphertext: &str, key: &str) -> String {
        format!("rsadecrypt({ciphertext:?}, {key:?})")
    }

    /// The error of `rsadecrypt(ciphertext, key)`, checked to contain `needle` and no part of
    /// the keys or the plaintext.
    #[track_caller]
    fn refused(ciphertext: &str, key: &str, needle: &str) {
        let src = call(ciphertext, key);
        fails(&src, needle);
        let e = eval(&src).unwrap_err();
        for secret in [KEY, OTHER_KEY, KEY_PKCS8, KEY_ENCRYPTED, key] {
            for line in secret
                .lines()
                .filter(|l| l.len() > 8 && !l.starts_with("-----"))
            {
                assert!(!e.contains(line), "{e}");
                assert!(!e.contains(&line[..8]), "{e}");
            }
        }
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn decrypts_what_openssl_encrypted() {
        assert_eq!(
            eval(&call(CIPHERTEXT, KEY)).unwrap(),
            hcl::Value::from(PLAINTEXT)
        );
        // Base64 in lines with a final newline, as `openssl base64` writes it, and the key with
        // text before and after its block.
        let lines: Vec<String> = CIPHERTEXT
            .trim()
            .as_bytes()
            .chunks(64)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let wrapped = lines.join("\r\n") + "\n";
        let key = format!("a comment\n{KEY}\ntrailing text\n");
        assert_eq!(
            eval(&call(&wrapped, &key)).unwrap(),
            hcl::Value::from(PLAINTEXT)
        );
    }

    #[test]
    fn bad_base64_is_refused_without_quoting_it() {
        refused("not base64!", KEY, "cipher text must be base64-encoded");
        refused("!!", KEY, "not base64 at offset 0");
        refused("abc", KEY, "its `=` padding is wrong");
        refused("abcde", KEY, "5 base64 characters");
        // The arguments the wrong way round: the key is not base64, and is not repeated.
        refused(KEY, CIPHERTEXT, "cipher text must be base64-encoded");
    }

    #[test]
    fn a_key_that_is_not_a_pkcs1_private_key_is_refused() {
        refused(CIPHERTEXT, "", "failed to parse key: no key found");
        refused(CIPHERTEXT, "secret", "no key found");
        refused(
            CIPHERTEXT,
            "-----BEGIN RSA PRIVATE KEY-----\nMIIB",
            "no key found",
        );
        refused(
            CIPHERTEXT,
            KEY_ENCRYPTED,
            "password protected keys are not supported",
        );
        refused(
            CIPHERTEXT,
            KEY_PKCS8,
            "the key is PKCS#8 (-----BEGIN PRIVATE KEY-----)",
        );
        refused(
            CIPHERTEXT,
            PUBLIC,
            "the PEM block is a \"PUBLIC KEY\", not an RSA private key",
        );
        let truncated = KEY.replacen("MII", "MIIA", 1);
        refused(CIPHERTEXT, &truncated, "not a valid PEM block");
        let body_lines: Vec<&str> = KEY.lines().collect();
        let short = format!(
            "{}\n{}\n{}\n",
            body_lines[0],
            body_lines[1],
            body_lines.last().unwrap()
        );
        refused(CIPHERTEXT, &short, "not a valid PKCS#1 RSA private key");
    }

    #[test]
    fn a_ciphertext_that_does_not_decrypt_is_refused() {
        refused(
            OTHER_CIPHERTEXT,
            KEY,
            "decryption error: the cipher text is not one this key encrypted",
        );
        // And it is one for the other key.
        assert_eq!(
            eval(&call(OTHER_CIPHERTEXT, OTHER_KEY)).unwrap(),
            hcl::Value::from("not for this key")
        );
        refused(
            "aGVsbG8=",
            KEY,
            "the cipher text is 5 bytes, and one for this 2048-bit key is 256",
        );
        // 256 bytes of ff: above the modulus.
        let high = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [0xff; 256]);
        refused(&high, KEY, "the cipher text is not one this key encrypted");
        refused(
            BINARY_CIPHERTEXT,
            KEY,
            "the decrypted bytes are not UTF-8 text",
        );
        fails("rsadecrypt(\"x\")", "expected 2 positional arguments");
        fails(
            &format!("rsadecrypt([], {KEY:?})"),
            "argument 1 must be a string, not a list",
        );
    }

    #[test]
    fn the_secrets_of_the_evaluation_are_redacted_from_errors() {
        super::forget();
        let quoted = format!("binary operator `+` is not applicable to `{PLAINTEXT:?}` and `1`");
        assert_eq!(super::redact(quoted.clone()), quoted);
        eval(&call(CIPHERTEXT, KEY)).unwrap();
        assert_eq!(
            super::redact(quoted),
            "binary operator `+` is not applicable to `\"(sensitive value)\"` and `1`"
        );
        // The key, whole or a line of it.
        let line = KEY.lines().nth(3).unwrap();
        assert_eq!(
            super::redact(format!("a {line} b")),
            "a (sensitive value) b"
        );
        assert_eq!(super::redact(KEY.to_string()).trim(), "(sensitive value)");
        // As HCL quotes a string; a piece too short to redact stays.
        super::remember("pa\"s${s}\\word");
        super::remember("abc");
        assert_eq!(
            super::redact("`\"pa\\\"s$${s}\\\\word\"` abc".to_string()),
            "`\"(sensitive value)\"` abc"
        );
        // Another parse (super::keep_secrets) starts with none.
        super::keep_secrets(|| {
            assert_eq!(super::redact(PLAINTEXT.to_string()), PLAINTEXT);
        });
        assert_eq!(super::redact(PLAINTEXT.to_string()), PLAINTEXT);
    }

    /// What the schema says of a value after the evaluation (an unknown signal) quotes no secret.
    #[test]
    fn a_schema_error_after_the_evaluation_quotes_no_secret() {
        let hcl = format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      \
             kill_signal = {}\n      config {{\n        command = \"true\"\n      }}\n    }}\n  }}\n}}\n",
            call(CIPHERTEXT, KEY)
        );
        let err = crate::jobspec::hcl::parse_job(&hcl)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(sensitive value)"), "{err}");
        assert!(!err.contains(PLAINTEXT.trim()), "{err}");
    }

    #[test]
    fn padding_is_removed_as_rfc_8017_says() {
        let mut em = vec![0, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, b'h', b'i'];
        assert_eq!(unpad(&em), Some(&b"hi"[..]));
        em[1] = 1;
        assert_eq!(unpad(&em), None);
        em[1] = 2;
        em[0] = 1;
        assert_eq!(unpad(&em), None);
        // Seven padding bytes are too few.
        assert_eq!(unpad(&[0, 2, 1, 1, 1, 1, 1, 1, 1, 0, b'h', b'i']), None);
        // No zero after the padding.
        assert_eq!(unpad(&[0, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), None);
        // An empty message.
        assert_eq!(unpad(&[0, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0]), Some(&b""[..]));
    }
}
