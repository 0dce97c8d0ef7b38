//! The sockets under an IPC endpoint (I4): Unix-domain `SOCK_SEQPACKET`, created 0600 in a
//! private 0700 directory, every connection checked with `SO_PEERCRED`, descriptors passed
//! with `SCM_RIGHTS`. Everything here is safe code over rustix; nothing here knows the
//! messages.

use crate::sync::{AtomicU64, Ordering, statics};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::ipc::wire::{MAX_FDS, MAX_MESSAGE};

statics! {
    /// Numbers the sockets of this process (const-initialised).
    static NEXT_SOCKET: AtomicU64 = AtomicU64::new(1);
}

/// The directory endpoints' sockets live in: `$XDG_RUNTIME_DIR/offload-ipc` where that is
/// set, else `<temp dir>/offload-ipc-<uid>`, created 0700. An existing one must be a real
/// directory (not a link) owned by us and closed to everyone else, or it is refused.
pub(crate) fn private_dir() -> io::Result<PathBuf> {
    let uid = rustix::process::geteuid();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(base) if !base.is_empty() => Path::new(&base).join("offload-ipc"),
        _ => std::env::temp_dir().join(format!("offload-ipc-{}", uid.as_raw())),
    };
    match rustix::fs::mkdir(&dir, Mode::RWXU) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let st = rustix::fs::lstat(&dir)?;
    let private = FileType::from_raw_mode(st.st_mode) == FileType::Directory
        && st.st_uid == uid.as_raw()
        && st.st_mode & 0o077 == 0;
    if !private {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of this user (it must be a directory owned by \
                 uid {} with mode 0700)",
                dir.display(),
                uid.as_raw()
            ),
        ));
    }
    Ok(dir)
}

/// A listening socket at a fresh path of the private directory, 0600: named
/// `<pid>-<token>-<n>.sock`, where the token is this copy of offload's own (two copies in
/// one process, say two plugins each embedding it, never take each other's name, I4), and
/// never bound over an existing file. First the sockets of processes that are gone are
/// removed ([`remove_stale`]).
pub(crate) fn listen() -> io::Result<(OwnedFd, PathBuf)> {
    let dir = private_dir()?;
    remove_stale(&dir);
    let pid = rustix::process::getpid().as_raw_nonzero();
    let token = crate::ipc::process_token() as u32;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    let mut attempts = 0;
    let path = loop {
        let n = NEXT_SOCKET.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{pid}-{token:08x}-{n}.sock"));
        let addr = SocketAddrUnix::new(&path)?;
        match rustix::net::bind(&fd, &addr) {
            Ok(()) => break path,
            // Somebody's file: never replaced; the next number.
            Err(rustix::io::Errno::ADDRINUSE) if attempts < 16 => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    };
    rustix::fs::chmod(&path, Mode::RUSR | Mode::WUSR)?;
    rustix::net::listen(&fd, 128)?;
    Ok((fd, path))
}

/// Removes the socket files in `dir` whose owning process is gone (its pid, the name's
/// first part, names no process): a killed process leaves its socket behind. A live
/// process's are never touched (a pid in use by another process keeps its file: the check
/// cannot tell, and leaving one is harmless). Best effort: errors are ignored.
pub(crate) fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_suffix(".sock")
            .and_then(|stem| stem.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        if rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH) {
            // Best effort: a dead process's socket file; another sweeper may have taken it.
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The peer's user must be ours (`SO_PEERCRED`); gives its pid.
pub(crate) fn check_peer(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(fd)?;
    let ours = rustix::process::geteuid();
    if cred.uid != ours {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the peer runs as uid {}, not {} (endpoints accept only their own user)",
                cred.uid.as_raw(),
                ours.as_raw()
            ),
        ));
    }
    Ok(cred.pid.as_raw_nonzero().get() as u32)
}

/// Connects to the endpoint listening at `path` and checks its user; the socket is
/// non-blocking from then on. Gives the socket and the peer's pid.
pub(crate) fn connect(path: &Path) -> io::Result<(OwnedFd, u32)> {
    let addr = SocketAddrUnix::new(path)?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&fd, &addr)?;
    let pid = check_peer(fd.as_fd())?;
    rustix::io::ioctl_fionbio(&fd, true)?;
    Ok((fd, pid))
}

/// Accepts one pending connection, if any, and checks its user.
pub(crate) fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<(OwnedFd, io::Result<u32>)>> {
    match rustix::net::accept_with(listener, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK) {
        Ok(fd) => {
            let pid = check_peer(fd.as_fd());
            Ok(Some((fd, pid)))
        }
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What a non-blocking send did.
pub(crate) enum Sent {
    Done,
    WouldBlock,
}

/// Sends one packet with at most one descriptor, without blocking.
pub(crate) fn send(
    fd: BorrowedFd<'_>,
    bytes: &[u8],
    with: Option<BorrowedFd<'_>>,
) -> io::Result<Sent> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(with) = with {
        fds = [with];
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    let iov = [io::IoSlice::new(bytes)];
    match rustix::net::sendmsg(
        fd,
        &iov,
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    ) {
        Ok(n) if n == bytes.len() => Ok(Sent::Done),
        Ok(n) => Err(io::Error::other(format!(
            "short packet: {n} of {} bytes",
            bytes.len()
        ))),
        Err(rustix::io::Errno::AGAIN) => Ok(Sent::WouldBlock),
        Err(e) => Err(e.into()),
    }
}

/// One received packet: its bytes (at most `MAX_MESSAGE + 1`, so a longer one shows as
/// longer), whether the kernel truncated the packet or its descriptors, and the
/// descriptors (closed when dropped).
pub(crate) struct Packet {
    pub(crate) bytes: Vec<u8>,
    pub(crate) truncated: bool,
    pub(crate) fds: Vec<OwnedFd>,
}

/// Receives one packet without blocking: `Ok(None)` if there is none now; an orderly close
/// by the peer is `UnexpectedEof`.
pub(crate) fn recv(fd: BorrowedFd<'_>) -> io::Result<Option<Packet>> {
    let mut buf = vec![0u8; MAX_MESSAGE + 1];
    // Room for more descriptors than any message carries, so extra ones arrive (and are
    // closed) instead of being dropped silently by the kernel.
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS + 3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let flags = RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC;
    let got = match rustix::net::recvmsg(fd, &mut iov, &mut control, flags) {
        Ok(got) => got,
        Err(rustix::io::Errno::AGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let truncated = got
        .flags
        .intersects(rustix::net::ReturnFlags::TRUNC | rustix::net::ReturnFlags::CTRUNC);
    buf.truncate(got.bytes.min(MAX_MESSAGE + 1));
    Ok(Some(Packet {
        bytes: buf,
        truncated,
        fds,
    }))
}
