//! `saggar cache ls | verify | gc | key | import`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use saggar_cache::{CacheConfig, CompileCache, ENTRY_EXTENSION, EntryInfo, ImportStatus};
use saggar_device::host::HostBackend;
use saggar_device::{Backend, BackendKind, BackendVisitor};
use saggar_dispatch::{CompilerIdentity, ProgramCompiler};
use saggar_models::ReferenceCompiler;
use serde::Serialize;

use crate::cli::{BackendArg, CacheCommand, CacheGcArgs, CacheImportArgs, CacheKeyArgs, CacheLsArgs, CacheVerifyArgs};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::output::{Table, emit, format_age, format_bytes};
use crate::source::ModelSource as _;
use crate::source::builtin::Builtin;
use crate::source::onnx;

/// Opens an existing cache directory for maintenance; a missing one is an error rather than being
/// created, since it is most likely a typo.
fn open_existing(
    dir: &Path,
    config: impl FnOnce(saggar_cache::CacheConfigBuilder) -> saggar_cache::CacheConfigBuilder,
) -> Result<CompileCache> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::failure(
                format!("cache directory {} does not exist", dir.display()),
                format!("check --cache-dir, or create and fill it with `saggar warmup --cache-dir {}`", dir.display()),
            ));
        }
        _ => {}
    }
    Ok(CompileCache::open(config(CacheConfig::builder(dir)).build())?)
}

/// Runs a `saggar cache` command.
pub fn run(command: &CacheCommand, env: &Environment) -> Result<()> {
    match command {
        CacheCommand::Ls(args) => ls(args, env),
        CacheCommand::Verify(args) => verify(args, env),
        CacheCommand::Gc(args) => gc(args, env),
        CacheCommand::Key(args) => key(args, env),
        CacheCommand::Import(args) => import(args, env),
    }
}

/// The `saggar cache import` report.
#[derive(Debug, Serialize)]
struct ImportOutput {
    cache_dir: String,
    from: String,
    imported: usize,
    replaced: usize,
    already_present: usize,
    failed: Vec<BadEntry>,
}

fn import(args: &CacheImportArgs, env: &Environment) -> Result<()> {
    let dir = env.cache_dir(args.cache_dir.as_deref())?;
    if !args.from.is_dir() {
        return Err(CliError::usage(
            format!("--from {}: no such folder", args.from.display()),
            "give the folder of a cache directory `saggar warmup` filled",
        ));
    }
    let cache = CompileCache::open(CacheConfig::builder(&dir).build())?;
    let report = cache.import_dir(&args.from)?;
    let count = |status: ImportStatus| report.imported.iter().filter(|o| o.status == status).count();
    let output = ImportOutput {
        cache_dir: dir.display().to_string(),
        from: args.from.display().to_string(),
        imported: count(ImportStatus::Imported),
        replaced: count(ImportStatus::Replaced),
        already_present: count(ImportStatus::AlreadyPresent),
        failed: report
            .failed
            .iter()
            .map(|(path, e)| BadEntry { id: String::new(), file: path.display().to_string(), reason: e.to_string() })
            .collect(),
    };
    emit(args.json.as_deref(), &output, || {
        let mut text = String::new();
        for bad in &output.failed {
            text.push_str(&format!("refused    {}: {}\n", bad.file, bad.reason));
        }
        text.push_str(&format!(
            "imported {} entries from {} into {}: {} new, {} replaced, {} already present, {} refused\n",
            output.imported + output.replaced + output.already_present,
            output.from,
            output.cache_dir,
            output.imported,
            output.replaced,
            output.already_present,
            output.failed.len()
        ));
        text
    })?;
    if !output.failed.is_empty() {
        return Err(CliError::failure(
            format!("{} refused of the files in {}", output.failed.len(), output.from),
            "a refused file is corrupt or not a cache entry; re-create the seed with `saggar warmup`",
        ));
    }
    Ok(())
}

/// The key fields of an entry, as JSON.
#[derive(Debug, Serialize)]
struct KeyFields {
    model_hash: String,
    shape: String,
    backend: String,
    arch: String,
    compiler: String,
    compiler_version: String,
    format_version: u32,
    options: std::collections::BTreeMap<String, String>,
}

impl KeyFields {
    fn of(key: &saggar_cache::CacheKey) -> KeyFields {
        KeyFields {
            model_hash: key.model_hash().to_string(),
            shape: key.shape().to_string(),
            backend: key.backend().to_string(),
            arch: key.arch().to_string(),
            compiler: key.compiler().to_string(),
            compiler_version: key.compiler_version().to_string(),
            format_version: key.format_version(),
            options: key.options().clone(),
        }
    }
}

/// One entry of `saggar cache ls --json`.
#[derive(Debug, Serialize)]
struct ListedEntry {
    id: String,
    file: String,
    size_bytes: u64,
    age_s: u64,
    last_used_s: u64,
    /// Whether the header reads back (the payload is only checked by `verify`).
    ok: bool,
    error: Option<String>,
    key: Option<KeyFields>,
    payload_bytes: Option<u64>,
    payload_blake3: Option<String>,
}

fn since(time: SystemTime) -> Duration {
    SystemTime::now().duration_since(time).unwrap_or_default()
}

fn listed(entry: &EntryInfo) -> ListedEntry {
    let (key, payload_bytes, payload_blake3, error) = match &entry.header {
        Ok(summary) => {
            (Some(KeyFields::of(&summary.key)), Some(summary.payload_len), Some(summary.payload_blake3.clone()), None)
        }
        Err(reason) => (None, None, None, Some(reason.to_string())),
    };
    ListedEntry {
        id: entry.id.to_hex(),
        file: entry.path.display().to_string(),
        size_bytes: entry.file_len,
        age_s: entry.age().as_secs(),
        last_used_s: since(entry.last_used).as_secs(),
        ok: error.is_none(),
        error,
        key,
        payload_bytes,
        payload_blake3,
    }
}

/// `saggar cache ls --json`.
#[derive(Debug, Serialize)]
struct Listing {
    cache_dir: String,
    entries: Vec<ListedEntry>,
    total_bytes: u64,
}

fn short(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

fn ls(args: &CacheLsArgs, env: &Environment) -> Result<()> {
    let dir = env.cache_dir(args.cache_dir.as_deref())?;
    let cache = open_existing(&dir, |c| c)?;
    let entries: Vec<ListedEntry> = cache.list()?.iter().map(listed).collect();
    let listing = Listing {
        cache_dir: dir.display().to_string(),
        total_bytes: entries.iter().map(|e| e.size_bytes).sum(),
        entries,
    };
    emit(args.json.as_deref(), &listing, || {
        let mut t = Table::with_header(&[
            "ID", "BACKEND", "ARCH", "COMPILER", "MODEL", "SHAPE", "OPTIONS", "SIZE", "AGE", "USED",
        ]);
        for e in &listing.entries {
            let mut row = vec![e.id.clone()];
            match &e.key {
                Some(k) => {
                    let options: Vec<String> = k.options.iter().map(|(n, v)| format!("{n}={v}")).collect();
                    row.extend([
                        k.backend.clone(),
                        k.arch.clone(),
                        format!("{} {}", k.compiler, k.compiler_version),
                        short(&k.model_hash, 12),
                        short(&k.shape, 12),
                        options.join(","),
                    ]);
                }
                None => {
                    row.push(format!("CORRUPT: {}", e.error.as_deref().unwrap_or("unreadable header")));
                    row.extend(std::iter::repeat_n(String::new(), 5));
                }
            }
            row.extend([
                format_bytes(e.size_bytes),
                format_age(Duration::from_secs(e.age_s)),
                format_age(Duration::from_secs(e.last_used_s)),
            ]);
            t.row(row);
        }
        format!(
            "{}{} entries, {} in {}\n",
            t.render(),
            listing.entries.len(),
            format_bytes(listing.total_bytes),
            listing.cache_dir
        )
    })
}

/// `saggar cache verify --json`.
#[derive(Debug, Serialize)]
struct VerifyOutput {
    cache_dir: String,
    checked: usize,
    ok: usize,
    corrupt: Vec<BadEntry>,
    untrusted: Vec<String>,
}

#[derive(Debug, Serialize)]
struct BadEntry {
    id: String,
    file: String,
    reason: String,
}

fn verify(args: &CacheVerifyArgs, env: &Environment) -> Result<()> {
    let dir = env.cache_dir(args.cache_dir.as_deref())?;
    let cache = open_existing(&dir, |c| c)?;
    let report = cache.verify(false)?;
    let output = VerifyOutput {
        cache_dir: dir.display().to_string(),
        checked: report.checked,
        ok: report.ok.len(),
        corrupt: report
            .corrupt
            .iter()
            .map(|c| BadEntry { id: c.id.to_hex(), file: c.path.display().to_string(), reason: c.reason.to_string() })
            .collect(),
        untrusted: report.untrusted.iter().map(|p| p.display().to_string()).collect(),
    };
    emit(args.json.as_deref(), &output, || {
        let mut text = String::new();
        for bad in &output.corrupt {
            text.push_str(&format!("corrupt    {}: {}\n", bad.file, bad.reason));
        }
        for path in &output.untrusted {
            text.push_str(&format!("untrusted  {path}: writable by other users or owned by another user\n"));
        }
        text.push_str(&format!(
            "checked {} entries in {}: {} ok, {} corrupt, {} untrusted\n",
            output.checked,
            output.cache_dir,
            output.ok,
            output.corrupt.len(),
            output.untrusted.len()
        ));
        text
    })?;
    let bad = output.corrupt.len() + output.untrusted.len();
    if bad > 0 {
        return Err(CliError::failure(
            format!("{bad} of {} cache entries are bad", output.checked),
            format!(
                "run `saggar cache gc --cache-dir {}` to remove corrupt entries (they are recompiled); fix or delete untrusted ones by hand",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// `saggar cache gc --json`.
#[derive(Debug, Serialize)]
struct GcOutput {
    cache_dir: String,
    corrupt_removed: usize,
    untrusted_kept: Vec<String>,
    stale_temps_removed: usize,
    orphan_locks_removed: usize,
    lru_evicted: usize,
    lru_evicted_bytes: u64,
    remaining_bytes: u64,
}

fn gc(args: &CacheGcArgs, env: &Environment) -> Result<()> {
    let dir = env.cache_dir(args.cache_dir.as_deref())?;
    let stale = Duration::from_secs(args.stale_after);
    let cache = open_existing(&dir, |c| c.max_disk_bytes(args.max_bytes).stale_temp_age(stale))?;
    let verified = cache.verify(true)?;
    let collected = cache.gc()?;
    let output = GcOutput {
        cache_dir: dir.display().to_string(),
        corrupt_removed: verified.evicted,
        untrusted_kept: verified.untrusted.iter().map(|p| p.display().to_string()).collect(),
        stale_temps_removed: collected.stale_temps_removed,
        orphan_locks_removed: collected.orphan_locks_removed,
        lru_evicted: collected.lru_evicted,
        lru_evicted_bytes: collected.lru_evicted_bytes,
        remaining_bytes: collected.remaining_bytes,
    };
    emit(args.json.as_deref(), &output, || {
        let mut text = format!(
            "removed {} corrupt entries, {} stale temp files, {} orphan lock files; evicted {} entries ({}) by size; {} remain in {}\n",
            output.corrupt_removed,
            output.stale_temps_removed,
            output.orphan_locks_removed,
            output.lru_evicted,
            format_bytes(output.lru_evicted_bytes),
            format_bytes(output.remaining_bytes),
            output.cache_dir
        );
        for path in &output.untrusted_kept {
            text.push_str(&format!("kept untrusted entry {path}: fix its permissions or delete it\n"));
        }
        text
    })
}

/// The identity the session's compiler reports on `B`.
struct IdentityOn<'a>(&'a ReferenceCompiler);

impl BackendVisitor for IdentityOn<'_> {
    type Output = CompilerIdentity;

    fn visit<B: Backend>(self) -> CompilerIdentity {
        ProgramCompiler::<B>::identity(self.0)
    }
}

/// `saggar cache key --json`.
#[derive(Debug, Serialize)]
struct KeyOutput {
    model: String,
    bucket: u64,
    backend: String,
    arch: String,
    device: Option<String>,
    key_text: String,
    key: KeyFields,
    entry_id: String,
    file_name: String,
    path: String,
    present: bool,
}

fn key(args: &CacheKeyArgs, env: &Environment) -> Result<()> {
    // `--onnx FILE`: an ONNX model's key parts; otherwise a built-in family's model.
    let onnx = args
        .model
        .onnx
        .as_deref()
        .map(|path| onnx::key_parts(&args.model, path, args.bucket, args.load_inputs.as_deref()))
        .transpose()?;
    let model = if onnx.is_none() { Some(Builtin::load(&args.model)?) } else { None };
    let (backend, arch, device) = match &args.arch {
        Some(arch) => {
            let backend = match args.backend {
                BackendArg::Host => BackendKind::Host,
                BackendArg::Cuda => BackendKind::Cuda,
                BackendArg::Hip => BackendKind::Hip,
                BackendArg::Auto => {
                    return Err(CliError::usage(
                        "--arch needs an explicit --backend (host, cuda or hip)",
                        "for example: saggar cache key --bucket 8 --backend cuda --arch sm_90",
                    ));
                }
            };
            (backend, arch.clone(), None)
        }
        None => {
            let backend = saggar_device::resolve(args.backend.choice())?;
            let ordinal = args.device.unwrap_or(0);
            let devices = saggar_device::enumerate(backend)?;
            let info = devices.get(ordinal).ok_or_else(|| {
                CliError::from(saggar_device::Error::NoSuchDevice { backend, ordinal, count: devices.len() })
            })?;
            (backend, info.arch.clone(), Some(info.name.clone()))
        }
    };
    // The key needs the compiler's identity as the session's backend reports it. Where that backend
    // is not built in (computing a HIP key in a CUDA-only build), the host's is used: saggar-models
    // has one generic ProgramCompiler impl whose identity does not depend on the backend.
    let (model_name, identity, specs, dims) = match (onnx, &model) {
        (Some(parts), _) => parts,
        (None, Some(model)) => (
            model.info().name.clone(),
            saggar_device::visit_backend(backend, IdentityOn(&model.compiler))
                .unwrap_or_else(|_| ProgramCompiler::<HostBackend>::identity(&*model.compiler)),
            model.config.input_specs(),
            model.config.input_dims(args.bucket),
        ),
        (None, None) => unreachable!("a model is loaded when --onnx is absent"),
    };
    let key = saggar_dispatch::cache_key(&identity, &specs, &dims, backend, &arch).map_err(|e| {
        CliError::usage(
            format!("cannot build a cache key for --arch `{arch}`: {e}"),
            "an architecture is a short name without control characters, such as sm_90, gfx942 or host-v1",
        )
    })?;
    let dir: PathBuf = env.cache_dir(args.cache_dir.as_deref())?;
    let file_name = format!("{}.{ENTRY_EXTENSION}", key.id());
    let path = dir.join(&file_name);
    let output = KeyOutput {
        model: model_name,
        bucket: args.bucket,
        backend: backend.name().to_string(),
        arch,
        device,
        key_text: key.canonical_text().to_string(),
        key: KeyFields::of(&key),
        entry_id: key.id().to_hex(),
        file_name,
        present: path.is_file(),
        path: path.display().to_string(),
    };
    emit(args.json.as_deref(), &output, || {
        format!(
            "{}entry id: {}\nentry file: {} ({})\n",
            output.key_text,
            output.entry_id,
            output.path,
            if output.present { "present" } else { "absent" }
        )
    })
}
