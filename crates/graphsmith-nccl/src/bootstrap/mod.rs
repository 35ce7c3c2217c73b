//! How the ranks of a run find each other and share NCCL's unique id, over TCP: the path a run
//! across hosts takes (and, on one host, one process per GPU, as NCCL advises for graphs).
//!
//! Rank 0 listens ([`Root::bind`]); every other rank connects ([`join`]), retrying until its
//! deadline, and says hello (its rank and the world size). Rank 0 checks that each rank of
//! `1..world` arrives exactly once and that every rank agrees on the world size, then sends each
//! the 128-byte unique id and a run token. After that the same connections carry barriers
//! ([`Session::barrier`]) and proposals that every rank must agree on ([`Session::agree`]: the
//! collectives each rank is about to capture). Every wait has a deadline and ends in a
//! [`BootstrapError`] naming the peer; when rank 0 gives up, it tells the ranks already
//! connected why (a `Reject`), so they fail at once with its reason rather than time out.
//!
//! The framing is in `wire.rs` (magic `GSNC`, version, kind, length-prefixed payload).
//! Payloads: hello `rank u32, world u32`; welcome `token u64, id [u8; 128]`; barrier
//! `token u64`; propose `token u64, bytes`; verdict and reject: UTF-8 text (an empty verdict
//! means agreement). Integers are little-endian.

mod error;
mod wire;

use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind as IoKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

pub use error::{BootstrapError, Peer};
pub use wire::{MAGIC, MAX_PAYLOAD, PROTOCOL_VERSION};

use wire::{u32_at, u64_at, Conn, Kind};

/// The bytes of NCCL's `ncclUniqueId` (opaque to the bootstrap).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId({:02x?}..)", &self.0[..8])
    }
}

type Result<T> = std::result::Result<T, BootstrapError>;

/// How long a rank waits between attempts to connect to rank 0.
const RETRY: Duration = Duration::from_millis(50);
/// How long rank 0 waits between polls of its listener.
const POLL: Duration = Duration::from_millis(5);
/// How long rank 0 spends telling connected ranks that the run is off.
const REJECT_WAIT: Duration = Duration::from_millis(500);

fn resolve(addr: &str) -> Result<SocketAddr> {
    let fail = |reason: String| BootstrapError::Resolve {
        addr: addr.to_string(),
        reason,
    };
    addr.to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("it resolves to no address".into()))
}

fn new_token() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.finish()
}

/// Rank 0's listener, bound before the other ranks start (bind to port 0 and read
/// [`Root::local_addr`] to let the system pick a port).
pub struct Root {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Root {
    /// Listens on `addr` (`host:port`).
    pub fn bind(addr: &str) -> Result<Root> {
        let bind_err = |source| BootstrapError::Bind {
            addr: addr.to_string(),
            source,
        };
        let listener = TcpListener::bind(resolve(addr)?).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        Ok(Root { listener, addr })
    }

    /// The address the other ranks connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits up to `timeout` for ranks `1..world` to say hello, checks them, and sends each the
    /// unique id and this run's token.
    pub fn accept(self, world: u32, id: UniqueId, timeout: Duration) -> Result<Session> {
        if world == 0 {
            return Err(BootstrapError::InvalidArgs("the world size is 0".into()));
        }
        let deadline = Instant::now() + timeout;
        let mut slots: Vec<Option<Conn>> = (0..world).map(|_| None).collect();
        let missing = |slots: &[Option<Conn>]| -> Vec<u32> {
            (1..world)
                .filter(|&r| slots[r as usize].is_none())
                .collect()
        };
        while !missing(&slots).is_empty() {
            match self.listener.accept() {
                Ok((stream, addr)) => {
                    let mut conn = match accepted(stream, addr) {
                        Ok(c) => c,
                        Err(e) => return Err(abort(&mut slots, e)),
                    };
                    match hello(&mut conn, world, &slots, deadline, timeout) {
                        Ok(rank) => {
                            conn.peer.rank = Some(rank);
                            slots[rank as usize] = Some(conn);
                        }
                        Err(e) => {
                            reject(&mut conn, &e.to_string());
                            return Err(abort(&mut slots, e));
                        }
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing = missing(&slots);
                        let arrived = (0..world).filter(|r| !missing.contains(r)).collect();
                        let e = BootstrapError::MissingRanks {
                            missing,
                            arrived,
                            world,
                            addr: self.addr,
                            after: timeout,
                        };
                        return Err(abort(&mut slots, e));
                    }
                    std::thread::sleep(POLL);
                }
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(source) => {
                    let e = BootstrapError::Io {
                        peer: Peer {
                            addr: self.addr,
                            rank: None,
                        },
                        op: "accept on the listener",
                        source,
                    };
                    return Err(abort(&mut slots, e));
                }
            }
        }
        let token = new_token();
        let mut welcome = token.to_le_bytes().to_vec();
        welcome.extend_from_slice(&id.0);
        let mut peers: Vec<Conn> = slots.into_iter().flatten().collect();
        for i in 0..peers.len() {
            if let Err(e) = peers[i].send(Kind::Welcome, &welcome, deadline) {
                return Err(abort_all(&mut peers, e));
            }
        }
        Ok(Session {
            rank: 0,
            world,
            token,
            id,
            link: Link::Root(peers),
        })
    }
}

fn accepted(stream: TcpStream, addr: SocketAddr) -> Result<Conn> {
    // The accepted socket may inherit the listener's non-blocking mode on some systems.
    stream
        .set_nonblocking(false)
        .map_err(|source| BootstrapError::Io {
            peer: Peer { addr, rank: None },
            op: "make the connection blocking",
            source,
        })?;
    Ok(Conn::new(stream, addr, None))
}

/// Reads and checks one rank's hello; returns its rank.
fn hello(
    conn: &mut Conn,
    world: u32,
    slots: &[Option<Conn>],
    deadline: Instant,
    budget: Duration,
) -> Result<u32> {
    let payload = conn.recv(Kind::Hello, deadline, budget)?;
    let (Some(rank), Some(theirs), 8) = (u32_at(&payload, 0), u32_at(&payload, 4), payload.len())
    else {
        return Err(BootstrapError::Unexpected {
            peer: conn.peer.clone(),
            expected: Kind::Hello.name(),
            got: format!("a hello of {} bytes (8 expected)", payload.len()),
        });
    };
    let addr = conn.peer.addr;
    if theirs != world {
        return Err(BootstrapError::WorldMismatch {
            rank,
            addr,
            theirs,
            ours: world,
        });
    }
    if rank == 0 || rank >= world {
        return Err(BootstrapError::RankOutOfRange { rank, world, addr });
    }
    if let Some(first) = &slots[rank as usize] {
        return Err(BootstrapError::DuplicateRank {
            rank,
            first: first.peer.addr,
            second: addr,
        });
    }
    Ok(rank)
}

/// Tells one peer the run is off (best effort: it may be gone already).
fn reject(conn: &mut Conn, reason: &str) {
    let _ = conn.send(
        Kind::Reject,
        reason.as_bytes(),
        Instant::now() + REJECT_WAIT,
    );
    let _ = conn.stream.shutdown(Shutdown::Write);
}

/// Tells every connected rank why the run is off; returns the error.
fn abort(slots: &mut [Option<Conn>], e: BootstrapError) -> BootstrapError {
    let reason = format!("rank 0 called the run off: {e}");
    for conn in slots.iter_mut().flatten() {
        reject(conn, &reason);
    }
    e
}

fn abort_all(peers: &mut [Conn], e: BootstrapError) -> BootstrapError {
    let reason = format!("rank 0 called the run off: {e}");
    for conn in peers.iter_mut() {
        reject(conn, &reason);
    }
    e
}

/// Connects rank `rank` of `world` to rank 0 at `addr`, retrying until `timeout`, and waits
/// (within the same `timeout`) for the unique id.
pub fn join(addr: &str, rank: u32, world: u32, timeout: Duration) -> Result<Session> {
    if rank == 0 || rank >= world {
        return Err(BootstrapError::InvalidArgs(format!(
            "join is for ranks 1..{world}, not rank {rank} (rank 0 listens with Root::bind)"
        )));
    }
    let target = resolve(addr)?;
    let deadline = Instant::now() + timeout;
    let stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt =
            TcpStream::connect_timeout(&target, left.clamp(RETRY, Duration::from_secs(1)));
        match attempt {
            Ok(s) => break s,
            Err(last) => {
                if Instant::now() + RETRY >= deadline {
                    return Err(BootstrapError::Connect {
                        rank,
                        addr: target,
                        after: timeout,
                        last,
                    });
                }
                std::thread::sleep(RETRY);
            }
        }
    };
    let mut conn = Conn::new(stream, target, Some(0));
    let mut hello = rank.to_le_bytes().to_vec();
    hello.extend_from_slice(&world.to_le_bytes());
    conn.send(Kind::Hello, &hello, deadline)?;
    let payload = conn.recv(Kind::Welcome, deadline, timeout)?;
    let (Some(token), Ok(id), 136) = (
        u64_at(&payload, 0),
        <[u8; 128]>::try_from(payload.get(8..).unwrap_or_default()),
        payload.len(),
    ) else {
        return Err(BootstrapError::Unexpected {
            peer: conn.peer.clone(),
            expected: Kind::Welcome.name(),
            got: format!("a welcome of {} bytes (136 expected)", payload.len()),
        });
    };
    Ok(Session {
        rank,
        world,
        token,
        id: UniqueId(id),
        link: Link::Member(conn),
    })
}

fn check_token(ours: u64, conn: &Conn, payload: &[u8]) -> Result<()> {
    match u64_at(payload, 0) {
        Some(t) if t == ours => Ok(()),
        Some(theirs) => Err(BootstrapError::TokenMismatch {
            peer: conn.peer.clone(),
            theirs,
            ours,
        }),
        None => Err(BootstrapError::Unexpected {
            peer: conn.peer.clone(),
            expected: Kind::Propose.name(),
            got: format!("{} bytes, too short for the run token", payload.len()),
        }),
    }
}

enum Link {
    /// Rank 0: one connection per other rank, in rank order.
    Root(Vec<Conn>),
    /// Any other rank: its connection to rank 0.
    Member(Conn),
}

/// One rank's place in a bootstrapped run: its rank, the world size, the unique id, and the
/// connections later barriers and agreements use.
pub struct Session {
    rank: u32,
    world: u32,
    token: u64,
    id: UniqueId,
    link: Link,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Session(rank {} of {}, token {:#018x})",
            self.rank, self.world, self.token
        )
    }
}

impl Session {
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn world(&self) -> u32 {
        self.world
    }

    /// The unique id rank 0 handed out.
    pub fn unique_id(&self) -> &UniqueId {
        &self.id
    }

    /// This run's token (the same on every rank; differs between runs).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Returns once every rank has called `barrier`, or fails after `timeout` naming the rank
    /// that did not come.
    pub fn barrier(&mut self, timeout: Duration) -> Result<()> {
        self.agree(&[], timeout, |_| Ok(())).map(|_| ())
    }

    /// Every rank proposes `payload`; rank 0 passes all of them, in rank order, to `judge` and
    /// sends its verdict back. Returns `Ok` on every rank when `judge` accepts, or
    /// [`BootstrapError::Disagreement`] with `judge`'s reason on every rank when it does not.
    /// `judge` runs on rank 0 only. All within `timeout`.
    pub fn agree(
        &mut self,
        payload: &[u8],
        timeout: Duration,
        judge: impl FnOnce(&[&[u8]]) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut frame = self.token.to_le_bytes().to_vec();
        frame.extend_from_slice(payload);
        let token = self.token;
        match &mut self.link {
            Link::Member(conn) => {
                conn.send(Kind::Propose, &frame, deadline)?;
                let verdict = conn.recv(Kind::Verdict, deadline, timeout)?;
                if verdict.is_empty() {
                    Ok(())
                } else {
                    Err(BootstrapError::Disagreement {
                        reason: String::from_utf8_lossy(&verdict).into_owned(),
                    })
                }
            }
            Link::Root(peers) => {
                let mut proposals: Vec<Vec<u8>> = vec![payload.to_vec()];
                for i in 0..peers.len() {
                    let got = peers[i].recv(Kind::Propose, deadline, timeout);
                    let got = match got {
                        Ok(p) => p,
                        Err(e) => return Err(abort_all(peers, e)),
                    };
                    if let Err(e) = check_token(token, &peers[i], &got) {
                        return Err(abort_all(peers, e));
                    }
                    proposals.push(got[8..].to_vec());
                }
                let views: Vec<&[u8]> = proposals.iter().map(Vec::as_slice).collect();
                let verdict = judge(&views);
                let text = verdict.as_ref().err().map_or(&[][..], |r| r.as_bytes());
                for i in 0..peers.len() {
                    if let Err(e) = peers[i].send(Kind::Verdict, text, deadline) {
                        return Err(abort_all(peers, e));
                    }
                }
                verdict.map_err(|reason| BootstrapError::Disagreement { reason })
            }
        }
    }
}

/// Bootstraps rank `rank` of `world` at `addr`: rank 0 binds there and hands out `id()` (called
/// only on rank 0), the others join. For rank 0 to pick a free port, use [`Root`] directly.
pub fn bootstrap(
    addr: &str,
    rank: u32,
    world: u32,
    timeout: Duration,
    id: impl FnOnce() -> UniqueId,
) -> Result<Session> {
    if world == 0 || rank >= world {
        return Err(BootstrapError::InvalidArgs(format!(
            "rank {rank} of a world of {world}: the rank must be below the world size"
        )));
    }
    if rank == 0 {
        Root::bind(addr)?.accept(world, id(), timeout)
    } else {
        join(addr, rank, world, timeout)
    }
}

#[cfg(test)]
mod tests;
