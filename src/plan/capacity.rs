//! Placement by resources (resources.md "Node resources and placement"): an allocation fits
//! only if what the node's live allocations ask, plus its own ask, stays within the node's
//! unreserved [`Capacity`]; one that does not is refused with Nomad's dimension
//! (`Dimension "memory" exhausted on 1 nodes`), as `AllocsFit` names it.
//!
//! Pure: [`fit`] takes the capacity, what is already used (what the node view's live
//! allocations ask, `super::NodeView`) and the [`Placement`] that `super::feasible` made, and
//! refuses what does not fit. The allocation manager builds the view under its registry lock
//! with the rest of the plan, so two registrations cannot both take the last room.

use super::feasible::{Placement, Reason};
use crate::jobspec::{Job, Resources, TaskGroup};
use crate::resources::Capacity;

/// The `cpu` a task asks for, in MHz: its `cpu`, or for a task with `cores`, the cores' MHz
/// (what Nomad's scheduler writes in its `CpuShares`: its weight and its `NOMAD_CPU_LIMIT`).
pub fn task_cpu_mhz(r: &Resources, mhz_per_core: u64) -> u64 {
    if r.cores > 0 {
        u64::from(r.cores) * mhz_per_core
    } else {
        u64::from(r.cpu)
    }
}

/// What allocations ask of the node, in Nomad's units (MHz, MB, MB, cores).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asks {
    pub cpu_mhz: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub cores: u32,
}

impl Asks {
    /// One allocation of `group`: its tasks' `resources` summed. The scheduler counts
    /// `memory`, not `memory_max` (Nomad's oversubscription), and a task's `cores` as that many
    /// cores and `mhz_per_core` MHz each of `cpu` (Nomad's `SharesPerCore`). The disk is the
    /// group's `ephemeral_disk` size, once per allocation (Nomad's `AllocatedSharedResources`).
    pub fn of_group(group: &TaskGroup, mhz_per_core: u64) -> Asks {
        let shared = Asks {
            disk_mb: group.ephemeral_disk.size_mb,
            ..Asks::default()
        };
        group.tasks.iter().fold(shared, |a, t| Asks {
            cpu_mhz: a.cpu_mhz + task_cpu_mhz(&t.resources, mhz_per_core),
            memory_mb: a.memory_mb + u64::from(t.resources.memory_mb),
            cores: a.cores + t.resources.cores,
            ..a
        })
    }

    /// Both asks together.
    pub fn plus(self, o: Asks) -> Asks {
        Asks {
            cpu_mhz: self.cpu_mhz + o.cpu_mhz,
            memory_mb: self.memory_mb + o.memory_mb,
            disk_mb: self.disk_mb + o.disk_mb,
            cores: self.cores + o.cores,
        }
    }

    /// The first dimension `self` exceeds `cap` in, in the order Nomad's `Superset` checks them.
    pub fn exhausted(&self, cap: &Capacity) -> Option<&'static str> {
        if self.cores as usize > cap.cores.len() {
            Some("cores")
        } else if self.cpu_mhz > cap.cpu_mhz {
            Some("cpu")
        } else if self.memory_mb > cap.memory_mb {
            Some("memory")
        } else if self.disk_mb > cap.disk_mb {
            Some("disk")
        } else {
            None
        }
    }
}

/// Refuses, group by group in the job's order, each allocation of `placement` that does not fit
/// in `cap` on top of `used` and of those placed before it; the rest of a group goes with the
/// first of it that does not fit. Answers what is used with what stays placed.
pub fn fit(job: &Job, cap: &Capacity, mut used: Asks, placement: &mut Placement) -> Asks {
    for group in &job.task_groups {
        let wanted = placement.place.get(&group.name).copied().unwrap_or(0);
        let ask = Asks::of_group(group, cap.mhz_per_core);
        for placed in 0..wanted {
            let after = used.plus(ask);
            if let Some(dimension) = after.exhausted(cap) {
                placement.refuse_some(
                    &group.name,
                    wanted - placed,
                    Reason::Dimension(dimension.to_string()),
                );
                break;
            }
            used = after;
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::super::feasible::PlacementFailure;
    use super::*;
    use std::collections::BTreeMap;

    fn job(groups: &[(&str, u32, u32, u32)]) -> Job {
        let mut job: Job = crate::jobspec::hcl::parse_job(
            r#"job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#,
        )
        .unwrap()
        .job;
        let template = job.task_groups[0].clone();
        job.task_groups = groups
            .iter()
            .map(|(name, count, cpu, mem)| {
                let mut g = template.clone();
                g.name = name.to_string();
                g.count = *count;
                // Small enough that only the tests of the disk run out of it.
                g.ephemeral_disk.size_mb = 10;
                g.tasks[0].resources.cpu = *cpu;
                g.tasks[0].resources.memory_mb = *mem;
                g
            })
            .collect();
        job
    }

    fn placing(job: &Job) -> Placement {
        Placement {
            place: job
                .task_groups
                .iter()
                .map(|g| (g.name.clone(), g.count))
                .collect::<BTreeMap<_, _>>(),
            failures: Vec::new(),
        }
    }

    fn cap() -> Capacity {
        Capacity {
            cpu_mhz: 1000,
            memory_mb: 200,
            disk_mb: 1000,
            cores: vec![0, 1],
            mhz_per_core: 500,
        }
    }

    #[test]
    fn what_fits_is_placed_and_the_rest_names_the_dimension() {
        let j = job(&[("a", 3, 100, 80), ("b", 1, 100, 10)]);
        let mut p = placing(&j);
        let used = fit(&j, &cap(), Asks::default(), &mut p);
        // Two of a's 80 MB fit in 200; the third does not; b's 10 MB still does.
        assert_eq!(p.place, BTreeMap::from([("a".into(), 2), ("b".into(), 1)]));
        assert_eq!(
            p.failures,
            vec![PlacementFailure {
                group: "a".into(),
                failed: 1,
                reason: Reason::Dimension("memory".into()),
            }]
        );
        assert_eq!(
            p.failures[0].lines()[1],
            "* Dimension \"memory\" exhausted on 1 nodes"
        );
        assert_eq!((used.cpu_mhz, used.memory_mb), (300, 170));
    }

    #[test]
    fn what_is_used_counts_and_cpu_is_checked_before_memory() {
        let j = job(&[("a", 1, 600, 300)]);
        let mut p = placing(&j);
        let used = Asks {
            cpu_mhz: 500,
            ..Asks::default()
        };
        fit(&j, &cap(), used, &mut p);
        assert!(p.place.is_empty());
        assert_eq!(p.failures[0].reason, Reason::Dimension("cpu".into()));
        // Exactly full fits.
        let j = job(&[("a", 1, 500, 200)]);
        let mut p = placing(&j);
        fit(&j, &cap(), used, &mut p);
        assert_eq!(p.place, BTreeMap::from([("a".into(), 1)]));
        assert!(p.failures.is_empty());
    }

    #[test]
    fn cores_ask_their_count_and_their_mhz() {
        let mut j = job(&[("a", 2, 0, 10)]);
        j.task_groups[0].tasks[0].resources.cores = 1;
        let ask = Asks::of_group(&j.task_groups[0], 500);
        assert_eq!((ask.cores, ask.cpu_mhz), (1, 500));
        let mut p = placing(&j);
        let used = Asks {
            cores: 1,
            ..Asks::default()
        };
        let after = fit(&j, &cap(), used, &mut p);
        // One core of two is held: the first allocation takes the other, the second has none.
        assert_eq!(p.place, BTreeMap::from([("a".into(), 1)]));
        assert_eq!(p.failures[0].reason, Reason::Dimension("cores".into()));
        assert_eq!(
            p.failures[0].lines()[1],
            "* Dimension \"cores\" exhausted on 1 nodes"
        );
        assert_eq!((after.cores, after.cpu_mhz), (2, 500));
    }

    #[test]
    fn the_groups_ephemeral_disk_is_asked_once_per_allocation() {
        let mut j = job(&[("a", 3, 10, 10), ("b", 1, 10, 10)]);
        j.task_groups[0].ephemeral_disk.size_mb = 300;
        let second = j.task_groups[0].tasks[0].clone();
        j.task_groups[0].tasks.push(second);
        j.task_groups[1].ephemeral_disk.size_mb = 500;
        assert_eq!(Asks::of_group(&j.task_groups[0], 500).disk_mb, 300);
        let mut p = placing(&j);
        let used = Asks {
            disk_mb: 100,
            ..Asks::default()
        };
        let after = fit(&j, &cap(), used, &mut p);
        // 100 held and three of a's 300 (once each, though a has two tasks) fill the 1000
        // exactly, which fits; b's 500 then does not.
        assert_eq!(p.place, BTreeMap::from([("a".into(), 3)]));
        assert_eq!(
            p.failures,
            vec![PlacementFailure {
                group: "b".into(),
                failed: 1,
                reason: Reason::Dimension("disk".into()),
            }]
        );
        assert_eq!(
            p.failures[0].lines()[1],
            "* Dimension \"disk\" exhausted on 1 nodes"
        );
        assert_eq!(after.disk_mb, 1000);
    }

    #[test]
    fn dimensions_are_named_in_nomads_order() {
        let over = |a: Asks| a.exhausted(&cap());
        let base = Asks::default();
        assert_eq!(over(base), None);
        assert_eq!(
            over(Asks {
                cores: 3,
                cpu_mhz: 5000,
                ..base
            }),
            Some("cores")
        );
        assert_eq!(
            over(Asks {
                disk_mb: 1001,
                ..base
            }),
            Some("disk")
        );
        assert_eq!(
            over(Asks {
                memory_mb: 201,
                disk_mb: 1001,
                ..base
            }),
            Some("memory")
        );
    }
}
