//! CPU cores for tasks' `resources { cores }` (docs/resources.md): which of a node's
//! unreserved cores are held, and the cores a new allocation's tasks get, as Nomad's scheduler
//! gives them (`ReservedCores`: the lowest free ones).
//!
//! A core is held while an allocation that holds it is live, as a port is (`super::ports`):
//! desired `run` and not every task dead (the allocation manager builds the node view's held
//! cores so). The cores are given in the plan of the registration that places the allocations,
//! after the capacity check ([`super::capacity`], which refused what asks more cores than are
//! left). They are then kept with the allocation (in the state file too), so an agent restart
//! keeps them and never gives them to another task while the allocation lives.

use std::collections::{BTreeMap, BTreeSet};

use super::feasible::{Placement, Reason};
use crate::jobspec::{Job, TaskGroup};

/// Task name → the cores it was given, for the tasks of one allocation that ask for cores.
pub type TaskCores = BTreeMap<String, Vec<u32>>;

/// The node's unreserved cores that no live allocation holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreIndex {
    free: BTreeSet<u32>,
}

impl CoreIndex {
    /// An index of `cores` (the unreserved ones), all free.
    pub fn new(cores: &[u32]) -> CoreIndex {
        CoreIndex {
            free: cores.iter().copied().collect(),
        }
    }

    /// Marks an allocation's cores held.
    pub fn hold(&mut self, cores: &TaskCores) {
        self.hold_cores(cores.values().flatten().copied());
    }

    /// Marks cores held (those the live allocations of a node view hold).
    pub fn hold_cores(&mut self, cores: impl IntoIterator<Item = u32>) {
        for c in cores {
            self.free.remove(&c);
        }
    }

    /// The cores of each task of one allocation of `group` that asks for them, the lowest free
    /// first, task by task in the group's order; marked held. `None`, and nothing marked, when
    /// there are not enough.
    pub fn assign(&mut self, group: &TaskGroup) -> Option<TaskCores> {
        let wanted: usize = group.tasks.iter().map(|t| t.resources.cores as usize).sum();
        if wanted > self.free.len() {
            return None;
        }
        let mut given = TaskCores::new();
        for t in group.tasks.iter().filter(|t| t.resources.cores > 0) {
            let cores: Vec<u32> = self
                .free
                .iter()
                .take(t.resources.cores as usize)
                .copied()
                .collect();
            for c in &cores {
                self.free.remove(c);
            }
            given.insert(t.name.clone(), cores);
        }
        Some(given)
    }
}

/// The cores of each allocation `placement` adds, group by group in the job's order (as
/// [`super::ports::assign_ports`] gives ports): an allocation that cannot get its cores is
/// refused with Nomad's `Dimension "cores" exhausted`, and so is the rest of its group.
pub fn assign_cores(
    index: &mut CoreIndex,
    job: &Job,
    placement: &mut Placement,
) -> BTreeMap<String, Vec<TaskCores>> {
    let mut given = BTreeMap::new();
    for group in &job.task_groups {
        let wanted = placement.place.get(&group.name).copied().unwrap_or(0);
        let mut cores = Vec::new();
        for _ in 0..wanted {
            match index.assign(group) {
                Some(c) => cores.push(c),
                None => {
                    let refused = wanted - cores.len() as u32;
                    let reason = Reason::Dimension("cores".to_string());
                    placement.refuse_some(&group.name, refused, reason);
                    break;
                }
            }
        }
        given.insert(group.name.clone(), cores);
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(cores: &[(&str, u32)]) -> TaskGroup {
        let job = crate::jobspec::hcl::parse_job(
            "job \"j\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"raw_exec\"\n   \
             config { command = \"/bin/true\" }\n  }\n }\n}\n",
        )
        .unwrap()
        .job;
        let mut g = job.task_groups[0].clone();
        let template = g.tasks[0].clone();
        g.tasks = cores
            .iter()
            .map(|(name, n)| {
                let mut t = template.clone();
                t.name = name.to_string();
                t.resources.cores = *n;
                t.resources.cpu = 0;
                t
            })
            .collect();
        g
    }

    #[test]
    fn tasks_get_the_lowest_free_cores_and_none_twice() {
        let mut index = CoreIndex::new(&[0, 1, 2, 3]);
        index.hold(&TaskCores::from([("old".to_string(), vec![1])]));
        let g = group(&[("a", 2), ("none", 0), ("b", 1)]);
        let given = index.assign(&g).unwrap();
        assert_eq!(
            given,
            TaskCores::from([("a".to_string(), vec![0, 2]), ("b".to_string(), vec![3])])
        );
        // Nothing is left: the next ask fails and takes nothing.
        let one = group(&[("c", 1)]);
        assert_eq!(index.assign(&one), None);
        let mut index = CoreIndex::new(&[0, 1]);
        assert_eq!(index.assign(&group(&[("a", 3)])), None);
        assert_eq!(
            index.assign(&group(&[("a", 2)])),
            Some(TaskCores::from([("a".to_string(), vec![0, 1])]))
        );
    }

    #[test]
    fn a_group_without_cores_gets_none_and_takes_none() {
        let mut index = CoreIndex::new(&[0]);
        assert_eq!(index.assign(&group(&[("a", 0)])), Some(TaskCores::new()));
        assert_eq!(
            index.assign(&group(&[("a", 1)])),
            Some(TaskCores::from([("a".to_string(), vec![0])]))
        );
    }

    #[test]
    fn what_cannot_get_its_cores_is_refused_with_nomads_dimension() {
        let mut job = crate::jobspec::hcl::parse_job(
            "job \"j\" {\n group \"g\" {\n  count = 3\n  task \"t\" {\n   driver = \"raw_exec\"\n   \
             config { command = \"/bin/true\" }\n   resources { cores = 1 }\n  }\n }\n}\n",
        )
        .unwrap()
        .job;
        job.task_groups[0].count = 3;
        let mut placement = Placement {
            place: BTreeMap::from([("g".to_string(), 3)]),
            failures: Vec::new(),
        };
        let mut index = CoreIndex::new(&[0, 1]);
        let given = assign_cores(&mut index, &job, &mut placement);
        assert_eq!(given["g"].len(), 2);
        assert_eq!(given["g"][1]["t"], vec![1]);
        assert_eq!(placement.place["g"], 2);
        assert_eq!(
            placement.failures[0].lines()[1],
            "* Dimension \"cores\" exhausted on 1 nodes"
        );
    }
}
