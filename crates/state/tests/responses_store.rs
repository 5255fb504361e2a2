//! Both response stores, through the trait the proxy uses; the disk store
//! also across a reopen and with a damaged record.

// The disk store's writer runs on the system's monotonic clock here.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use mannerly_policy::conditional::http::{request, response, HeaderMap, Method, Request, Response};
use mannerly_policy::conditional::{storable, CacheEntryMeta, CacheKey, CacheParams, CacheSync};
use mannerly_state::responses::{
    DiskOptions, DiskStore, MemoryStore, PutOutcome, ResponseStore, StoreError, StoreLimits,
};
use mannerly_test_support::poll::poll_until;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableHandle};

/// The disk store's table of records, as its tests read and damage it.
const PAGES: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("pages_v2");
/// Page key -> (variant, size), as the tests read it.
const SEQS: redb::TableDefinition<u64, (&str, u64)> = redb::TableDefinition::new("seqs_v2");
/// Page key -> tick of its latest read.
const READS: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("reads_v3");

/// The disk store at `path`, its writer on the system's monotonic clock.
fn open(path: impl AsRef<Path>, limits: StoreLimits) -> Result<DiskStore, StoreError> {
    DiskStore::open(path, limits, Instant::now)
}

/// [`open`] with `options`.
fn open_with(
    path: impl AsRef<Path>,
    limits: StoreLimits,
    options: DiskOptions,
) -> Result<DiskStore, StoreError> {
    DiskStore::open_with(path, limits, options, Instant::now)
}

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn req(headers: &[(&str, &str)]) -> request::Parts {
    let mut b = Request::builder().method(Method::GET).uri("/");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

fn headers(h: &[(&str, &str)]) -> HeaderMap {
    req(h).headers
}

fn key(path: &str) -> CacheKey {
    CacheKey::new(&Method::GET, &format!("https://example.com{path}")).unwrap()
}

/// The meta the policy would produce for `path` answered with `etag`.
fn meta(path: &str, req_h: &[(&str, &str)], resp_h: &[(&str, &str)]) -> CacheEntryMeta {
    let mut b = Response::builder().status(200);
    for (k, v) in resp_h {
        b = b.header(*k, *v);
    }
    let resp: response::Parts = b.body(()).unwrap().into_parts().0;
    storable(
        &req(req_h),
        &key(path),
        &resp,
        &CacheParams::default(),
        t0(),
    )
    .unwrap()
}

fn limits(max_body: u64, max_size: u64) -> StoreLimits {
    StoreLimits { max_body, max_size }
}

fn body_of(store: &dyn ResponseStore, path: &str, h: &[(&str, &str)]) -> Option<Vec<u8>> {
    store
        .get(&key(path), &headers(h))
        .unwrap()
        .map(|r| r.body.to_vec())
}

/// Every behaviour both backends must share.
fn common(store: &dyn ResponseStore) {
    // Miss, then stored exactly as received (gzip bytes stay gzip bytes).
    assert!(body_of(store, "/a", &[]).is_none());
    let gz = meta(
        "/a",
        &[],
        &[("etag", "\"v1\""), ("content-encoding", "gzip")],
    );
    let raw = vec![0x1f, 0x8b, 8, 0, 1, 2, 3];
    assert_eq!(
        store.put(&gz, &raw).unwrap(),
        PutOutcome::Stored { evicted: 0 }
    );
    let got = store.get(&key("/a"), &HeaderMap::new()).unwrap().unwrap();
    assert_eq!(got.body, raw);
    assert_eq!(got.meta.etag(), Some("\"v1\""));

    // A changed page replaces the stored one.
    let v2 = meta("/a", &[], &[("etag", "\"v2\"")]);
    store.put(&v2, b"new page").unwrap();
    let got = store.get(&key("/a"), &HeaderMap::new()).unwrap().unwrap();
    assert_eq!(
        (&got.body[..], got.meta.etag()),
        (&b"new page"[..], Some("\"v2\""))
    );
    assert_eq!(store.stats().entries, 1);

    // Vary: one entry per variant; a request selects its own.
    let ae = |v| {
        meta(
            "/v",
            &[("accept-encoding", v)],
            &[("etag", "\"x\""), ("vary", "Accept-Encoding")],
        )
    };
    store.put(&ae("gzip"), b"gzipped").unwrap();
    store.put(&ae("identity"), b"plain").unwrap();
    assert_eq!(
        body_of(store, "/v", &[("accept-encoding", "gzip")]).unwrap(),
        b"gzipped"
    );
    assert_eq!(
        body_of(store, "/v", &[("accept-encoding", "identity")]).unwrap(),
        b"plain"
    );
    assert!(body_of(store, "/v", &[("accept-encoding", "br")]).is_none());
    // When the origin starts varying on something else, old variants go.
    let custom = meta(
        "/v",
        &[("x-lang", "de")],
        &[("etag", "\"de\""), ("vary", "X-Lang")],
    );
    store.put(&custom, b"deutsch").unwrap();
    assert!(body_of(store, "/v", &[("accept-encoding", "gzip")]).is_none());
    assert_eq!(
        body_of(store, "/v", &[("x-lang", "de")]).unwrap(),
        b"deutsch"
    );
    assert!(body_of(store, "/v", &[("x-lang", "fr")]).is_none());
    assert_eq!(store.stats().entries, 2);
    // ...and when it stops varying, and starts again.
    store
        .put(
            &meta(
                "/w",
                &[("x-lang", "de")],
                &[("etag", "\"w\""), ("vary", "X-Lang")],
            ),
            b"de",
        )
        .unwrap();
    store
        .put(&meta("/w", &[], &[("etag", "\"w2\"")]), b"any")
        .unwrap();
    assert_eq!(body_of(store, "/w", &[("x-lang", "de")]).unwrap(), b"any");
    assert_eq!(body_of(store, "/w", &[]).unwrap(), b"any");
    assert_eq!(store.stats().entries, 3);
    store
        .put(
            &meta(
                "/w",
                &[("x-lang", "fr")],
                &[("etag", "\"w3\""), ("vary", "X-Lang")],
            ),
            b"fr",
        )
        .unwrap();
    assert!(body_of(store, "/w", &[]).is_none());
    assert_eq!(body_of(store, "/w", &[("x-lang", "fr")]).unwrap(), b"fr");
    assert_eq!(store.stats().entries, 3);
    store.remove(&key("/w")).unwrap();
    assert_eq!(store.stats().entries, 2);

    // A body cut short (or padded) against its Content-Length is never stored.
    let cl = meta("/cl", &[], &[("etag", "\"c\""), ("content-length", "10")]);
    assert_eq!(
        store.put(&cl, b"short").unwrap(),
        PutOutcome::LengthMismatch
    );
    assert_eq!(
        store.put(&cl, b"0123456789").unwrap(),
        PutOutcome::Stored { evicted: 0 }
    );

    // remove drops every variant of a URL.
    assert_eq!(store.remove(&key("/v")).unwrap(), 1);
    assert!(body_of(store, "/v", &[("x-lang", "de")]).is_none());

    // Host records: opaque bytes per host.
    store
        .put_host_record("b.example", b"{\"pause\":1}")
        .unwrap();
    store.put_host_record("a.example", b"one").unwrap();
    store.put_host_record("a.example", b"two").unwrap();
    assert_eq!(
        store.host_records().unwrap(),
        vec![
            ("a.example".to_string(), b"two".to_vec()),
            ("b.example".to_string(), b"{\"pause\":1}".to_vec())
        ]
    );
    store.remove_host_record("b.example").unwrap();
    store.remove_host_record("never.example").unwrap();
    assert_eq!(store.host_records().unwrap().len(), 1);
}

fn size_caps(store: &dyn ResponseStore) {
    // Bodies above max_body are not stored.
    let big = meta("/big", &[], &[("etag", "\"b\"")]);
    assert_eq!(store.put(&big, &[0u8; 1025]).unwrap(), PutOutcome::TooLarge);
    assert!(body_of(store, "/big", &[]).is_none());
    // Fill to the cap; the least recently *read* entry is evicted first.
    let body = [7u8; 1000];
    for p in ["/1", "/2", "/3"] {
        assert_eq!(
            store
                .put(&meta(p, &[], &[("etag", "\"e\"")]), &body)
                .unwrap(),
            PutOutcome::Stored { evicted: 0 }
        );
    }
    assert!(body_of(store, "/1", &[]).is_some());
    let out = store
        .put(&meta("/4", &[], &[("etag", "\"e\"")]), &body)
        .unwrap();
    assert_eq!(out, PutOutcome::Stored { evicted: 1 });
    assert!(
        body_of(store, "/2", &[]).is_none(),
        "least recently used went"
    );
    for p in ["/1", "/3", "/4"] {
        assert!(body_of(store, p, &[]).is_some(), "{p}");
    }
    let stats = store.stats();
    assert_eq!((stats.entries, stats.evicted), (3, 1));
    assert!(stats.bytes <= cap().max_size);
}

/// Limits under which three of `size_caps`'s entries fit and four do not.
fn cap() -> StoreLimits {
    let probe = MemoryStore::new(limits(1 << 20, 1 << 30));
    probe
        .put(&meta("/0", &[], &[("etag", "\"e\"")]), &[0u8; 1000])
        .unwrap();
    let one = probe.stats().bytes;
    limits(1024, 3 * one + one / 2)
}

#[test]
fn memory_store_behaves() {
    common(&MemoryStore::new(limits(1 << 20, 1 << 30)));
    size_caps(&MemoryStore::new(cap()));
}

#[test]
fn disk_store_behaves() {
    let dir = tempfile::tempdir().unwrap();
    common(&open(dir.path().join("a.redb"), limits(1 << 20, 1 << 30)).unwrap());
    size_caps(&open(dir.path().join("b.redb"), cap()).unwrap());
}

fn put_pages(store: &DiskStore, paths: &[&str], body: &[u8]) {
    for p in paths {
        store
            .put(&meta(p, &[], &[("etag", "\"e\"")]), body)
            .unwrap();
    }
}

#[test]
fn reopen_keeps_entries_records_and_recency() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let body = [1u8; 1000];
    {
        let store = open(&path, cap()).unwrap();
        put_pages(&store, &["/1", "/2", "/3"], &body);
        store.put_host_record("slow.example", b"paused").unwrap();
        // A read, committed by the time the store has closed.
        assert!(body_of(&store, "/1", &[]).is_some());
        store.put_host_record("x", b"y").unwrap();
        store
            .put(&meta("/3", &[], &[("etag", "\"e2\"")]), &body)
            .unwrap();
    }
    let store = open(&path, cap()).unwrap();
    let got = store.get(&key("/3"), &HeaderMap::new()).unwrap().unwrap();
    assert_eq!(got.meta.etag(), Some("\"e2\""));
    assert_eq!(got.body[..], body);
    assert_eq!(store.stats().entries, 3);
    assert!(store
        .host_records()
        .unwrap()
        .contains(&("slow.example".into(), b"paused".to_vec())));
    // Recency survived: /2 is the oldest now, so it goes first.
    store
        .put(&meta("/4", &[], &[("etag", "\"e\"")]), &body)
        .unwrap();
    assert!(body_of(&store, "/2", &[]).is_none());
    assert!(body_of(&store, "/1", &[]).is_some());
}

/// Reads that no write follows reach the disk on their own once they
/// pause: a long spell of reads is not left for one write to carry.
#[test]
fn reads_reach_the_disk_without_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let body = [1u8; 1000];
    {
        let store = open(&path, cap()).unwrap();
        put_pages(&store, &["/1", "/2", "/3"], &body);
        let stats = store.stats();
        assert!(body_of(&store, "/1", &[]).is_some());
        poll_until(
            "the read is committed",
            Duration::from_secs(30),
            Duration::from_millis(5),
            || store.stats().read_commits > stats.read_commits,
        );
        assert_eq!(store.stats().commits, stats.commits, "no page was written");
    }
    // /1 was read after /2 and /3 were written: /2 is the oldest now.
    the_read_page_outlives_a_fourth(&path, &body);
}

/// A store whose read ticks are keyed by variant (`reads_v2`) opens with
/// them keyed by page, recency kept; a tick of a variant with no page is
/// dropped, and the old table goes.
#[test]
fn read_ticks_keyed_by_variant_are_moved_on_open() {
    const READS_V2: redb::TableDefinition<&str, (u64, u64)> =
        redb::TableDefinition::new("reads_v2");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let body = [1u8; 1000];
    {
        let store = open(&path, cap()).unwrap();
        put_pages(&store, &["/1", "/2", "/3"], &body);
    }
    // As the layout before wrote it: /1 read after the others were written.
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let seqs = txn.open_table(SEQS).unwrap();
            let last = seqs.last().unwrap().unwrap().0.value();
            let first = key("/1").as_str().to_owned();
            let variant = seqs
                .iter()
                .unwrap()
                .map(|row| row.unwrap().1.value().0.to_owned())
                .find(|v| v.starts_with(&first))
                .unwrap();
            let mut old = txn.open_table(READS_V2).unwrap();
            old.insert(variant.as_str(), (last + 1, 1000)).unwrap();
            let gone = variant.replace("/1", "/gone");
            old.insert(gone.as_str(), (last + 2, 1000)).unwrap();
        }
        assert!(txn.delete_table(READS).unwrap());
        txn.commit().unwrap();
    }
    {
        let store = open(&path, cap()).unwrap();
        assert_eq!(store.stats().entries, 3);
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_read().unwrap();
        let names: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_string())
            .collect();
        assert!(!names.iter().any(|n| n == "reads_v2"), "{names:?}");
        assert_eq!(txn.open_table(READS).unwrap().len().unwrap(), 1);
    }
    // /1's read survived the move: /2 is the oldest now.
    the_read_page_outlives_a_fourth(&path, &body);
}

/// Opens the store at `path` (pages /1 to /3, /1 read after the others were
/// written) and stores a fourth: /2, the least recent, goes; /1 stays.
fn the_read_page_outlives_a_fourth(path: &Path, body: &[u8]) {
    let store = open(path, cap()).unwrap();
    store
        .put(&meta("/4", &[], &[("etag", "\"e\"")]), body)
        .unwrap();
    assert!(body_of(&store, "/2", &[]).is_none());
    assert!(body_of(&store, "/1", &[]).is_some());
}

/// A store written in the first layout (records keyed by variant, ticks
/// beside them) opens with its entries and their recency; an entry that had
/// no tick counts as the least recent.
#[test]
fn a_store_in_the_first_layout_is_moved_on_open() {
    const ENTRIES_V1: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new("responses_v1");
    const ACCESS_V1: redb::TableDefinition<&str, (u64, u64)> =
        redb::TableDefinition::new("access_v1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let body = [1u8; 1000];
    {
        let store = open(&path, cap()).unwrap();
        put_pages(&store, &["/1", "/2", "/3"], &body);
        assert!(body_of(&store, "/1", &[]).is_some());
        store.put_host_record("x", b"y").unwrap();
    }
    // Rewrite it as the first layout wrote it: /2 oldest, then /3, then /1
    // (read last); /3 loses its tick.
    let third = key("/3").as_str().to_owned();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let pages = txn.open_table(PAGES).unwrap();
            let seqs = txn.open_table(SEQS).unwrap();
            let reads = txn.open_table(READS).unwrap();
            let mut entries = txn.open_table(ENTRIES_V1).unwrap();
            let mut access = txn.open_table(ACCESS_V1).unwrap();
            for row in seqs.iter().unwrap() {
                let (seq, value) = row.unwrap();
                let (variant, size) = value.value();
                let page = pages.get(seq.value()).unwrap().unwrap();
                entries.insert(variant, page.value()).unwrap();
                let read = reads.get(seq.value()).unwrap().map(|r| r.value());
                if !variant.starts_with(&third) {
                    let tick = read.unwrap_or(0).max(seq.value());
                    access.insert(variant, (tick, size)).unwrap();
                }
            }
        }
        for name in ["pages_v2", "seqs_v2", "reads_v3"] {
            assert!(txn
                .delete_table(redb::TableDefinition::<u64, &[u8]>::new(name))
                .unwrap());
        }
        txn.commit().unwrap();
    }
    {
        let store = open(&path, cap()).unwrap();
        assert_eq!(store.stats().entries, 3);
        // Not /3: the store commits these reads as it closes, and /3 must
        // keep the no tick it was moved with.
        for p in ["/1", "/2"] {
            assert_eq!(body_of(&store, p, &[]).unwrap(), body, "{p}");
        }
        assert!(store
            .host_records()
            .unwrap()
            .contains(&("x".into(), b"y".to_vec())));
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let names: Vec<String> = db
            .begin_read()
            .unwrap()
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_string())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n == "responses_v1" || n == "access_v1"),
            "{names:?}"
        );
    }
    // /3 (no tick) goes first.
    let store = open(&path, cap()).unwrap();
    store
        .put(&meta("/4", &[], &[("etag", "\"e\"")]), &body)
        .unwrap();
    assert!(
        body_of(&store, "/3", &[]).is_none(),
        "no tick: least recent"
    );
    assert!(body_of(&store, "/2", &[]).is_some());
    assert!(body_of(&store, "/1", &[]).is_some());
}

#[test]
fn a_damaged_entry_is_a_miss_and_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let m = meta("/page", &[], &[("etag", "\"v1\"")]);
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        store.put(&m, b"the page body").unwrap();
        store
            .put(&meta("/other", &[], &[("etag", "\"o\"")]), b"fine")
            .unwrap();
    }
    // Flip one body byte behind the store's back.
    rewrite_record(&path, m.key().as_str(), |mut bytes| {
        let at = bytes.len() - 40;
        bytes[at] ^= 0xff;
        bytes
    });
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    assert!(store
        .get(&key("/page"), &HeaderMap::new())
        .unwrap()
        .is_none());
    let stats = store.stats();
    assert_eq!((stats.corrupt_removed, stats.entries), (1, 1));
    assert!(store
        .get(&key("/page"), &HeaderMap::new())
        .unwrap()
        .is_none());
    assert_eq!(store.stats().corrupt_removed, 1, "removed, not found again");
    assert_eq!(body_of(&store, "/other", &[]).unwrap(), b"fine");
    // The slot is usable again.
    store.put(&m, b"the page body").unwrap();
    assert_eq!(body_of(&store, "/page", &[]).unwrap(), b"the page body");
}

/// A store file written before records were checksummed with CRC-32
/// (`MNR2`, SHA-256) is read by this build: the page is there after the
/// upgrade, not dropped as damaged.
#[test]
fn a_page_stored_with_a_sha256_sum_before_is_read_after_the_upgrade() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let m = meta("/page", &[], &[("etag", "\"v1\"")]);
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        store.put(&m, b"the page body").unwrap();
    }
    let rows = rewrite_record(&path, m.key().as_str(), |record| {
        assert_eq!(&record[..4], b"MNR3");
        // The same record as the build before wrote it.
        let mut old = b"MNR2".to_vec();
        old.extend_from_slice(&record[4..record.len() - 4]);
        let sum = Sha256::digest(&old);
        old.extend_from_slice(&sum);
        old
    });
    assert_eq!(rows, 1);
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    assert_eq!(body_of(&store, "/page", &[]).unwrap(), b"the page body");
    assert_eq!(store.stats().corrupt_removed, 0);
}

/// Rewrites, behind the store's back, the record in the file at `path`
/// that holds `url` with what `edit` makes of it. Returns how many records
/// the file holds.
fn rewrite_record(path: &Path, url: &str, edit: impl FnOnce(Vec<u8>) -> Vec<u8>) -> usize {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    let rows = {
        let mut table = txn.open_table(PAGES).unwrap();
        let rows: Vec<(u64, Vec<u8>)> = table
            .iter()
            .unwrap()
            .map(|row| row.unwrap())
            .map(|(k, v)| (k.value(), v.value().to_vec()))
            .collect();
        let (seq, record) = rows
            .iter()
            .find(|(_, v)| v.windows(url.len()).any(|w| w == url.as_bytes()))
            .expect("the page's record");
        table.insert(*seq, edit(record.clone()).as_slice()).unwrap();
        rows.len()
    };
    txn.commit().unwrap();
    rows
}

#[test]
fn a_torn_record_in_memory_is_a_miss_too() {
    let store = MemoryStore::new(limits(1 << 20, 1 << 30));
    let m = meta("/page", &[], &[("etag", "\"v1\"")]);
    store.put(&m, b"body").unwrap();
    store
        .overwrite_raw(m.variant(), b"MNR1\x05\x00\x00\x00{\"ke".to_vec())
        .unwrap();
    assert!(body_of(&store, "/page", &[]).is_none());
    assert_eq!(store.stats().corrupt_removed, 1);
    assert_eq!(store.stats().entries, 0);
}

fn opts(memory_size: u64, sync: CacheSync) -> DiskOptions {
    DiskOptions { memory_size, sync }
}

/// Waits for a `put_then` outcome delivered on the writer's thread.
fn put_later(
    store: &DiskStore,
    m: CacheEntryMeta,
    body: &'static [u8],
) -> mpsc::Receiver<Result<PutOutcome, StoreError>> {
    let (tx, rx) = mpsc::channel();
    store.put_then(
        m,
        Bytes::from_static(body),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx
}

#[test]
fn writes_queued_during_a_commit_share_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path().join("s.redb"), limits(1 << 20, 1 << 30)).unwrap();
    let before = store.stats().commits;
    let hold = store.hold_writer();
    let waits: Vec<_> = (0..100)
        .map(|i| {
            put_later(
                &store,
                meta(&format!("/p{i}"), &[], &[("etag", "\"e\"")]),
                b"page",
            )
        })
        .collect();
    // Nothing is reported before the commit.
    assert!(waits[0].try_recv().is_err());
    drop(hold);
    for w in waits {
        assert_eq!(
            w.recv().unwrap().unwrap(),
            PutOutcome::Stored { evicted: 0 }
        );
    }
    assert_eq!(
        store.stats().commits,
        before + 1,
        "one transaction for 100 pages"
    );
    assert_eq!(store.stats().entries, 100);
    // A lone write is committed by itself, waiting for no one.
    store
        .put(&meta("/lone", &[], &[("etag", "\"e\"")]), b"x")
        .unwrap();
    assert_eq!(store.stats().commits, before + 2);
}

#[test]
fn misses_and_entries_read_since_written_are_answered_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let gz = [("accept-encoding", "gzip")];
    let m = meta("/v", &gz, &[("etag", "\"x\""), ("vary", "Accept-Encoding")]);
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        // Nothing stored for the URL: memory says so.
        assert!(matches!(
            store.get_resident(&key("/v"), &headers(&gz)),
            Some(Ok(None))
        ));
        store.put(&m, b"gzipped").unwrap();
        // Written, not read since: the disk must tell, twice, and then it
        // is held.
        for _ in 0..2 {
            assert!(store.get_resident(&key("/v"), &headers(&gz)).is_none());
            assert_eq!(body_of(&store, "/v", &gz).unwrap(), b"gzipped");
        }
        let got = store.get_resident(&key("/v"), &headers(&gz));
        assert_eq!(&got.unwrap().unwrap().unwrap().body[..], b"gzipped");
        // Written again while held: the copy held is the new one.
        store.put(&m, b"gzipped2").unwrap();
        let got = store.get_resident(&key("/v"), &headers(&gz));
        assert_eq!(&got.unwrap().unwrap().unwrap().body[..], b"gzipped2");
        // Another variant of a stored URL: memory cannot tell.
        assert!(store
            .get_resident(&key("/v"), &headers(&[("accept-encoding", "br")]))
            .is_none());
        assert!(store.stats().resident_bytes > 0);
    }
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    assert_eq!(store.stats().resident_bytes, 0);
    assert!(matches!(
        store.get_resident(&key("/other"), &HeaderMap::new()),
        Some(Ok(None))
    ));
    // Stored, not yet read since the start: the disk must tell. Read after
    // its last write (the store commits reads as it closes): held from its
    // first read.
    assert!(store.get_resident(&key("/v"), &headers(&gz)).is_none());
    assert_eq!(body_of(&store, "/v", &gz).unwrap(), b"gzipped2");
    let got = store.get_resident(&key("/v"), &headers(&gz));
    assert_eq!(&got.unwrap().unwrap().unwrap().body[..], b"gzipped2");
    // Removed: memory knows it is gone.
    store.remove(&key("/v")).unwrap();
    assert!(matches!(
        store.get_resident(&key("/v"), &headers(&gz)),
        Some(Ok(None))
    ));
}

#[test]
fn a_page_read_before_a_restart_is_held_from_its_first_read_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        store
            .put(&meta("/read", &[], &[("etag", "\"r\"")]), b"read")
            .unwrap();
        store
            .put(&meta("/unread", &[], &[("etag", "\"u\"")]), b"unread")
            .unwrap();
        assert_eq!(body_of(&store, "/read", &[]).unwrap(), b"read");
        // A write after the read, which the read's row outlives.
        store
            .put(&meta("/later", &[], &[("etag", "\"l\"")]), b"later")
            .unwrap();
    }
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    assert_eq!(body_of(&store, "/read", &[]).unwrap(), b"read");
    assert_eq!(body_of(&store, "/unread", &[]).unwrap(), b"unread");
    assert!(store
        .get_resident(&key("/read"), &HeaderMap::new())
        .is_some());
    assert!(store
        .get_resident(&key("/unread"), &HeaderMap::new())
        .is_none());
}

#[test]
fn a_page_written_back_after_a_read_is_held_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path().join("s.redb"), limits(1 << 20, 1 << 30)).unwrap();
    let m = meta("/w", &[], &[("etag", "\"w\"")]);
    store.put(&m, b"v1").unwrap();
    assert_eq!(body_of(&store, "/w", &[]).unwrap(), b"v1");
    assert!(store.get_resident(&key("/w"), &HeaderMap::new()).is_none());
    // A revalidation changed what is stored: the page was read since its
    // write, so the copy written back is held (a reader in the write's
    // commit window finds it in memory, not the older page on disk).
    store.put(&m, b"v2").unwrap();
    let got = store.get_resident(&key("/w"), &HeaderMap::new());
    assert_eq!(&got.unwrap().unwrap().unwrap().body[..], b"v2");
    // Written again without a read in between: not a write-back, not held.
    let n = meta("/n", &[], &[("etag", "\"n\"")]);
    store.put(&n, b"n1").unwrap();
    store.put(&n, b"n2").unwrap();
    assert!(store.get_resident(&key("/n"), &HeaderMap::new()).is_none());
}

/// Between a batch's record in the index and its commit, a reader finds
/// what the last commit holds: the page being replaced, not a miss (a
/// crawler asking again at once got the page fetched in full).
#[test]
fn a_reader_in_a_commits_window_finds_the_committed_page() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path().join("s.redb"), limits(1 << 20, 1 << 30)).unwrap();
    let m = meta("/c", &[], &[("etag", "\"c\"")]);
    store.put(&m, b"v1").unwrap();
    let writer = store.hold_writer();
    let commit = store.hold_commit();
    let rewrite = put_later(&store, m, b"v2");
    let new = put_later(&store, meta("/new", &[], &[("etag", "\"n\"")]), b"n");
    drop(writer);
    commit.reached();
    // Written again without a read: nothing is held, the disk answers.
    assert!(store.get_resident(&key("/c"), &HeaderMap::new()).is_none());
    assert_eq!(body_of(&store, "/c", &[]).unwrap(), b"v1");
    assert!(body_of(&store, "/new", &[]).is_none(), "not committed yet");
    drop(commit);
    assert_eq!(
        rewrite.recv().unwrap().unwrap(),
        PutOutcome::Stored { evicted: 0 }
    );
    assert_eq!(
        new.recv().unwrap().unwrap(),
        PutOutcome::Stored { evicted: 0 }
    );
    assert_eq!(body_of(&store, "/c", &[]).unwrap(), b"v2");
    assert_eq!(body_of(&store, "/new", &[]).unwrap(), b"n");
    // The superseded page read in the window was not held in its place.
    assert_eq!(body_of(&store, "/c", &[]).unwrap(), b"v2");
    let held = store.get_resident(&key("/c"), &HeaderMap::new());
    assert_eq!(&held.unwrap().unwrap().unwrap().body[..], b"v2");
}

#[test]
fn memory_holds_at_most_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = open_with(
        &path,
        limits(1 << 20, 1 << 30),
        opts(64_000, CacheSync::Batch),
    )
    .unwrap();
    let body = [5u8; 1000];
    for i in 0..40 {
        store
            .put(&meta(&format!("/p{i}"), &[], &[("etag", "\"e\"")]), &body)
            .unwrap();
    }
    assert_eq!(store.stats().resident_bytes, 0, "written, not read");
    for i in 0..40 {
        assert_eq!(body_of(&store, &format!("/p{i}"), &[]).unwrap(), body);
    }
    assert_eq!(store.stats().resident_bytes, 0, "read once");
    for i in 0..40 {
        assert_eq!(body_of(&store, &format!("/p{i}"), &[]).unwrap(), body);
    }
    let resident = store.stats().resident_bytes;
    assert!(resident > 0 && resident <= 64_000, "{resident}");
    // The last read are held, the first read went to disk only.
    assert!(store
        .get_resident(&key("/p39"), &HeaderMap::new())
        .is_some());
    assert!(store.get_resident(&key("/p0"), &HeaderMap::new()).is_none());
    assert_eq!(body_of(&store, "/p0", &[]).unwrap(), body);
    // An entry above an eighth of the budget is never held.
    store
        .put(&meta("/big", &[], &[("etag", "\"e\"")]), &[1u8; 4000])
        .unwrap();
    assert_eq!(body_of(&store, "/big", &[]).unwrap(), [1u8; 4000]);
    assert_eq!(body_of(&store, "/big", &[]).unwrap(), [1u8; 4000]);
    assert!(store
        .get_resident(&key("/big"), &HeaderMap::new())
        .is_none());
    // memory_size = 0: nothing held, misses still known.
    let none = open_with(
        dir.path().join("n.redb"),
        limits(1 << 20, 1 << 30),
        opts(0, CacheSync::Batch),
    )
    .unwrap();
    none.put(&meta("/a", &[], &[("etag", "\"e\"")]), b"a")
        .unwrap();
    assert_eq!(body_of(&none, "/a", &[]).unwrap(), b"a");
    assert_eq!(body_of(&none, "/a", &[]).unwrap(), b"a");
    assert!(none.get_resident(&key("/a"), &HeaderMap::new()).is_none());
    assert!(matches!(
        none.get_resident(&key("/b"), &HeaderMap::new()),
        Some(Ok(None))
    ));
    assert_eq!(none.stats().resident_bytes, 0);
}

#[test]
fn a_full_write_queue_refuses_rather_than_grows() {
    static MIB: [u8; 1 << 20] = [3u8; 1 << 20];
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path().join("s.redb"), limits(2 << 20, 1 << 30)).unwrap();
    let hold = store.hold_writer();
    let waits: Vec<_> = (0..70)
        .map(|i| {
            put_later(
                &store,
                meta(&format!("/m{i}"), &[], &[("etag", "\"e\"")]),
                &MIB,
            )
        })
        .collect();
    drop(hold);
    let outcomes: Vec<_> = waits
        .into_iter()
        .map(|w| w.recv().unwrap().unwrap())
        .collect();
    let busy = outcomes.iter().filter(|o| **o == PutOutcome::Busy).count();
    // 64 MiB may wait; the rest is refused at once.
    assert_eq!(busy, 6, "{outcomes:?}");
    assert_eq!(store.stats().entries, 64);
    // Once written, the queue takes writes again.
    assert_eq!(
        store
            .put(&meta("/after", &[], &[("etag", "\"e\"")]), &MIB)
            .unwrap(),
        PutOutcome::Stored { evicted: 0 }
    );
}

/// With `sync = "none"`, a host record (a pause, a breaker) is forced to
/// disk before `put_host_record` returns, as the trait promises; with
/// `"batch"` every commit is forced.
#[test]
fn host_records_are_forced_even_without_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(
        dir.path().join("s.redb"),
        limits(1 << 20, 1 << 30),
        opts(0, CacheSync::None),
    )
    .unwrap();
    store.put_host_record("h.example", b"paused").unwrap();
    let stats = store.stats();
    assert_eq!((stats.commits, stats.forced_commits), (1, 1));
    store
        .put(&meta("/p", &[], &[("etag", "\"e\"")]), b"page")
        .unwrap();
    let before = store.stats().forced_commits;
    store.remove_host_record("h.example").unwrap();
    assert!(store.stats().forced_commits > before);
    drop(store);

    let store = open_with(
        dir.path().join("b.redb"),
        limits(1 << 20, 1 << 30),
        opts(0, CacheSync::Batch),
    )
    .unwrap();
    for i in 0..3 {
        store
            .put(&meta(&format!("/p{i}"), &[], &[("etag", "\"e\"")]), b"page")
            .unwrap();
    }
    let stats = store.stats();
    assert_eq!((stats.commits, stats.forced_commits), (3, 3));
}

#[test]
fn unforced_commits_are_on_disk_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = open_with(&path, limits(1 << 20, 1 << 30), opts(0, CacheSync::None)).unwrap();
        for i in 0..20 {
            store
                .put(&meta(&format!("/p{i}"), &[], &[("etag", "\"e\"")]), b"page")
                .unwrap();
        }
        store.put_host_record("h.example", b"r").unwrap();
    }
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    assert_eq!(store.stats().entries, 20);
    assert_eq!(body_of(&store, "/p19", &[]).unwrap(), b"page");
    assert_eq!(store.host_records().unwrap().len(), 1);
}

/// A caller may let go of its last reference to the store inside a write's
/// callback, which runs on the store's own thread: the store then closes
/// without joining that thread (which would fail, and did, panicking the
/// writer at a proxy's shutdown), and the file can be opened again.
#[test]
fn a_store_dropped_in_its_own_callback_closes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = std::sync::Arc::new(open(&path, limits(1 << 20, 1 << 30)).unwrap());
    let (tx, rx) = mpsc::channel();
    let hold = store.hold_writer();
    let last = store.clone();
    store.put_then(
        meta("/p", &[], &[("etag", "\"e\"")]),
        Bytes::from_static(b"page"),
        Box::new(move |r| {
            assert!(matches!(r, Ok(PutOutcome::Stored { .. })), "{r:?}");
            drop(last);
            let _ = tx.send(());
        }),
    );
    drop(store);
    drop(hold);
    rx.recv()
        .expect("the callback went on after dropping the store");
    // The writer closes the file on its way out, just after the callback.
    let reopened = (0..500).find_map(|_| {
        open(&path, limits(1 << 20, 1 << 30)).ok().or_else(|| {
            std::thread::sleep(Duration::from_millis(10));
            None
        })
    });
    let reopened = reopened.expect("the file is closed");
    assert_eq!(body_of(&reopened, "/p", &[]).unwrap(), b"page");
}

/// With `sync = "none"`, pages committed unforced are forced once they add
/// up to half a MiB, however little time passed: the forced commit writes
/// them all while every later commit waits, so its size is bounded.
#[test]
fn unforced_pages_are_forced_once_half_a_mib_waits() {
    let dir = tempfile::tempdir().unwrap();
    // A clock that never moves: only the byte bound can force a commit.
    let frozen = Instant::now();
    let store = DiskStore::open_with(
        dir.path().join("s.redb"),
        limits(1 << 30, 1 << 30),
        opts(0, CacheSync::None),
        move || frozen,
    )
    .unwrap();
    let body = vec![b'x'; 100 * 1024];
    for i in 0..5 {
        store
            .put(&meta(&format!("/p{i}"), &[], &[("etag", "\"e\"")]), &body)
            .unwrap();
    }
    let stats = store.stats();
    assert_eq!((stats.commits, stats.forced_commits), (5, 0));
    // The sixth brings the unforced pages to 600 KiB: its commit is forced.
    store
        .put(&meta("/p5", &[], &[("etag", "\"e\"")]), &body)
        .unwrap();
    let stats = store.stats();
    assert_eq!((stats.commits, stats.forced_commits), (6, 1));
    // The count starts again after a forced commit.
    for i in 6..11 {
        store
            .put(&meta(&format!("/p{i}"), &[], &[("etag", "\"e\"")]), &body)
            .unwrap();
    }
    assert_eq!(store.stats().forced_commits, 1);
}

/// The pieces after a long record's first, as the tests read them.
const TAILS: redb::TableDefinition<(u64, u32), &[u8]> = redb::TableDefinition::new("page_tails_v1");
/// The store's piece: a 16 KiB page less redb's leaf overhead.
const PIECE: usize = 16 * 1024 - 20;

/// `len` bytes of a fixed pseudo-random sequence: a piece read back out of
/// place, or twice, changes the body.
fn varied(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Each page row's record length, and the number of tail rows of each page.
fn rows_of(path: &Path) -> (Vec<usize>, std::collections::BTreeMap<u64, usize>) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let pages = txn.open_table(PAGES).unwrap();
    let lens = pages
        .iter()
        .unwrap()
        .map(|r| r.unwrap().1.value().len())
        .collect();
    let mut tails = std::collections::BTreeMap::new();
    for row in txn.open_table(TAILS).unwrap().iter().unwrap() {
        *tails.entry(row.unwrap().0.value().0).or_insert(0) += 1;
    }
    (lens, tails)
}

/// A record longer than a piece is written in pieces and read back whole
/// from disk after a reopen, at each edge: a record of exactly one piece
/// (no tail), one byte more (a one-byte tail), several pieces, 300 KB.
#[test]
fn pages_longer_than_a_piece_are_read_back_whole_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let m = |p: &str| meta(p, &[], &[("etag", "\"e\"")]);
    // What a record adds to its body, for paths of one length.
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        store.put(&m("/p0"), &varied(1000)).unwrap();
    }
    let overhead = rows_of(&path).0[0] - 1000;
    let sizes = [
        ("/p1", PIECE - overhead),
        ("/p2", PIECE - overhead + 1),
        ("/p3", 3 * PIECE + 5),
        ("/p4", 300_000),
    ];
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        for (p, len) in sizes {
            store.put(&m(p), &varied(len)).unwrap();
        }
    }
    let (lens, tails) = rows_of(&path);
    assert_eq!(lens.len(), 5);
    assert!(lens.iter().all(|&l| l <= PIECE), "{lens:?}");
    // /p1's record is exactly one piece, and /p2's to /p4's first pieces are
    // whole pieces: the edges were hit.
    assert_eq!(lens.iter().filter(|&&l| l == PIECE).count(), 4, "{lens:?}");
    let mut counts: Vec<usize> = tails.values().copied().collect();
    counts.sort_unstable();
    // /p1: none; /p2: 1; /p3: 3 full pieces less the first, and the rest;
    // /p4: 300 KB in pieces.
    assert_eq!(counts, vec![1, 3, (300_000 + overhead).div_ceil(PIECE) - 1]);
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    for (p, len) in sizes {
        assert_eq!(body_of(&store, p, &[]).unwrap(), varied(len), "{p}");
    }
    assert_eq!(body_of(&store, "/p0", &[]).unwrap(), varied(1000));
    assert_eq!(store.stats().corrupt_removed, 0);
}

/// A page in pieces leaves none of them behind when it is replaced,
/// evicted or removed.
#[test]
fn a_page_in_pieces_leaves_no_piece_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let m = |p: &str, e: &str| meta(p, &[], &[("etag", e)]);
    let big = varied(5 * PIECE);
    {
        let store = open(&path, limits(1 << 20, 12 * PIECE as u64)).unwrap();
        store.put(&m("/a", "\"1\""), &big).unwrap();
        store.put(&m("/a", "\"2\""), b"small now").unwrap();
        store.put(&m("/b", "\"1\""), &big).unwrap();
        assert_eq!(store.remove(&key("/b")).unwrap(), 1);
        store.put(&m("/c", "\"1\""), &big).unwrap();
        // Read, /a is more recent than /c...
        assert_eq!(body_of(&store, "/a", &[]).unwrap(), b"small now");
        // ...so when three pages of five pieces do not fit in twelve, /c goes.
        store.put(&m("/d", "\"1\""), &big).unwrap();
        store.put(&m("/e", "\"1\""), &big).unwrap();
        assert!(body_of(&store, "/c", &[]).is_none());
        assert_eq!(store.stats().entries, 3);
    }
    let (lens, tails) = rows_of(&path);
    assert_eq!(lens.len(), 3, "/a, /d and /e");
    assert_eq!(tails.len(), 2, "only /d's and /e's pieces: {tails:?}");
    assert!(tails.values().all(|&n| n == 5), "{tails:?}");
    let store = open(&path, limits(1 << 20, 12 * PIECE as u64)).unwrap();
    assert_eq!(body_of(&store, "/a", &[]).unwrap(), b"small now");
    assert_eq!(body_of(&store, "/e", &[]).unwrap(), big);
}

/// Pages of 65 KiB, just past a power of two, take little more than their
/// size in the file: written whole, redb gave each a 128 KiB page.
#[test]
fn pages_just_past_a_power_of_two_take_little_more_than_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let body = varied(65 * 1024);
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        for i in 0..200 {
            store
                .put(&meta(&format!("/{i}"), &[], &[("etag", "\"e\"")]), &body)
                .unwrap();
        }
    }
    let db = redb::Database::create(&path).unwrap();
    let txn = db.begin_write().unwrap();
    let stats = txn.stats().unwrap();
    let allocated = stats.allocated_pages() * stats.page_size() as u64;
    // A record is its body and less than 1 KiB of metadata.
    let records = 200 * (body.len() as u64 + 1024);
    assert!(
        allocated < records * 115 / 100,
        "{allocated} bytes allocated for about {records} bytes of records"
    );
}

/// A record written whole before pieces (any length) is read as it is,
/// and its replacement is written in pieces.
#[test]
fn a_long_page_written_whole_before_is_read_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let body = varied(3 * PIECE);
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        store
            .put(&meta("/old", &[], &[("etag", "\"1\"")]), &body)
            .unwrap();
    }
    // Join the pieces into one row, as the build before wrote it.
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut pages = txn.open_table(PAGES).unwrap();
            let mut tails = txn.open_table(TAILS).unwrap();
            let (seq, mut whole) = {
                let (k, v) = pages.first().unwrap().unwrap();
                (k.value(), v.value().to_vec())
            };
            for row in tails.iter().unwrap() {
                whole.extend_from_slice(row.unwrap().1.value());
            }
            tails.retain(|_, _| false).unwrap();
            pages.insert(seq, whole.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let (lens, tails) = rows_of(&path);
    assert!(
        lens[0] > 3 * PIECE && tails.is_empty(),
        "{lens:?} {tails:?}"
    );
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        assert_eq!(body_of(&store, "/old", &[]).unwrap(), body);
        assert_eq!(store.stats().corrupt_removed, 0);
        let next = varied(4 * PIECE);
        store
            .put(&meta("/old", &[], &[("etag", "\"2\"")]), &next)
            .unwrap();
    }
    let (lens, tails) = rows_of(&path);
    assert_eq!((lens.len(), lens[0]), (1, PIECE));
    assert_eq!(tails.values().copied().collect::<Vec<_>>(), vec![4]);
    let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
    assert_eq!(body_of(&store, "/old", &[]).unwrap(), varied(4 * PIECE));
}

/// A damaged piece makes the whole page a miss, and the page goes with all
/// its pieces.
#[test]
fn a_damaged_piece_is_a_miss_and_the_page_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        put_pages(&store, &["/page"], &varied(3 * PIECE));
        put_pages(&store, &["/other"], b"fine");
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut tails = txn.open_table(TAILS).unwrap();
            let (k, mut piece) = {
                let (k, v) = tails.first().unwrap().unwrap();
                (k.value(), v.value().to_vec())
            };
            piece[100] ^= 0xff;
            tails.insert(k, piece.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    {
        let store = open(&path, limits(1 << 20, 1 << 30)).unwrap();
        assert!(body_of(&store, "/page", &[]).is_none());
        assert_eq!(store.stats().corrupt_removed, 1);
        assert_eq!(body_of(&store, "/other", &[]).unwrap(), b"fine");
    }
    let (lens, tails) = rows_of(&path);
    assert_eq!((lens.len(), tails.len()), (1, 0), "only /other is left");
}
