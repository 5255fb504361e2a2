//! Sans-IO crawl policy for mannerly: every rule the proxy applies, as plain functions of data and a passed-in `now`; no sockets, no runtime, no clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod address;
pub mod answer;
mod audit;
pub mod budget;
mod cidr;
pub mod conditional;
pub mod encoding;
mod headers;
mod hex;
pub mod identity;
mod outcome;
mod param;
pub mod parent;
pub(crate) mod pattern;
pub mod payment;
pub mod prefs;
pub mod robots;
pub mod robots_cache;
mod token;
pub mod url;
pub mod visit;
mod whitespace;

pub use address::{classify_ip, parse_host_ip, AddressClass};
pub use audit::{
    chain_line, chain_onto, hex, last_chain, parse_public_key, split_line, verify_chain,
    AbsentProof, AuditRecord, ChainError, Checkpoint, Commits, Evidence, EvidenceBuilder,
    EvidenceFile, EvidenceProblem, EvidenceSummary, FileReport, FileTrees, Heads, HostEntry,
    HostProof, IndexedLine, Problem, ProvenLine, Report, SealReason, Verifier, CHECKPOINT, GENESIS,
};
pub use budget::site;
pub use cidr::Cidr;
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use headers::{set_origin_host, strip_hop_by_hop};
pub use outcome::Outcome;
pub use param::ParamError;
