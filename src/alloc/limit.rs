//! The per-node allocation limit (`client { max_allocs }`, docs/configuration.md): a
//! registration that would make more allocations live on this node than the limit is refused
//! before anything changes. Every live allocation costs a runner thread per task in the agent and
//! a process per task; without a bound, one jobspec of 200 groups of `count = 10000` asked for
//! two million of each.
//!
//! Checked under the registry lock, in the registration that it guards, so two registrations
//! cannot both fit in the same room.

use super::manager::Registry;
use super::AllocError;
use crate::jobspec::Job;
use crate::records::TaskStatus;

impl Registry {
    /// Refuses `job` when its allocations and the live (not terminal) allocations of the other
    /// jobs are more than `limit`. The job's own allocations are not counted: registering it
    /// stops them.
    /// Refuses to place `adding` more allocations of job `id`, whose other allocations stay,
    /// when that makes more than `limit` live: a blocked job placed later (the node changed)
    /// is held to the limit as a registration is.
    pub(super) fn check_room(&self, id: &str, adding: u64, limit: usize) -> Result<(), AllocError> {
        let live = self
            .allocs
            .values()
            .filter(|a| a.tasks.values().any(|t| t.lock().state != TaskStatus::Dead))
            .count() as u64;
        if live + adding <= limit as u64 {
            return Ok(());
        }
        Err(AllocError::TooManyAllocs(format!(
            "number of allocations ({}) is over the limit ({limit}): placing {adding} queued \
             allocations of job {id:?} beside the {live} live on this node; they stay queued \
             until there is room, or raise client {{ max_allocs }}",
            live + adding
        )))
    }

    pub(super) fn check_alloc_limit(&self, job: &Job, limit: usize) -> Result<(), AllocError> {
        let asked: u64 = job.task_groups.iter().map(|g| u64::from(g.count)).sum();
        let others = self
            .allocs
            .values()
            .filter(|a| a.job.id != job.id)
            .filter(|a| a.tasks.values().any(|t| t.lock().state != TaskStatus::Dead))
            .count() as u64;
        let total = asked + others;
        if total <= limit as u64 {
            return Ok(());
        }
        Err(AllocError::TooManyAllocs(format!(
            "number of allocations ({total}) is over the limit ({limit}): job {:?} asks for \
             {asked} and {others} of other jobs are live on this node; lower the job's count or \
             raise client {{ max_allocs }}",
            job.id
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{gated_job, manager};
    use super::*;

    /// Other jobs' live allocations count, the job's own do not (registering it stops them),
    /// terminal ones do not.
    #[test]
    fn the_limit_counts_what_would_be_live() {
        let (allocs, dir, _shutdown) = manager("limit");
        allocs.register_job(gated_job("a", 3)).unwrap();
        let check = |job: &str, count: u32| {
            let reg = allocs.registry.lock();
            reg.check_alloc_limit(&gated_job(job, count), 5)
        };
        assert!(check("b", 2).is_ok());
        assert_eq!(
            check("b", 3).unwrap_err().to_string(),
            "number of allocations (6) is over the limit (5): job \"b\" asks for 3 and 3 of \
             other jobs are live on this node; lower the job's count or raise client { max_allocs }"
        );
        assert!(check("a", 5).is_ok(), "a's own allocations are replaced");
        allocs.stop_job("a", false).unwrap();
        assert!(check("b", 5).is_ok(), "stopped allocations are not live");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Queued allocations placed later are held to the limit with every live allocation
    /// counted, the job's own included (they stay).
    #[test]
    fn queued_allocations_are_placed_only_within_the_limit() {
        let (allocs, dir, _shutdown) = manager("limit-room");
        allocs.register_job(gated_job("a", 3)).unwrap();
        let reg = allocs.registry.lock();
        assert!(reg.check_room("a", 2, 5).is_ok());
        assert_eq!(
            reg.check_room("a", 3, 5).unwrap_err().to_string(),
            "number of allocations (6) is over the limit (5): placing 3 queued allocations of job \
             \"a\" beside the 3 live on this node; they stay queued until there is room, or raise \
             client { max_allocs }"
        );
        drop(reg);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// 2 groups of 10,000 against the default limit: refused, nothing registered.
    #[test]
    fn a_registration_over_the_limit_changes_nothing() {
        let (allocs, dir, _shutdown) = manager("limit-reg");
        let mut job = gated_job("huge", crate::jobspec::MAX_GROUP_COUNT);
        let mut second = job.task_groups[0].clone();
        second.name = "g2".into();
        job.task_groups.push(second);
        let err = allocs.register_job(job).unwrap_err();
        assert!(matches!(err, AllocError::TooManyAllocs(_)), "{err}");
        assert!(
            err.to_string()
                .starts_with("number of allocations (20000) is over the limit (10000)"),
            "{err}"
        );
        assert!(allocs.job_ids().is_empty() && allocs.allocations().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
