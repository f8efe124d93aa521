//! Scratch directories for unit tests: made under the system's temporary directory, removed
//! when the test's thread ends (libtest runs each test on a thread of its own), so a test that
//! writes files to read them back leaves nothing behind, failed or not.

use std::cell::RefCell;
use std::path::PathBuf;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

thread_local! {
    /// The directories this thread made; dropped, and so removed, when it ends.
    static MADE: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

/// A new empty directory `<tmp>/<prefix>-<uuid>`, removed when the calling thread ends.
pub fn dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).expect("a scratch directory under the temporary directory");
    MADE.with(|m| m.borrow_mut().push(Scratch(d.clone())));
    d
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_scratch_directory_goes_with_its_thread() {
        let d = std::thread::spawn(|| {
            let d = super::dir("nodeward-scratch");
            std::fs::write(d.join("f"), "x").unwrap();
            assert!(d.join("f").is_file());
            d
        })
        .join()
        .unwrap();
        assert!(!d.exists(), "{d:?} is left");
    }
}
