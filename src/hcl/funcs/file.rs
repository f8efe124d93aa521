//! File functions: `file`, `filebase64`, `fileexists`, `abspath`, `basename`, `dirname`,
//! `pathexpand` (`fileset` is in [`super::fileset`]).
//!
//! A relative path is relative to the jobspec's directory ([`super::Files::Dir`]), as Nomad's
//! CLI resolves it. Where no directory is given (`POST /v1/jobs/parse`: the agent does not read
//! files on a caller's behalf, see docs/jobspec.md) every call fails with the reason given.

use std::path::{Path, PathBuf};

use base64::Engine;
use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;

use super::{env, fixed, string, Files};

/// The largest file `file()` reads: the job it ends up in goes to the agent in one request,
/// whose body is limited to 1 MiB.
pub const MAX_FILE: u64 = 1 << 20;

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("file", fixed(1, file)),
        ("filebase64", fixed(1, filebase64)),
        ("fileexists", fixed(1, fileexists)),
        ("abspath", fixed(1, abspath)),
        ("basename", fixed(1, basename)),
        ("dirname", fixed(1, dirname)),
        ("pathexpand", fixed(1, pathexpand)),
    ]
}

/// `~` or a leading `~/` as the home directory of the user who evaluates the jobspec (`$HOME`,
/// as go-homedir reads it); any other path unchanged. Like the other file functions it is
/// disabled where files are not read (the agent's `POST /v1/jobs/parse`): the agent's home is
/// not the caller's.
fn pathexpand(args: FuncArgs) -> Result<Value, String> {
    let path = string(&args, 0)?;
    if let Files::Disabled(reason) = env().files {
        return Err(reason);
    }
    let rest = match path.strip_prefix('~') {
        None => return Ok(Value::String(path)),
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        Some(_) => return Err("cannot expand user-specific home dir".into()),
    };
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| !h.is_empty())
        .ok_or("cannot expand \"~\": HOME is not set")?;
    Ok(Value::String(format!("{home}{rest}")))
}

fn resolve(args: &FuncArgs) -> Result<PathBuf, String> {
    let path = string(args, 0)?;
    match env().files {
        Files::Dir(dir) => Ok(dir.join(path)),
        Files::Disabled(reason) => Err(reason),
    }
}

fn read(args: &FuncArgs) -> Result<(PathBuf, Vec<u8>), String> {
    let path = resolve(args)?;
    let fail = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let size = std::fs::metadata(&path).map_err(fail)?.len();
    if size > MAX_FILE {
        return Err(format!(
            "{} has {size} bytes, more than the {MAX_FILE} a jobspec may read",
            path.display()
        ));
    }
    let bytes = std::fs::read(&path).map_err(fail)?;
    Ok((path, bytes))
}

fn file(args: FuncArgs) -> Result<Value, String> {
    let (path, bytes) = read(&args)?;
    String::from_utf8(bytes).map(Value::String).map_err(|_| {
        format!(
            "{} is not UTF-8 text; filebase64() reads it as base64",
            path.display()
        )
    })
}

fn filebase64(args: FuncArgs) -> Result<Value, String> {
    let (_, bytes) = read(&args)?;
    Ok(Value::String(
        base64::engine::general_purpose::STANDARD.encode(bytes),
    ))
}

fn fileexists(args: FuncArgs) -> Result<Value, String> {
    let path = resolve(&args)?;
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(Value::Bool(true)),
        Ok(_) => Err(format!("{} is not a regular file", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Bool(false)),
        Err(e) => Err(format!("cannot stat {}: {e}", path.display())),
    }
}

/// A path made absolute (Go's `filepath.Abs`): a relative one against the jobspec's directory,
/// as `file()` reads it, and cleaned (no `.`, no `a/..`). Only the text is worked on; the file
/// need not exist. A relative path where no directory is given fails with the reason.
fn abspath(args: FuncArgs) -> Result<Value, String> {
    let path = string(&args, 0)?;
    // Disabled with the other file functions, as Nomad's guard disables it.
    let dir = match env().files {
        Files::Dir(dir) => dir,
        Files::Disabled(reason) => return Err(reason),
    };
    let joined = if path.starts_with('/') {
        PathBuf::from(&path)
    } else {
        std::path::absolute(dir.join(&path))
            .map_err(|e| format!("cannot make {path:?} absolute: {e}"))?
    };
    Ok(Value::String(super::fileset::clean(
        &joined.to_string_lossy(),
    )))
}

/// The last element of a path (Go's `filepath.Base`).
fn basename(args: FuncArgs) -> Result<Value, String> {
    let path = string(&args, 0)?;
    let trimmed = path.trim_end_matches('/');
    Ok(Value::String(if path.is_empty() {
        ".".into()
    } else if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.rsplit('/').next().unwrap_or(trimmed).to_string()
    }))
}

/// Everything but the last element of a path (Go's `filepath.Dir`).
fn dirname(args: FuncArgs) -> Result<Value, String> {
    let path = string(&args, 0)?;
    let parent = Path::new(&path)
        .parent()
        .map(|p| p.to_string_lossy().into_owned());
    Ok(Value::String(match parent.as_deref() {
        None if path.starts_with('/') => "/".into(),
        None | Some("") => ".".into(),
        Some(p) => p.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eval, fails, same};
    use super::super::{with_env, Files, FuncEnv};

    fn in_dir<T>(dir: &std::path::Path, f: impl FnOnce() -> T) -> T {
        let env = FuncEnv {
            files: Files::Dir(dir.to_path_buf()),
            now: chrono::Utc::now(),
        };
        with_env(env, f)
    }

    #[test]
    fn reads_relative_to_the_jobspec() {
        let dir = std::env::temp_dir().join(format!("nw-file-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/motd.txt"), "hello\n").unwrap();
        std::fs::write(dir.join("bin"), [0xff, 0x00]).unwrap();
        in_dir(&dir, || {
            same("file(\"sub/motd.txt\")", "\"hello\\n\"");
            same("filebase64(\"bin\")", "\"/wA=\"");
            fails("file(\"bin\")", "is not UTF-8 text");
            same("fileexists(\"sub/motd.txt\")", "true");
            same("fileexists(\"nope\")", "false");
            if let Ok(home) = std::env::var("HOME") {
                same("pathexpand(\"~/x\")", &format!("{:?}", format!("{home}/x")));
                same("pathexpand(\"~\")", &format!("{home:?}"));
            }
            same("pathexpand(\"/a/~/b\")", "\"/a/~/b\"");
            fails(
                "pathexpand(\"~root/x\")",
                "cannot expand user-specific home dir",
            );
            fails("fileexists(\"sub\")", "is not a regular file");
            fails("file(\"nope.txt\")", "cannot read");
            same(
                "abspath(\"sub/../x/./y\")",
                &format!("{:?}", dir.join("x/y").display().to_string()),
            );
        });
        let rel = FuncEnv {
            files: Files::Dir("jobs".into()),
            now: chrono::Utc::now(),
        };
        let cwd = std::env::current_dir().unwrap();
        with_env(rel, || {
            same(
                "abspath(\"a\")",
                &format!("{:?}", cwd.join("jobs/a").display().to_string()),
            );
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_directory_files_are_refused() {
        fails("file(\"x\")", "filesystem functions are disabled");
        fails("abspath(\"x\")", "filesystem functions are disabled");
        fails(
            "abspath(\"/a/b/../c/\")",
            "filesystem functions are disabled",
        );
        fails("pathexpand(\"~/x\")", "filesystem functions are disabled");
        let e = eval("fileexists(\"/etc/passwd\")").unwrap_err();
        assert!(e.contains("disabled"), "{e}");
    }

    #[test]
    fn paths() {
        same("basename(\"/a/b.txt\")", "\"b.txt\"");
        same("basename(\"a/b/\")", "\"b\"");
        same("basename(\"/\")", "\"/\"");
        same("dirname(\"/a/b.txt\")", "\"/a\"");
        same("dirname(\"b.txt\")", "\".\"");
        same("dirname(\"/b\")", "\"/\"");
    }
}
