//! Values put on the heap where they are made.
//!
//! `Box::new(v)` makes `v` on the stack, then allocates and copies it.
//! Allocated first, the slot is there when the value is made, and the
//! compiler writes a struct's fields into it: the audit record (1,168
//! bytes, boxed for every request) is no longer copied. A future is still
//! made on the stack and copied however it is boxed (measured), so the
//! pipeline's is boxed with `Box::pin`.

/// `make()`'s value in a box allocated before it is made.
#[inline(always)]
pub(crate) fn boxed<T>(make: impl FnOnce() -> T) -> Box<T> {
    Box::write(Box::new_uninit(), make())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_made_is_the_value_boxed() {
        let b = boxed(|| [7u8; 5000]);
        assert!(b.iter().all(|&x| x == 7));
        assert_eq!(b.len(), 5000);
    }
}
