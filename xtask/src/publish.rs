//! `cargo xtask publish-check`: what `cargo publish` would check, for every published crate, without
//! publishing anything.
//!
//! 1. `cargo package --workspace` packages every crate and verifies each package by building it
//!    from the packaged files alone. The saggar crates depend on each other and none is on crates.io
//!    yet; cargo (1.90 and later) verifies a package against the packages of its unpublished
//!    workspace siblings through a temporary local registry (`target/publish-check/package/tmp-registry`), so this
//!    is the build a user of the published crates gets, not a build from the workspace's paths.
//! 2. Every package ships its README and both license files (`cargo package --list`).
//! 3. No README of a package links to a relative path (such a link works in the repository and
//!    breaks on crates.io and docs.rs, where only the package is).
//!
//! A package's version does not change between runs, and cargo treats a registry package of a
//! given version as immutable twice over: it extracts the temporary registry's packages under
//! `$CARGO_HOME/registry/src/-<hash>/` (the hash depends on the registry's path only) and skips the
//! extraction when a folder of that name and version exists, and it reuses a registry package's
//! build output without looking at its sources. A machine that ran this check before from the
//! same checkout would verify against the previous run's siblings. So the check removes those
//! extractions and verifies in its own target folder (`target/publish-check`), emptied first and removed afterwards.

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
    "saggar-serve",
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
    forget_stale_extractions(&cargo_home())?;
    let target = root.join("target").join("publish-check");
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|e| format!("cannot empty {}: {e}", target.display()))?;
    }
    let target_arg = target.to_string_lossy().into_owned();
    let mut args = vec!["package", "--workspace", "--allow-dirty", "--target-dir", &target_arg];
    // `publish = false` members: a test fixture, this tool, and the Python package's crate (shipped as
    // a wheel by maturin, never as a crate).
    for member in ["saggar-hip-fixture", "saggar-python", "xtask"] {
        args.extend(["--exclude", member]);
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    // The verification only needs the crates to compile: no debug info, no incremental state, and the
    // folder removed afterwards, so the check adds no lasting weight to the disk.
    let status = Command::new(crate::env_cargo())
        .args(&args)
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let _ = std::fs::remove_dir_all(&target);
    if !status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    eprintln!("xtask: publish check passed for {}", PUBLISHED.join(", "));
    Ok(())
}

/// Cargo's home folder: `$CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> std::path::PathBuf {
    match std::env::var_os("CARGO_HOME") {
        Some(home) => home.into(),
        None => Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
    }
}

/// Removes earlier extractions of the published packages from cargo's local-registry source
/// folders (`registry/src/-<hash>/<package>-<version>`), so that `cargo package` extracts the
/// packages it has just made. Folders of named registries (crates.io's `index.crates.io-<hash>`)
/// are left alone.
fn forget_stale_extractions(cargo_home: &Path) -> Result<(), String> {
    let Ok(registries) = std::fs::read_dir(cargo_home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(extracted) = std::fs::read_dir(registry.path()) else { continue };
        for entry in extracted.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = PUBLISHED.iter().any(|package| {
                name.strip_prefix(package)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|e| format!("cannot remove the stale extraction {}: {e}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{forget_stale_extractions, relative_links};

    #[test]
    fn stale_extractions_of_local_registries_are_removed_and_nothing_else() {
        let home = std::env::temp_dir().join(format!("saggar-xtask-cargo-home-{}", std::process::id()));
        let src = home.join("registry").join("src");
        let keep = [
            src.join("index.crates.io-1949cf8c6b5b557f").join("saggar-arena-0.1.0"),
            src.join("-22c3805da5a543b4").join("serde-1.0.0"),
            src.join("-22c3805da5a543b4").join("saggar-arena-extra-0.1.0"),
        ];
        let gone = [src.join("-22c3805da5a543b4").join("saggar-arena-0.1.0"), src.join("-3c95").join("saggar-0.2.0")];
        for dir in keep.iter().chain(&gone) {
            std::fs::create_dir_all(dir).unwrap();
        }
        forget_stale_extractions(&home).unwrap();
        for dir in &keep {
            assert!(dir.exists(), "{} was removed", dir.display());
        }
        for dir in &gone {
            assert!(!dir.exists(), "{} was kept", dir.display());
        }
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn relative_links_are_found_and_urls_are_not() {
        let text = "see [the doc](docs/cli.md), [docs.rs](https://docs.rs/saggar), [here](#usage) and \
                    [arch](../../docs/ARCHITECTURE.md)";
        assert_eq!(relative_links(text), ["docs/cli.md", "../../docs/ARCHITECTURE.md"]);
    }
}
