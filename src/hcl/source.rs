//! The text a syntax tree was parsed from: turns spans into lines of the input as written, and
//! gives back the text of a span (how `${...}` is read literally, see [`super::value`]).

use std::ops::Range;

use super::lines::LineMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// What was parsed: the input, or the input with one-line blocks split.
    parsed: String,
    /// Lines of `parsed` to lines of the input, when they differ.
    lines: Option<LineMap>,
}

impl Source {
    pub(super) fn as_written(src: &str) -> Source {
        Source {
            parsed: src.to_string(),
            lines: None,
        }
    }

    pub(super) fn normalized(parsed: String, lines: LineMap) -> Source {
        Source {
            parsed,
            lines: Some(lines),
        }
    }

    /// Whether the text parsed is not the input as written but its one-line blocks split.
    pub fn is_normalized(&self) -> bool {
        self.lines.is_some()
    }

    /// 1-based line of the input where `span` starts; 0 when the parser gave no span (it always
    /// does for parsed input).
    pub fn line(&self, span: Option<Range<usize>>) -> usize {
        span.map_or(0, |r| {
            let end = r.start.min(self.parsed.len());
            let line = self.parsed.as_bytes()[..end]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            self.lines.as_ref().map_or(line, |map| map.original(line))
        })
    }

    /// The text `span` covers in what was parsed, or `None` without a span. Normalising copies
    /// strings as they are, so the text of anything inside a string is the user's.
    pub fn raw(&self, span: Option<Range<usize>>) -> Option<&str> {
        span.and_then(|r| self.parsed.get(r))
    }
}
