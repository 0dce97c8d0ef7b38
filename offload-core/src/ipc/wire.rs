//! The IPC wire format: every message an endpoint sends or accepts, encoded and decoded
//! here and nowhere else (I2, I4).
//!
//! One message is one `SOCK_SEQPACKET` packet: a 16-byte header, then a body whose length
//! the header states and the kind fixes. All integers are little-endian. Header:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `OFIP` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | kind (below) |
//! | 8 | 4 | body length |
//! | 12 | 4 | reserved (0) |
//!
//! Bodies (`u32`s unless said):
//!
//! | kind | message | body | descriptors | sent by |
//! |---|---|---|---|---|
//! | 1 | `Hello` | token `u64`, pid, reserved | 0 | both ends, first |
//! | 2 | `Map` | entry, generation, tag `u64`, offset `u64`, length `u64`, then an [`IpcHandle`]'s bytes | the handle's (0 or 1) | sender: a cache miss |
//! | 3 | `Use` | entry, generation, mapping, reserved, tag `u64`, offset `u64`, length `u64` | 0 | sender: a cache hit |
//! | 4 | `OneShot` | sequence, reserved, tag `u64`, offset `u64`, length `u64`, then a handle's bytes | the handle's | sender: no cache entry to use |
//! | 5 | `Mapped` | entry, generation, mapping | 0 | receiver: answers `Map` |
//! | 6 | `Failed` | entry, generation, reason code | 0 | receiver: a `Map`/`Use`/`OneShot` it could not deliver |
//! | 7 | `Done` | entry, generation | 0 | receiver: the view of a delivery was dropped |
//! | 8 | `Unmap` | entry, generation, mapping | 0 | sender: close that mapping |
//! | 9 | `UnmapAck` | entry, generation | 0 | receiver: it is closed |
//!
//! A one-shot delivery's `Failed`/`Done` carry entry [`ONE_SHOT`] and its sequence number as
//! the generation. Every delivery (`Map`, `Use`, `OneShot`) is answered by exactly one
//! `Done` or `Failed`; that is how the sender counts sends in flight.
//!
//! Decoding checks everything and trusts nothing: magic, version, kind, the exact body
//! length of the kind, reserved fields, the handle's own format, the range against the
//! allocation, and the descriptor count (a message may carry exactly the descriptors its
//! kind says; any other descriptor is closed and the message refused).

use std::os::fd::OwnedFd;

use crate::error::Error;
use crate::ipc::handle::{IpcHandle, MAX_HANDLE_BYTES};

const MAGIC: [u8; 4] = *b"OFIP";
/// The protocol version this offload speaks.
pub const VERSION: u16 = 1;
/// Header bytes.
pub const HEADER: usize = 16;
/// The largest message: a `Map` or `OneShot` with the largest handle.
pub const MAX_MESSAGE: usize = HEADER + DELIVERY_FIXED + MAX_HANDLE_BYTES;
/// The most descriptors any message carries.
pub const MAX_FDS: usize = 1;
/// The entry number of one-shot deliveries' answers.
pub const ONE_SHOT: u32 = u32::MAX;

const DELIVERY_FIXED: usize = 32;

/// Why a receiver could not deliver (the `Failed` reason code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FailCode {
    /// The import failed (bad handle, out of memory, a device not here).
    Import = 1,
    /// A `Use` of a mapping the receiver does not have.
    UnknownMapping = 2,
    /// The range is outside the mapping.
    Range = 3,
    /// The receiver is shutting down.
    Closing = 4,
}

impl FailCode {
    fn from_u32(v: u32) -> Option<FailCode> {
        [
            FailCode::Import,
            FailCode::UnknownMapping,
            FailCode::Range,
            FailCode::Closing,
        ]
        .into_iter()
        .find(|c| *c as u32 == v)
    }
}

/// One message.
#[derive(Debug)]
pub enum Message {
    /// First message each way: who is there.
    Hello {
        /// The process token of the sender (see `IpcHandle::allocation`).
        token: u64,
        /// Its process id.
        pid: u32,
    },
    /// A range of an allocation the receiver has not mapped yet: map it, keep the mapping
    /// as (entry, generation), deliver a view.
    Map {
        /// The sender's cache entry.
        entry: u32,
        /// The entry's generation (a one-shot's sequence number where the entry is `ONE_SHOT`).
        generation: u32,
        /// The sender's tag, handed to the receiver.
        tag: u64,
        /// Start of the range, in bytes from the start of the allocation.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
        /// The exported allocation.
        handle: IpcHandle,
    },
    /// A range of an allocation the receiver has mapped: deliver a view.
    Use {
        /// The sender's cache entry.
        entry: u32,
        /// The entry's generation (a one-shot's sequence number where the entry is `ONE_SHOT`).
        generation: u32,
        /// The receiver's id for its mapping (0: not known yet).
        mapping: u32,
        /// The sender's tag, handed to the receiver.
        tag: u64,
        /// Start of the range, in bytes from the start of the allocation.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
    },
    /// Map, deliver, and close the mapping when its view is dropped.
    OneShot {
        /// Numbers the sender's one-shots.
        sequence: u32,
        /// The sender's tag, handed to the receiver.
        tag: u64,
        /// Start of the range, in bytes from the start of the allocation.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
        /// The exported allocation.
        handle: IpcHandle,
    },
    /// The receiver mapped (entry, generation) as `mapping`.
    Mapped {
        /// The sender's cache entry.
        entry: u32,
        /// The entry's generation (a one-shot's sequence number where the entry is `ONE_SHOT`).
        generation: u32,
        /// The receiver's id for its mapping (0: not known yet).
        mapping: u32,
    },
    /// A delivery failed.
    Failed {
        /// The sender's cache entry.
        entry: u32,
        /// The entry's generation (a one-shot's sequence number where the entry is `ONE_SHOT`).
        generation: u32,
        /// Why.
        code: FailCode,
    },
    /// A delivery's view was dropped.
    Done {
        /// The sender's cache entry (`ONE_SHOT` for a one-shot).
        entry: u32,
        /// Its generation (a one-shot's sequence number).
        generation: u32,
    },
    /// Close the mapping of (entry, generation).
    Unmap {
        /// The sender's cache entry.
        entry: u32,
        /// The entry's generation (a one-shot's sequence number where the entry is `ONE_SHOT`).
        generation: u32,
        /// The receiver's id for its mapping (0: not known yet).
        mapping: u32,
    },
    /// The mapping of (entry, generation) is closed.
    UnmapAck {
        /// The sender's cache entry (`ONE_SHOT` for a one-shot).
        entry: u32,
        /// Its generation (a one-shot's sequence number).
        generation: u32,
    },
}

/// Why a packet was refused.
#[derive(Debug)]
pub enum WireError {
    /// Shorter than a header, or than its header says.
    Truncated(usize),
    /// Longer than the largest message (the socket truncated it).
    Oversized,
    /// Not `OFIP`, another version, or reserved bits set.
    Header(String),
    /// A kind this version does not have.
    Kind(u16),
    /// A body length that is not the kind's.
    Length {
        /// The message kind.
        kind: u16,
        /// The body length it came with.
        body: usize,
    },
    /// Descriptors the kind does not carry, or too many.
    Descriptors {
        /// The message kind.
        kind: u16,
        /// Descriptors that came.
        got: usize,
    },
    /// The handle inside is malformed, or the range is outside it.
    Handle(Error),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Truncated(n) => write!(f, "truncated message ({n} bytes)"),
            WireError::Oversized => write!(f, "message longer than {MAX_MESSAGE} bytes"),
            WireError::Header(why) => write!(f, "bad header: {why}"),
            WireError::Kind(k) => write!(f, "unknown message kind {k}"),
            WireError::Length { kind, body } => {
                write!(f, "kind {kind} with a {body}-byte body")
            }
            WireError::Descriptors { kind, got } => {
                write!(f, "kind {kind} with {got} descriptor(s)")
            }
            WireError::Handle(e) => write!(f, "{e}"),
        }
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u16) -> Writer {
        let mut w = Writer(Vec::with_capacity(MAX_MESSAGE));
        w.0.extend_from_slice(&MAGIC);
        w.u16(VERSION);
        w.u16(kind);
        w.u32(0); // body length, set by `finish`
        w.u32(0);
        w
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn finish(&mut self) -> Vec<u8> {
        let body = (self.0.len() - HEADER) as u32;
        self.0[8..12].copy_from_slice(&body.to_le_bytes());
        std::mem::take(&mut self.0)
    }
}

impl Message {
    fn kind(&self) -> u16 {
        match self {
            Message::Hello { .. } => 1,
            Message::Map { .. } => 2,
            Message::Use { .. } => 3,
            Message::OneShot { .. } => 4,
            Message::Mapped { .. } => 5,
            Message::Failed { .. } => 6,
            Message::Done { .. } => 7,
            Message::Unmap { .. } => 8,
            Message::UnmapAck { .. } => 9,
        }
    }

    /// The packet's bytes and the descriptor that travels with it (a handle's).
    pub fn encode(self) -> (Vec<u8>, Option<OwnedFd>) {
        let mut w = Writer::new(self.kind());
        match self {
            Message::Hello { token, pid } => (w.u64(token).u32(pid).u32(0).finish(), None),
            Message::Map {
                entry,
                generation,
                tag,
                offset,
                len,
                handle,
            } => {
                let (bytes, fd) = handle.into_parts();
                w.u32(entry).u32(generation).u64(tag).u64(offset).u64(len);
                (w.bytes(&bytes).finish(), fd)
            }
            Message::Use {
                entry,
                generation,
                mapping,
                tag,
                offset,
                len,
            } => (
                w.u32(entry)
                    .u32(generation)
                    .u32(mapping)
                    .u32(0)
                    .u64(tag)
                    .u64(offset)
                    .u64(len)
                    .finish(),
                None,
            ),
            Message::OneShot {
                sequence,
                tag,
                offset,
                len,
                handle,
            } => {
                let (bytes, fd) = handle.into_parts();
                w.u32(sequence).u32(0).u64(tag).u64(offset).u64(len);
                (w.bytes(&bytes).finish(), fd)
            }
            Message::Mapped {
                entry,
                generation,
                mapping,
            }
            | Message::Unmap {
                entry,
                generation,
                mapping,
            } => (w.u32(entry).u32(generation).u32(mapping).finish(), None),
            Message::Failed {
                entry,
                generation,
                code,
            } => (w.u32(entry).u32(generation).u32(code as u32).finish(), None),
            Message::Done { entry, generation } | Message::UnmapAck { entry, generation } => {
                (w.u32(entry).u32(generation).finish(), None)
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes[self.at..self.at + 4]);
        self.at += 4;
        u32::from_le_bytes(b)
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[self.at..self.at + 8]);
        self.at += 8;
        u64::from_le_bytes(b)
    }
    fn rest(&self) -> &[u8] {
        &self.bytes[self.at..]
    }
}

/// Decodes one packet of `len` bytes (the socket's count; more than `bytes.len()` means it
/// was truncated) with the descriptors that came with it. On refusal the descriptors are
/// closed (dropped) and nothing was mapped.
pub fn decode(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Message, WireError> {
    if bytes.len() > MAX_MESSAGE {
        return Err(WireError::Oversized);
    }
    if bytes.len() < HEADER {
        return Err(WireError::Truncated(bytes.len()));
    }
    if bytes[..4] != MAGIC {
        return Err(WireError::Header(
            "not an offload IPC message (magic)".into(),
        ));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(WireError::Header(format!(
            "protocol version {version}; this offload speaks {VERSION}"
        )));
    }
    let kind = u16::from_le_bytes([bytes[6], bytes[7]]);
    let mut r = Reader { bytes, at: 8 };
    let body = r.u32() as usize;
    if r.u32() != 0 {
        return Err(WireError::Header("reserved header bytes are set".into()));
    }
    if body != bytes.len() - HEADER {
        return Err(WireError::Truncated(bytes.len()));
    }
    let expect = |want: usize| {
        if body == want {
            Ok(())
        } else {
            Err(WireError::Length { kind, body })
        }
    };
    let carries = matches!(kind, 2 | 4);
    if !carries && !fds.is_empty() {
        return Err(WireError::Descriptors {
            kind,
            got: fds.len(),
        });
    }
    let reserved = |v: u32| {
        if v == 0 {
            Ok(())
        } else {
            Err(WireError::Header("a reserved field is set".into()))
        }
    };
    let message = match kind {
        1 => {
            expect(16)?;
            let token = r.u64();
            let pid = r.u32();
            reserved(r.u32())?;
            Message::Hello { token, pid }
        }
        2 | 4 => {
            if body < DELIVERY_FIXED {
                return Err(WireError::Length { kind, body });
            }
            if fds.len() > MAX_FDS {
                return Err(WireError::Descriptors {
                    kind,
                    got: fds.len(),
                });
            }
            let (a, b) = (r.u32(), r.u32());
            let (tag, offset, len) = (r.u64(), r.u64(), r.u64());
            let handle = IpcHandle::from_parts(r.rest(), fds.into_iter().next())
                .map_err(WireError::Handle)?;
            let inside = offset
                .checked_add(len)
                .is_some_and(|end| end <= handle.size() && len > 0);
            if !inside {
                return Err(WireError::Handle(Error::invalid(
                    "IpcEndpoint::recv",
                    format!(
                        "range {offset}..+{len} of a {}-byte allocation",
                        handle.size()
                    ),
                )));
            }
            if kind == 2 {
                Message::Map {
                    entry: a,
                    generation: b,
                    tag,
                    offset,
                    len,
                    handle,
                }
            } else {
                reserved(b)?;
                Message::OneShot {
                    sequence: a,
                    tag,
                    offset,
                    len,
                    handle,
                }
            }
        }
        3 => {
            expect(40)?;
            let (entry, generation, mapping) = (r.u32(), r.u32(), r.u32());
            reserved(r.u32())?;
            let (tag, offset, len) = (r.u64(), r.u64(), r.u64());
            if len == 0 || offset.checked_add(len).is_none() {
                return Err(WireError::Length { kind, body });
            }
            Message::Use {
                entry,
                generation,
                mapping,
                tag,
                offset,
                len,
            }
        }
        5 | 8 => {
            expect(12)?;
            let (entry, generation, mapping) = (r.u32(), r.u32(), r.u32());
            if kind == 5 {
                Message::Mapped {
                    entry,
                    generation,
                    mapping,
                }
            } else {
                Message::Unmap {
                    entry,
                    generation,
                    mapping,
                }
            }
        }
        6 => {
            expect(12)?;
            let (entry, generation) = (r.u32(), r.u32());
            let code = r.u32();
            let code = FailCode::from_u32(code)
                .ok_or_else(|| WireError::Header(format!("failure code {code}")))?;
            Message::Failed {
                entry,
                generation,
                code,
            }
        }
        7 | 9 => {
            expect(8)?;
            let (entry, generation) = (r.u32(), r.u32());
            if kind == 7 {
                Message::Done { entry, generation }
            } else {
                Message::UnmapAck { entry, generation }
            }
        }
        other => return Err(WireError::Kind(other)),
    };
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: Message) -> Message {
        let (bytes, fd) = m.encode();
        decode(&bytes, fd.into_iter().collect()).unwrap()
    }

    #[test]
    fn fixed_messages_round_trip() {
        assert!(matches!(
            round_trip(Message::Hello { token: 7, pid: 9 }),
            Message::Hello { token: 7, pid: 9 }
        ));
        assert!(matches!(
            round_trip(Message::Use {
                entry: 1,
                generation: 2,
                mapping: 3,
                tag: 4,
                offset: 5,
                len: 6
            }),
            Message::Use {
                entry: 1,
                generation: 2,
                mapping: 3,
                tag: 4,
                offset: 5,
                len: 6
            }
        ));
        assert!(matches!(
            round_trip(Message::Failed {
                entry: ONE_SHOT,
                generation: 1,
                code: FailCode::Range
            }),
            Message::Failed {
                code: FailCode::Range,
                ..
            }
        ));
        assert!(matches!(
            round_trip(Message::UnmapAck {
                entry: 3,
                generation: 4
            }),
            Message::UnmapAck {
                entry: 3,
                generation: 4
            }
        ));
    }

    #[test]
    fn descriptors_on_messages_without_them_are_refused() {
        let (bytes, _) = Message::Done {
            entry: 1,
            generation: 1,
        }
        .encode();
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        assert!(matches!(
            decode(&bytes, vec![fd]),
            Err(WireError::Descriptors { kind: 7, got: 1 })
        ));
    }

    #[test]
    fn every_truncation_is_refused() {
        let (bytes, _) = Message::Use {
            entry: 1,
            generation: 2,
            mapping: 3,
            tag: 4,
            offset: 5,
            len: 6,
        }
        .encode();
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], Vec::new()).is_err(), "{len}");
        }
    }
}
