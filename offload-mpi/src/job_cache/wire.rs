//! The job cache's messages: their byte format, encoded and decoded here only, an image
//! checked by its SHA-256 on the way in. Owns no state and sends nothing.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | kind (below) |
//! | 1 | 3 | zero |
//! | 4 | 4 | reply tag, u32 LE: where the answer to an `Ask` goes (`Ask`, `Cancel`; else 0) |
//! | 8 | 32 | the compile key (zero in `Bye`, `ByeAck`) |
//! | 40 | 32 | SHA-256 of the image (`Put`, `Image` only) |
//! | 72 | n | the image (`Put`, `Image` only) |
//!
//! Kinds, to the server: 1 `Ask`, 2 `Put`, 3 `Failed`, 4 `Cancel`, 5 `Bye`; to a client:
//! 16 `Image`, 17 `Compile`, 18 `Local`, 19 `ByeAck`. A message that is short, of an
//! unknown kind, or whose image does not match its checksum is refused (`Err`), never used.

use offload_core::CompileKey;
use sha2::{Digest, Sha256};

/// Bytes before the checksum: kind, zero, tag, key.
const HEAD: usize = 40;
/// Bytes before an image.
const IMAGE_AT: usize = HEAD + 32;

/// One message of the job cache's protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// A client asks for the image of `key`; the answer goes to tag `tag`.
    Ask { key: CompileKey, tag: i32 },
    /// The client compiled `key` (the server told it to) and shares the image.
    Put { key: CompileKey, image: Vec<u8> },
    /// The client was told to compile `key` and it failed (or it will not compile it).
    Failed { key: CompileKey },
    /// The client stopped waiting for its `Ask` of `key` on tag `tag`.
    Cancel { key: CompileKey, tag: i32 },
    /// The client sends nothing more (it is finalizing).
    Bye,
    /// The image of `key`.
    Image { key: CompileKey, image: Vec<u8> },
    /// Nobody has `key`: the asker compiles it and sends `Put` (or `Failed`).
    Compile { key: CompileKey },
    /// The asker compiles `key` itself and shares nothing (the rank compiling it died or
    /// failed, or the server is closing).
    Local { key: CompileKey },
    /// The server's last message to a client that said `Bye`.
    ByeAck,
}

impl Msg {
    /// The message's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (kind, key, tag, image): (u8, Option<&CompileKey>, i32, Option<&[u8]>) = match self {
            Msg::Ask { key, tag } => (1, Some(key), *tag, None),
            Msg::Put { key, image } => (2, Some(key), 0, Some(image)),
            Msg::Failed { key } => (3, Some(key), 0, None),
            Msg::Cancel { key, tag } => (4, Some(key), *tag, None),
            Msg::Bye => (5, None, 0, None),
            Msg::Image { key, image } => (16, Some(key), 0, Some(image)),
            Msg::Compile { key } => (17, Some(key), 0, None),
            Msg::Local { key } => (18, Some(key), 0, None),
            Msg::ByeAck => (19, None, 0, None),
        };
        let mut bytes = Vec::with_capacity(IMAGE_AT + image.map_or(0, <[u8]>::len));
        bytes.extend_from_slice(&[kind, 0, 0, 0]);
        bytes.extend_from_slice(&(tag as u32).to_le_bytes());
        bytes.extend_from_slice(key.map_or(&[0u8; 32], |k| k.as_bytes()));
        if let Some(image) = image {
            bytes.extend_from_slice(&Sha256::digest(image));
            bytes.extend_from_slice(image);
        }
        bytes
    }

    /// The message of `bytes`, or why they are not one.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Msg, String> {
        if bytes.len() < HEAD {
            return Err(format!("a message of {} bytes", bytes.len()));
        }
        let tag = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as i32;
        let mut raw = [0u8; 32];
        raw.copy_from_slice(&bytes[8..HEAD]);
        let key = CompileKey::from_bytes(raw);
        let image = || -> Result<Vec<u8>, String> {
            if bytes.len() < IMAGE_AT {
                return Err(format!("an image message of {} bytes", bytes.len()));
            }
            let image = &bytes[IMAGE_AT..];
            if Sha256::digest(image).as_slice() != &bytes[HEAD..IMAGE_AT] {
                return Err(format!("the image of {key} does not match its checksum"));
            }
            Ok(image.to_vec())
        };
        let plain = |msg: Msg| {
            if bytes.len() == HEAD {
                Ok(msg)
            } else {
                Err(format!(
                    "a message of kind {} with {} bytes",
                    bytes[0],
                    bytes.len()
                ))
            }
        };
        match bytes[0] {
            1 => plain(Msg::Ask { key, tag }),
            2 => Ok(Msg::Put {
                key,
                image: image()?,
            }),
            3 => plain(Msg::Failed { key }),
            4 => plain(Msg::Cancel { key, tag }),
            5 => plain(Msg::Bye),
            16 => Ok(Msg::Image {
                key,
                image: image()?,
            }),
            17 => plain(Msg::Compile { key }),
            18 => plain(Msg::Local { key }),
            19 => plain(Msg::ByeAck),
            kind => Err(format!("a message of unknown kind {kind}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_decodes_to_itself() {
        let key = CompileKey::from_bytes([9; 32]);
        for msg in [
            Msg::Ask { key, tag: 31_000 },
            Msg::Put {
                key,
                image: b"an image".to_vec(),
            },
            Msg::Put {
                key,
                image: Vec::new(),
            },
            Msg::Failed { key },
            Msg::Cancel { key, tag: 16 },
            Msg::Bye,
            Msg::Image {
                key,
                image: vec![7; 100_000],
            },
            Msg::Compile { key },
            Msg::Local { key },
            Msg::ByeAck,
        ] {
            assert_eq!(Msg::decode(&msg.encode()), Ok(msg));
        }
    }

    #[test]
    fn a_changed_image_a_short_message_and_an_unknown_kind_are_refused() {
        let key = CompileKey::from_bytes([1; 32]);
        let mut bytes = Msg::Image {
            key,
            image: b"the image".to_vec(),
        }
        .encode();
        *bytes.last_mut().unwrap() ^= 1;
        let e = Msg::decode(&bytes).unwrap_err();
        assert!(e.contains("does not match its checksum"), "{e}");
        bytes.truncate(50); // cut inside the checksum
        assert!(Msg::decode(&bytes).is_err());
        assert!(Msg::decode(&[1; 39]).is_err());
        let mut ask = Msg::Ask { key, tag: 3 }.encode();
        ask.push(0); // a trailing byte
        assert!(Msg::decode(&ask).is_err());
        ask.pop();
        ask[0] = 99;
        assert!(Msg::decode(&ask).unwrap_err().contains("unknown kind 99"));
    }
}
