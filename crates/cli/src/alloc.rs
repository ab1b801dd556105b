//! The global allocator: jemalloc (the `jemalloc` feature, on by default).

/// jemalloc instead of glibc's malloc: at 1,000 VLLMServices the operator
/// needs 20 % less CPU to converge with it (8.3 s against 10.4 s; mimalloc
/// 9.1 s) for the same memory (BENCHMARKS.md, "Allocator"): a watch-driven
/// process that parses and drops many small JSON objects spends a quarter of
/// its time in malloc and free.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `_RJEM_MALLOC_CONF` (which can still
/// override them): a background thread returns freed pages to the kernel
/// within about a second (`dirty_decay_ms:1000`, `muzzy_decay_ms:0`). With the
/// defaults, pages freed after a burst of watch events stayed with the process
/// while it idled, since jemalloc purges only when it allocates: ~1 MiB at
/// 1,000 VLLMServices (BENCHMARKS.md, "Eleventh step").
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";
