//! The disk store's file: its tables, and the move from the first layout.

use redb::{
    ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction,
};

use crate::responses::{entry_size, StoreError};

/// Page key → record (see `record.rs`). A page's key is the recency tick it
/// was written at, so every new page goes to the end of the tree: a commit
/// of many responses writes a few pages at its right edge, where keys by URL
/// hash put each response on a page of its own, anywhere in the file.
pub(super) const PAGES: TableDefinition<u64, &[u8]> = TableDefinition::new("pages_v2");
/// Page key and piece number (from 1) → the record's bytes after its first
/// [`PIECE`]: a record longer than a piece is written as pieces, the first
/// in [`PAGES`], the rest here.
///
/// redb gives each value larger than its 4 KiB page a page of its own whose
/// size is the next power of two: a page of 65 KiB took 128 KiB of the file,
/// zeroed and written whole and read back whole, and pages of 1-500 KiB
/// took 1.40 times their size (bench/README, "seventeenth round"). In pieces
/// that each fill a 16 KiB page, only the last piece is rounded up.
pub(super) const TAILS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("page_tails_v1");
/// The size of a piece: a 16 KiB page less what redb's leaf holds beside
/// one value (a 4-byte header, a 4-byte end offset and the 12-byte key of
/// [`TAILS`]; [`PAGES`]' key is 4 bytes shorter).
pub(super) const PIECE: usize = 16 * 1024 - 20;

/// Whether the first piece `first` of a record may be followed by pieces in
/// [`TAILS`]: only a first piece of exactly [`PIECE`] bytes is. A record
/// written whole before (any length) is never one, unless exactly that long,
/// and then [`TAILS`] has nothing for it.
pub(super) fn has_tails(first: &[u8]) -> bool {
    first.len() == PIECE
}

/// The range of [`TAILS`] rows that follow page `seq`'s first piece.
pub(super) fn tails_of(seq: u64) -> std::ops::RangeInclusive<(u64, u32)> {
    (seq, 1)..=(seq, u32::MAX)
}

/// Page `seq`'s record: its first piece `first` and the pieces that follow
/// it in `txn`, in one buffer the decoded body can be a slice of.
pub(super) fn whole_record(
    txn: &ReadTransaction,
    seq: u64,
    first: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let tails = txn.open_table(TAILS)?;
    let pieces = tails.range(tails_of(seq))?.collect::<Result<Vec<_>, _>>()?;
    let len = first.len() + pieces.iter().map(|(_, p)| p.value().len()).sum::<usize>();
    let mut whole = Vec::with_capacity(len);
    whole.extend_from_slice(first);
    for (_, piece) in &pieces {
        whole.extend_from_slice(piece.value());
    }
    Ok(whole)
}

/// Page key → (variant key, size): rebuilds the index on open without
/// reading any body.
pub(super) const SEQS: TableDefinition<u64, (&str, u64)> = TableDefinition::new("seqs_v2");
/// Page key → tick of the page's latest read, for pages read since they
/// were written: recency survives a restart. Keyed by page, the rows of a
/// re-crawl's reads (pages read in the order they were written) land next
/// to each other; keyed by variant (`reads_v2`), each landed on a leaf of
/// its own, and committing 146,000 of them rewrote most of the table.
pub(super) const READS: TableDefinition<u64, u64> = TableDefinition::new("reads_v3");
/// The reads of the layout before: variant key → (tick, size). Moved to
/// [`READS`] when a store written by it is opened.
const READS_V2: TableDefinition<&str, (u64, u64)> = TableDefinition::new("reads_v2");
/// Primary key → JSON list of the `Vary` names of its variants. No row: the
/// URL's response has no `Vary` (its one variant is keyed by the URL alone).
pub(super) const VARY: TableDefinition<&str, &str> = TableDefinition::new("vary_v1");
/// The `Vary` list of a response without `Vary`, as JSON.
pub(super) const NO_VARY: &str = "[]";
/// The first layout: variant key → record, and variant key → (tick, size).
/// Moved to the tables above when a store written by it is opened.
const ENTRIES_V1: TableDefinition<&str, &[u8]> = TableDefinition::new("responses_v1");
const ACCESS_V1: TableDefinition<&str, (u64, u64)> = TableDefinition::new("access_v1");
/// Host → opaque budget record.
pub(super) const HOSTS: TableDefinition<&str, &[u8]> = TableDefinition::new("host_records_v1");

/// Creates the tables a new file lacks and moves a file of the first layout
/// to this one, in `txn`.
pub(super) fn prepare(txn: &WriteTransaction) -> Result<(), StoreError> {
    txn.open_table(PAGES)?;
    txn.open_table(TAILS)?;
    txn.open_table(SEQS)?;
    txn.open_table(READS)?;
    txn.open_table(VARY)?;
    txn.open_table(HOSTS)?;
    migrate_v1(txn)?;
    migrate_reads_v2(txn)
}

/// Moves the read rows of a store written before they were keyed by page,
/// in the transaction that opens it, and drops the old table. A row whose
/// variant has no page any more is left behind.
fn migrate_reads_v2(txn: &WriteTransaction) -> Result<(), StoreError> {
    let moved = {
        let old = txn.open_table(READS_V2)?;
        if old.is_empty()? {
            0
        } else {
            let seqs = txn.open_table(SEQS)?;
            let mut page_of = std::collections::HashMap::new();
            for row in seqs.iter()? {
                let (seq, value) = row?;
                page_of.insert(value.value().0.to_owned(), seq.value());
            }
            let mut reads = txn.open_table(READS)?;
            let mut moved = 0u64;
            for row in old.iter()? {
                let (variant, value) = row?;
                if let Some(&seq) = page_of.get(variant.value()) {
                    reads.insert(seq, value.value().0)?;
                    moved += 1;
                }
            }
            moved
        }
    };
    txn.delete_table(READS_V2)?;
    if moved > 0 {
        tracing::info!("response store: {moved} read ticks moved to rows keyed by page");
    }
    Ok(())
}

/// Moves the entries of a store written in the first layout (keyed by
/// variant) to pages keyed by recency, in the transaction that opens the
/// store (a crash leaves the old layout whole), and drops the old tables.
fn migrate_v1(txn: &WriteTransaction) -> Result<(), StoreError> {
    let moved = {
        let entries = txn.open_table(ENTRIES_V1)?;
        let access = txn.open_table(ACCESS_V1)?;
        let mut pages = txn.open_table(PAGES)?;
        let mut seqs = txn.open_table(SEQS)?;
        // Entries without a tick come first (least recent), then the rest
        // in the order of their ticks (all at least 1).
        let mut unticked = 0;
        for row in entries.iter()? {
            if access.get(row?.0.value())?.is_none() {
                unticked += 1;
            }
        }
        let mut next_unticked = 0;
        let mut moved = 0u64;
        for row in entries.iter()? {
            let (variant, bytes) = row?;
            let (variant, bytes) = (variant.value(), bytes.value());
            let seq = match access.get(variant)? {
                Some(a) => a.value().0 + unticked,
                None => {
                    next_unticked += 1;
                    next_unticked
                }
            };
            pages.insert(seq, bytes)?;
            seqs.insert(seq, (variant, entry_size(variant, bytes.len())))?;
            moved += 1;
        }
        moved
    };
    txn.delete_table(ENTRIES_V1)?;
    txn.delete_table(ACCESS_V1)?;
    if moved > 0 {
        tracing::info!("response store: {moved} entries moved to the page-keyed layout");
    }
    Ok(())
}
