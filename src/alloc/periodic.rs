//! The `periodic` thread: launches the children of periodic jobs at their scheduled instants
//! (Nomad's `nomad/periodic.go`).
//!
//! The core is [`Schedule`], pure: given the periodic jobs and the time, it says which launches
//! are due and when the next one is. The thread around it takes the time from a [`Clock`] (a
//! fake one in tests), launches through [`AllocManager::launch_periodic`] (which skips a launch
//! under `prohibit_overlap` while a child runs, and refuses one for a parent stopped or purged
//! meanwhile), and waits in one `select!` over the agent's shutdown channel, the registry's job
//! watch ([`AllocManager::watch_jobs`]: a job registered, stopped or purged) and a deadline at
//! the next launch. Schedules start from the time the agent (or the job) starts: launches missed
//! while the agent was down are not replayed, as in Nomad. It stops when the shutdown channel
//! disconnects; the agent joins it.

use crossbeam_channel::{after, never, select, Receiver};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::AllocManager;
use crate::jobspec::periodic::PeriodicConfig;
use crate::thread::Never;

/// Where the launcher reads the time: milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    fn now_millis(&self) -> i64;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// The periodic jobs and the next launch of each (unix seconds).
#[derive(Debug, Default)]
pub struct Schedule {
    jobs: BTreeMap<String, (PeriodicConfig, Option<i64>)>,
}

impl Schedule {
    /// Takes the registry's periodic jobs at `now` (unix seconds): a job new or changed gets its
    /// next launch after `now`; a job gone is dropped; the others keep theirs.
    pub fn update(&mut self, jobs: Vec<(String, PeriodicConfig)>, now: i64) {
        let mut next = BTreeMap::new();
        for (id, config) in jobs {
            let launch = match self.jobs.remove(&id) {
                Some((old, launch)) if old == config => launch,
                _ => config.next_launch(now),
            };
            next.insert(id, (config, launch));
        }
        self.jobs = next;
    }

    /// The launches due at `now`: each job's latest instant not after it, once; each job then
    /// waits for its first instant after `now` (missed instants are not made up for).
    pub fn due(&mut self, now: i64) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for (id, (config, launch)) in self.jobs.iter_mut() {
            if let Some(at) = launch.filter(|at| *at <= now) {
                out.push((id.clone(), at));
                *launch = config.next_launch(now);
            }
        }
        out
    }

    /// The next launch of any job, unix seconds.
    pub fn next(&self) -> Option<i64> {
        self.jobs.values().filter_map(|(_, l)| *l).min()
    }

    /// The next launch of the job `id`.
    pub fn next_of(&self, id: &str) -> Option<i64> {
        self.jobs.get(id).and_then(|(_, l)| *l)
    }
}

/// The thread's loop (see the module doc). Returns at shutdown.
pub fn run(allocs: Arc<AllocManager>, clock: Arc<dyn Clock>, shutdown: Receiver<Never>) {
    let watch = allocs.watch_jobs();
    let mut schedule = Schedule::default();
    loop {
        let now = clock.now_millis().div_euclid(1000);
        schedule.update(allocs.periodic_jobs(), now);
        for (id, at) in schedule.due(now) {
            match allocs.launch_periodic(&id, at, false) {
                Ok(Some(l)) => log::info!("periodic job {id:?}: launched {:?}", l.job_id),
                Ok(None) => log::info!(
                    "periodic job {id:?}: launch at {at} skipped (a child still runs, or it exists)"
                ),
                Err(e) => log::warn!("periodic job {id:?}: launch at {at} failed: {e}"),
            }
        }
        let deadline = match schedule.next() {
            Some(at) => {
                let wait = (at * 1000 - clock.now_millis()).max(0);
                after(Duration::from_millis(wait as u64))
            }
            None => never(),
        };
        select! {
            recv(shutdown) -> _ => return,
            recv(watch) -> _ => {}
            recv(deadline) -> _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::cron::Cron;

    fn every(expr: &str) -> PeriodicConfig {
        Cron::parse(expr).unwrap();
        PeriodicConfig {
            enabled: true,
            spec: expr.to_string(),
            specs: Vec::new(),
            spec_type: "cron".into(),
            prohibit_overlap: false,
            time_zone: "UTC".into(),
        }
    }

    // 2026-01-01T00:00:00Z.
    const T0: i64 = 1_767_225_600;

    #[test]
    fn launches_each_instant_once_on_a_fake_clock() {
        let mut s = Schedule::default();
        s.update(vec![("a".into(), every("* * * * *"))], T0 + 10);
        assert_eq!(s.next(), Some(T0 + 60));
        assert!(s.due(T0 + 59).is_empty());
        assert_eq!(s.due(T0 + 60), vec![("a".to_string(), T0 + 60)]);
        assert!(s.due(T0 + 61).is_empty(), "launched once");
        assert_eq!(s.next(), Some(T0 + 120));
    }

    #[test]
    fn missed_instants_are_not_replayed() {
        let mut s = Schedule::default();
        s.update(vec![("a".into(), every("* * * * *"))], T0);
        // The clock jumps ten minutes (the agent was stopped, or the machine slept): one
        // launch, at the latest missed instant, and then the next one after now.
        assert_eq!(s.due(T0 + 600 + 5), vec![("a".to_string(), T0 + 60)]);
        assert_eq!(s.next(), Some(T0 + 660));
    }

    #[test]
    fn a_job_changed_or_gone_is_rescheduled_or_dropped() {
        let mut s = Schedule::default();
        s.update(
            vec![
                ("a".into(), every("* * * * *")),
                ("b".into(), every("@hourly")),
            ],
            T0,
        );
        assert_eq!(
            (s.next_of("a"), s.next_of("b")),
            (Some(T0 + 60), Some(T0 + 3600))
        );
        // Unchanged: keeps its launch even when updated later.
        s.update(
            vec![
                ("a".into(), every("* * * * *")),
                ("b".into(), every("@daily")),
            ],
            T0 + 30,
        );
        assert_eq!(
            (s.next_of("a"), s.next_of("b")),
            (Some(T0 + 60), Some(T0 + 86_400))
        );
        s.update(vec![("b".into(), every("@daily"))], T0 + 30);
        assert_eq!(s.next_of("a"), None);
        assert_eq!(s.next(), Some(T0 + 86_400));
    }
}
