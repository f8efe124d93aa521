//! What reading an HCL document can fail with, in one shape for every front-end.
//!
//! Each front-end words the final message its own way (the exact strings are part of the contract:
//! a jobspec says `HCL syntax error at line 3, column 5: ...`, a volume file `invalid HCL: ...`),
//! so a [`SyntaxError`] keeps the line, column and message apart instead of a finished sentence.
//! The messages of [`Error::Unknown`] and [`Error::Invalid`] name the attribute or block, where it
//! is and its line as the user wrote it.

use std::fmt;

/// The strict parser's complaint about the text as the user wrote it (not the normalised retry,
/// whose line and column would point at text the user never wrote).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError(hcl::edit::parser::Error);

impl SyntaxError {
    pub(super) fn new(e: hcl::edit::parser::Error) -> SyntaxError {
        SyntaxError(e)
    }

    /// 1-based line of the input.
    pub fn line(&self) -> usize {
        self.0.location().line()
    }

    /// 1-based column of the input.
    pub fn column(&self) -> usize {
        self.0.location().column()
    }

    /// What the parser expected, without the position.
    pub fn message(&self) -> &str {
        self.0.message()
    }
}

/// The parser's own rendering: the position, the offending line with a caret under the column,
/// and the message (several lines).
impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SyntaxError {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The text is not HCL.
    #[error("{0}")]
    Syntax(SyntaxError),
    /// The thread the parser runs on could not be started.
    #[error("cannot start the HCL parser: {0}")]
    Thread(std::io::Error),
    /// A block or attribute the schema does not have.
    #[error("{0}")]
    Unknown(String),
    /// A value or block the schema cannot use: a wrong type, wrong labels, a repeated block, a
    /// duration that does not parse.
    #[error("{0}")]
    Invalid(String),
    /// HCL2's language: a variable without a value, a failed validation, an expression that
    /// does not evaluate ([`super::eval`]).
    #[error("{0}")]
    Eval(#[from] super::eval::Error),
}

pub(super) fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}
