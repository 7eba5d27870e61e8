//! Triton's model repository layout: `DIR/<model>/<version>/model.onnx`, with an optional
//! `DIR/<model>/config.pbtxt`. Versions are whole numbers; the highest is served (Triton's default
//! version policy, `latest { num_versions: 1 }`).

use std::path::{Path, PathBuf};

use crate::error::{Result, ServeError};

/// A model folder of the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    /// The folder's name: the model's name.
    pub name: String,
    /// Versions holding a `model.onnx`, ascending, with the file's path.
    pub versions: Vec<(u64, PathBuf)>,
    /// `config.pbtxt`, if present.
    pub config: Option<PathBuf>,
}

impl ModelEntry {
    /// The version served: the highest.
    pub fn latest(&self) -> Option<&(u64, PathBuf)> {
        self.versions.last()
    }
}

/// A model repository folder.
#[derive(Debug, Clone)]
pub struct Repository {
    root: PathBuf,
}

/// Whether `name` can name a model folder: letters, digits, `_`, `-` and `.`, not `.` or `..`
/// and not starting with a `.`, so a name from a request never leaves the repository.
pub fn valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
}

impl Repository {
    /// The repository at `root`, which must be a folder.
    pub fn open(root: &Path) -> Result<Repository> {
        if !root.is_dir() {
            return Err(ServeError::NotFound(format!("model repository {}: no such folder", root.display())));
        }
        Ok(Repository { root: root.to_path_buf() })
    }

    /// Its folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every model folder, by name.
    pub fn scan(&self) -> Result<Vec<ModelEntry>> {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .map_err(|e| ServeError::Internal(format!("model repository {}: {e}", self.root.display())))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_model_name(n))
            .collect();
        names.sort();
        names.iter().map(|n| self.entry(n)).collect()
    }

    /// The model folder `name`.
    pub fn entry(&self, name: &str) -> Result<ModelEntry> {
        if !valid_model_name(name) {
            return Err(ServeError::bad(format!("`{name}` is not a model name (letters, digits, `_`, `-`, `.`)")));
        }
        let dir = self.root.join(name);
        if !dir.is_dir() {
            return Err(ServeError::NotFound(format!(
                "model `{name}` is not in the repository {}",
                self.root.display()
            )));
        }
        let mut versions: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
            .map_err(|e| ServeError::Internal(format!("model `{name}`: {e}")))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let v = e.file_name().to_str()?.parse::<u64>().ok()?;
                let file = e.path().join("model.onnx");
                file.is_file().then_some((v, file))
            })
            .collect();
        versions.sort();
        let config = Some(dir.join("config.pbtxt")).filter(|p| p.is_file());
        Ok(ModelEntry { name: name.to_string(), versions, config })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_configs_are_found() {
        let dir = tempfile::tempdir().unwrap();
        for v in ["1", "3", "notes"] {
            std::fs::create_dir_all(dir.path().join("m").join(v)).unwrap();
        }
        std::fs::write(dir.path().join("m/1/model.onnx"), b"x").unwrap();
        std::fs::write(dir.path().join("m/3/model.onnx"), b"x").unwrap();
        std::fs::write(dir.path().join("m/config.pbtxt"), b"").unwrap();
        std::fs::create_dir_all(dir.path().join(".hidden")).unwrap();
        let repo = Repository::open(dir.path()).unwrap();
        let models = repo.scan().unwrap();
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].versions.iter().map(|v| v.0).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(models[0].latest().unwrap().0, 3);
        assert!(models[0].config.is_some());
        assert!(matches!(repo.entry("none"), Err(ServeError::NotFound(_))));
        for bad in ["..", "../etc", "a/b", ".x", ""] {
            assert!(matches!(repo.entry(bad), Err(ServeError::BadRequest(_))), "{bad}");
        }
    }
}
