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

/// Go's `base64.StdEncoding`: standard base64, with padding; unused bits in the last character
/// are not an error.
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// The cipher text's base64, as Go's `StdEncoding` reads it: line ends are skipped (so that
/// a file written by `base64` or `openssl base64`, in lines and with a final newline, reads) and
/// unused bits in the last character are not an error.
fn decode_ciphertext(text: &str) -> Result<Vec<u8>, String> {
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

/// The first PEM block of `text`, read as a PKCS#1 RSA private key whatever its label, as Go
/// reads it (Nomad: `pem.Decode`, then `x509.ParsePKCS1PrivateKey`); the label only makes the
/// error clearer when it is not one.
fn parse_key(text: &str) -> Result<PrivateKey, String> {
    let Some(block) = pem_decode(text) else {
        let why = if text.contains("-----BEGIN ") {
            "a -----BEGIN line, but no complete PEM block after it: an -----END line of the same \
             label and a base64 body are needed"
        } else {
            "the private key must be PEM-encoded: -----BEGIN RSA PRIVATE KEY-----"
        };
        return Err(format!("failed to parse key: no key found ({why})"));
    };
    if block
        .headers
        .iter()
        .any(|&(k, v)| k == "Proc-Type" && v == "4,ENCRYPTED")
    {
        return Err(
            "failed to parse key: password protected keys are not supported. \
                    Please decrypt the key prior to use"
                .into(),
        );
    }
    PrivateKey::from_pkcs1_der(&block.der).map_err(|e| match block.label {
        "RSA PRIVATE KEY" => {
            format!("failed to parse key: not a valid PKCS#1 RSA private key ({e})")
        }
        label @ ("PRIVATE KEY" | "ENCRYPTED PRIVATE KEY") => format!(
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

/// One PEM block: its label, its headers (`Proc-Type: 4,ENCRYPTED`) and its decoded body.
struct PemBlock<'a> {
    label: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    der: Vec<u8>,
}

/// The first complete PEM block of `text`, found as Go's `encoding/pem.Decode` finds it (RFC
/// 1421 with its leniencies): text before and after is skipped, as are blocks that do not end
/// (an `-----END` line of the same label) or whose body is not base64; `Name: value` header
/// lines are read; the body's lines may be of any length and spaces, tabs and line ends in it
/// are ignored. A stricter reader (RFC 7468: 64-column lines, no headers) would refuse keys
/// Nomad reads, such as one pasted on a single line inside a heredoc.
fn pem_decode(text: &str) -> Option<PemBlock<'_>> {
    const BEGIN: &str = "-----BEGIN ";
    const END: &str = "-----END ";
    const DASHES: &str = "-----";
    // The next line of `s` without its line end and trailing spaces, and what follows it.
    fn line(s: &str) -> (&str, &str) {
        let (line, rest) = s.split_once('\n').unwrap_or((s, ""));
        (line.trim_end_matches([' ', '\t', '\r']), rest)
    }
    let mut rest = text;
    loop {
        // A block begins at the start of the text or of a line.
        rest = if let Some(after) = rest.strip_prefix(BEGIN) {
            after
        } else {
            let at = rest.find(&format!("\n{BEGIN}"))?;
            &rest[at + 1 + BEGIN.len()..]
        };
        let (label_line, after_label) = line(rest);
        let Some(label) = label_line.strip_suffix(DASHES) else {
            continue;
        };
        rest = after_label;
        let mut headers = Vec::new();
        loop {
            if rest.is_empty() {
                return None;
            }
            let (l, next) = line(rest);
            let Some((key, value)) = l.split_once(':') else {
                break;
            };
            headers.push((key.trim(), value.trim()));
            rest = next;
        }
        // With no headers, the END line may come at once, with no line end before it.
        let (body_end, trailer_at) = if headers.is_empty() && rest.starts_with(END) {
            (0, END.len())
        } else {
            match rest.find(&format!("\n{END}")) {
                Some(at) => (at, at + 1 + END.len()),
                None => continue,
            }
        };
        let Some(trailer) = rest[trailer_at..]
            .strip_prefix(label)
            .and_then(|t| t.strip_prefix(DASHES))
        else {
            continue;
        };
        if !line(trailer).0.is_empty() {
            continue;
        }
        let body: String = rest[..body_end]
            .chars()
            .filter(|c| !matches!(c, ' ' | '\t' | '\r' | '\n'))
            .collect();
        let Ok(der) = GO_STD.decode(body) else {
            continue;
        };
        return Some(PemBlock {
            label,
            headers,
            der,
        });
    }
}

/// RSA decryption (RFC 8017 RSADP, blinded, checked) and the removal of its PKCS#1 v1.5 padding.
/// A cipher text shorter than the key is the integer its bytes make, as Go reads it (an
/// encryptor that drops leading zero bytes writes one a time in 256).
fn decrypt(key: &PrivateKey, ciphertext: &[u8]) -> Result<Vec<u8>, String> {
    let k = key.size();
    if ciphertext.len() > k {
        return Err(format!(
            "decryption error: the cipher text is {} bytes, longer than the {k} of one for \
             this {}-bit key",
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
    if c >= *key.n().as_ref() {
        return Err(failed());
    }
    // What fails now is not the input: the random numbers of the blinding, or the check of
    // the result (a fault in the computation). rsa's messages name no part of the key.
    let m = rsa::hazmat::rsa_decrypt_and_check(key, Some(&mut getrandom::SysRng), &c)
        .map_err(|e| format!("decryption error: the RSA operation failed ({e})"))?;
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
    /// `short cipher text`, for KEY, in 255 bytes.
    const SHORT_CIPHERTEXT: &str = include_str!("../../../tests/data/rsa/short-ciphertext.b64");
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

    /// Keys Go's `pem.Decode` reads and a strict RFC 7468 reader would not: the body on one line
    /// or in lines of 76, header lines, spaces and CRLF line ends; the first complete block
    /// counts.
    #[test]
    fn reads_pem_as_go_does() {
        let lines: Vec<&str> = KEY.lines().collect();
        let (begin, end) = (lines[0], lines[lines.len() - 1]);
        let body: String = lines[1..lines.len() - 1].concat();
        let rewrap = |width: usize, eol: &str| {
            let body: Vec<String> = body
                .as_bytes()
                .chunks(width)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            format!("{begin}{eol}{}{eol}{end}{eol}", body.join(eol))
        };
        for key in [
            format!("{begin}\n{body}\n{end}"),
            rewrap(76, "\n"),
            rewrap(64, "\r\n"),
            format!("{begin}\nComment: made for a test\n\n{body}\n{end}\n"),
            format!("{begin}\n  {body}  \n{end}   \n"),
            format!("-----BEGIN RSA PRIVATE KEY-----\nnot base64\n{end}\n{KEY}"),
            format!("no\n-----BEGIN X\n{KEY}"),
        ] {
            assert_eq!(
                eval(&call(CIPHERTEXT, &key)).unwrap(),
                hcl::Value::from(PLAINTEXT),
                "{key}"
            );
        }
        // The END line must be a line of its own.
        refused(
            CIPHERTEXT,
            &format!("{begin}\n{body}\n{end} x\n"),
            "no complete PEM block",
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
        refused(CIPHERTEXT, &truncated, "no complete PEM block");
        refused(
            CIPHERTEXT,
            &KEY.replace("-----END RSA PRIVATE KEY-----", "-----END PRIVATE KEY-----"),
            "no complete PEM block",
        );
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
        // Shorter than the key: the integer of its bytes, as Go reads it. Of OpenSSL's
        // encryptions, one in 256 begins with a zero byte; this one without it.
        assert_eq!(
            eval(&call(SHORT_CIPHERTEXT, KEY)).unwrap(),
            hcl::Value::from("short cipher text")
        );
        refused(
            "aGVsbG8=",
            KEY,
            "the cipher text is not one this key encrypted",
        );
        let long = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [1; 257]);
        refused(
            &long,
            KEY,
            "the cipher text is 257 bytes, longer than the 256 of one for this 2048-bit key",
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
