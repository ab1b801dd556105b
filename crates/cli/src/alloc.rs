//! The global allocator: jemalloc (the `jemalloc` feature, on by default).
//!
//! The operator is watch-driven: it parses and drops many small JSON objects,
//! so malloc and free are a large share of its CPU. jemalloc's thread caches
//! and size classes make them cheaper than glibc's malloc does, for the same
//! memory. Without the feature the binary uses the system allocator, which
//! heap profilers that hook malloc (heaptrack) can see.
//!
//! No I/O of its own; jemalloc's background thread returns freed pages to the
//! kernel (`JEMALLOC_CONF`).

/// jemalloc instead of the system allocator.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `_RJEM_MALLOC_CONF` (which can still
/// override them): a background thread returns freed pages to the kernel
/// within about a second (`dirty_decay_ms:1000`, `muzzy_decay_ms:0`). With the
/// defaults, pages freed after a burst of watch events stayed with the process
/// while it idled, since jemalloc purges only when it allocates.
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";
