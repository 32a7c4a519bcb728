//! The seccomp side of process mode: the system calls confined code never needs, refused
//! with EPERM; `clone3` with ENOSYS (libc then falls back to `clone`, whose flags can be
//! read); without network, `socket()` of every family (ENETUNREACH for IP, EACCES for the
//! rest, unix sockets included; `socketpair` stays); with an allow-list, every socket but a
//! TCP one and TCP fast-open (Landlock then decides where TCP may connect).

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{ConfineSettings, Network};

/// The seccomp programs: refused system calls (EPERM), `clone3` (ENOSYS, so libc falls
/// back to `clone`, whose namespace flags can be seen), and the sockets `network` refuses.
pub(super) fn filters(settings: &ConfineSettings) -> io::Result<Vec<BpfProgram>> {
    let arch = arch()?;
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
    match &settings.network {
        Network::On => {}
        Network::Off => programs.extend(no_sockets()?),
        Network::Only(_) => programs.extend(tcp_alone()?),
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

fn bad(e: seccompiler::BackendError) -> io::Error {
    io::Error::other(format!("seccomp: {e}"))
}

fn arch() -> io::Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| io::Error::other("seccomp: this architecture is not supported"))
}

fn arg(index: u8, op: SeccompCmpOp, value: u64) -> io::Result<SeccompCondition> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(bad)
}

fn rule(conditions: Vec<SeccompCondition>) -> io::Result<SeccompRule> {
    SeccompRule::new(conditions).map_err(bad)
}

/// No socket at all: IP ones are unreachable, the rest refused.
fn no_sockets() -> io::Result<Vec<BpfProgram>> {
    let family = |op, family: i32| arg(0, op, family as u64);
    let inet = vec![
        rule(vec![family(SeccompCmpOp::Eq, libc::AF_INET)?])?,
        rule(vec![family(SeccompCmpOp::Eq, libc::AF_INET6)?])?,
    ];
    let other = vec![rule(vec![
        family(SeccompCmpOp::Ne, libc::AF_INET)?,
        family(SeccompCmpOp::Ne, libc::AF_INET6)?,
    ])?];
    Ok(vec![
        program(
            [(libc::SYS_socket, inet)].into(),
            libc::ENETUNREACH,
            arch()?,
        )?,
        program([(libc::SYS_socket, other)].into(), libc::EACCES, arch()?)?,
    ])
}

/// TCP sockets alone (Landlock holds their connections to the proxy), and no fast-open,
/// which sends data without a `connect` for Landlock to see.
fn tcp_alone() -> io::Result<Vec<BpfProgram>> {
    let mut not_tcp = vec![];
    for family in [libc::AF_INET, libc::AF_INET6] {
        let family = arg(0, SeccompCmpOp::Eq, family as u64)?;
        // Any type but a stream (flags such as SOCK_CLOEXEC sit above the low bits).
        for kind in [
            libc::SOCK_DGRAM,
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_DCCP,
        ] {
            let kind = arg(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?;
            not_tcp.push(rule(vec![family.clone(), kind])?);
        }
        // A stream of another protocol than TCP (SCTP, MPTCP).
        not_tcp.push(rule(vec![
            family,
            arg(2, SeccompCmpOp::Ne, 0)?,
            arg(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
    }
    let other = vec![rule(vec![
        arg(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
        arg(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
    ])?];
    let fast_open = libc::MSG_FASTOPEN as u64;
    let fast = [
        (
            libc::SYS_sendto,
            vec![rule(vec![arg(
                3,
                SeccompCmpOp::MaskedEq(fast_open),
                fast_open,
            )?])?],
        ),
        (
            libc::SYS_sendmsg,
            vec![rule(vec![arg(
                2,
                SeccompCmpOp::MaskedEq(fast_open),
                fast_open,
            )?])?],
        ),
        (
            libc::SYS_setsockopt,
            vec![rule(vec![
                arg(1, SeccompCmpOp::Eq, libc::IPPROTO_TCP as u64)?,
                arg(2, SeccompCmpOp::Eq, libc::TCP_FASTOPEN_CONNECT as u64)?,
            ])?],
        ),
    ];
    Ok(vec![
        program(
            [(libc::SYS_socket, not_tcp)].into(),
            libc::ENETUNREACH,
            arch()?,
        )?,
        program([(libc::SYS_socket, other)].into(), libc::EACCES, arch()?)?,
        program(fast.into(), libc::EPERM, arch()?)?,
    ])
}
