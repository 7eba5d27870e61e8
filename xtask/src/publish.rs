//! `cargo xtask publish-check`: what `cargo publish` would check, for every published crate, without
//! publishing anything.
//!
//! 1. `cargo package --workspace` packages every crate and verifies each package by building it
//!    from the packaged files alone. The saggar crates depend on each other and none is on crates.io
//!    yet; cargo (1.90 and later) verifies a package against the packages of its unpublished
//!    workspace siblings through a temporary local registry (`target/package/tmp-registry`), so this
//!    is the build a user of the published crates gets, not a build from the workspace's paths.
//! 2. Every package ships its README and both license files (`cargo package --list`).
//! 3. No README of a package links to a relative path (such a link works in the repository and
//!    breaks on crates.io and docs.rs, where only the package is).

use std::path::Path;
use std::process::Command;

/// The packages that are published (every other workspace member has `publish = false`).
const PUBLISHED: &[&str] = &[
    "saggar-device",
    "saggar-shape",
    "saggar-cache",
    "saggar-arena",
    "saggar-dispatch",
    "saggar-models",
    "saggar-onnx",
    "saggar-cli",
    "saggar",
];

/// Files every package must ship.
const REQUIRED_FILES: &[&str] = &["README.md", "LICENSE-MIT", "LICENSE-APACHE", "Cargo.toml"];

/// Runs cargo and returns its standard output.
fn cargo_output(args: &[&str]) -> Result<String, String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let output = Command::new(crate::env_cargo()).args(args).output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&output.stderr)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Relative link targets in a markdown text: `[text](target)` where target is not a URL or an
/// anchor.
fn relative_links(markdown: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].trim();
        if !(target.starts_with("http://") || target.starts_with("https://") || target.starts_with('#')) {
            links.push(target.to_string());
        }
        rest = &after[end..];
    }
    links
}

/// Runs the checks; `root` is the workspace root.
pub(crate) fn publish_check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    for package in PUBLISHED {
        let files = cargo_output(&["package", "--list", "--allow-dirty", "-p", package])?;
        for required in REQUIRED_FILES {
            if !files.lines().any(|f| f == *required) {
                problems.push(format!("{package}: the package lacks {required}"));
            }
        }
        let dir = if *package == "saggar" { root.to_path_buf() } else { root.join("crates").join(package) };
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .map_err(|e| format!("{package}: cannot read README.md: {e}"))?;
        for link in relative_links(&readme) {
            problems.push(format!("{package}: README.md links to `{link}`, which breaks once packaged"));
        }
    }
    if !problems.is_empty() {
        return Err(format!("publish check failed:\n  {}", problems.join("\n  ")));
    }
    let mut args = vec!["package", "--workspace", "--allow-dirty"];
    for member in ["saggar-hip-fixture", "xtask"] {
        args.extend(["--exclude", member]);
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(crate::env_cargo()).args(&args).status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    eprintln!("xtask: publish check passed for {}", PUBLISHED.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::relative_links;

    #[test]
    fn relative_links_are_found_and_urls_are_not() {
        let text = "see [the doc](docs/cli.md), [docs.rs](https://docs.rs/saggar), [here](#usage) and \
                    [arch](../../docs/ARCHITECTURE.md)";
        assert_eq!(relative_links(text), ["docs/cli.md", "../../docs/ARCHITECTURE.md"]);
    }
}
