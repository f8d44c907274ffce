//! The holder's wire format: length-prefixed JSON frames over a unix stream socket, with at most
//! one fd riding on a frame (`SCM_RIGHTS`).
//!
//! A frame is a `u32` little-endian length, then that many bytes of JSON. An fd travels with the
//! first byte of its frame, and a frame is always read with `recvmsg` in two exact steps (header,
//! body), never past its end: so the fd that arrives while reading a frame is that frame's.

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr, recvmsg, sendmsg};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::HolderError;

/// Largest frame body either side accepts. The biggest message is one entry's metadata (a mount's
/// options and credentials: a few KiB), so this only stops a confused peer from making the other
/// allocate without bound.
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// What a client asks. `meta` is the caller's metadata as text; see the module docs of
/// [`super`] for why it must be UTF-8.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    Keep {
        name: String,
        meta: String,
    },
    Update {
        name: String,
        meta: String,
    },
    List,
    Release {
        name: String,
    },
    /// Whether the holder was told to stop (SIGTERM or SIGINT).
    Status,
}

/// What the holder answers: `Ok` or `Error` to each request, except `List`, answered with one
/// `Entry` per held fd (each with its fd attached), then `End`.
#[derive(Serialize, Deserialize, PartialEq)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub(crate) enum Reply {
    Ok,
    Entry { name: String, meta: String },
    End,
    Error { error: String },
    Status { stopping: bool },
}

/// Not derived: an entry's metadata may hold credentials.
impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Ok => f.write_str("Ok"),
            Reply::Entry { name, .. } => write!(f, "Entry {{ name: {name:?}, meta: *** }}"),
            Reply::End => f.write_str("End"),
            Reply::Error { error } => write!(f, "Error {{ error: {error:?} }}"),
            Reply::Status { stopping } => write!(f, "Status {{ stopping: {stopping} }}"),
        }
    }
}

/// The frame of `message`: length header and JSON body.
pub(crate) fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, HolderError> {
    let body = serde_json::to_vec(message)
        .map_err(|e| HolderError::Protocol(format!("cannot encode a message: {e}")))?;
    let len = body_len(body.len())?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The body length a header announces, if acceptable.
pub(crate) fn decode_len(header: [u8; 4]) -> Result<usize, HolderError> {
    let len = u32::from_le_bytes(header) as usize;
    body_len(len).map(|_| len)
}

fn body_len(len: usize) -> Result<u32, HolderError> {
    match u32::try_from(len) {
        Ok(small) if len <= MAX_FRAME => Ok(small),
        _ => Err(HolderError::FrameTooLarge { len }),
    }
}

/// Sends one message, with `fd` attached to its first byte.
pub(crate) fn send<T: Serialize>(
    stream: &mut UnixStream,
    message: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), HolderError> {
    let frame = encode(message)?;
    let raw: Vec<RawFd> = fd.iter().map(|fd| fd.as_raw_fd()).collect();
    let cmsgs: Vec<ControlMessage<'_>> = if raw.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    // MSG_NOSIGNAL: a peer that went away is an EPIPE error, not a process-killing SIGPIPE.
    let sent = loop {
        match sendmsg::<UnixAddr>(
            stream.as_raw_fd(),
            &[IoSlice::new(&frame)],
            &cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(sent) => break sent,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io_error(e.into())),
        }
    };
    // The fd went with the first chunk; the rest is plain bytes.
    stream.write_all(&frame[sent..]).map_err(io_error)
}

/// Receives one message and the fd that came with it. `Ok(None)` is a clean end of the stream
/// between frames.
pub(crate) fn recv<T: DeserializeOwned>(
    stream: &UnixStream,
) -> Result<Option<(T, Option<OwnedFd>)>, HolderError> {
    let mut fds = Vec::new();
    let mut header = [0u8; 4];
    if !recv_exact(stream, &mut header, &mut fds)? {
        return Ok(None);
    }
    let mut body = vec![0u8; decode_len(header)?];
    if !recv_exact(stream, &mut body, &mut fds)? {
        return Err(HolderError::Protocol(
            "connection closed inside a frame".into(),
        ));
    }
    if fds.len() > 1 {
        return Err(HolderError::Protocol(format!(
            "{} fds attached to one message; at most 1 is allowed",
            fds.len()
        )));
    }
    let message = serde_json::from_slice(&body)
        .map_err(|e| HolderError::Protocol(format!("malformed message: {e}")))?;
    Ok(Some((message, fds.pop())))
}

/// Fills `buf`, collecting any fds that arrive. `false` when the stream ended before its first
/// byte.
fn recv_exact(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<bool, HolderError> {
    let mut filled = 0;
    while filled < buf.len() {
        // Room for one fd (the kernel rounds it up to two on 64-bit). A same-uid peer that sends
        // more gets its message refused; any of its fds beyond what fits are closed by the kernel.
        let mut space = nix::cmsg_space!(RawFd);
        let mut iov = [IoSliceMut::new(&mut buf[filled..])];
        let msg = match recvmsg::<UnixAddr>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => msg,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io_error(e.into())),
        };
        let cmsgs = msg
            .cmsgs()
            .map_err(|_| HolderError::Protocol("too many fds attached to a message".into()))?;
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                // SAFETY: the kernel just installed these fds in this process for us alone.
                fds.extend(
                    received
                        .into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        match msg.bytes {
            0 if filled == 0 => return Ok(false),
            0 => {
                return Err(HolderError::Protocol(
                    "connection closed inside a frame".into(),
                ));
            }
            n => filled += n,
        }
    }
    Ok(true)
}

/// A timeout is worth its own error: it names the likely cause (a wedged holder).
fn io_error(e: std::io::Error) -> HolderError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => HolderError::Timeout,
        _ => HolderError::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_is_little_endian_length_then_json() {
        let frame = encode(&Request::Release { name: "a".into() }).unwrap();
        let body = br#"{"op":"release","name":"a"}"#;
        assert_eq!(frame[..4], (body.len() as u32).to_le_bytes());
        assert_eq!(&frame[4..], body);
        assert_eq!(
            decode_len(frame[..4].try_into().unwrap()).unwrap(),
            body.len()
        );
    }

    #[test]
    fn oversize_frame_is_rejected_both_ways() {
        let header = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            decode_len(header),
            Err(HolderError::FrameTooLarge { .. })
        ));
        let huge = Request::Update {
            name: "a".into(),
            meta: "x".repeat(MAX_FRAME),
        };
        assert!(matches!(
            encode(&huge),
            Err(HolderError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn message_and_fd_survive_a_socket_pair() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (reader, mut writer) = std::io::pipe().unwrap();
        let keep = Request::Keep {
            name: "m".into(),
            meta: "{}".into(),
        };
        send(&mut a, &keep, Some(std::os::fd::AsFd::as_fd(&reader))).unwrap();
        send(&mut a, &Request::List, None).unwrap();
        let (got, fd) = recv::<Request>(&b).unwrap().unwrap();
        assert_eq!(got, keep);
        writer.write_all(b"hi").unwrap();
        let mut through = std::fs::File::from(fd.unwrap());
        let mut buf = [0u8; 2];
        std::io::Read::read_exact(&mut through, &mut buf).unwrap();
        assert_eq!(&buf, b"hi");
        let (got, fd) = recv::<Request>(&b).unwrap().unwrap();
        assert_eq!((got, fd.is_none()), (Request::List, true));
        drop(a);
        assert!(recv::<Request>(&b).unwrap().is_none());
    }
}
