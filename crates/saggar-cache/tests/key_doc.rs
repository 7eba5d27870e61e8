//! The worked example of `docs/cache-key.md`, pinned: if the encoding or the id derivation
//! changes, this fails, and so would every cache and tool computing ids outside the process.

use saggar_cache::{CacheKey, FORMAT_VERSION};

const DOC: &str = include_str!("../../../docs/cache-key.md");

const EXAMPLE_MODEL_HASH: &str = "18084f564d0254b56cabd0c17c6ba6c742bfdb1105ac6d6a04fe051fceef02d7";

const EXAMPLE_TEXT: &str = "saggar-cache-key/1
model_hash=18084f564d0254b56cabd0c17c6ba6c742bfdb1105ac6d6a04fe051fceef02d7
shape=batch=8;input:f32[8,3,224,224]
backend=hip
arch=gfx942
compiler=migraphx
compiler_version=2.12.0
format_version=2
option:exhaustive_tune=false
option:fp16=true
";

const EXAMPLE_DIGEST: &str = "134135447a296a8b8f2fcaaef8da74e1adfff6149390b34febfe6231b4209d85";
const EXAMPLE_ID: &str = "134135447a296a8b8f2fcaaef8da74e1";

fn example() -> CacheKey {
    CacheKey::builder()
        .model_hash(CacheKey::hash_model_bytes(b"example model"))
        .shape("batch=8;input:f32[8,3,224,224]")
        .backend("hip")
        .arch("gfx942")
        .compiler("migraphx")
        .compiler_version("2.12.0")
        .option("fp16", "true")
        .option("exhaustive_tune", "false")
        .build()
        .unwrap()
}

#[test]
fn worked_example_is_pinned() {
    let k = example();
    assert_eq!(FORMAT_VERSION, 2);
    assert_eq!(k.model_hash(), EXAMPLE_MODEL_HASH);
    assert_eq!(k.canonical_text(), EXAMPLE_TEXT);
    assert_eq!(EXAMPLE_TEXT.len(), 261);
    assert_eq!(blake3::hash(EXAMPLE_TEXT.as_bytes()).to_hex().as_str(), EXAMPLE_DIGEST);
    assert_eq!(k.id().to_hex(), EXAMPLE_ID);
    assert_eq!(CacheKey::from_canonical_text(EXAMPLE_TEXT).unwrap(), k);
}

#[test]
fn document_shows_the_pinned_example() {
    assert!(DOC.contains(EXAMPLE_TEXT), "docs/cache-key.md must show the exact canonical text");
    for needle in [EXAMPLE_MODEL_HASH, EXAMPLE_DIGEST, EXAMPLE_ID, "261 bytes"] {
        assert!(DOC.contains(needle), "docs/cache-key.md must mention {needle}");
    }
    // The shell recipe in the document reproduces the text byte for byte.
    let recipe = DOC.lines().find(|l| l.starts_with("printf '")).expect("a printf recipe");
    let arg = recipe.strip_prefix("printf '").and_then(|r| r.split_once("' |")).map(|(a, _)| a).unwrap();
    assert_eq!(arg.replace("\\n", "\n"), EXAMPLE_TEXT);
}
