//! The system allocator, counting what it does: the bytes it holds (`examples/store_footprint`)
//! and the allocations it makes (`benches/planner`). A measuring binary installs it with
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;` and counts only while switched on
//! (`switch(true)`): each count is an atomic read-modify-write, and the planner benchmark's
//! timings should not pay for them (they cost it about a tenth of its time).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};

pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static HELD: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ON.load(Ordering::Relaxed) {
            HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    /// Counts as one allocation.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            HELD.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Starts or stops counting. Bytes held are only right across a stretch that was counted
/// throughout: a block allocated before counting began and freed while it runs is subtracted.
pub fn switch(on: bool) {
    ON.store(on, Ordering::SeqCst);
}

/// Bytes held by the heap now (of what this allocator handed out while counting).
pub fn held() -> isize {
    HELD.load(Ordering::Relaxed)
}

/// Allocations made so far while counting.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}
