//! kiln
fn main() {}
