//! Running one child process per rank on this host, with a deadline: every child's output is
//! collected, and a child still running at the deadline is killed (so a rank stuck in a
//! collective cannot hang the launcher).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one child did.
#[derive(Debug)]
pub struct ChildOutcome {
    /// Its rank.
    pub rank: u32,
    /// Its exit status (`None` when it could not be started or was killed).
    pub status: Option<ExitStatus>,
    /// Whether it was killed at the deadline.
    pub timed_out: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error (or why it could not be started).
    pub stderr: String,
}

impl ChildOutcome {
    /// The JSON objects this crate's commands print (one a line, each with a
    /// `graphsmith_nccl` key naming it), parsed; text before a line's first `{` (a test
    /// harness's) is skipped.
    pub fn reports(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter_map(|l| l.find('{').map(|at| &l[at..]))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("graphsmith_nccl").is_some())
            .collect()
    }

    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

struct Running {
    rank: u32,
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
    status: Option<ExitStatus>,
}

/// Runs `commands` (rank `i` is `commands[i]`) at once and waits for all, killing whatever
/// still runs after `timeout`.
pub fn run_ranks(commands: Vec<Command>, timeout: Duration) -> Vec<ChildOutcome> {
    let deadline = Instant::now() + timeout;
    let mut running = Vec::new();
    let mut outcomes = Vec::new();
    for (rank, mut cmd) in commands.into_iter().enumerate() {
        let rank = rank as u32;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match cmd.spawn() {
            Ok(mut child) => {
                let (Some(o), Some(e)) = (child.stdout.take(), child.stderr.take()) else {
                    let _ = child.kill();
                    let _ = child.wait();
                    continue;
                };
                running.push(Running {
                    rank,
                    child,
                    out: drain(o),
                    err: drain(e),
                    status: None,
                });
            }
            Err(e) => outcomes.push(ChildOutcome {
                rank,
                status: None,
                timed_out: false,
                stdout: String::new(),
                stderr: format!("could not start {cmd:?}: {e}"),
            }),
        }
    }
    loop {
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(s)) = r.child.try_wait() {
                r.status = Some(s);
            }
        }
        if running.iter().all(|r| r.status.is_some()) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for mut r in running {
        let timed_out = r.status.is_none();
        if timed_out {
            // Only children this function started are killed, each by its own handle.
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
        outcomes.push(ChildOutcome {
            rank: r.rank,
            status: r.status,
            timed_out,
            stdout: r.out.join().unwrap_or_default(),
            stderr: r.err.join().unwrap_or_default(),
        });
    }
    outcomes.sort_by_key(|o| o.rank);
    outcomes
}

/// A loopback address with a port that was free a moment ago (the system picks it).
pub fn free_loopback_addr() -> std::io::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}
