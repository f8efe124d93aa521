//! The task directory hook: builds the allocation and task directories before every start.
//!
//! Layout (tasks.md): `<data_dir>/alloc/<alloc_id>/` with `alloc/` (shared, `NOMAD_ALLOC_DIR`),
//! `alloc/logs/`, and one `<task>/` per task holding `local/` (`NOMAD_TASK_DIR`) and `secrets/`.
//! `secrets/` is 0700; the rest 0755 so a task run as another `user` can use it, and that user owns
//! its task directory, `local/` and `secrets/`.
//!
//! A task owns those directories, so between two runs it can replace them with links. Everything
//! here is reached from the allocation root without following a link
//! ([`nodeward_keeper::beneath`]), modes and owners are set on the open directories, and a link
//! found where one of these directories belongs is removed (not followed) and the directory made
//! again: the next run gets the layout it is promised, the link's target is never touched, and
//! the hook answers what it removed (a `Task Setup` event).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use nodeward_keeper::beneath::{Dir, Replaced};

use crate::task::hooks::{HookError, Interrupt, TaskContext, TaskHook};

pub struct TaskDirHook;

fn failed(what: &Path, e: impl std::fmt::Display) -> HookError {
    HookError::new(format!(
        "failed to build task directory {}: {e}",
        what.display()
    ))
}

/// The allocation root (`<data_dir>/alloc`, the parent of `alloc_dir`), created if missing and
/// opened as the operator named it: the top below which no link is followed.
pub fn open_alloc_root(alloc_dir: &Path) -> Result<Dir, HookError> {
    let root = alloc_dir
        .parent()
        .ok_or_else(|| failed(alloc_dir, "an allocation directory has a parent"))?;
    // It is there but for the first task of a data directory: opened first (every restart
    // passes here), and made only when that fails, which also says why it could not be.
    Dir::open(root)
        .or_else(|_| std::fs::create_dir_all(root).and_then(|_| Dir::open(root)))
        .map_err(|e| failed(root, e))
}

/// The directory a path `rel` of the task directory goes in (a volume's destination), opened
/// beneath the allocation root without following links and made where missing (mode 0755),
/// with what was replaced on the way; `fail` words an I/O error for the caller's operation.
pub fn open_parent_beneath(
    task: &TaskContext,
    rel: &Path,
    fail: impl Fn(std::io::Error) -> HookError,
) -> Result<(Dir, Vec<Replaced>), HookError> {
    let root = open_alloc_root(&task.alloc_dir)?;
    let task_rel = task.task_dir.strip_prefix(root.path()).map_err(|_| {
        fail(std::io::Error::other(
            "the task directory is outside its allocation root",
        ))
    })?;
    let task_dir = root.open_dir(task_rel).map_err(&fail)?;
    task_dir
        .make_dirs(rel.parent().unwrap_or(Path::new("")), 0o755)
        .map_err(fail)
}

/// One directory of the layout, made if missing (a link in its place replaced). Answers it and
/// whether anything was made or replaced.
fn make(
    parent: &Dir,
    name: &OsStr,
    mode: u32,
    notes: &mut Vec<Replaced>,
) -> Result<(Dir, bool), HookError> {
    let made = parent
        .make_dir(name, mode)
        .map_err(|e| failed(&parent.path().join(name), e))?;
    notes.extend(made.replaced);
    if made.created {
        // mkdir's mode went through the umask; the layout's modes are exact.
        made.dir
            .chmod(mode)
            .map_err(|e| failed(made.dir.path(), e))?;
    }
    Ok((made.dir, made.created))
}

/// Creates the allocation's shared directories; answers the allocation directory.
fn build_alloc_dir(
    root: &Dir,
    alloc_dir: &Path,
    notes: &mut Vec<Replaced>,
) -> Result<Dir, HookError> {
    let id = alloc_dir
        .file_name()
        .ok_or_else(|| failed(alloc_dir, "no allocation ID in the path"))?;
    let (alloc, _) = make(root, id, 0o755, notes)?;
    let (shared, _) = make(&alloc, OsStr::new("alloc"), 0o755, notes)?;
    make(&shared, OsStr::new("logs"), 0o755, notes)?;
    Ok(alloc)
}

impl TaskHook for TaskDirHook {
    fn name(&self) -> &'static str {
        "task_dir"
    }

    fn prestart(
        &self,
        task: &TaskContext,
        _env: &mut BTreeMap<String, String>,
        _stop: &Interrupt,
    ) -> Result<Vec<String>, HookError> {
        let mut replaced = Vec::new();
        let root = open_alloc_root(&task.alloc_dir)?;
        let alloc = build_alloc_dir(&root, &task.alloc_dir, &mut replaced)?;
        let name = task
            .task_dir
            .strip_prefix(&task.alloc_dir)
            .ok()
            .and_then(|p| p.to_str())
            .filter(|p| !p.is_empty() && !p.contains('/'))
            .ok_or_else(|| failed(&task.task_dir, "not a directory of its allocation"))?;
        let (task_dir, a) = make(&alloc, OsStr::new(name), 0o755, &mut replaced)?;
        let (local, b) = make(&task_dir, OsStr::new("local"), 0o755, &mut replaced)?;
        let (secrets, c) = make(&task_dir, OsStr::new("secrets"), 0o700, &mut replaced)?;
        // Restarts find the directories in place: their owners were set when they were made. Only
        // what this call made is given away, never a directory that was already there.
        if let Some(user) = &task.task.user {
            let made: Vec<&Dir> = [(&task_dir, a), (&local, b), (&secrets, c)]
                .into_iter()
                .filter_map(|(d, made)| made.then_some(d))
                .collect();
            if !made.is_empty() {
                chown_to(user, &made)?;
            }
        }
        if let Some(dispatch) = &task.task.dispatch_payload {
            let user = task.task.user.as_deref();
            // Nomad's own hook for it is `dispatch_payload`: its failure is named so.
            write_payload(
                &local,
                &dispatch.file,
                &task.job.payload,
                user,
                &mut replaced,
            )
            .map_err(|e| e.in_hook("dispatch_payload"))?;
        }
        Ok(replaced
            .into_iter()
            .map(|r| {
                format!(
                    "{r}, and made the directory again (a task may not replace the directories nodeward keeps for it)"
                )
            })
            .collect())
    }
}

/// Writes a dispatched job's payload (base64 in the job) to `local/<file>`, as Nomad's dispatch
/// hook does, through the open `local/` so a link the task left cannot redirect it. Written at
/// every start: the task may have changed it. A job without a payload writes an empty file.
/// A task with a `user` owns it, mode 0600 (when nodeward runs as root, as for its directories);
/// otherwise it is root's, mode 0644.
fn write_payload(
    local: &Dir,
    file: &str,
    payload: &str,
    user: Option<&str>,
    notes: &mut Vec<Replaced>,
) -> Result<(), HookError> {
    use base64::Engine as _;
    use std::io::Write as _;
    let target = local.path().join(file);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|e| failed(&target, format!("the job's payload is not base64: {e}")))?;
    let rel = Path::new(file);
    let parent = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => {
            let (dir, made) = local.make_dirs(p, 0o755).map_err(|e| failed(&target, e))?;
            notes.extend(made);
            dir
        }
        None => local.try_clone().map_err(|e| failed(&target, e))?,
    };
    let name = rel
        .file_name()
        .ok_or_else(|| failed(&target, "no file name"))?;
    parent
        .truncate_file(name, 0)
        .map_err(|e| failed(&target, e))?;
    let (mut f, replaced) = parent
        .open_append(name, 0o644)
        .map_err(|e| failed(&target, e))?;
    notes.extend(replaced);
    // SAFETY: geteuid has no preconditions.
    if let Some(user) = user.filter(|_| unsafe { libc::geteuid() } == 0) {
        use std::os::unix::fs::PermissionsExt as _;
        let (uid, gid) =
            crate::driver::lookup_user(user).map_err(|e| HookError::new(e.to_string()))?;
        // On the open file: a link put in its place cannot redirect the change.
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
            .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o600)))
            .map_err(|e| failed(&target, format!("failed to give it to {user}: {e}")))?;
    }
    f.write_all(&bytes).map_err(|e| failed(&target, e))
}

/// Gives a task run as `user` its own directories, as Nomad does: on the open directories, so a
/// link can never redirect the change. A directory owned by anyone but root (nodeward made it)
/// or the user already is not nodeward's to give away.
fn chown_to(user: &str, dirs: &[&Dir]) -> Result<(), HookError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let (uid, gid) = crate::driver::lookup_user(user).map_err(|e| HookError::new(e.to_string()))?;
    for d in dirs {
        let chown = |e: std::io::Error| {
            HookError::new(format!(
                "failed to chown {} to {user}: {e}",
                d.path().display()
            ))
        };
        let (owner, _, _) = d.owner_and_mode().map_err(chown)?;
        if owner != 0 && owner != uid {
            return Err(chown(std::io::Error::other(format!(
                "it is owned by uid {owner}, neither root nor {user}"
            ))));
        }
        d.chown(uid, gid).map_err(chown)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_payload_that_cannot_be_written_is_named_as_nomads_dispatch_payload_hook() {
        let dir = std::env::temp_dir().join(format!("nw-taskdir-{}", uuid::Uuid::new_v4()));
        let hcl = "job \"j\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"raw_exec\"\n   \
                   dispatch_payload { file = \"in\" }\n   config { command = \"true\" }\n  }\n }\n}\n";
        let mut job = crate::jobspec::hcl::parse_job(hcl).unwrap().job;
        job.payload = "not base64!".to_string();
        let job = Arc::new(job);
        let ctx = TaskContext {
            alloc_index: 0,
            alloc_name: "j.g[0]".to_string(),
            alloc_id: "a".to_string(),
            task: job.task_groups[0].tasks[0].clone(),
            group: "g".to_string(),
            job,
            alloc_dir: dir.join("a"),
            task_dir: dir.join("a/t"),
            data_dir: dir.clone(),
            node_id: "node".to_string(),
            node_name: "node".to_string(),
            node: Default::default(),
            ports: Vec::new(),
            cores: Vec::new(),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let e = TaskDirHook
            .prestart(&ctx, &mut BTreeMap::new(), &Interrupt::never())
            .unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(e.hook_name(TaskDirHook.name()), "dispatch_payload");
        assert!(e.message.contains("is not base64"), "{e}");
        // Its other failures are the task directory hook's own.
        assert_eq!(
            HookError::new("x").hook_name(TaskDirHook.name()),
            "task_dir"
        );
    }
}
