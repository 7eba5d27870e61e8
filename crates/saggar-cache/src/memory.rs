//! The memory tier and the artifact handle it shares.

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use crate::key::EntryId;

/// Compiled artifact bytes, shared without copying between the memory tier and callers.
#[derive(Clone, PartialEq, Eq)]
pub struct Artifact(Arc<Vec<u8>>);

impl Artifact {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes as an owned vector (moved out if this is the only handle, copied otherwise).
    pub fn into_vec(self) -> Vec<u8> {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl From<Vec<u8>> for Artifact {
    fn from(bytes: Vec<u8>) -> Self {
        Artifact(Arc::new(bytes))
    }
}

impl Deref for Artifact {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Artifact {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Artifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Artifact({} bytes)", self.0.len())
    }
}

#[derive(Debug)]
struct Slot {
    artifact: Artifact,
    last_used: AtomicU64,
}

/// Artifacts by entry id under a byte budget, least recently used dropped first. Hits take a
/// shared lock and bump one atomic.
#[derive(Debug)]
pub(crate) struct MemoryTier {
    budget: u64,
    slots: RwLock<HashMap<EntryId, Slot>>,
    bytes: AtomicU64,
    clock: AtomicU64,
}

impl MemoryTier {
    pub(crate) fn new(budget: u64) -> Self {
        MemoryTier { budget, slots: RwLock::new(HashMap::new()), bytes: AtomicU64::new(0), clock: AtomicU64::new(0) }
    }

    pub(crate) fn get(&self, id: EntryId) -> Option<Artifact> {
        if self.budget == 0 {
            return None;
        }
        let slots = self.slots.read();
        let slot = slots.get(&id)?;
        slot.last_used.store(self.clock.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Some(slot.artifact.clone())
    }

    pub(crate) fn insert(&self, id: EntryId, artifact: &Artifact) {
        let len = artifact.len() as u64;
        if self.budget == 0 || len > self.budget {
            return;
        }
        let mut slots = self.slots.write();
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = slots.insert(id, Slot { artifact: artifact.clone(), last_used: AtomicU64::new(now) }) {
            self.bytes.fetch_sub(old.artifact.len() as u64, Ordering::Relaxed);
        }
        let mut total = self.bytes.fetch_add(len, Ordering::Relaxed) + len;
        while total > self.budget {
            let victim = slots
                .iter()
                .filter(|(k, _)| **k != id)
                .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            let Some(victim) = victim else { break };
            if let Some(old) = slots.remove(&victim) {
                let freed = old.artifact.len() as u64;
                total -= freed;
                self.bytes.fetch_sub(freed, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn remove(&self, id: EntryId) {
        if let Some(old) = self.slots.write().remove(&id) {
            self.bytes.fetch_sub(old.artifact.len() as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn usage(&self) -> (u64, u64) {
        let n = self.slots.read().len() as u64;
        (n, self.bytes.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EntryId {
        format!("{n:02x}{}", "0".repeat(30)).parse().unwrap()
    }

    #[test]
    fn budget_drops_least_recently_used() {
        let m = MemoryTier::new(10);
        m.insert(id(1), &Artifact::from(vec![1; 4]));
        m.insert(id(2), &Artifact::from(vec![2; 4]));
        assert!(m.get(id(1)).is_some());
        m.insert(id(3), &Artifact::from(vec![3; 4]));
        assert!(m.get(id(2)).is_none(), "least recently used must go");
        assert!(m.get(id(1)).is_some());
        assert!(m.get(id(3)).is_some());
        assert_eq!(m.usage(), (2, 8));
        m.insert(id(4), &Artifact::from(vec![4; 11]));
        assert!(m.get(id(4)).is_none(), "larger than the budget: not kept");
        m.remove(id(1));
        assert_eq!(m.usage(), (1, 4));
    }

    #[test]
    fn zero_budget_disables_the_tier() {
        let m = MemoryTier::new(0);
        m.insert(id(1), &Artifact::from(vec![]));
        assert!(m.get(id(1)).is_none());
    }
}
