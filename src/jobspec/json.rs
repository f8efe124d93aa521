//! TODO: json
