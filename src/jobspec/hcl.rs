//! TODO: hcl
