//! Which ranks of a communicator are dead: the process table gathered when offload takes a
//! communicator (`comm::Comm::new`), and the look into `/proc` that tells, for a rank of
//! this node, whether its process ended. MPICH (ch4, without ULFM) reports no process
//! failure — a receive from a dead rank, or a barrier with it, waits forever, even with
//! `MPI_ERRORS_RETURN` — so offload learns it from the operating system instead. Ranks of
//! other nodes are never known dead here (the finalize protocol's timeout covers them).
//! Owns nothing but the table; never blocks.

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// Bytes of one rank's record: world rank (4), pid (4), start time (8), node key (8).
const RECORD: usize = 24;

/// What this process knows about one rank of a communicator.
#[derive(Clone, Copy, Debug)]
struct Proc {
    /// Its rank in `MPI_COMM_WORLD`.
    world: i32,
    /// Its process id, and the start time `/proc` gave for it (clock ticks after boot;
    /// tells a reused pid from the rank's own process).
    pid: u32,
    start: u64,
    /// On this node (same kernel, same pid namespace), with a start time read: its
    /// liveness can be looked up here.
    local: bool,
}

/// A rank's process as seen from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// On this node and running.
    Alive,
    /// On this node, and its process ended (exited, killed: gone from `/proc`, a zombie,
    /// or its pid now names another process).
    Dead,
    /// On another node: not known here.
    Unknown,
}

/// The processes of a communicator's ranks, indexed by rank.
#[derive(Debug)]
pub(crate) struct Table {
    procs: Vec<Proc>,
}

impl Table {
    /// Gathers every rank's record over `comm`. Collective over `comm`.
    pub(crate) fn gather(comm: &SimpleCommunicator) -> Table {
        let world = SimpleCommunicator::world().rank();
        let pid = std::process::id();
        let start = start_time(pid).unwrap_or(0);
        let node = node_key();
        let mut record = [0u8; RECORD];
        record[..4].copy_from_slice(&world.to_le_bytes());
        record[4..8].copy_from_slice(&pid.to_le_bytes());
        record[8..16].copy_from_slice(&start.to_le_bytes());
        record[16..24].copy_from_slice(&node.to_le_bytes());
        let mut all = vec![0u8; RECORD * comm.size().max(0) as usize];
        comm.all_gather_into(&record[..], &mut all[..]);
        let procs = all
            .chunks_exact(RECORD)
            .map(|r| {
                let word =
                    |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap_or([0; 8]));
                let (their_start, their_node) = (word(8), word(16));
                Proc {
                    world: i32::from_le_bytes([r[0], r[1], r[2], r[3]]),
                    pid: u32::from_le_bytes([r[4], r[5], r[6], r[7]]),
                    start: their_start,
                    local: node != 0 && their_node == node && their_start != 0 && start != 0,
                }
            })
            .collect();
        Table { procs }
    }

    /// The `MPI_COMM_WORLD` rank of `rank` (itself when unknown).
    pub(crate) fn world(&self, rank: i32) -> i32 {
        self.get(rank).map_or(rank, |p| p.world)
    }

    /// The process id of `rank`, if known.
    pub(crate) fn pid(&self, rank: i32) -> Option<u32> {
        self.get(rank).map(|p| p.pid)
    }

    /// Whether `rank`'s process is running, ended, or not known from here.
    pub(crate) fn liveness(&self, rank: i32) -> Liveness {
        match self.get(rank) {
            Some(p) if p.local => match start_time(p.pid) {
                Some(start) if start == p.start && !is_zombie(p.pid) => Liveness::Alive,
                _ => Liveness::Dead,
            },
            _ => Liveness::Unknown,
        }
    }

    fn get(&self, rank: i32) -> Option<&Proc> {
        usize::try_from(rank).ok().and_then(|r| self.procs.get(r))
    }
}

/// Field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`, for n ≥ 3: after the command
/// name, which may hold spaces and parentheses (it ends at the last `)`).
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace()
        .nth(n.checked_sub(3)?)
        .map(str::to_owned)
}

/// The start time of process `pid` (proc(5) field 22), `None` when there is no such
/// process (or no `/proc`).
fn start_time(pid: u32) -> Option<u64> {
    stat_field(pid, 22)?.parse().ok()
}

/// Whether `pid` ended and was not reaped yet: every thread of it is a zombie (state `Z`,
/// or `X`). The main thread of a killed process may show `Z` while others are still
/// exiting, and the process's descriptors (its sockets) close only with the last one.
fn is_zombie(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return stat_field(pid, 3).is_some_and(|s| ended(&s));
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let rest = &stat[stat.rfind(')')? + 1..];
                rest.split_whitespace().next().map(ended)
            })
            .unwrap_or(true) // a thread gone meanwhile
    })
}

/// Whether a proc(5) state is that of a task that ended.
fn ended(state: &str) -> bool {
    matches!(state, "Z" | "X" | "x")
}

/// A key of this node and pid namespace (0 when unreadable): ranks with the same key see
/// each other's processes in `/proc`. FNV-1a over the boot id, the host name and the pid
/// namespace.
fn node_key() -> u64 {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
    // Each missing piece makes the key `None` below: no node sharing is assumed.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let ns = std::fs::read_link("/proc/self/ns/pid").ok();
    let (Some(boot), Some(host), Some(ns)) = (boot, host, ns) else {
        return 0;
    };
    let mut key: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!("{}|{}|{}", boot.trim(), host.trim(), ns.display());
    for b in text.bytes() {
        key ^= u64::from(b);
        key = key.wrapping_mul(0x0100_0000_01b3);
    }
    key.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_missing_pid_is_not() {
        let me = std::process::id();
        let start = start_time(me).expect("this process has a start time");
        let table = Table {
            procs: vec![
                Proc {
                    world: 0,
                    pid: me,
                    start,
                    local: true,
                },
                Proc {
                    world: 1,
                    pid: me,
                    start: start + 1, // the pid now names another process
                    local: true,
                },
                Proc {
                    world: 2,
                    pid: u32::MAX, // no such process
                    start,
                    local: true,
                },
                Proc {
                    world: 3,
                    pid: me,
                    start,
                    local: false,
                },
            ],
        };
        assert_eq!(table.liveness(0), Liveness::Alive);
        assert_eq!(table.liveness(1), Liveness::Dead);
        assert_eq!(table.liveness(2), Liveness::Dead);
        assert_eq!(table.liveness(3), Liveness::Unknown);
        assert_eq!(table.liveness(4), Liveness::Unknown);
        assert_eq!(table.world(2), 2);
        assert_ne!(node_key(), 0);
    }

    #[test]
    fn a_child_that_was_killed_is_dead_before_and_after_it_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("runs sleep");
        let pid = child.id();
        let start = start_time(pid).expect("the child has a start time");
        let table = Table {
            procs: vec![Proc {
                world: 0,
                pid,
                start,
                local: true,
            }],
        };
        assert_eq!(table.liveness(0), Liveness::Alive);
        child.kill().expect("SIGKILL the child");
        // Not reaped yet: a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while table.liveness(0) != Liveness::Dead {
            assert!(
                std::time::Instant::now() < deadline,
                "the killed child stays alive"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().expect("reaps the child");
        assert_eq!(table.liveness(0), Liveness::Dead);
    }
}
