//! The seccomp side of process mode: the system calls confined code never needs, refused
//! with EPERM; `clone3` with ENOSYS (libc then falls back to `clone`, whose flags can be
//! read); and without network, `socket()` of every family (ENETUNREACH for IP, EACCES for
//! the rest, unix sockets included; `socketpair` stays).

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::ConfineSettings;

/// The seccomp programs: refused system calls (EPERM), `clone3` (ENOSYS, so libc falls
/// back to `clone`, whose namespace flags can be seen), and without network, sockets.
pub(super) fn filters(settings: &ConfineSettings) -> io::Result<Vec<BpfProgram>> {
    let bad = |e: seccompiler::BackendError| io::Error::other(format!("seccomp: {e}"));
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| io::Error::other("seccomp: this architecture is not supported"))?;
    let always = |n: i64| (n, vec![]);
    let refused: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_syslog,
        libc::SYS_quotactl,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
    ]
    .into_iter()
    .map(always)
    .chain([(libc::SYS_clone, namespace_flags()?)])
    .collect();
    let mut programs = vec![program(refused, libc::EPERM, arch)?];
    programs.push(program(
        [always(libc::SYS_clone3)].into(),
        libc::ENOSYS,
        arch,
    )?);
    if !settings.network {
        let family = |op, family: i32| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, family as u64).map_err(bad)
        };
        let inet = vec![
            SeccompRule::new(vec![family(SeccompCmpOp::Eq, libc::AF_INET)?]).map_err(bad)?,
            SeccompRule::new(vec![family(SeccompCmpOp::Eq, libc::AF_INET6)?]).map_err(bad)?,
        ];
        programs.push(program(
            [(libc::SYS_socket, inet)].into(),
            libc::ENETUNREACH,
            arch,
        )?);
        let other = vec![
            SeccompRule::new(vec![
                family(SeccompCmpOp::Ne, libc::AF_INET)?,
                family(SeccompCmpOp::Ne, libc::AF_INET6)?,
            ])
            .map_err(bad)?,
        ];
        programs.push(program(
            [(libc::SYS_socket, other)].into(),
            libc::EACCES,
            arch,
        )?);
    }
    Ok(programs)
}

/// `clone` with any flag that makes a namespace.
fn namespace_flags() -> io::Result<Vec<SeccompRule>> {
    [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ]
    .into_iter()
    .map(|flag| {
        let flag = flag as u64;
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| io::Error::other(format!("seccomp: {e}")))
    })
    .collect()
}

fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    arch: TargetArch,
) -> io::Result<BpfProgram> {
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| io::Error::other(format!("seccomp: {e}")))
}
