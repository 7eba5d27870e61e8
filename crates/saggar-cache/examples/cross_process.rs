//! Cache an expensive computation across processes: four processes start at once and ask the same
//! cache directory for the same key; exactly one computes the artifact, the others wait for it and
//! load it from disk. A fifth process, started afterwards, loads it without waiting.
//!
//! Run it with `cargo run -p saggar-cache --example cross_process`. The example re-runs its own
//! executable as the child processes (`SAGGAR_EXAMPLE_CACHE_DIR` selects the child role).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use saggar_cache::{CacheConfig, CacheKey, CompileCache, ModelHash, Origin};

/// The environment variable that makes this executable a child, naming the cache directory.
const CHILD_DIR: &str = "SAGGAR_EXAMPLE_CACHE_DIR";

/// The expensive computation: a stand-in for a compiler (half a second, then 64 KiB of output
/// derived from the model bytes).
fn expensive_compile(model: &[u8]) -> Result<Vec<u8>, std::io::Error> {
    std::thread::sleep(Duration::from_millis(500));
    let seed = ModelHash::of_bytes(model);
    Ok(seed.as_str().bytes().cycle().take(64 << 10).collect())
}

/// One process's work: open the cache and get the artifact, computing it only on a miss.
fn child(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let model = b"the model file";
    let cache = CompileCache::open(CacheConfig::builder(dir).build())?;
    let key = CacheKey::builder()
        .model_hash(ModelHash::of_bytes(model))
        .shape("batch=8")
        .backend("host")
        .arch("example")
        .compiler("expensive_compile")
        .compiler_version("1")
        .build()?;
    let started = Instant::now();
    let fetched = cache.get_or_compile(&key, || expensive_compile(model))?;
    let elapsed = started.elapsed();
    assert_eq!(fetched.artifact.as_bytes(), expensive_compile(model)?.as_slice());
    let origin = match fetched.origin {
        Origin::Compiled => "compiled",
        Origin::AfterWait => "waited for another process, then loaded",
        Origin::Disk => "loaded from disk",
        _ => "other",
    };
    println!("process {}: {origin} in {elapsed:?}", std::process::id());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        return child(Path::new(&dir));
    }
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("saggar");
    let exe = std::env::current_exe()?;
    let spawn = || Command::new(&exe).env(CHILD_DIR, &dir).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    // Four processes at once, then a fifth once they are done.
    let together = (0..4).map(|_| spawn()).collect::<Result<Vec<_>, _>>()?;
    let mut lines = Vec::new();
    for child in together {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("a child failed: {}", String::from_utf8_lossy(&output.stderr)).into());
        }
        lines.push(String::from_utf8(output.stdout)?);
    }
    let later = spawn()?.wait_with_output()?;
    lines.push(String::from_utf8(later.stdout)?);
    print!("{}", lines.concat());
    let compiled = lines.iter().filter(|l| l.contains("compiled in")).count();
    assert_eq!(compiled, 1, "exactly one process computes the artifact");
    assert!(lines[4].contains("loaded from disk"), "a later process loads it");
    Ok(())
}
