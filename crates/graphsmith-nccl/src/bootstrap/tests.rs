//! The bootstrap on loopback with one thread per rank (`tests/bootstrap_processes.rs` runs the
//! same protocol with one process per rank).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::wire::{encode, Kind};
use super::*;

const SHORT: Duration = Duration::from_millis(600);
const LONG: Duration = Duration::from_secs(10);

fn id() -> UniqueId {
    let mut b = [0u8; 128];
    for (i, x) in b.iter_mut().enumerate() {
        *x = i as u8 ^ 0x5a;
    }
    UniqueId(b)
}

fn root() -> (Root, String) {
    let root = Root::bind("127.0.0.1:0").expect("bind on loopback");
    let addr = root.local_addr().to_string();
    (root, addr)
}

fn spawn_join(
    addr: &str,
    rank: u32,
    world: u32,
    timeout: Duration,
) -> thread::JoinHandle<Result<Session>> {
    let addr = addr.to_string();
    thread::spawn(move || join(&addr, rank, world, timeout))
}

fn hello_frame(rank: u32, world: u32) -> Vec<u8> {
    let mut p = rank.to_le_bytes().to_vec();
    p.extend_from_slice(&world.to_le_bytes());
    encode(Kind::Hello, &p)
}

/// A raw connection that sends `bytes` and keeps the socket open until dropped.
fn raw(addr: &str, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect to rank 0");
    s.write_all(bytes).expect("write");
    s
}

#[test]
fn four_ranks_share_the_id_and_token_and_pass_a_barrier() {
    let (root, addr) = root();
    let peers: Vec<_> = (1..4).map(|r| spawn_join(&addr, r, 4, LONG)).collect();
    let mut s0 = root.accept(4, id(), LONG).expect("rank 0");
    let mut sessions: Vec<Session> = peers
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    for (i, s) in sessions.iter().enumerate() {
        assert_eq!(s.rank(), i as u32 + 1);
        assert_eq!(s.world(), 4);
        assert_eq!(s.unique_id(), &id());
        assert_eq!(s.token(), s0.token());
    }
    let handles: Vec<_> = sessions
        .drain(..)
        .map(|mut s| thread::spawn(move || s.barrier(LONG).map(|()| s)))
        .collect();
    s0.barrier(LONG).expect("rank 0 barrier");
    for h in handles {
        h.join().unwrap().expect("barrier");
    }
}

#[test]
fn a_world_of_one_needs_no_peer() {
    let (root, _) = root();
    let mut s = root.accept(1, id(), SHORT).expect("alone");
    s.barrier(SHORT).expect("barrier alone");
    assert_eq!((s.rank(), s.world()), (0, 1));
}

#[test]
fn a_rank_that_never_connects_is_named_and_the_others_hear_why() {
    let (root, addr) = root();
    let r1 = spawn_join(&addr, 1, 3, LONG);
    let start = Instant::now();
    let err = root.accept(3, id(), SHORT).unwrap_err();
    assert!(start.elapsed() < SHORT * 3, "took {:?}", start.elapsed());
    let BootstrapError::MissingRanks {
        missing, arrived, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(
        (missing.as_slice(), arrived.as_slice()),
        (&[2][..], &[0, 1][..])
    );
    let text = err.to_string();
    assert!(text.contains("waiting for rank(s) [2] of 3"), "{text}");
    let e1 = r1.join().unwrap().unwrap_err();
    let t1 = e1.to_string();
    assert!(matches!(e1, BootstrapError::Rejected { .. }), "{t1}");
    assert!(t1.contains("rank(s) [2]"), "{t1}");
}

#[test]
fn a_rank_with_no_rank_0_gives_up_at_its_deadline() {
    // A port nobody listens on: bind, read the port, close.
    let addr = Root::bind("127.0.0.1:0").unwrap().local_addr().to_string();
    let start = Instant::now();
    let err = join(&addr, 1, 2, SHORT).unwrap_err();
    assert!(start.elapsed() < SHORT * 3);
    let text = err.to_string();
    assert!(
        matches!(err, BootstrapError::Connect { rank: 1, .. }),
        "{text}"
    );
    assert!(
        text.contains(&format!("rank 1 could not connect to rank 0 at {addr}")),
        "{text}"
    );
}

#[test]
fn garbage_from_a_peer_is_named_with_its_address() {
    let (root, addr) = root();
    let r1 = spawn_join(&addr, 1, 3, LONG);
    // Let rank 1 be accepted first, so it hears that the run was called off.
    thread::sleep(Duration::from_millis(100));
    let _http = raw(&addr, b"GET / HTTP/1.1\r\n\r\n");
    let err = root.accept(3, id(), LONG).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, BootstrapError::Garbage { got, .. } if &got == b"GET "),
        "{text}"
    );
    assert!(text.contains("47 45 54 20 (\"GET \")"), "{text}");
    let e1 = r1.join().unwrap().unwrap_err().to_string();
    assert!(
        e1.contains("called the run off: garbage from 127.0.0.1:"),
        "{e1}"
    );
}

#[test]
fn garbage_from_rank_0_is_named_on_the_joining_rank() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fake = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(b"SSH-2.0-OpenSSH\r\n").unwrap();
        thread::sleep(Duration::from_millis(300));
    });
    let err = join(&addr, 1, 2, LONG).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("garbage from rank 0 at {addr}")),
        "{text}"
    );
    fake.join().unwrap();
}

#[test]
fn world_size_mismatch_names_both_sizes() {
    let (root, addr) = root();
    let r1 = spawn_join(&addr, 1, 3, LONG);
    let err = root.accept(2, id(), LONG).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("world size mismatch: rank 1 (at 127.0.0.1:"),
        "{text}"
    );
    assert!(text.ends_with("says 3, rank 0 says 2"), "{text}");
    let e1 = r1.join().unwrap().unwrap_err().to_string();
    assert!(
        e1.contains("refused this rank: world size mismatch"),
        "{e1}"
    );
}

#[test]
fn a_duplicate_rank_is_refused() {
    let (root, addr) = root();
    let a = spawn_join(&addr, 1, 3, LONG);
    thread::sleep(Duration::from_millis(100));
    let b = spawn_join(&addr, 1, 3, LONG);
    let err = root.accept(3, id(), LONG).unwrap_err();
    assert!(
        matches!(err, BootstrapError::DuplicateRank { rank: 1, .. }),
        "{err}"
    );
    assert!(err
        .to_string()
        .starts_with("duplicate rank 1: first from 127.0.0.1:"));
    for h in [a, b] {
        assert!(matches!(
            h.join().unwrap(),
            Err(BootstrapError::Rejected { .. })
        ));
    }
}

#[test]
fn ranks_out_of_range_are_refused() {
    for bad in [0u32, 3, 7] {
        let (root, addr) = root();
        let _s = raw(&addr, &hello_frame(bad, 3));
        let err = root.accept(3, id(), LONG).unwrap_err();
        assert!(
            matches!(err, BootstrapError::RankOutOfRange { rank, world: 3, .. } if rank == bad),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!("says it is rank {bad}")),
            "{err}"
        );
    }
    // A rank's own arguments are checked before it connects anywhere.
    assert!(matches!(
        join("127.0.0.1:1", 2, 2, SHORT),
        Err(BootstrapError::InvalidArgs(_))
    ));
    assert!(matches!(
        bootstrap("127.0.0.1:1", 0, 0, SHORT, id),
        Err(BootstrapError::InvalidArgs(_))
    ));
}

#[test]
fn another_protocol_version_is_refused() {
    let (root, addr) = root();
    let mut frame = hello_frame(1, 2);
    frame[4..6].copy_from_slice(&9u16.to_le_bytes());
    let _s = raw(&addr, &frame);
    let err = root.accept(2, id(), LONG).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("speaks version 9, this process speaks 1"),
        "{text}"
    );
}

#[test]
fn a_silent_peer_and_half_a_frame_time_out() {
    for bytes in [&b""[..], &hello_frame(1, 2)[..7]] {
        let (root, addr) = root();
        let _s = raw(&addr, bytes);
        let start = Instant::now();
        let err = root.accept(2, id(), SHORT).unwrap_err();
        assert!(start.elapsed() < SHORT * 3);
        let text = err.to_string();
        assert!(
            text.contains("(rank not yet known) to send its hello"),
            "{text}"
        );
    }
}

#[test]
fn an_oversized_frame_is_refused_before_it_is_read() {
    let (root, addr) = root();
    let mut frame = hello_frame(1, 2);
    frame[7..11].copy_from_slice(&u32::MAX.to_le_bytes());
    let _s = raw(&addr, &frame);
    let err = root.accept(2, id(), LONG).unwrap_err();
    assert!(
        matches!(err, BootstrapError::TooLarge { len: u32::MAX, .. }),
        "{err}"
    );
}

/// Runs `agree` on every rank of a fresh run of `world` with each rank's payload.
fn agree_all(world: u32, payloads: Vec<Vec<u8>>) -> Vec<Result<()>> {
    let (root, addr) = root();
    let peers: Vec<_> = (1..world)
        .map(|r| spawn_join(&addr, r, world, LONG))
        .collect();
    let mut s0 = root.accept(world, id(), LONG).unwrap();
    let mut handles = Vec::new();
    for (h, payload) in peers.into_iter().zip(payloads[1..].to_vec()) {
        let mut s = h.join().unwrap().unwrap();
        handles.push(thread::spawn(move || s.agree(&payload, LONG, |_| Ok(()))));
    }
    let judge = |all: &[&[u8]]| -> std::result::Result<(), String> {
        match all.iter().position(|p| *p != all[0]) {
            None => Ok(()),
            Some(r) => Err(format!("rank {r} proposed something else")),
        }
    };
    let mut out = vec![s0.agree(&payloads[0], LONG, judge)];
    out.extend(handles.into_iter().map(|h| h.join().unwrap()));
    out
}

#[test]
fn agreement_and_disagreement_reach_every_rank() {
    let same = agree_all(3, vec![b"plan".to_vec(); 3]);
    assert!(same.iter().all(Result::is_ok), "{same:?}");
    let differ = agree_all(
        3,
        vec![b"plan".to_vec(), b"plan".to_vec(), b"other".to_vec()],
    );
    for r in differ {
        let e = r.unwrap_err().to_string();
        assert_eq!(e, "the ranks disagree: rank 2 proposed something else");
    }
}

#[test]
fn a_rank_missing_from_a_barrier_is_named() {
    let (root, addr) = root();
    let r1 = spawn_join(&addr, 1, 3, LONG);
    let r2 = spawn_join(&addr, 2, 3, LONG);
    let mut s0 = root.accept(3, id(), LONG).unwrap();
    let mut s1 = r1.join().unwrap().unwrap();
    let _s2 = r2.join().unwrap().unwrap(); // never calls barrier
    let h1 = thread::spawn(move || s1.barrier(LONG));
    let err = s0.barrier(SHORT).unwrap_err().to_string();
    assert!(err.contains("waiting for rank 2 at 127.0.0.1:"), "{err}");
    let e1 = h1.join().unwrap().unwrap_err().to_string();
    assert!(e1.contains("called the run off: timed out"), "{e1}");
}

#[test]
fn error_texts() {
    let addr: SocketAddr = "10.0.0.2:29500".parse().unwrap();
    let peer = Peer {
        addr,
        rank: Some(2),
    };
    let cases = [
        (
            BootstrapError::WorldMismatch {
                rank: 2,
                addr,
                theirs: 3,
                ours: 2,
            },
            "world size mismatch: rank 2 (at 10.0.0.2:29500) says 3, rank 0 says 2",
        ),
        (
            BootstrapError::MissingRanks {
                missing: vec![2, 3],
                arrived: vec![0, 1],
                world: 4,
                addr,
                after: Duration::from_secs(30),
            },
            "rank 0 timed out after 30s waiting for rank(s) [2, 3] of 4 to connect to \
             10.0.0.2:29500 (arrived: [0, 1])",
        ),
        (
            BootstrapError::Garbage {
                peer: peer.clone(),
                expected: "hello",
                got: *b"\x16\x03\x01\x00",
            },
            "garbage from rank 2 at 10.0.0.2:29500: expected a hello frame starting with the \
             magic \"GSNC\" (47 53 4e 43), got 16 03 01 00 (\"....\"); is something else \
             connecting to this port?",
        ),
        (
            BootstrapError::PeerTimeout {
                peer,
                expected: "barrier",
                after: Duration::from_millis(1500),
            },
            "timed out after 1.5s waiting for rank 2 at 10.0.0.2:29500 to send its barrier",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}
