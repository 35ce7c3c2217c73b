//! The bootstrap's framing: every message is one frame,
//!
//! ```text
//! magic    4 bytes  "GSNC"
//! version  u16 LE   PROTOCOL_VERSION
//! kind     u8       Kind
//! length   u32 LE   payload bytes, at most MAX_PAYLOAD
//! payload  length bytes
//! ```
//!
//! and every read and write has a deadline (a socket timeout set to the time left), so a peer
//! that sends nothing, or half a frame, is a timeout rather than a hang. The magic is read and
//! checked before anything else, so a peer speaking another protocol (an HTTP client, a port
//! scanner) is named as sending garbage after its first four bytes.

use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Peer};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"GSNC";
/// The protocol version this build speaks; a peer with another one is refused.
pub const PROTOCOL_VERSION: u16 = 1;
/// The largest payload accepted (the capture plans exchanged before a capture are the largest
/// messages).
pub const MAX_PAYLOAD: u32 = 1 << 20;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Rank r > 0 to rank 0: `rank u32, world u32`.
    Hello = 1,
    /// Rank 0 to rank r: `token u64, unique id 128 bytes`.
    Welcome = 2,
    /// Rank 0 to rank r: a UTF-8 reason; the run is off.
    Reject = 3,
    /// Both ways: `token u64`.
    Barrier = 4,
    /// Rank r to rank 0: bytes to agree on (a capture plan).
    Propose = 5,
    /// Rank 0 to rank r: empty when every rank agreed, else the UTF-8 reason they do not.
    Verdict = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Reject,
            4 => Kind::Barrier,
            5 => Kind::Propose,
            6 => Kind::Verdict,
            _ => return None,
        })
    }

    /// The message's name in errors.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Welcome => "welcome (the unique id)",
            Kind::Reject => "reject",
            Kind::Barrier => "barrier",
            Kind::Propose => "capture plan",
            Kind::Verdict => "verdict on the capture plans",
        }
    }
}

/// One connection with the peer it leads to (for errors).
pub struct Conn {
    pub stream: TcpStream,
    pub peer: Peer,
}

fn time_left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

impl Conn {
    pub fn new(stream: TcpStream, addr: SocketAddr, rank: Option<u32>) -> Conn {
        // Frames are small and answered at once: do not wait to fill a segment.
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            peer: Peer { addr, rank },
        }
    }

    fn timeout(&self, expected: &'static str, after: Duration) -> BootstrapError {
        BootstrapError::PeerTimeout {
            peer: self.peer.clone(),
            expected,
            after,
        }
    }

    fn io(&self, op: &'static str, source: std::io::Error) -> BootstrapError {
        BootstrapError::Io {
            peer: self.peer.clone(),
            op,
            source,
        }
    }

    /// Reads exactly `buf.len()` bytes before `deadline`.
    fn read_exact(
        &mut self,
        buf: &mut [u8],
        deadline: Instant,
        budget: Duration,
        expected: &'static str,
    ) -> Result<(), BootstrapError> {
        let mut filled = 0;
        while filled < buf.len() {
            let Some(left) = time_left(deadline) else {
                return Err(self.timeout(expected, budget));
            };
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| self.io("set a read timeout", e))?;
            match self.stream.read(&mut buf[filled..]) {
                Ok(0) => {
                    return Err(BootstrapError::Closed {
                        peer: self.peer.clone(),
                        expected,
                    })
                }
                Ok(n) => filled += n,
                Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => {
                    return Err(self.timeout(expected, budget))
                }
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) if e.kind() == IoKind::ConnectionReset => {
                    return Err(BootstrapError::Closed {
                        peer: self.peer.clone(),
                        expected,
                    })
                }
                Err(e) => return Err(self.io("read", e)),
            }
        }
        Ok(())
    }

    /// Reads one frame of kind `want` (a `Reject` is returned as [`BootstrapError::Rejected`])
    /// before `deadline`; `budget` is the whole wait, for the error text.
    pub fn recv(
        &mut self,
        want: Kind,
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<u8>, BootstrapError> {
        let expected = want.name();
        let mut magic = [0u8; 4];
        self.read_exact(&mut magic, deadline, budget, expected)?;
        if magic != MAGIC {
            return Err(BootstrapError::Garbage {
                peer: self.peer.clone(),
                expected,
                got: magic,
            });
        }
        let mut head = [0u8; 7];
        self.read_exact(&mut head, deadline, budget, expected)?;
        let version = u16::from_le_bytes([head[0], head[1]]);
        if version != PROTOCOL_VERSION {
            return Err(BootstrapError::Version {
                peer: self.peer.clone(),
                theirs: version,
                ours: PROTOCOL_VERSION,
            });
        }
        let len = u32::from_le_bytes([head[3], head[4], head[5], head[6]]);
        if len > MAX_PAYLOAD {
            return Err(BootstrapError::TooLarge {
                peer: self.peer.clone(),
                len,
                max: MAX_PAYLOAD,
            });
        }
        let mut payload = vec![0u8; len as usize];
        self.read_exact(&mut payload, deadline, budget, expected)?;
        let kind = Kind::from_u8(head[2]);
        match kind {
            Some(k) if k == want => Ok(payload),
            Some(Kind::Reject) => Err(BootstrapError::Rejected {
                by: self.peer.clone(),
                reason: String::from_utf8_lossy(&payload).into_owned(),
            }),
            _ => Err(BootstrapError::Unexpected {
                peer: self.peer.clone(),
                expected,
                got: kind.map_or_else(|| format!("message kind {}", head[2]), |k| k.name().into()),
            }),
        }
    }

    /// Writes one frame before `deadline`.
    pub fn send(
        &mut self,
        kind: Kind,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<(), BootstrapError> {
        let frame = encode(kind, payload);
        let left = time_left(deadline).unwrap_or(Duration::from_millis(1));
        self.stream
            .set_write_timeout(Some(left))
            .map_err(|e| self.io("set a write timeout", e))?;
        self.stream
            .write_all(&frame)
            .and_then(|()| self.stream.flush())
            .map_err(|e| self.io("write", e))
    }
}

/// One frame's bytes (a payload longer than [`MAX_PAYLOAD`] is the caller's bug; the reader
/// refuses it by name).
pub fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(11 + payload.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    frame.push(kind as u8);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Reads a little-endian `u32` at `at`, if the payload is long enough.
pub fn u32_at(payload: &[u8], at: usize) -> Option<u32> {
    let b = payload.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a little-endian `u64` at `at`, if the payload is long enough.
pub fn u64_at(payload: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = payload.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}
