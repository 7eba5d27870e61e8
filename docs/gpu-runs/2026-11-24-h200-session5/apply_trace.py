import sys
def rep(s, old, new, count=1):
    assert old in s, old
    return s.replace(old, new, count)
p='crates/kiln-arena/src/gather.rs'
s=open(p).read()
s=rep(s,'/// How the host side of a gather is spread over threads, and how it stores.','''/// TEMPORARY trace points (probe build only).
#[doc(hidden)]
pub mod trace {
    use crossbeam::utils::CachePadded;
    use std::sync::atomic::{AtomicU64, Ordering};
    pub const SLOTS: usize = 64;
    pub static T: [CachePadded<AtomicU64>; SLOTS] = [const { CachePadded::new(AtomicU64::new(0)) }; SLOTS];
    #[inline(always)]
    pub fn now() -> u64 {
        // SAFETY: rdtsc has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[inline(always)]
    pub fn mark(i: usize) {
        T[i].store(now(), Ordering::Relaxed)
    }
    #[inline(always)]
    pub fn set(i: usize, v: u64) {
        T[i].store(v, Ordering::Relaxed)
    }
    pub fn snapshot() -> [u64; SLOTS] {
        std::array::from_fn(|i| T[i].load(Ordering::Relaxed))
    }
    pub fn no_prefetch() -> bool {
        static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *V.get_or_init(|| std::env::var_os("KILN_NO_PREFETCH").is_some())
    }
}

/// How the host side of a gather is spread over threads, and how it stores.''')
s=rep(s,'''        shared.publication.word.store(publication_word(epoch, parts), Ordering::SeqCst);
''','''        shared.publication.word.store(publication_word(epoch, parts), Ordering::SeqCst);
        trace::mark(3);
''')
s=rep(s,'''                claims.mine |= 1 << p;
                task(p);''','''                claims.mine |= 1 << p;
                trace::set(32 + p, 0);
                task(p);''')
s=rep(s,'''        claims.own_parts_done = Instant::now();''','''        claims.own_parts_done = Instant::now();
        trace::mark(4);''')
s=rep(s,'''        let waited = claims.finish();''','''        let waited = claims.finish();
        trace::mark(5);''')
s=rep(s,'''        let (epoch, parts) = unpack_publication(word);
''','''        let (epoch, parts) = unpack_publication(word);
        trace::mark(40 + index);
        let mut first = true;
''')
s=rep(s,'''            if !try_claim(state, epoch) {
                continue;
            }
''','''            if !try_claim(state, epoch) {
                continue;
            }
            if first {
                trace::mark(48 + index);
                first = false;
            }
            trace::set(32 + p, index as u64 + 1);
''')
open(p,'w').write(s)
p='crates/kiln-arena/src/lib.rs'
s=open(p).read()
s=rep(s,'pub use gather::{GatherOptions','pub use gather::{trace, GatherOptions')
open(p,'w').write(s)
p='crates/kiln-arena/src/arena.rs'
s=open(p).read()
s=rep(s,'''        self.wait_idle()?;
        let Arena { ctx, staging, slots, bindings, kinds, .. } = self;''','''        crate::gather::trace::mark(0);
        self.wait_idle()?;
        crate::gather::trace::mark(1);
        let Arena { ctx, staging, slots, bindings, kinds, .. } = self;''')
s=rep(s,'''        let (slots, source) = (&slots[..], &source);
''','''        let (slots, source) = (&slots[..], &source);
        crate::gather::trace::mark(2);
''')
s=rep(s,'''                let outcome = gather_part(layout, part, source, slots, streaming, true);
                part.outcome = Some(outcome);''','''                crate::gather::trace::mark(8 + part.trace_index);
                let outcome = gather_part(layout, part, source, slots, streaming, !crate::gather::trace::no_prefetch());
                part.outcome = Some(outcome);
                crate::gather::trace::mark(24 + part.trace_index);''')
s=rep(s,'''            span_end = span_end.max(CachePadded::into_inner(part).outcome.expect("every part ran")?);
        }
        Ok(span_end)''','''            span_end = span_end.max(CachePadded::into_inner(part).outcome.expect("every part ran")?);
        }
        crate::gather::trace::mark(6);
        Ok(span_end)''')
s=rep(s,'''        for (k, slot) in layout.inputs()[first..end].iter().enumerate() {''','''        crate::gather::trace::mark(16 + *trace_index);
        for (k, slot) in layout.inputs()[first..end].iter().enumerate() {''')
s=rep(s,'''    let Part { first, base, staging, bindings, kinds, .. } = part;''','''    let Part { first, base, staging, bindings, kinds, trace_index, .. } = part;''')
s=rep(s,'''    /// What gathering the part returned, once it ran on a helper.
    outcome: Option<Result<usize>>,
}''','''    /// What gathering the part returned, once it ran on a helper.
    outcome: Option<Result<usize>>,
    trace_index: usize,
}''')
s=rep(s,'''Part { first: 0, base: 0, staging, bindings, kinds, outcome: None }''','''Part { first: 0, base: 0, staging, bindings, kinds, outcome: None, trace_index: 0 }''')
s=rep(s,'''            let part = Part { first, base, staging: s_part, bindings: b_part, kinds: k_part, outcome: None };''','''            let part = Part { first, base, staging: s_part, bindings: b_part, kinds: k_part, outcome: None, trace_index: parts.len() };''')
open(p,'w').write(s)
