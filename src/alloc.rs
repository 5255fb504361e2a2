//! mimalloc as the global allocator, asked the way the system allocator
//! glue asks malloc: a layout mimalloc's plain `mi_malloc` already aligns
//! goes to it, only the rest to `mi_malloc_aligned`.
//!
//! The `mimalloc` crate sends every layout to the aligned entry points.
//! Those find a block only for sizes up to 1 KiB; above that they measure
//! the size class and, unless it is a power of two, over-allocate by the
//! alignment and align within (callgrind: ~1,800 instructions a forwarded
//! request, for the hyper read buffer, the audit record, hash tables). A
//! block of mimalloc's is a whole number of words from a 16-byte aligned
//! page start, so any layout aligned to at most a word is aligned as it
//! comes.
//!
//! Included by `examples/stack_relay.rs` too, so the relay that stands for
//! mannerly's stack allocates as mannerly does.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// What every mimalloc block is aligned to, whatever its size.
const WORD: usize = std::mem::size_of::<usize>();

pub struct Mimalloc;

// SAFETY: mimalloc's entry points meet GlobalAlloc's contract: `mi_malloc`
// and `mi_zalloc` return word-aligned blocks of at least the size asked
// for (or null), `mi_realloc` keeps the contents up to the smaller size,
// and `mi_free` takes any block either family returned.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi::mi_malloc(layout.size()).cast() }
        } else {
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi::mi_zalloc(layout.size()).cast() }
        } else {
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast() }
        } else {
            unsafe { mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_and_alignment_comes_back_aligned_and_whole() {
        let a = Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [
                1, 3, 7, 8, 9, 15, 24, 40, 100, 1000, 1025, 1100, 5000, 70_000,
            ] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xAB, size);
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed size {size} align {align}");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    let grown = a.realloc(p, layout, size * 3);
                    assert_eq!(
                        grown as usize % align,
                        0,
                        "realloc size {size} align {align}"
                    );
                    assert!(std::slice::from_raw_parts(grown, size)
                        .iter()
                        .all(|&b| b == 0xAB));
                    a.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
