//! The signal a task is stopped with (`kill_signal`), read once when the job is converted.
//!
//! A jobspec names a signal as `"SIGTERM"`, `"TERM"` or `"term"`. A [`Signal`] keeps its
//! canonical `SIG...` name, which is what the job's JSON carries (the state file, API answers), and
//! its number, which is what the driver sends. The name used to be kept as a string and looked up
//! again wherever a task was stopped, with SIGINT for a name the lookup did not know; now a name
//! nodeward does not know never gets past the parser.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A POSIX signal by its canonical name (`SIGTERM`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal {
    /// As the job's JSON spells it. `SIGIOT` stays `SIGIOT` (the number of `SIGABRT`): a job comes
    /// back from its JSON the same.
    name: &'static str,
    number: i32,
}

impl Signal {
    pub const INT: Signal = Signal::new("SIGINT", libc::SIGINT);

    const fn new(name: &'static str, number: i32) -> Signal {
        Signal { name, number }
    }

    /// The signal named `SIGTERM` or `TERM`, in any case, blanks around it ignored.
    pub fn from_name(name: &str) -> Option<Signal> {
        let upper = name.trim().to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        SIGNALS.iter().copied().find(|s| &s.name[3..] == bare)
    }

    /// The canonical name, `SIGTERM`.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The number to send, `libc::SIGTERM`.
    pub fn number(self) -> i32 {
        self.number
    }
}

/// The POSIX signals a task can be stopped with.
const SIGNALS: &[Signal] = &[
    Signal::new("SIGHUP", libc::SIGHUP),
    Signal::INT,
    Signal::new("SIGQUIT", libc::SIGQUIT),
    Signal::new("SIGILL", libc::SIGILL),
    Signal::new("SIGTRAP", libc::SIGTRAP),
    Signal::new("SIGABRT", libc::SIGABRT),
    Signal::new("SIGIOT", libc::SIGABRT),
    Signal::new("SIGBUS", libc::SIGBUS),
    Signal::new("SIGFPE", libc::SIGFPE),
    Signal::new("SIGKILL", libc::SIGKILL),
    Signal::new("SIGUSR1", libc::SIGUSR1),
    Signal::new("SIGSEGV", libc::SIGSEGV),
    Signal::new("SIGUSR2", libc::SIGUSR2),
    Signal::new("SIGPIPE", libc::SIGPIPE),
    Signal::new("SIGALRM", libc::SIGALRM),
    Signal::new("SIGTERM", libc::SIGTERM),
    Signal::new("SIGCHLD", libc::SIGCHLD),
    Signal::new("SIGCONT", libc::SIGCONT),
    Signal::new("SIGSTOP", libc::SIGSTOP),
    Signal::new("SIGTSTP", libc::SIGTSTP),
    Signal::new("SIGTTIN", libc::SIGTTIN),
    Signal::new("SIGTTOU", libc::SIGTTOU),
    Signal::new("SIGURG", libc::SIGURG),
    Signal::new("SIGXCPU", libc::SIGXCPU),
    Signal::new("SIGXFSZ", libc::SIGXFSZ),
    Signal::new("SIGVTALRM", libc::SIGVTALRM),
    Signal::new("SIGPROF", libc::SIGPROF),
    Signal::new("SIGWINCH", libc::SIGWINCH),
    Signal::new("SIGIO", libc::SIGIO),
    Signal::new("SIGSYS", libc::SIGSYS),
];

/// A signal name nodeward does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signal {0:?}")]
pub struct UnknownSignal(pub String);

impl FromStr for Signal {
    type Err = UnknownSignal;

    fn from_str(s: &str) -> Result<Signal, UnknownSignal> {
        Signal::from_name(s).ok_or_else(|| UnknownSignal(s.to_string()))
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name, self.number)
    }
}

/// A signal is its canonical name: `task.kill_signal == "SIGTERM"`.
impl PartialEq<&str> for Signal {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
    }
}

/// The job's JSON in the state file spells the canonical name; the other spellings a jobspec may
/// use are accepted too.
impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_every_spelling() {
        for spelled in ["SIGTERM", "TERM", "term", " sigTerm "] {
            let signal = Signal::from_name(spelled).unwrap();
            assert_eq!((signal.name(), signal.number()), ("SIGTERM", libc::SIGTERM));
        }
        assert_eq!(Signal::from_name("KILL").unwrap().number(), 9);
        assert_eq!(Signal::from_name("iot").unwrap().name(), "SIGIOT");
        assert_eq!(Signal::from_name("iot").unwrap().number(), libc::SIGABRT);
        for unknown in ["", "SIG", "SIGNOPE", "SIGSIGTERM", "15"] {
            assert_eq!(Signal::from_name(unknown), None, "{unknown:?}");
        }
        assert_eq!(
            "nope".parse::<Signal>().unwrap_err().to_string(),
            "unknown signal \"nope\""
        );
        assert_eq!(Signal::INT, "SIGINT");
        assert_eq!(Signal::INT.to_string(), "SIGINT");
    }

    #[test]
    fn json_is_the_canonical_name() {
        let signal: Signal = "term".parse().unwrap();
        assert_eq!(serde_json::to_string(&signal).unwrap(), "\"SIGTERM\"");
        assert_eq!(
            serde_json::from_str::<Signal>("\"SIGTERM\"").unwrap(),
            signal
        );
        let iot = Signal::from_name("SIGIOT").unwrap();
        assert_eq!(serde_json::to_string(&iot).unwrap(), "\"SIGIOT\"");
        assert_eq!(serde_json::from_str::<Signal>("\"SIGIOT\"").unwrap(), iot);
        assert_eq!(
            serde_json::from_str::<Signal>("\"SIGNOPE\"")
                .unwrap_err()
                .to_string(),
            "unknown signal \"SIGNOPE\""
        );
    }
}
