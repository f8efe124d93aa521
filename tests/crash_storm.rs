//! A short crash storm: `scripts/crash_storm.py` SIGKILLs this build's agent at random instants
//! while volume creates and deletes and job registrations are in flight, restarts it, and checks
//! that nothing acknowledged was lost, no volume name appears twice and every task runs exactly
//! once. The full storm (200 rounds against a release build) is run by hand; see the script.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUNDS: &str = "5";
/// Far more than 5 rounds take (a few seconds); the script bounds every wait of its own too.
const TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn five_rounds_of_crashes_lose_nothing_and_run_nothing_twice() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/crash_storm.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["--rounds", ROUNDS, "--bin", env!("CARGO_BIN_EXE_nodeward")])
        .args(["--time-limit", "240"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run python3 scripts/crash_storm.py (Python 3 is needed)");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            // SIGTERM lets the script stop its agent and the tasks it started.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            std::thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            panic!("the crash storm did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = reader.join().unwrap();
    print!("{out}");
    assert!(
        out.lines()
            .any(|l| l == format!("{ROUNDS} passed, 0 failed")),
        "the storm did not pass every round:\n{out}"
    );
    assert!(status.success(), "crash storm exited with {status}:\n{out}");
}
