//! Block bodies against a schema: which attributes and nested blocks a body may hold, a block's
//! labels, blocks that may appear at most once. Anything else is an error naming the block, the
//! attribute and the line.

use std::collections::BTreeMap;

use hcl::edit::structure::{Attribute, Block, Body, Structure};
use hcl::edit::Span;

use super::error::invalid;
use super::{Error, Source};

/// The attributes and blocks of one block body, after checking that each is allowed there.
pub struct Items<'b> {
    /// What the body belongs to, for messages: `task "web"`, `config block of task "web"`.
    pub what: String,
    attrs: BTreeMap<&'b str, &'b Attribute>,
    blocks: Vec<&'b Block>,
}

impl<'b> Items<'b> {
    pub fn attr(&self, key: &str) -> Option<&'b Attribute> {
        self.attrs.get(key).copied()
    }

    /// The blocks named `ident`, in the order written.
    pub fn blocks(&self, ident: &str) -> Vec<&'b Block> {
        self.blocks
            .iter()
            .copied()
            .filter(|b| b.ident.as_str() == ident)
            .collect()
    }
}

impl Source {
    /// Splits `body` into attributes and blocks, refusing anything not in `attrs`/`blocks`.
    /// `what` names the body in messages.
    pub fn items<'b>(
        &self,
        what: &str,
        body: &'b Body,
        attrs: &[&str],
        blocks: &[&str],
    ) -> Result<Items<'b>, Error> {
        let mut items = Items {
            what: what.to_string(),
            attrs: BTreeMap::new(),
            blocks: Vec::new(),
        };
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let key = attr.key.as_str();
                    if !attrs.contains(&key) {
                        return Err(Error::Unknown(format!(
                            "unknown attribute {key:?} in {what} at line {}",
                            self.line(attr.span())
                        )));
                    }
                    // The parser refuses an attribute given twice in one body.
                    items.attrs.insert(key, attr);
                }
                Structure::Block(block) => {
                    let ident = block.ident.as_str();
                    if !blocks.contains(&ident) {
                        return Err(Error::Unknown(format!(
                            "unknown block {ident:?} in {what} at line {}",
                            self.line(block.span())
                        )));
                    }
                    items.blocks.push(block);
                }
            }
        }
        Ok(items)
    }

    /// The single label of a `group "x"`-style block; `parent` names where the block is.
    pub fn label(&self, parent: &str, block: &Block) -> Result<String, Error> {
        match block.labels.as_slice() {
            [label] => Ok(label.as_str().to_string()),
            _ => Err(invalid(format!(
                "block {:?} in {parent} at line {} must have exactly one label (its name)",
                block.ident.as_str(),
                self.line(block.span())
            ))),
        }
    }

    /// The unlabeled block `ident` that may appear at most once in `parent` (`config`, `logs`...).
    pub fn single<'b>(&self, parent: &Items<'b>, ident: &str) -> Result<Option<&'b Block>, Error> {
        let blocks = parent.blocks(ident);
        if let Some(second) = blocks.get(1) {
            return Err(invalid(format!(
                "block {ident:?} is given more than once in {} (again at line {})",
                parent.what,
                self.line(second.span())
            )));
        }
        match blocks.first() {
            Some(block) => {
                self.no_labels(&parent.what, block)?;
                Ok(Some(*block))
            }
            None => Ok(None),
        }
    }

    /// Refuses labels on a block that takes none; `parent` names where the block is.
    pub fn no_labels(&self, parent: &str, block: &Block) -> Result<(), Error> {
        if block.labels.is_empty() {
            Ok(())
        } else {
            Err(invalid(format!(
                "block {:?} in {parent} at line {} must not have labels",
                block.ident.as_str(),
                self.line(block.span())
            )))
        }
    }
}
