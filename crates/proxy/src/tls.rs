//! TLS towards clients: the interception CA and the leaf certificates it
//! mints per server name.

mod ca;

pub use ca::CertificateAuthority;
