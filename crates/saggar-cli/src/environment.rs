//! Everything the CLI takes from its process environment, read once at start-up.
//!
//! This is the only place that reads environment variables (the seeds' review lists "configuration
//! read from the environment in two places" as a bug); commands receive an [`Environment`] value.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use saggar_cache::{CacheConfig, CompileCache};

use crate::error::{CliError, Result};

/// What the CLI knows about its surroundings.
#[derive(Debug, Clone)]
pub struct Environment {
    /// `$XDG_CACHE_HOME`, if set to an absolute path (the XDG rule: relative values are ignored).
    pub xdg_cache_home: Option<PathBuf>,
    /// `$HOME`, if set and non-empty.
    pub home: Option<PathBuf>,
    /// Whether stderr is a terminal (progress bars are drawn only then).
    pub stderr_is_terminal: bool,
    /// When the command started (for times to ready, which count from the start of the process).
    pub started: std::time::Instant,
}

impl Default for Environment {
    /// No cache variables, no terminal, started now.
    fn default() -> Environment {
        Environment { xdg_cache_home: None, home: None, stderr_is_terminal: false, started: std::time::Instant::now() }
    }
}

impl Environment {
    /// Reads the process environment.
    pub fn from_process() -> Environment {
        let absolute = |name: &str| std::env::var_os(name).map(PathBuf::from).filter(|p| p.is_absolute());
        Environment {
            started: std::time::Instant::now(),
            xdg_cache_home: absolute("XDG_CACHE_HOME"),
            home: std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from),
            stderr_is_terminal: std::io::stderr().is_terminal(),
        }
    }

    /// The cache directory to use: `explicit` if given, else `$XDG_CACHE_HOME/saggar`, else
    /// `$HOME/.cache/saggar`.
    pub fn cache_dir(&self, explicit: Option<&Path>) -> Result<PathBuf> {
        if let Some(dir) = explicit {
            if dir.as_os_str().is_empty() {
                return Err(CliError::usage("--cache-dir is empty", "pass a directory path"));
            }
            return Ok(dir.to_path_buf());
        }
        if let Some(xdg) = &self.xdg_cache_home {
            return Ok(xdg.join("saggar"));
        }
        if let Some(home) = &self.home {
            return Ok(home.join(".cache").join("saggar"));
        }
        Err(CliError::usage(
            "no cache directory: --cache-dir is not given and neither XDG_CACHE_HOME nor HOME is set",
            "pass --cache-dir DIR",
        ))
    }

    /// Opens (creating if needed) the compile cache of [`Environment::cache_dir`] for sessions.
    pub fn open_cache(&self, explicit: Option<&Path>) -> Result<Arc<CompileCache>> {
        let dir = self.cache_dir(explicit)?;
        Ok(Arc::new(CompileCache::open(CacheConfig::builder(&dir).build())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_prefers_the_flag_then_xdg_then_home() {
        let env =
            Environment { xdg_cache_home: Some("/xdg".into()), home: Some("/home/u".into()), ..Environment::default() };
        assert_eq!(env.cache_dir(Some(Path::new("/explicit"))).unwrap(), PathBuf::from("/explicit"));
        assert_eq!(env.cache_dir(None).unwrap(), PathBuf::from("/xdg/saggar"));
        let env = Environment { xdg_cache_home: None, ..env };
        assert_eq!(env.cache_dir(None).unwrap(), PathBuf::from("/home/u/.cache/saggar"));
        let env = Environment { home: None, ..env };
        assert_eq!(env.cache_dir(None).unwrap_err().exit_code(), crate::error::EXIT_USAGE);
        assert_eq!(env.cache_dir(Some(Path::new(""))).unwrap_err().exit_code(), crate::error::EXIT_USAGE);
    }
}
