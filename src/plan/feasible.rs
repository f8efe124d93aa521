//! Feasibility: which of a job's allocations one node can take, and Nomad's words for those it
//! cannot ([`PlacementFailure`]). Pure: the node is a value ([`Node`]), the allocations already
//! on it are counts, and the answer is a [`Placement`]; the planner (`super::schedule`) runs it
//! node by node and the allocation manager turns what the plan puts on its node into
//! allocations and evaluations.
//!
//! The checks, in the order Nomad's scheduler filters a node, the first that fails naming the
//! failure:
//!
//! 1. the job's `node_pool` (`all` is any) and `datacenters` (globs): a node outside them is not
//!    evaluated at all (`No nodes were eligible for evaluation`);
//! 2. the job's constraints, then per group: its tasks' drivers (`missing drivers`: a driver
//!    whose `driver.<name>` attribute is absent, as the docker driver's is while the engine
//!    cannot be reached), the group's and its tasks' constraints;
//! 3. `distinct_hosts` (one allocation of the job, or of the group, on a node) and
//!    `distinct_property` (at most N per value of the property), which limit how many of a
//!    group's allocations fit rather than whether any does;
//! 4. resources a group exhausts ([`Reason::Dimension`]: `super::capacity`, `super::ports`,
//!    `super::cores`).
//!
//! Adding a check is one line: a check of the node alone goes in [`node_filter`]; one that
//! needs what the node's allocations hold runs after [`place_asked`] in the planner's pipeline
//! (`super::schedule`) and refuses the group it fails: `placement.refuse(&group,
//! Reason::Dimension("network: reserved port collision http=8080".into()))`. The failure, its
//! metric lines, its evaluation record and its API shape follow.

use crate::jobspec::devices::MISSING_DEVICES;
use std::collections::BTreeMap;

use crate::jobspec::{Constraint, Job, Operator, TaskGroup};
use crate::records::{FailedPlacement, PlacementReason};
use crate::util::version::{Constraints, Flavor, Version};

/// What placement knows of this node, at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub id: String,
    pub name: String,
    pub datacenter: String,
    pub node_class: String,
    pub node_pool: String,
    /// Fingerprinted attributes (`kernel.name`, `driver.docker`...): `${attr.<key>}`.
    pub attributes: BTreeMap<String, String>,
    /// The agent's `client { meta }`: `${meta.<key>}`.
    pub meta: BTreeMap<String, String>,
    /// What is left for allocations after `client { reserved }`; `None` checks nothing.
    pub capacity: Option<crate::resources::Capacity>,
}

/// Why the node takes no (more) allocations of a group.
pub type Reason = PlacementReason;

/// A group this node could not place, wholly or in part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementFailure {
    pub group: String,
    /// How many of the group's allocations were not placed.
    pub failed: u32,
    pub reason: Reason,
}

impl PlacementFailure {
    /// Nomad's metric lines for the group (`formatAllocMetrics`), without the indent:
    /// `* Constraint "${attr.kernel.name} = linux": 1 nodes excluded by filter`.
    pub fn lines(&self) -> Vec<String> {
        match &self.reason {
            Reason::NodePool | Reason::Datacenter => {
                vec!["* No nodes were eligible for evaluation".to_string()]
            }
            Reason::Constraint(c) => {
                vec![format!("* Constraint {c:?}: 1 nodes excluded by filter")]
            }
            Reason::Dimension(d) => vec![
                "* Resources exhausted on 1 nodes".to_string(),
                format!("* Dimension {d:?} exhausted on 1 nodes"),
            ],
        }
    }

    /// `Task Group "web" (failed to place 2 allocations):`, as Nomad's `job run` heads them.
    pub fn heading(&self) -> String {
        let noun = if self.failed == 1 {
            "allocation"
        } else {
            "allocations"
        };
        format!(
            "Task Group {:?} (failed to place {} {noun}):",
            self.group, self.failed
        )
    }
}

impl From<&PlacementFailure> for FailedPlacement {
    fn from(f: &PlacementFailure) -> FailedPlacement {
        FailedPlacement {
            task_group: f.group.clone(),
            failed: f.failed,
            reason: f.reason.clone(),
        }
    }
}

impl From<&FailedPlacement> for PlacementFailure {
    fn from(f: &FailedPlacement) -> PlacementFailure {
        PlacementFailure {
            group: f.task_group.clone(),
            failed: f.failed,
            reason: f.reason.clone(),
        }
    }
}

/// What the node takes of a job: per group, how many new allocations; and the failures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Group → allocations to add, for every group with at least one.
    pub place: BTreeMap<String, u32>,
    /// In the job's group order.
    pub failures: Vec<PlacementFailure>,
}

impl Placement {
    /// Takes back what was placed of `group` and records it as failed for `reason`: a check
    /// made after [`place`] (one that needs the registry) refuses the group. A group with an
    /// earlier failure keeps that reason (the first check that fails names it, as in Nomad).
    pub fn refuse(&mut self, group: &str, reason: Reason) {
        self.refuse_some(group, u32::MAX, reason);
    }

    /// As [`Placement::refuse`], for at most `n` of the group's allocations: the others stay
    /// placed (a static port fits one allocation of a group, not its second).
    pub fn refuse_some(&mut self, group: &str, n: u32, reason: Reason) {
        let Some(placed) = self.place.get_mut(group) else {
            return;
        };
        let refused = n.min(*placed);
        *placed -= refused;
        if *placed == 0 {
            self.place.remove(group);
        }
        match self.failures.iter_mut().find(|f| f.group == group) {
            Some(f) => f.failed += refused,
            None => self.failures.push(PlacementFailure {
                group: group.to_string(),
                failed: refused,
                reason,
            }),
        }
    }
}

/// Places what `job` still needs on `node`. `existing` counts, per group, the job's allocations
/// that are already placed and stay (none for a new registration, which replaces them all); each
/// group asks for `count` minus those.
pub fn place(job: &Job, node: &Node, existing: &BTreeMap<String, u32>) -> Placement {
    let asked: BTreeMap<String, u32> = job
        .task_groups
        .iter()
        .map(|g| {
            let have = existing.get(&g.name).copied().unwrap_or(0);
            (g.name.clone(), g.count.saturating_sub(have))
        })
        .collect();
    place_asked(job, node, existing, &asked)
}

/// Places `asked` allocations per group on `node`, which already has `have` of the job's
/// (per group; they count for the `distinct_*` limits). [`place`] asks what the job still
/// needs; the planner asks for a node's share of it.
pub fn place_asked(
    job: &Job,
    node: &Node,
    have: &BTreeMap<String, u32>,
    asked: &BTreeMap<String, u32>,
) -> Placement {
    let have = |g: &TaskGroup| have.get(&g.name).copied().unwrap_or(0);
    let mut out = Placement::default();
    let whole_job = job_filter(job, node);
    // Allocations of the job on this node, placed or staying, for job-level distinct_* limits.
    let mut job_total: u32 = job.task_groups.iter().map(have).sum();
    for group in &job.task_groups {
        let wanted = asked.get(&group.name).copied().unwrap_or(0);
        if wanted == 0 {
            continue;
        }
        let mut reason = whole_job.clone().or_else(|| group_filter(group, node));
        let mut fits = if reason.is_some() { 0 } else { wanted };
        if reason.is_none() {
            let limits = distinct_limits(job, group, node, job_total, have(group));
            fits = limits.iter().map(|(n, _)| *n).fold(fits, u32::min);
            // The first allocation that does not fit is refused by the first check (in
            // Nomad's order) that has no room left.
            reason = limits
                .into_iter()
                .find(|(n, _)| *n == fits)
                .map(|(_, why)| why);
        }
        if fits > 0 {
            out.place.insert(group.name.clone(), fits);
            job_total += fits;
        }
        if let (Some(reason), true) = (reason, fits < wanted) {
            out.failures.push(PlacementFailure {
                group: group.name.clone(),
                failed: wanted - fits,
                reason,
            });
        }
    }
    out
}

/// Why `node` takes none of `group`, by the checks of the node alone (steps 1 and 2 of the
/// module doc), the first that fails; `None` when it may take some.
pub fn node_filter(job: &Job, group: &TaskGroup, node: &Node) -> Option<Reason> {
    job_filter(job, node).or_else(|| group_filter(group, node))
}

/// Why `node` takes nothing of `job` at all: its pool, its datacenter, the job's constraints.
fn job_filter(job: &Job, node: &Node) -> Option<Reason> {
    if !pool_matches(&job.node_pool, &node.node_pool) {
        Some(Reason::NodePool)
    } else if !job.datacenters.iter().any(|p| glob(p, &node.datacenter)) {
        Some(Reason::Datacenter)
    } else {
        first_failed(&job.constraints, node).map(Reason::Constraint)
    }
}

/// The node pool rule: `all` runs anywhere, else the pools must be the same.
fn pool_matches(job_pool: &str, node_pool: &str) -> bool {
    job_pool == crate::jobspec::constraint::ALL_NODE_POOLS || job_pool == node_pool
}

/// A datacenter glob as Nomad matches one: `*` is any run of characters, nothing else is special.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || !name[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The first failing filter of a group: its drivers, then its own and its tasks' constraints.
fn group_filter(group: &TaskGroup, node: &Node) -> Option<Reason> {
    let missing_driver = group.tasks.iter().any(|t| {
        let attr = node.attributes.get(&format!("driver.{}", t.driver));
        attr.and_then(|v| go_bool(v)) != Some(true)
    });
    if missing_driver {
        return Some(Reason::Constraint("missing drivers".to_string()));
    }
    first_failed(&group.constraints, node)
        .or_else(|| {
            group
                .tasks
                .iter()
                .find_map(|t| first_failed(&t.constraints, node))
        })
        .map(Reason::Constraint)
        // After the constraints, as Nomad's feasibility checks run: this node has no devices.
        .or_else(|| {
            group
                .tasks
                .iter()
                .any(|t| !t.resources.devices.is_empty())
                .then(|| Reason::Constraint(MISSING_DEVICES.to_string()))
        })
}

/// The first constraint `node` does not meet, as Nomad names it; the distinct operators count
/// allocations and are not checked here.
fn first_failed(constraints: &[Constraint], node: &Node) -> Option<String> {
    constraints
        .iter()
        .find(|c| !c.operand.is_distinct() && !meets(c, node))
        .map(Constraint::to_string)
}

/// The limits the distinct operators put on a group: `(allocations that still fit, why not
/// more)`, job-level ones first.
fn distinct_limits(
    job: &Job,
    group: &TaskGroup,
    node: &Node,
    job_total: u32,
    group_total: u32,
) -> Vec<(u32, Reason)> {
    let levels = [
        (&job.constraints, job_total),
        (&group.constraints, group_total),
    ];
    let mut hosts = Vec::new();
    let mut properties = Vec::new();
    for (constraints, used) in levels {
        for c in constraints.iter() {
            match c.operand {
                Operator::DistinctHosts if c.r_target != "false" => hosts.push((
                    1u32.saturating_sub(used),
                    Reason::Constraint("distinct_hosts".to_string()),
                )),
                Operator::DistinctProperty => properties.push(property_limit(c, node, used)),
                _ => {}
            }
        }
    }
    hosts.extend(properties);
    hosts
}

/// How many more allocations a `distinct_property` lets on this node, where every allocation
/// has the node's one value of the property.
fn property_limit(c: &Constraint, node: &Node, used: u32) -> (u32, Reason) {
    let Some(value) = resolve(&c.l_target, node) else {
        return (
            0,
            Reason::Constraint(format!("missing property {:?}", c.l_target)),
        );
    };
    let allowed = c.r_target.parse::<u32>().unwrap_or(1);
    let left = allowed.saturating_sub(used);
    let why = format!(
        "distinct_property: {}={value} used by {} allocs",
        c.l_target,
        used.max(allowed)
    );
    (left, Reason::Constraint(why))
}

/// A target's value on the node: a literal, or `${node.*}`, `${attr.*}`, `${meta.*}` (Nomad's
/// `resolveTarget`); `None` when the node has no such value.
pub fn resolve(target: &str, node: &Node) -> Option<String> {
    let Some(inner) = target.strip_prefix("${") else {
        return Some(target.to_string());
    };
    let inner = inner.strip_suffix('}').unwrap_or(inner);
    match inner {
        "node.unique.id" => Some(node.id.clone()),
        "node.datacenter" => Some(node.datacenter.clone()),
        "node.unique.name" => Some(node.name.clone()),
        "node.class" => Some(node.node_class.clone()),
        "node.pool" => Some(node.node_pool.clone()),
        _ => {
            if let Some(key) = inner.strip_prefix("attr.") {
                node.attributes.get(key).cloned()
            } else if let Some(key) = inner.strip_prefix("meta.") {
                node.meta.get(key).cloned()
            } else {
                None
            }
        }
    }
}

/// Whether `node` meets one constraint, by Nomad's `checkConstraint`: a target the node does
/// not have fails every operator but `!=`, `not` and `is_not_set`.
pub fn meets(c: &Constraint, node: &Node) -> bool {
    let l = resolve(&c.l_target, node);
    let r = resolve(&c.r_target, node);
    let both = || l.as_deref().zip(r.as_deref());
    match c.operand {
        Operator::Eq | Operator::EqEq | Operator::Is => both().is_some_and(|(l, r)| l == r),
        Operator::Ne | Operator::Not => l.unwrap_or_default() != r.unwrap_or_default(),
        Operator::Lt | Operator::Le | Operator::Gt | Operator::Ge => {
            both().is_some_and(|(l, r)| ordered(c.operand, l, r))
        }
        Operator::IsSet => l.is_some(),
        Operator::IsNotSet => l.is_none(),
        Operator::Version | Operator::Semver => both().is_some_and(|(l, r)| {
            let flavor = if c.operand == Operator::Version {
                Flavor::Version
            } else {
                Flavor::Semver
            };
            match (Version::parse(l), Constraints::parse(r, flavor)) {
                (Ok(v), Ok(cs)) => cs.check(&v),
                _ => false,
            }
        }),
        Operator::Regexp => both()
            .is_some_and(|(l, r)| super::regexps::compiled(r).is_some_and(|re| re.is_match(l))),
        Operator::SetContains | Operator::SetContainsAll => {
            both().is_some_and(|(l, r)| items(r).all(|want| items(l).any(|have| have == want)))
        }
        Operator::SetContainsAny => {
            both().is_some_and(|(l, r)| items(r).any(|want| items(l).any(|have| have == want)))
        }
        Operator::DistinctHosts | Operator::DistinctProperty => true,
    }
}

/// The comma-separated items of a set attribute, trimmed.
fn items(list: &str) -> impl Iterator<Item = &str> + Clone {
    list.split(',').map(str::trim)
}

/// `<`, `<=`, `>`, `>=` as Nomad orders: as integers when both are, else as floats when both
/// are, else as text.
fn ordered(op: Operator, l: &str, r: &str) -> bool {
    use std::cmp::Ordering;
    let order = match (l.parse::<i64>(), r.parse::<i64>()) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => match (l.parse::<f64>(), r.parse::<f64>()) {
            (Ok(a), Ok(b)) => match a.partial_cmp(&b) {
                Some(o) => o,
                None => return false,
            },
            _ => l.cmp(r),
        },
    };
    match op {
        Operator::Lt => order == Ordering::Less,
        Operator::Le => order != Ordering::Greater,
        Operator::Gt => order == Ordering::Greater,
        Operator::Ge => order != Ordering::Less,
        _ => false,
    }
}

/// Go's `strconv.ParseBool`, which Nomad reads `driver.<name>` attributes with.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node {
            id: "9f0c8b7a-0000-4000-8000-000000000001".into(),
            name: "node-1".into(),
            datacenter: "dc1".into(),
            node_class: "web".into(),
            node_pool: "default".into(),
            attributes: BTreeMap::from(
                [
                    ("kernel.name", "linux"),
                    ("kernel.version", "6.1.0-28-amd64"),
                    ("cpu.numcores", "8"),
                    ("cpu.frequency", "2400.5"),
                    ("os.name", "debian"),
                    ("nodeward.version", "0.1.0"),
                    ("driver.raw_exec", "1"),
                    ("tags", "ssd, fast,gpu"),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            ),
            meta: BTreeMap::from([("rack".to_string(), "r1".to_string())]),
            capacity: None,
        }
    }

    fn c(l: &str, op: &str, r: &str) -> Constraint {
        Constraint {
            l_target: l.into(),
            r_target: r.into(),
            operand: Operator::parse(op).unwrap(),
        }
    }

    /// Every operator family, passing and failing, against one node.
    #[test]
    fn the_operator_matrix() {
        let n = node();
        let cases = [
            ("${attr.kernel.name}", "=", "linux", true),
            ("${attr.kernel.name}", "==", "windows", false),
            ("${attr.kernel.name}", "is", "linux", true),
            ("${attr.missing}", "=", "", false),
            ("${attr.kernel.name}", "!=", "windows", true),
            ("${attr.kernel.name}", "not", "linux", false),
            ("${attr.missing}", "!=", "x", true),
            ("${attr.cpu.numcores}", ">", "10", false),
            ("${attr.cpu.numcores}", ">=", "8", true),
            ("${attr.cpu.numcores}", "<", "10", true),
            ("${attr.cpu.frequency}", "<=", "2400.5", true),
            ("${attr.os.name}", "<", "fedora", true),
            ("${attr.os.name}", "regexp", "^(debian|ubuntu)$", true),
            ("${attr.os.name}", "regexp", "^ubuntu", false),
            ("${attr.nodeward.version}", "version", ">= 0.1, < 1.0", true),
            ("${attr.nodeward.version}", "version", "~> 1.0", false),
            ("${attr.kernel.version}", "version", ">= 5.0", false),
            ("${attr.kernel.version}", "semver", ">= 5.0", true),
            ("${attr.tags}", "set_contains", "ssd,gpu", true),
            ("${attr.tags}", "set_contains_all", "ssd,nvme", false),
            ("${attr.tags}", "set_contains_any", "nvme,fast", true),
            ("${attr.tags}", "set_contains_any", "nvme", false),
            ("${meta.rack}", "is_set", "", true),
            ("${meta.zone}", "is_set", "", false),
            ("${meta.zone}", "is_not_set", "", true),
            ("${meta.rack}", "=", "r1", true),
            ("${node.datacenter}", "=", "dc1", true),
            ("${node.class}", "=", "web", true),
            ("${node.unique.name}", "=", "node-1", true),
            ("${node.unique.id}", "regexp", "^9f0c8b7a-", true),
            ("${node.pool}", "=", "default", true),
            ("${node.nope}", "=", "x", false),
            ("${meta.rack}", "=", "${meta.rack}", true),
        ];
        for (l, op, r, want) in cases {
            assert_eq!(meets(&c(l, op, r), &n), want, "{l} {op} {r}");
        }
    }

    fn job(hcl_body: &str) -> Job {
        crate::jobspec::hcl::parse_job(&format!("job \"j\" {{\n{hcl_body}\n}}\n"))
            .unwrap()
            .job
    }

    fn group(name: &str, count: u32, extra: &str) -> String {
        format!(
            "group \"{name}\" {{\n count = {count}\n{extra}\n task \"t\" {{\n  driver = \"raw_exec\"\n  config {{ command = \"true\" }}\n }}\n}}"
        )
    }

    fn failure(group: &str, failed: u32, reason: Reason) -> PlacementFailure {
        PlacementFailure {
            group: group.into(),
            failed,
            reason,
        }
    }

    #[test]
    fn a_failing_constraint_places_nothing_of_its_group() {
        let j = job(&format!(
            "{}\n{}",
            group(
                "win",
                2,
                "constraint {\n attribute = \"${attr.kernel.name}\"\n value = \"windows\"\n}"
            ),
            group("ok", 1, "")
        ));
        let p = place(&j, &node(), &BTreeMap::new());
        assert_eq!(p.place, BTreeMap::from([("ok".to_string(), 1)]));
        let f = failure(
            "win",
            2,
            Reason::Constraint("${attr.kernel.name} = windows".into()),
        );
        assert_eq!(p.failures, std::slice::from_ref(&f));
        assert_eq!(
            f.heading(),
            "Task Group \"win\" (failed to place 2 allocations):"
        );
        assert_eq!(
            f.lines(),
            ["* Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter"]
        );
    }

    #[test]
    fn datacenters_pools_and_drivers() {
        let mut n = node();
        let eu = job(&format!("datacenters = [\"eu-*\"]\n{}", group("g", 1, "")));
        let p = place(&eu, &n, &BTreeMap::new());
        assert_eq!(p.failures, [failure("g", 1, Reason::Datacenter)]);
        assert_eq!(
            p.failures[0].lines(),
            ["* No nodes were eligible for evaluation"]
        );
        n.datacenter = "eu-west-1".into();
        assert!(place(&eu, &n, &BTreeMap::new()).failures.is_empty());

        let gpu = job(&format!("node_pool = \"gpu\"\n{}", group("g", 1, "")));
        assert_eq!(
            place(&gpu, &n, &BTreeMap::new()).failures,
            [failure("g", 1, Reason::NodePool)]
        );
        let all = job(&format!("node_pool = \"all\"\n{}", group("g", 1, "")));
        assert!(place(&all, &n, &BTreeMap::new()).failures.is_empty());

        let docker = crate::jobspec::hcl::parse_job(
            "job \"d\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"docker\"\n   config { image = \"busybox:1\" }\n  }\n }\n}\n",
        )
        .unwrap()
        .job;
        let p = place(&docker, &n, &BTreeMap::new());
        assert_eq!(
            p.failures,
            [failure(
                "g",
                1,
                Reason::Constraint("missing drivers".into())
            )]
        );
        n.attributes.insert("driver.docker".into(), "1".into());
        assert_eq!(place(&docker, &n, &BTreeMap::new()).place["g"], 1);
    }

    #[test]
    fn globs() {
        for (pattern, name, want) in [
            ("*", "dc1", true),
            ("dc1", "dc1", true),
            ("dc1", "dc2", false),
            ("eu-*", "dc1", false),
            ("eu-*", "eu-west-1", true),
            ("*-1", "eu-west-1", true),
            ("e*w*1", "eu-west-1", true),
            ("e*x*1", "eu-west-1", false),
            ("dc1*", "dc1", true),
        ] {
            assert_eq!(glob(pattern, name), want, "{pattern} on {name}");
        }
    }

    /// On one node, `distinct_hosts` places one allocation (of the group, or of the whole job),
    /// and `distinct_property` as many as the property's value allows.
    #[test]
    fn distinct_operators_count_allocations() {
        let hosts = "constraint {\n distinct_hosts = true\n}";
        let j = job(&format!("{}\n{}", group("a", 3, hosts), group("b", 2, "")));
        let p = place(&j, &node(), &BTreeMap::new());
        assert_eq!(
            p.place,
            BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 2)])
        );
        assert_eq!(
            p.failures,
            [failure("a", 2, Reason::Constraint("distinct_hosts".into()))]
        );
        // Already placed: nothing more fits.
        let placed = BTreeMap::from([("a".to_string(), 1)]);
        let again = place(&j, &node(), &placed);
        assert_eq!(
            again.failures,
            [failure("a", 2, Reason::Constraint("distinct_hosts".into()))]
        );

        let job_level = job(&format!(
            "{hosts}\n{}\n{}",
            group("a", 1, ""),
            group("b", 1, "")
        ));
        let p = place(&job_level, &node(), &BTreeMap::new());
        assert_eq!(p.place, BTreeMap::from([("a".to_string(), 1)]));
        assert_eq!(
            p.failures,
            [failure("b", 1, Reason::Constraint("distinct_hosts".into()))]
        );

        let property = "constraint {\n distinct_property = \"${meta.rack}\"\n value = \"2\"\n}";
        let p = place(&job(&group("a", 3, property)), &node(), &BTreeMap::new());
        assert_eq!(p.place["a"], 2);
        assert_eq!(
            p.failures,
            [failure(
                "a",
                1,
                Reason::Constraint("distinct_property: ${meta.rack}=r1 used by 2 allocs".into())
            )]
        );
        let missing = "constraint {\n distinct_property = \"${meta.zone}\"\n}";
        let p = place(&job(&group("a", 1, missing)), &node(), &BTreeMap::new());
        assert_eq!(
            p.failures,
            [failure(
                "a",
                1,
                Reason::Constraint("missing property \"${meta.zone}\"".into())
            )]
        );
    }

    /// A check made after `place` refuses a group: what was placed becomes its failure.
    #[test]
    fn a_later_check_refuses_a_group() {
        let j = job(&format!("{}\n{}", group("a", 2, ""), group("b", 1, "")));
        let mut p = place(&j, &node(), &BTreeMap::new());
        let port = Reason::Dimension("network: reserved port collision http=8080".into());
        p.refuse("a", port.clone());
        p.refuse("nope", port.clone());
        assert_eq!(p.place, BTreeMap::from([("b".to_string(), 1)]));
        assert_eq!(p.failures, [failure("a", 2, port)]);
        assert_eq!(
            p.failures[0].lines()[1],
            "* Dimension \"network: reserved port collision http=8080\" exhausted on 1 nodes"
        );
    }

    #[test]
    fn task_constraints_count_for_their_group() {
        let j = crate::jobspec::hcl::parse_job(
            "job \"j\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"raw_exec\"\n   config { command = \"true\" }\n   constraint {\n    attribute = \"${meta.gpu}\"\n    is_set = true\n   }\n  }\n }\n}\n",
        )
        .unwrap()
        .job;
        let p = place(&j, &node(), &BTreeMap::new());
        assert_eq!(
            p.failures,
            [failure(
                "g",
                1,
                Reason::Constraint("${meta.gpu} is_set ".into())
            )]
        );
        let dims = failure("g", 1, Reason::Dimension("memory".into()));
        assert_eq!(
            dims.lines(),
            [
                "* Resources exhausted on 1 nodes",
                "* Dimension \"memory\" exhausted on 1 nodes"
            ]
        );
        assert_eq!(
            dims.heading(),
            "Task Group \"g\" (failed to place 1 allocation):"
        );
    }
}
