//! The one HCL front-end, shared by jobspecs ([`crate::jobspec::hcl`]), volume specifications
//! ([`crate::volume::spec`]) and the agent configuration ([`crate::config`]). Each of them keeps
//! only its schema: which blocks and attributes a document may hold, and what they mean.
//!
//! [`read`] parses a document the same way for all three. The text is parsed as written first;
//! when that fails it is parsed again with one-line blocks split onto lines ([`lines`]), because
//! nodeward's and Nomad's documentation write `restart { attempts = 2  interval = "30m" }`, which
//! strict HCL 2 refuses; when the retry fails too, the error is the one about the text as written
//! ([`SyntaxError`]). The parse and the schema's walk over the result run on a thread with a
//! large stack (see [`PARSER_STACK`]).
//!
//! The parser is `hcl-edit` (re-exported by `hcl-rs` as [`hcl::edit`]), whose syntax tree keeps
//! byte spans. [`Source`] turns a span into the line the user wrote, whichever text was parsed, and
//! reads attributes literally ([`value`]): nothing is evaluated, so `"${NOMAD_TASK_DIR}"` comes
//! through as that text. [`Source::items`] splits a block body into the attributes and blocks a
//! schema allows. Problems are reported in one shape, [`Error`], whose messages name the line.
//!
//! Jobspecs are HCL2 with its expression language: for them, [`eval`] runs between the parse and
//! the walk, evaluating variables, locals, expressions and Nomad's functions ([`funcs`]) into the
//! literals the walker reads. Volume specifications and the agent configuration are read
//! literally.

pub mod body;
pub mod error;
pub mod eval;
pub mod funcs;
pub mod lines;
pub mod source;
pub mod tree;
pub mod value;

pub use body::Items;
pub use error::{Error, SyntaxError};
pub use source::Source;

use hcl::edit::structure::Body;

/// A parsed document: its syntax tree and the text the tree's spans point into.
#[derive(Debug)]
pub struct Document {
    pub body: Body,
    pub source: Source,
}

/// Parses `src` (as written, else with one-line blocks split) and hands the result to `walk`, the
/// schema's reader, on a thread with [`PARSER_STACK`], whichever thread calls it.
pub fn read<T, E>(src: &str, walk: impl FnOnce(Document) -> Result<T, E> + Send) -> Result<T, E>
where
    T: Send,
    E: From<Error> + Send,
{
    // The walk recurses over the tree and dropping the tree recurses too: both belong on the
    // parser's stack, not only the parse.
    on_parser_stack(|| walk(parse(src)?)).map_err(Error::Thread)?
}

fn parse(src: &str) -> Result<Document, Error> {
    let as_written = match hcl::edit::parser::parse_body(src) {
        Ok(body) => {
            return Ok(Document {
                body,
                source: Source::as_written(src),
            })
        }
        Err(e) => e,
    };
    let (normalized, lines) = lines::normalize(src);
    if normalized != src {
        if let Ok(body) = hcl::edit::parser::parse_body(&normalized) {
            return Ok(Document {
                body,
                source: Source::normalized(normalized, lines),
            });
        }
    }
    Err(Error::Syntax(SyntaxError::new(as_written)))
}

/// Stack of the thread that parses HCL. hcl-edit's parser recurses once per nesting level of an
/// expression or block and refuses input nested deeper than 64 levels (or with more than 128
/// chained operators), so the stack a parse needs is bounded: up to about 2 MiB in a debug build
/// (nested `for` expressions), far more than nodeward's threads have ([`crate::thread::STACK_SIZE`]).
/// A jobspec with 30 nested `[` sent to `POST /v1/jobs/parse` overflowed an API worker's stack and
/// aborted the agent.
pub const PARSER_STACK: usize = 16 << 20;

/// Runs `parse` on a short-lived scoped thread with [`PARSER_STACK`] ([`crate::thread::spawn_scoped`]).
/// Only touched stack pages cost memory. A panic in `parse` continues in the caller.
fn on_parser_stack<T: Send>(parse: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|scope| {
        let parser = crate::thread::spawn_scoped(scope, "hcl-parser", PARSER_STACK, parse)?;
        Ok(parser
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(src: &str) -> Result<Vec<usize>, Error> {
        read(src, |doc: Document| {
            Ok::<_, Error>(
                doc.body
                    .iter()
                    .map(|s| doc.source.line(hcl::edit::Span::span(s)))
                    .collect(),
            )
        })
    }

    #[test]
    fn strict_text_is_read_as_written() {
        let doc = read("a = 1\n\nb { c = 2 }\n", |doc: Document| {
            Ok::<_, Error>(doc)
        })
        .unwrap();
        assert!(!doc.source.is_normalized());
        assert_eq!(lines_of("a = 1\n\nb { c = 2 }\n").unwrap(), [1, 3]);
    }

    #[test]
    fn one_line_blocks_are_retried_and_keep_their_lines() {
        let src = "a = 1\nb { c = 2  d = 3 }\n\ne { f = 1  g = 2 }\n";
        let doc = read(src, |doc: Document| Ok::<_, Error>(doc)).unwrap();
        assert!(doc.source.is_normalized());
        assert_eq!(lines_of(src).unwrap(), [1, 2, 4]);
    }

    #[test]
    fn a_syntax_error_is_about_the_text_as_written() {
        let Err(Error::Syntax(e)) = lines_of("a = 1\nb { c = 2  d = }\n") else {
            panic!("expected a syntax error")
        };
        // Not line 3, column 1, where the retry put `d`.
        assert_eq!((e.line(), e.column()), (2, 12));
        assert!(
            e.to_string()
                .contains("HCL parse error in line 2, column 12"),
            "{e}"
        );
    }

    #[test]
    fn runs_on_the_parser_stack() {
        let name = read("", |_| {
            Ok::<_, Error>(std::thread::current().name().map(String::from))
        });
        assert_eq!(name.unwrap().as_deref(), Some("hcl-parser"));
    }
}
