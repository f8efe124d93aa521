//! TODO: validate
