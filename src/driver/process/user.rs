//! Running a child as another user: the user's ids and groups, looked up before the fork.

use std::ffi::CString;

use super::ProcessError;

/// The credentials a child takes between fork and exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, the user's primary group included.
    pub groups: Vec<libc::gid_t>,
}

impl RunAs {
    /// The credentials of `user`. Only root can take them.
    pub fn user(user: &str) -> Result<RunAs, ProcessError> {
        let (uid, gid) = lookup_user(user)?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(ProcessError::NotRoot {
                user: user.to_string(),
            });
        }
        Ok(RunAs {
            uid,
            gid,
            groups: supplementary_groups(user, gid),
        })
    }
}

/// The uid and gid of `user`.
pub fn lookup_user(user: &str) -> Result<(u32, u32), ProcessError> {
    let unknown = || ProcessError::UnknownUser {
        user: user.to_string(),
    };
    let name = CString::new(user).map_err(|_| unknown())?;
    // SAFETY: passwd is plain data; all-zero is a valid value that getpwnam_r overwrites.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the duration of the call; buf outlives the use of pwd's
    // string fields, and only the numeric ids are read.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return Err(unknown());
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}

/// The groups `user` belongs to, looked up before forking (the lookup reads files and allocates,
/// which a forked child of a threaded process must not do).
fn supplementary_groups(user: &str, gid: u32) -> Vec<libc::gid_t> {
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: groups has room for `count` entries; getgrouplist writes at most that many and
        // sets count to the number it needs.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count.max(0) as usize);
            return groups;
        }
        if count <= n || n > 65_536 {
            return vec![gid];
        }
        n = count;
    }
}
