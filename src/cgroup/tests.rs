use super::*;

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("nw-cg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn get(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

fn res(memory_mb: u32, memory_max_mb: u32, cpu: u32) -> Resources {
    Resources {
        cpu,
        memory_mb,
        memory_max_mb,
        cores: 0,
        ..Resources::default()
    }
}

#[test]
fn parents_are_relative_names() {
    for ok in ["nodeward", "nodeward.slice", "a/b", "x_y-z@1:2"] {
        assert_eq!(check_parent(ok), Ok(()), "{ok}");
    }
    for bad in ["", "/abs", "a/../b", "a//b", ".", "sp ace", "a/"] {
        assert!(check_parent(bad).is_err(), "{bad}");
    }
}

#[test]
fn limits_follow_memory_memory_max_and_cpu() {
    let l = Limits::of(&res(32, 0, 500), &[]);
    assert!(l.cpus.is_empty());
    assert_eq!(Limits::of(&res(32, 0, 500), &[1, 0]).cpus, vec![1, 0]);
    assert_eq!(l.memory_hard_bytes, 32 * MIB);
    assert_eq!(l.memory_soft_bytes, None);
    assert_eq!(l.cpu_shares, 500);
    let l = Limits::of(&res(32, 64, 1), &[]);
    assert_eq!(l.memory_hard_bytes, 64 * MIB);
    assert_eq!(l.memory_soft_bytes, Some(32 * MIB));
    assert_eq!(l.cpu_shares, 2, "v1's least");
    assert_eq!(l.cpu_weight(), 1);
    assert_eq!(Limits::of(&res(1, 0, 1024), &[]).cpu_weight(), 39);
    assert_eq!(Limits::of(&res(1, 0, 262_144), &[]).cpu_weight(), 10000);
    assert_eq!(Limits::of(&res(1, 0, 1_000_000), &[]).cpu_weight(), 10000);
}

#[test]
fn v2_enables_controllers_down_to_the_task_and_writes_its_limits() {
    let t = Tmp::new("v2");
    let root = &t.0;
    put(
        &root.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    );
    let c = Cgroups::detect(root, "nw/sub").unwrap();
    assert_eq!(c.version(), Version::V2);
    let enable = "+cpu +cpuset +memory +pids";
    for dir in [root.clone(), root.join("nw"), root.join("nw/sub")] {
        assert_eq!(get(&dir.join("cgroup.subtree_control")), enable, "{dir:?}");
    }
    let task = c.task("a1", "web");
    let dir = root.join("nw/sub/a1.web");
    assert_eq!(task.memory_dir(), dir);
    put(&dir.join("memory.swap.max"), "max");
    put(&root.join("nw/sub/cpuset.cpus.effective"), "0-3\n");
    task.create(&Limits::of(&res(32, 64, 1024), &[1, 2]))
        .unwrap();
    assert_eq!(get(&dir.join("memory.max")), (64 * MIB).to_string());
    assert_eq!(get(&dir.join("memory.low")), (32 * MIB).to_string());
    assert_eq!(get(&dir.join("memory.swap.max")), "0");
    assert_eq!(get(&dir.join("cpu.weight")), "39");
    assert_eq!(get(&dir.join("cpuset.cpus")), "1-2");
    task.create(&Limits::of(&res(32, 64, 1024), &[])).unwrap();
    assert_eq!(
        get(&dir.join("cpuset.cpus")),
        "\n",
        "v2's empty, the parent's CPUs: a newline, as no bytes make no write(2)"
    );
    let p = task.paths();
    assert!(p.v2);
    assert_eq!(
        (p.join, p.memory, p.kill),
        (vec![dir.clone()], dir.clone(), dir)
    );
}

#[test]
fn v1_makes_one_cgroup_per_controller_with_the_parents_cpuset() {
    let t = Tmp::new("v1");
    let root = &t.0;
    assert!(matches!(
        Cgroups::detect(root, "nodeward"),
        Err(CgroupError::Unavailable(_))
    ));
    for c in V1_CONTROLLERS {
        put(&root.join(c).join("cgroup.procs"), "");
    }
    put(&root.join("cpuset/cpuset.cpus"), "0-3\n");
    put(&root.join("cpuset/cpuset.mems"), "0\n");
    // A real cgroupfs makes these files with the directory; here the test does.
    for f in ["cpuset.cpus", "cpuset.mems"] {
        put(&root.join("cpuset/nodeward").join(f), "");
        put(&root.join("cpuset/nodeward/a1.web").join(f), "");
    }
    let c = Cgroups::detect(root, "nodeward").unwrap();
    assert_eq!(c.version(), Version::V1);
    assert_eq!(get(&root.join("cpuset/nodeward/cpuset.cpus")), "0-3");
    let task = c.task("a1", "web");
    // Left frozen by an agent killed in the middle of a removal: the start thaws it.
    let freezer = root.join("freezer/nodeward/a1.web/freezer.state");
    put(&freezer, "FROZEN\n");
    task.create(&Limits::of(&res(32, 0, 250), &[])).unwrap();
    assert_eq!(get(&freezer), "THAWED");
    let mem = root.join("memory/nodeward/a1.web");
    assert_eq!(task.memory_dir(), mem);
    assert_eq!(
        get(&mem.join("memory.limit_in_bytes")),
        (32 * MIB).to_string()
    );
    assert_eq!(get(&mem.join("memory.soft_limit_in_bytes")), "-1");
    assert_eq!(get(&root.join("cpu/nodeward/a1.web/cpu.shares")), "250");
    assert_eq!(get(&root.join("cpuset/nodeward/a1.web/cpuset.mems")), "0");
    assert_eq!(
        get(&root.join("cpuset/nodeward/a1.web/cpuset.cpus")),
        "0-3",
        "no cores: the parent's CPUs"
    );
    task.create(&Limits::of(&res(32, 0, 250), &[0, 2])).unwrap();
    assert_eq!(get(&root.join("cpuset/nodeward/a1.web/cpuset.cpus")), "0,2");
    let p = task.paths();
    assert!(!p.v2);
    assert_eq!(p.join.len(), V1_CONTROLLERS.len());
    assert_eq!(p.kill, root.join("freezer/nodeward/a1.web"));
    assert_eq!(task.procs(), Vec::<i32>::new());
}

#[test]
fn usage_is_read_from_either_hierarchy() {
    let t = Tmp::new("usage");
    let d = &t.0;
    put(&d.join("memory.stat"), "anon 4096\nfile 8192\nkernel 1\n");
    put(&d.join("memory.current"), "16384\n");
    put(&d.join("memory.peak"), "32768\n");
    put(&d.join("memory.swap.current"), "0\n");
    put(
        &d.join("cpu.stat"),
        "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_throttled 1\nthrottled_usec 20\n",
    );
    assert_eq!(
        usage::v2(d).unwrap(),
        CgroupUsage {
            memory_rss: 4096,
            memory_cache: 8192,
            memory_usage: 16384,
            memory_max_usage: 32768,
            memory_swap: 0,
            cpu_total_ns: 1_500_000,
            cpu_user_ns: 1_000_000,
            cpu_system_ns: 500_000,
            cpu_throttled_ns: 20_000,
            cpu_throttled_periods: 1,
        }
    );
    let v1 = d.join("v1");
    put(
        &v1.join("memory.stat"),
        "cache 1\nrss 2\nswap 3\ntotal_cache 10\ntotal_rss 20\ntotal_swap 30\n",
    );
    put(&v1.join("memory.usage_in_bytes"), "100\n");
    put(&v1.join("memory.max_usage_in_bytes"), "200\n");
    put(
        &v1.join("cpu.stat"),
        "nr_periods 9\nnr_throttled 2\nthrottled_time 77\n",
    );
    put(&v1.join("cpuacct.usage"), "123456\n");
    put(&v1.join("cpuacct.usage_user"), "100000\n");
    put(&v1.join("cpuacct.usage_sys"), "23456\n");
    assert_eq!(
        usage::v1(&v1, &v1, Some(&v1)).unwrap(),
        CgroupUsage {
            memory_rss: 20,
            memory_cache: 10,
            memory_usage: 100,
            memory_max_usage: 200,
            memory_swap: 30,
            cpu_total_ns: 123456,
            cpu_user_ns: 100000,
            cpu_system_ns: 23456,
            cpu_throttled_ns: 77,
            cpu_throttled_periods: 2,
        }
    );
    // A kernel that does not split the time: all of it is user time.
    std::fs::remove_file(v1.join("cpuacct.usage_user")).unwrap();
    std::fs::remove_file(v1.join("cpuacct.usage_sys")).unwrap();
    let u = usage::v1(&v1, &v1, Some(&v1)).unwrap();
    assert_eq!((u.cpu_user_ns, u.cpu_system_ns), (123456, 0));
    std::fs::remove_file(v1.join("memory.usage_in_bytes")).unwrap();
    let e = usage::v1(&v1, &v1, None).unwrap_err().to_string();
    assert!(
        e.starts_with("cannot read ") && e.contains("memory.usage_in_bytes"),
        "{e}"
    );
}
