//! The Docker Engine client (`nodeward::driver::docker::engine`) against the suite's real private
//! dockerd: version negotiation, images, a pull with no registry, the container lifecycle, exit
//! codes, signals, OOM, wait and its cancellation, the log stream and what `since` means, stats,
//! name conflicts, labels and published ports. The facts asserted here are the ones the engine
//! module's doc writes down.

use crate::common::docker::*;
use crate::common::*;
use nodeward::driver::docker::engine::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Runs `f` on another thread and answers its result within `bound`: a call that should return
/// at once must not hang the suite if it does not.
fn bounded<T: Send + 'static>(bound: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(bound)
        .unwrap_or_else(|_| panic!("no answer within {bound:?}"))
}

/// Every frame of a container's log stream from `since`, to its end (the container has exited).
fn all_frames(env: &DockerEnv, id: &str, since: Option<i64>) -> Vec<Frame> {
    let engine = env.engine.clone();
    let id = id.to_string();
    bounded(WAIT, move || {
        engine
            .logs(&id, since, true, &Closer::new())
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    })
}

/// A frame as (stream, timestamp, text).
fn parts(f: &Frame) -> (Stream, i64, String) {
    let (at, text) = f.timestamp().expect("a timestamp");
    (f.stream, at, String::from_utf8_lossy(text).into_owned())
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn negotiates_the_api_version_and_reads_the_version() {
    let env = required_engine();
    let v = env.engine.version().unwrap();
    let newest = ApiVersion::parse(&v.api_version).unwrap();
    let oldest = v.min_api_version.as_deref().and_then(ApiVersion::parse);
    assert_eq!(Some(env.engine.api_version()), negotiate(newest, oldest));
    assert!(env.engine.api_version() <= newest.max(NEWEST_API));
    assert_eq!(v.os_type, "linux");
    assert!(!v.version.is_empty());
    let ping = env.engine.ping().unwrap();
    assert_eq!(ping.api_version, Some(newest));
    assert_eq!(ping.os_type.as_deref(), Some("linux"));
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn images_present_and_missing() {
    let env = required_engine();
    assert!(env.engine.image_exists("busybox:1").unwrap());
    assert!(!env.engine.image_exists("nodeward-test-missing:1").unwrap());
    let err = env.engine.image_exists("Not An Image").unwrap_err();
    assert!(matches!(err, EngineError::BadReference(_)), "{err}");
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_pull_with_no_registry_fails_fast_with_the_engines_message() {
    let env = required_engine();
    // A registry on a loopback port nothing listens on: the engine's pull fails with no traffic
    // leaving the machine.
    let (port, _refusing) = refused_port();
    let image = format!("127.0.0.1:{port}/nodeward/missing:1");
    let started = Instant::now();
    let err = env
        .engine
        .pull(&image, Duration::from_secs(60), &Closer::new())
        .unwrap_err();
    let took = started.elapsed();
    println!("a pull with no registry failed after {took:?}: {err}");
    let EngineError::Pull {
        image: named,
        message,
    } = &err
    else {
        panic!("not a pull failure: {err:?}");
    };
    assert_eq!(named, &image);
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("connection refused"), "{message}");
    assert_eq!(
        err.to_string(),
        format!("Failed to pull `{image}`: {message}")
    );

    // A closed closer cancels the pull before it starts.
    let closer = Closer::new();
    closer.close();
    let err = env
        .engine
        .pull(&image, Duration::from_secs(60), &closer)
        .unwrap_err();
    assert!(matches!(err, EngineError::Cancelled { .. }), "{err:?}");
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_container_exits_with_its_code_and_its_output_demuxed() {
    let env = required_engine();
    let c = env.run(
        &unique_name("exit"),
        &busybox(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
    );
    let engine = env.engine.clone();
    let id = c.id.clone();
    let code = bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap();
    assert_eq!(code, 3);
    let mut frames: Vec<(Stream, String)> = all_frames(&env, &c.id, None)
        .iter()
        .map(|f| {
            let (stream, _, text) = parts(f);
            (stream, text)
        })
        .collect();
    // The engine reads stdout and stderr apart: their order between them is not kept.
    frames.sort_by_key(|(stream, _)| *stream == Stream::Stderr);
    assert_eq!(
        frames,
        vec![
            (Stream::Stdout, "out\n".to_string()),
            (Stream::Stderr, "err\n".to_string())
        ]
    );
    let info = env.engine.inspect(&c.id).unwrap().unwrap();
    assert_eq!(info.name, c.name);
    assert_eq!(
        (info.state.status.as_str(), info.state.exit_code),
        ("exited", 3)
    );
    assert!(!info.state.running && !info.state.oom_killed);
    // Both times are set; for a container that exits at once FinishedAt may come before
    // StartedAt (by about half a millisecond here): the engine stamps the start after the exit.
    assert!(info.state.started_at.is_some() && info.state.finished_at.is_some());

    // It has exited: a second wait answers at once with the same code.
    let engine = env.engine.clone();
    let id = c.id.clone();
    assert_eq!(
        bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap(),
        3
    );
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_container_never_started_waits_and_follows_to_nothing() {
    let env = required_engine();
    let c = env.create(&unique_name("created"), &busybox(&["sleep", "1000"]));
    let engine = env.engine.clone();
    let id = c.id.clone();
    assert_eq!(
        bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap(),
        0
    );
    assert!(all_frames(&env, &c.id, None).is_empty());
    let info = env.engine.inspect(&c.id).unwrap().unwrap();
    assert_eq!(info.state.status, "created");
    assert_eq!(
        (info.state.started_at, info.state.finished_at),
        (None, None)
    );
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn sigterm_through_the_engines_init_exits_143_and_a_second_kill_is_not_running() {
    let env = required_engine();
    // Without an init, `sleep` would be the container's PID 1, which the kernel shields from
    // signals it has no handler for; the engine's init forwards SIGTERM to it.
    let mut config = busybox(&["sleep", "1000"]);
    config.host_config.init = Some(true);
    let c = env.run(&unique_name("kill"), &config);
    env.wait_status(&c.id, "running", WAIT);
    assert_eq!(
        env.engine.kill(&c.id, "SIGTERM").unwrap(),
        Killed::Signalled
    );
    let engine = env.engine.clone();
    let id = c.id.clone();
    assert_eq!(
        bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap(),
        143
    );
    assert_eq!(env.engine.kill(&c.id, 15).unwrap(), Killed::NotRunning);
    let err = env.engine.kill(&c.id, "NOSUCHSIGNAL").unwrap_err();
    assert!(
        err.to_string().contains("Invalid signal: NOSUCHSIGNAL"),
        "{err}"
    );
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn an_oom_killed_container_says_so() {
    let env = required_engine();
    if !std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        && !std::path::Path::new("/sys/fs/cgroup/memory.max").exists()
        && !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
    {
        println!("SKIPPED an_oom_killed_container_says_so: no memory cgroup controller here");
        return;
    }
    // The shell doubles a string until the kernel kills it: busybox has no allocator tool.
    let mut config = busybox(&["sh", "-c", "x=a; while :; do x=$x$x; done"]);
    config.host_config.memory = Some(16 << 20);
    config.host_config.memory_swap = Some(16 << 20);
    let c = env.run(&unique_name("oom"), &config);
    let engine = env.engine.clone();
    let id = c.id.clone();
    assert_eq!(
        bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap(),
        137
    );
    let info = env.engine.inspect(&c.id).unwrap().unwrap();
    assert!(info.state.oom_killed, "{:?}", info.state);
    assert_eq!(info.state.exit_code, 137);
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_wait_and_a_log_follow_closed_from_another_thread_are_cancelled() {
    let env = required_engine();
    let c = env.run(
        &unique_name("cancel"),
        &busybox(&["sh", "-c", "echo started; exec sleep 1000"]),
    );
    let closer = Closer::new();
    let (engine, id, waiter) = (env.engine.clone(), c.id.clone(), closer.clone());
    let wait = std::thread::spawn(move || engine.wait(&id, &waiter));
    let mut stream = env.engine.logs(&c.id, None, true, &closer).unwrap();
    let first = stream.next_frame().unwrap().unwrap();
    assert_eq!(parts(&first).2, "started\n");
    let follow = std::thread::spawn(move || stream.next_frame());
    // Both are blocked in a read with no deadline: only closing ends them.
    closer.close();
    let waited = bounded(WAIT, move || wait.join().unwrap());
    assert!(
        matches!(waited, Err(EngineError::Cancelled { .. })),
        "{waited:?}"
    );
    let followed = bounded(WAIT, move || follow.join().unwrap());
    assert!(
        matches!(followed, Err(EngineError::Cancelled { .. })),
        "{followed:?}"
    );
    // Cancelling a call leaves the container alone.
    assert!(env.engine.inspect(&c.id).unwrap().unwrap().state.running);
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn logs_since_is_inclusive_at_nanosecond_resolution() {
    let env = required_engine();
    // Three quick lines (most often within one second), a line of 40,000 bytes, and a last one
    // without a newline.
    let script = "echo l1; echo l2; echo l3; \
                  x=aaaaaaaaaa; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do x=$x$x; done; echo $x; \
                  printf tail";
    let c = env.run(&unique_name("since"), &busybox(&["sh", "-c", script]));
    let engine = env.engine.clone();
    let id = c.id.clone();
    assert_eq!(
        bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap(),
        0
    );
    let all: Vec<_> = all_frames(&env, &c.id, None).iter().map(parts).collect();
    let texts: Vec<&str> = all.iter().map(|(_, _, t)| t.as_str()).collect();
    assert_eq!(&texts[..3], ["l1\n", "l2\n", "l3\n"]);
    assert_eq!(
        texts.last(),
        Some(&"tail"),
        "a last line keeps its missing newline"
    );
    // The long line: pieces of 16 KiB, all with the line's timestamp, the newline in the last.
    let long = &all[3..all.len() - 1];
    assert!(long.len() >= 3, "{} pieces", long.len());
    assert!(long.iter().all(|(_, at, _)| *at == long[0].1));
    assert!(long[..long.len() - 1]
        .iter()
        .all(|(_, _, t)| t.len() == 16 << 10));
    let joined: String = long.iter().map(|(_, _, t)| t.as_str()).collect();
    assert_eq!(joined, format!("{}\n", "a".repeat(10 << 12)));

    let (l1, l2) = (all[0].1, all[1].1);
    let from = |since: i64| -> Vec<String> {
        all_frames(&env, &c.id, Some(since))
            .iter()
            .map(|f| parts(f).2)
            .collect()
    };
    // Inclusive: since = l2's time returns l2 first.
    assert_eq!(from(l2)[..2], ["l2\n".to_string(), "l3\n".to_string()]);
    // Nanosecond resolution: one nanosecond later leaves l2 out.
    assert_eq!(from(l2 + 1)[0], "l3\n");
    // One nanosecond before l2 still leaves l1 out, even when both are in the same second.
    assert_eq!(from(l2 - 1)[0], "l2\n");
    if l1 / 1_000_000_000 == l2 / 1_000_000_000 {
        println!("l1 and l2 share a second: since within it left the earlier line out");
    }
    // A since of the long line's time returns every piece of it again.
    let again = from(long[0].1);
    assert_eq!(again.len(), long.len() + 1);
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn stats_of_a_running_container() {
    let env = required_engine();
    let mut config = busybox(&["sleep", "1000"]);
    config.host_config.memory = Some(64 << 20);
    config.host_config.init = Some(true);
    let c = env.run(&unique_name("stats"), &config);
    env.wait_status(&c.id, "running", WAIT);
    let s = env.engine.with_timeout(WAIT).stats(&c.id).unwrap();
    assert_eq!(s.memory.limit, 64 << 20);
    assert!(s.memory.usage > 0, "{s:?}");
    assert!(s.cpu.online_cpus >= 1 && s.cpu.system_usage > 0, "{s:?}");
    assert!(s.read_at.is_some());
    assert!(s.cpu_percent() >= 0.0);
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn names_in_use_missing_containers_and_labels() {
    let env = required_engine();
    let name = unique_name("name");
    let alloc = uuid::Uuid::new_v4().to_string();
    let mut config = busybox(&["sleep", "1000"]);
    config.labels = BTreeMap::from([(ALLOC_LABEL.to_string(), alloc.clone())]);
    let c = env.create(&name, &config);
    let err = env.engine.create_container(&name, &config).unwrap_err();
    let EngineError::NameInUse {
        name: named,
        message,
    } = &err
    else {
        panic!("not a name conflict: {err:?}");
    };
    assert_eq!(named, &name);
    assert!(message.contains(&c.id), "{message}");

    let listed = env.containers_of_alloc(&alloc);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].name.as_str()),
        (c.id.as_str(), name.as_str())
    );
    assert_eq!(listed[0].labels[ALLOC_LABEL], alloc);
    assert!(env
        .containers_of_alloc(&uuid::Uuid::new_v4().to_string())
        .is_empty());

    let missing = unique_name("missing");
    assert_eq!(env.engine.inspect(&missing).unwrap(), None);
    env.engine.remove(&missing, true).unwrap();
    let err = env.engine.start(&missing).unwrap_err();
    assert!(matches!(err, EngineError::NotFound { .. }), "{err:?}");
    let err = env
        .engine
        .create_container(
            &unique_name("noimage"),
            &CreateContainer {
                image: "nodeward-test-missing:1".into(),
                ..busybox(&["true"])
            },
        )
        .unwrap_err();
    assert!(matches!(err, EngineError::NotFound { .. }), "{err:?}");
    // Starting twice is no error; removing a running one with force removes it.
    env.engine.start(&c.id).unwrap();
    env.engine.start(&c.id).unwrap();
    env.engine.remove(&c.id, true).unwrap();
    assert_eq!(env.engine.inspect(&c.id).unwrap(), None);
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_published_port_answers_on_the_host_in_bridge_mode() {
    let env = required_engine();
    // An engine started with --bridge=none has no bridge network: a container of network mode
    // "bridge" then gets a loopback only and publishes nothing (docs/docker.md).
    if !env
        .docker(&["network", "inspect", "bridge"])
        .status
        .success()
    {
        println!(
            "SKIPPED a_published_port_answers_on_the_host_in_bridge_mode: the engine has no \
             bridge network (started with --bridge=none)"
        );
        return;
    }
    let dir = TempDir::new("dkport");
    std::fs::write(dir.path().join("index.html"), "hello from a container\n").unwrap();
    let port = free_port();
    let mut config = busybox(&["httpd", "-f", "-p", "8001", "-h", "/www"]);
    config.exposed_ports = BTreeMap::from([("8001/tcp".to_string(), Empty {})]);
    config.host_config.network_mode = Some("bridge".into());
    config.host_config.binds = vec![format!("{}:/www:ro", dir.path().display())];
    config.host_config.port_bindings = BTreeMap::from([(
        "8001/tcp".to_string(),
        vec![PortBinding {
            host_ip: "127.0.0.1".into(),
            host_port: port.to_string(),
        }],
    )]);
    let c = env.run(&unique_name("port"), &config);
    env.wait_status(&c.id, "running", WAIT);
    let body = wait_for(WAIT, "the published port answering", || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer.contains("200 OK").then_some(answer)
    });
    assert!(body.ends_with("hello from a container\n"), "{body}");
}

#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn the_csi_test_plugin_image_serves_its_socket_through_a_bind_mount() {
    let env = required_engine();
    let image = env.csi_plugin_image();
    let dir = TempDir::new("dkcsi");
    let mut config = CreateContainer {
        image: image.to_string(),
        cmd: Some(vec![
            "nodeward-csi-test-plugin".into(),
            "--endpoint".into(),
            "unix:///csi/csi.sock".into(),
        ]),
        attach_stdout: true,
        attach_stderr: true,
        ..CreateContainer::default()
    };
    config.host_config.binds = vec![format!("{}:/csi", dir.path().display())];
    let c = env.run(&unique_name("csi"), &config);
    // The agent's side: the host end of the socket, probed with nodeward's own CSI client.
    let client = nodeward::csi::client::CsiClient::new(&dir.path().join("csi.sock"));
    wait_for(WAIT, "the plugin in the container healthy", || {
        client.probe(Duration::from_secs(2), &[]).ok()
    });
    // It stops cleanly on SIGTERM (it handles it, so PID 1 needs no init).
    assert_eq!(
        env.engine.kill(&c.id, "SIGTERM").unwrap(),
        Killed::Signalled
    );
    let engine = env.engine.clone();
    let id = c.id.clone();
    assert_eq!(
        bounded(WAIT, move || engine.wait(&id, &Closer::new())).unwrap(),
        0
    );
}
