//! The allocator the `manus-rt` binary runs on, mimalloc, and its settings. glibc's malloc
//! spent about a third of the runtime's CPU under many concurrent flows (benches/many_flows);
//! mimalloc cuts the CPU per agent step by about 40 %. Embedders may use the same, with one
//! line at the top level of their binary:
//!
//! ```ignore
//! manus_rt::use_mimalloc!();
//! ```

pub use mimalloc::MiMalloc as Allocator;

/// `mi_option_arena_eager_commit`: its place in mimalloc 3's `mi_option_e` (the crate's
/// bindings do not name it).
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Commit arena memory as it is used, not up front: by default mimalloc commits its arenas
/// eagerly where the OS overcommits, which took a small flow's peak RSS from 14 to 39 MB
/// (benches/flow_footprint); lazily it stays under 25 MB. It applies to arenas made after
/// it, so `use_mimalloc!` calls it from the process's initialisers, before `main`.
pub extern "C" fn configure() {
    // SAFETY: setting an option is a plain store into mimalloc's option table.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) }
}

/// Make mimalloc, configured, the binary's global allocator. The settings are applied by an
/// `.init_array` entry, which runs before the standard library's start-up allocates.
#[macro_export]
macro_rules! use_mimalloc {
    () => {
        #[global_allocator]
        static MANUS_ALLOCATOR: $crate::allocator::Allocator = $crate::allocator::Allocator;

        #[cfg(target_os = "linux")]
        #[used]
        #[unsafe(link_section = ".init_array")]
        static MANUS_ALLOCATOR_SETUP: extern "C" fn() = $crate::allocator::configure;
    };
}
