//! Linux capability names and numbers, as `capability.h` has them: for the exec driver's
//! bounding set and the jobspec's check of `cap_add`/`cap_drop`.

/// Nomad's default `allow_caps` (Docker's default capability set): what stays in an `exec`
/// task's bounding set, and what a docker task may add by default.
pub const NOMAD_DEFAULT_CAPS: [&str; 13] = [
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "mknod",
    "net_bind_service",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
    "sys_chroot",
];

/// The number of a capability by its name (`chown` or `CAP_CHOWN`), as `capability.h` has it.
pub fn cap_number(name: &str) -> Option<u32> {
    let name = name.to_ascii_lowercase();
    let name = name.strip_prefix("cap_").unwrap_or(&name);
    const NAMES: [&str; 41] = [
        "chown",
        "dac_override",
        "dac_read_search",
        "fowner",
        "fsetid",
        "kill",
        "setgid",
        "setuid",
        "setpcap",
        "linux_immutable",
        "net_bind_service",
        "net_broadcast",
        "net_admin",
        "net_raw",
        "ipc_lock",
        "ipc_owner",
        "sys_module",
        "sys_rawio",
        "sys_chroot",
        "sys_ptrace",
        "sys_pacct",
        "sys_admin",
        "sys_boot",
        "sys_nice",
        "sys_resource",
        "sys_time",
        "sys_tty_config",
        "mknod",
        "lease",
        "audit_write",
        "audit_control",
        "setfcap",
        "mac_override",
        "mac_admin",
        "syslog",
        "wake_alarm",
        "block_suspend",
        "audit_read",
        "perfmon",
        "bpf",
        "checkpoint_restore",
    ];
    NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_kernels_numbers() {
        assert_eq!(cap_number("chown"), Some(0));
        assert_eq!(cap_number("CAP_SYS_ADMIN"), Some(21));
        assert_eq!(cap_number("checkpoint_restore"), Some(40));
        assert_eq!(cap_number("bogus"), None);
    }
}
