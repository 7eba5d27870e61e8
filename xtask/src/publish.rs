//! `cargo xtask publish-check`: what `cargo publish` would check, for every published crate, without
//! publishing anything.
//!
//! 1. Every package ships its README and both license files (`cargo package --list`).
//! 2. No README of a package links to a relative path (such a link works in the repository and
//!    breaks on crates.io and docs.rs, where only the package is).
//! 3. `cargo package --workspace --no-verify` packages every crate; then every package is compiled
//!    from its packaged files alone, as `cargo publish`'s verification does (type-checked with
//!    `cargo check`: a file left out of a package, a path or feature that only the repository has,
//!    fails there; codegen and linking are the workspace's own builds' business). The saggar crates depend on
//!    each other and none is on crates.io yet, so the packages are extracted side by side into one
//!    verification workspace (`target/publish-check/verify`) whose `[patch.crates-io]` points each
//!    saggar dependency at its sibling's package: the build a user of the published crates gets, not a
//!    build from the repository's paths. Each package is checked on its own (`cargo check -p`, its
//!    own feature resolution, with the repository's `Cargo.lock`), all of them in one target folder,
//!    so a dependency with the same features is compiled once rather than once per package (`cargo
//!    package`'s own verification rebuilt every dependency for each of the ten packages).
//!
//! The folder is emptied first and removed afterwards.

use std::path::Path;
use std::process::{Command, Stdio};

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

/// Runs cargo with `args` in `dir`, returning its standard output when `capture` (else its output
/// goes to the terminal as it comes). Builds skip debug info and incremental state: only whether the
/// packages compile matters.
fn cargo(dir: &Path, args: &[&str], capture: bool) -> Result<String, String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let pipe = || if capture { Stdio::piped() } else { Stdio::inherit() };
    let output = Command::new(crate::env_cargo())
        .args(args)
        .current_dir(dir)
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .stdout(pipe())
        .stderr(pipe())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
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
        let files = cargo(root, &["package", "--list", "--allow-dirty", "-p", package], true)?;
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
    let target = root.join("target").join("publish-check");
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|e| format!("cannot empty {}: {e}", target.display()))?;
    }
    let result = package_and_verify(root, &target);
    let _ = std::fs::remove_dir_all(&target);
    result?;
    eprintln!("xtask: publish check passed for {}", PUBLISHED.join(", "));
    Ok(())
}

/// Packages every published crate into `target/package`, extracts the packages into one verification
/// workspace and checks each package there.
fn package_and_verify(root: &Path, target: &Path) -> Result<(), String> {
    let target_arg = target.to_string_lossy().into_owned();
    let mut args = vec!["package", "--workspace", "--no-verify", "--allow-dirty", "--target-dir", &target_arg];
    // `publish = false` members: a test fixture, this tool, and the Python package's crate (shipped as
    // a wheel by maturin, never as a crate).
    for member in ["saggar-hip-fixture", "saggar-python", "xtask"] {
        args.extend(["--exclude", member]);
    }
    cargo(root, &args, false)?;
    let verify = target.join("verify");
    std::fs::create_dir_all(&verify).map_err(|e| format!("cannot create {}: {e}", verify.display()))?;
    let version = package_version(root)?;
    let mut members = Vec::new();
    for package in PUBLISHED {
        let name = format!("{package}-{version}");
        let archive = target.join("package").join(format!("{name}.crate"));
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&verify)
            .status()
            .map_err(|e| format!("cannot run tar: {e}"))?;
        if !status.success() {
            return Err(format!("cannot extract {}", archive.display()));
        }
        members.push((*package, name));
    }
    let manifest = verification_manifest(&members);
    std::fs::write(verify.join("Cargo.toml"), manifest).map_err(|e| format!("cannot write the manifest: {e}"))?;
    std::fs::copy(root.join("Cargo.lock"), verify.join("Cargo.lock"))
        .map_err(|e| format!("cannot copy Cargo.lock: {e}"))?;
    for package in PUBLISHED {
        cargo(&verify, &["check", "-p", package], false)?;
    }
    Ok(())
}

/// The workspace's version (every published crate has it: `version.workspace = true`).
fn package_version(root: &Path) -> Result<String, String> {
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .find_map(|line| {
            line.trim().strip_prefix("version")?.trim().strip_prefix('=')?.trim().strip_prefix('"')?.strip_suffix('"')
        })
        .map(str::to_string)
        .ok_or_else(|| "Cargo.toml has no [workspace.package] version".to_string())
}

/// The verification workspace's manifest: every extracted package a member, and every saggar
/// dependency patched to its sibling's package.
fn verification_manifest(members: &[(&str, String)]) -> String {
    let list: Vec<String> = members.iter().map(|(_, dir)| format!("\"{dir}\"")).collect();
    let mut manifest = format!("[workspace]\nresolver = \"3\"\nmembers = [{}]\n\n[patch.crates-io]\n", list.join(", "));
    for (package, dir) in members {
        manifest.push_str(&format!("{package} = {{ path = \"{dir}\" }}\n"));
    }
    manifest
}

#[cfg(test)]
mod tests {
    use super::{package_version, relative_links, verification_manifest};

    #[test]
    fn the_verification_workspace_patches_every_sibling_to_its_package() {
        let members = [("saggar-shape", "saggar-shape-0.1.0".to_string()), ("saggar", "saggar-0.1.0".to_string())];
        assert_eq!(
            verification_manifest(&members),
            "[workspace]\nresolver = \"3\"\nmembers = [\"saggar-shape-0.1.0\", \"saggar-0.1.0\"]\n\n\
             [patch.crates-io]\nsaggar-shape = { path = \"saggar-shape-0.1.0\" }\nsaggar = { path = \"saggar-0.1.0\" }\n"
        );
    }

    #[test]
    fn the_version_is_the_workspace_packages() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let version = package_version(root).unwrap();
        assert!(
            version.split('.').count() == 3 && version.split('.').all(|part| part.parse::<u32>().is_ok()),
            "{version}"
        );
    }

    #[test]
    fn relative_links_are_found_and_urls_are_not() {
        let text = "see [the doc](docs/cli.md), [docs.rs](https://docs.rs/saggar), [here](#usage) and \
                    [arch](../../docs/ARCHITECTURE.md)";
        assert_eq!(relative_links(text), ["docs/cli.md", "../../docs/ARCHITECTURE.md"]);
    }
}
