//! `saggar cache ls | verify | gc | key | import` on a directory filled by `saggar warmup`.

mod common;

use std::time::{Duration, SystemTime};

use common::{Sandbox, assert_error, assert_success, stdout};

fn json_of(sandbox: &Sandbox, args: &[&str]) -> serde_json::Value {
    let output = sandbox.run(&[args, &["--json", "-"]].concat());
    assert_success(&output);
    serde_json::from_str(&stdout(&output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&output)))
}

/// Fills a cache with the small MLP's buckets 1, 2, 4 and returns the cache dir and config path.
fn filled(sandbox: &Sandbox) -> (String, String) {
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let output = sandbox.run(&[
        "warmup",
        "--backend",
        "host",
        "--cache-dir",
        &cache,
        "--model-config",
        &config,
        "--max-batch",
        "4",
    ]);
    assert_success(&output);
    (cache, config)
}

fn entry_files(cache: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sce"))
        .collect();
    files.sort();
    files
}

#[test]
fn key_names_the_entry_that_warmup_wrote_and_ls_lists_it() {
    let sandbox = Sandbox::new();
    let (cache, config) = filled(&sandbox);
    let listing = json_of(&sandbox, &["cache", "ls", "--cache-dir", &cache]);
    let entries = listing["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    for entry in entries {
        assert_eq!(entry["ok"], true, "{entry:#}");
        assert_eq!(entry["key"]["backend"], "host");
        assert_eq!(entry["key"]["arch"], "host-v1");
        assert_eq!(entry["key"]["compiler"], "saggar-models");
        assert!(entry["size_bytes"].as_u64().unwrap() > 0);
    }

    for bucket in ["1", "2", "4"] {
        // From the device, and from the architecture alone: the same key.
        let from_device = json_of(
            &sandbox,
            &[
                "cache",
                "key",
                "--model-config",
                &config,
                "--bucket",
                bucket,
                "--backend",
                "host",
                "--cache-dir",
                &cache,
            ],
        );
        let from_arch = json_of(
            &sandbox,
            &[
                "cache",
                "key",
                "--model-config",
                &config,
                "--bucket",
                bucket,
                "--backend",
                "host",
                "--arch",
                "host-v1",
                "--cache-dir",
                &cache,
            ],
        );
        assert_eq!(from_device["entry_id"], from_arch["entry_id"]);
        assert_eq!(from_device["present"], true, "{from_device:#}");
        let id = from_device["entry_id"].as_str().unwrap();
        assert!(entries.iter().any(|e| e["id"] == id), "`cache key` id {id} is not in `cache ls`");
        assert!(from_device["key_text"].as_str().unwrap().starts_with("saggar-cache-key/1\n"));
    }
    let absent =
        json_of(&sandbox, &["cache", "key", "--model-config", &config, "--bucket", "8", "--cache-dir", &cache]);
    assert_eq!(absent["present"], false);
    let other_arch = json_of(
        &sandbox,
        &["cache", "key", "--model-config", &config, "--bucket", "4", "--backend", "cuda", "--arch", "sm_90"],
    );
    assert_eq!(other_arch["backend"], "cuda");
    assert_eq!(other_arch["key"]["arch"], "sm_90");

    let table = stdout(&sandbox.run(&["cache", "ls", "--cache-dir", &cache]));
    assert!(table.contains("3 entries"), "{table}");
    let text =
        stdout(&sandbox.run(&["cache", "key", "--model-config", &config, "--bucket", "2", "--cache-dir", &cache]));
    assert!(text.contains("entry id: ") && text.contains("(present)"), "{text}");
}

#[test]
fn verify_finds_corruption_and_gc_removes_it_with_stale_temps() {
    let sandbox = Sandbox::new();
    let (cache, config) = filled(&sandbox);
    let clean = json_of(&sandbox, &["cache", "verify", "--cache-dir", &cache]);
    assert_eq!(clean["checked"], 3);
    assert_eq!(clean["ok"], 3);

    // Flip a payload byte of one entry.
    let victim = entry_files(&cache)[1].clone();
    let mut bytes = std::fs::read(&victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    let output = sandbox.run(&["cache", "verify", "--cache-dir", &cache]);
    let line = assert_error(&output, 1);
    assert!(line.contains("1 of 3 cache entries are bad"), "{line}");
    assert!(stdout(&output).contains("checksum"), "{}", stdout(&output));

    // A temp file left by a writer that died an hour ago.
    let id = victim.file_stem().unwrap().to_str().unwrap();
    let temp = std::path::Path::new(&cache).join(format!(".saggar-tmp.{id}.99999.1"));
    let file = std::fs::File::create(&temp).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
    drop(file);

    let gc = json_of(&sandbox, &["cache", "gc", "--cache-dir", &cache]);
    assert_eq!(gc["corrupt_removed"], 1, "{gc:#}");
    assert_eq!(gc["stale_temps_removed"], 1, "{gc:#}");
    assert!(!temp.exists());
    assert!(!victim.exists());
    let after = json_of(&sandbox, &["cache", "verify", "--cache-dir", &cache]);
    assert_eq!((after["checked"].as_u64(), after["ok"].as_u64()), (Some(2), Some(2)));

    // The next warmup recompiles exactly the removed entry.
    let json = sandbox.path("rewarm.json");
    let output = sandbox.run(&[
        "warmup",
        "--backend",
        "host",
        "--cache-dir",
        &cache,
        "--model-config",
        &config,
        "--max-batch",
        "4",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_success(&output);
    assert_eq!(common::u64_at(&common::read_json(&json), "/compiles"), 1);
}

#[test]
fn gc_trims_to_a_size_bound() {
    let sandbox = Sandbox::new();
    let (cache, _) = filled(&sandbox);
    let gc = json_of(&sandbox, &["cache", "gc", "--cache-dir", &cache, "--max-bytes", "1"]);
    assert_eq!(gc["lru_evicted"], 3, "{gc:#}");
    assert_eq!(gc["remaining_bytes"], 0);
    assert!(entry_files(&cache).is_empty());
}

#[test]
fn maintenance_of_a_missing_directory_fails_clearly() {
    let sandbox = Sandbox::new();
    let missing = sandbox.cache_dir("never-created");
    for command in ["ls", "verify", "gc"] {
        let line = assert_error(&sandbox.run(&["cache", command, "--cache-dir", &missing]), 1);
        assert!(line.contains("does not exist"), "{line}");
    }
    assert!(!std::path::Path::new(&missing).exists(), "maintenance commands never create a cache");
}

#[test]
fn import_seeds_another_cache_and_refuses_a_bad_file() {
    let sandbox = Sandbox::new();
    let (seed, _) = filled(&sandbox);
    let replica = sandbox.cache_dir("replica");
    let report = json_of(&sandbox, &["cache", "import", "--cache-dir", &replica, "--from", &seed]);
    let files = entry_files(&seed).len() as u64;
    assert_eq!((report["imported"].as_u64(), report["failed"].as_array().map(Vec::len)), (Some(files), Some(0)));
    assert_eq!(entry_files(&replica).len() as u64, files);
    // Again: everything is already present.
    let again = json_of(&sandbox, &["cache", "import", "--cache-dir", &replica, "--from", &seed]);
    assert_eq!(again["already_present"].as_u64(), Some(files));
    // A file that is not an entry is refused, the others still imported, exit 1.
    std::fs::write(std::path::Path::new(&seed).join("junk.sce"), b"not an entry").unwrap();
    let output = sandbox.run(&["cache", "import", "--cache-dir", &replica, "--from", &seed]);
    assert!(assert_error(&output, 1).contains("1 refused of the files in"));
    assert!(stdout(&output).contains("refused"), "{}", stdout(&output));
}
