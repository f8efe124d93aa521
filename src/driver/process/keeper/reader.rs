//! The reader thread of one connection to the keeper (`keeper-reader`): it turns the keeper's
//! messages into answers for waiting callers and exits on the tasks' channels, repairs a dropped
//! connection, and reports every task lost when the keeper dies. See [`super::client`].

use crossbeam_channel::bounded;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::client::{hello, ready, write_request, Conn, Shared, TaskExit, Watch};
use super::{Event, Request, SOCKET_FILE};
use crate::driver::process::{orphan, procfs};

/// The reader thread of one connection.
pub(super) struct Reader {
    pub(super) shared: Arc<Shared>,
    pub(super) lines: BufReader<UnixStream>,
    pub(super) conn: Arc<Conn>,
}

impl Reader {
    pub(super) fn run(mut self) {
        loop {
            self.read_until_end();
            if self.shared.closing.load(Ordering::Acquire) {
                return;
            }
            if procfs::same_process_alive(self.conn.keeper.pid, self.conn.keeper.start_ticks)
                && self.reconnect()
            {
                continue;
            }
            return self.keeper_died();
        }
    }

    fn read_until_end(&mut self) {
        let mut line = String::new();
        loop {
            line.clear();
            match self.lines.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let ev = match serde_json::from_str::<Event>(&line) {
                Ok(ev) => ev,
                Err(e) => {
                    log::warn!("a message from the task keeper does not parse: {e}");
                    continue;
                }
            };
            match ev {
                Event::Exited { pid, exit } => self.shared.exited(pid, exit),
                Event::Started {
                    seq,
                    pid,
                    start_ticks,
                } => {
                    let Some((tx, name)) = self.shared.pending.lock().remove(&seq) else {
                        continue;
                    };
                    // The watch exists before the caller hears of the task: an exit that
                    // follows at once has its channel.
                    let (alloc_id, task) = name.unwrap_or_default();
                    let (wtx, wrx) = bounded(1);
                    self.shared.watches.lock().insert(
                        pid,
                        Watch {
                            tx: wtx,
                            alloc_id,
                            task,
                            exited: false,
                        },
                    );
                    let started = Event::Started {
                        seq,
                        pid,
                        start_ticks,
                    };
                    if tx.send((started, Some(wrx))).is_err() {
                        // The caller gave up waiting: nobody will supervise it.
                        log::error!("task {pid} started after its start timed out: killing it");
                        self.shared.watches.lock().remove(&pid);
                        let _ = write_request(
                            &self.conn,
                            &Request::Signal {
                                seq: 0,
                                pid,
                                signal: libc::SIGKILL,
                            },
                        );
                        let _ = write_request(&self.conn, &Request::Forget { pid });
                    }
                }
                ev @ (Event::Done { seq, .. } | Event::Failed { seq, .. }) => {
                    if let Some((tx, _)) = self.shared.pending.lock().remove(&seq) {
                        let _ = tx.send((ev, None));
                    }
                }
                Event::Welcome { .. } => {}
            }
        }
    }

    /// The keeper dropped the connection but runs: connect again and catch up on exits.
    fn reconnect(&mut self) -> bool {
        let Ok(stream) = UnixStream::connect(self.shared.dir.join(SOCKET_FILE)) else {
            return false;
        };
        let Ok((lines, _, tasks)) = hello(&stream) else {
            return false;
        };
        log::warn!("the task keeper dropped this agent's connection: connected again");
        self.shared.take_over(tasks, false);
        self.lines = lines;
        *self.conn.writer.lock() = stream;
        true
    }

    /// The keeper died and its tasks with it.
    fn keeper_died(self) {
        self.conn.dead.store(true, Ordering::Release);
        // The order of the locks is the claims' (recovered, then watches): a task is in one.
        let (lost, unclaimed) = {
            let mut recovered = self.shared.recovered.lock();
            let lost: Vec<(i32, Watch)> = self.shared.watches.lock().drain().collect();
            // A task not claimed yet learns it when its runner claims it.
            let mut unclaimed = Vec::new();
            for (held, exited) in recovered.values_mut() {
                if held.exit.is_none() {
                    *exited = ready(TaskExit::KeeperDied);
                    unclaimed.push((held.alloc_id.clone(), held.task.clone()));
                }
            }
            (lost, unclaimed)
        };
        log::error!(
            "the task keeper (pid {}) died: {} tasks died with it",
            self.conn.keeper.pid,
            lost.len()
        );
        // What is left of their groups (the parent-death signal reaches only the process the
        // keeper started) is stopped before any of them starts again: never two runs of a task.
        let names: HashSet<(String, String)> = lost
            .iter()
            .map(|(_, w)| (w.alloc_id.clone(), w.task.clone()))
            .chain(unclaimed)
            .collect();
        let ids: HashSet<String> = names.iter().map(|(a, _)| a.clone()).collect();
        let groups: BTreeMap<i32, i32> =
            orphan::find_task_processes(&ids, &crate::util::allocdir::alloc_root(&self.shared.dir))
                .into_iter()
                .filter(|l| names.contains(&(l.alloc_id.clone(), l.task.clone())))
                .map(|l| (l.pgid, libc::SIGKILL))
                .collect();
        orphan::stop_groups(&groups, Duration::ZERO, &crossbeam_channel::never());
        for (_, w) in lost {
            let _ = w.tx.try_send(TaskExit::KeeperDied);
        }
        // Callers waiting for an answer get a disconnected channel.
        self.shared.pending.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::client::{KeeperClient, TaskExit};
    use super::super::{Exit, Held};

    fn held(pid: i32) -> Held {
        Held {
            pid,
            start_ticks: 7,
            alloc_id: "a".into(),
            task: "t".into(),
            exit: None,
        }
    }

    const EXIT: Exit = Exit {
        exit_code: 3,
        signal: 0,
        at_nanos: 1,
        oom_killed: false,
    };

    /// An exit the keeper reports after its hello and before the task's runner claims it
    /// reaches the claim (it was dropped: the runner then waited for an exit that had passed).
    #[test]
    fn an_exit_before_the_claim_is_not_lost() {
        let dir = crate::util::scratch::dir("keeper-claim");
        let client = KeeperClient::open(&dir, "/nonexistent".into()).unwrap();
        client.shared.take_over(vec![held(100), held(101)], true);
        client.shared.exited(100, EXIT);
        client.shared.exited(101, EXIT);
        let kept = client.claim(100, 7).expect("claimed");
        assert!(matches!(kept.exited.try_recv(), Ok(TaskExit::Exited(e)) if e == EXIT));
        // By name, an exited run is forgotten, not handed over as running.
        assert!(client.claim_by_name("a", "t").is_none());
        // Once claimed, an exit goes to the watch.
        client.shared.take_over(vec![held(102)], true);
        let kept = client.claim(102, 7).expect("claimed");
        assert!(kept.exited.try_recv().is_err());
        client.shared.exited(102, EXIT);
        assert!(matches!(kept.exited.try_recv(), Ok(TaskExit::Exited(e)) if e == EXIT));
    }
}
