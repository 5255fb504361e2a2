//! The listener: accepting client connections onto the serving threads,
//! driving each connection, CONNECT and the tunnels it opens. A request
//! read here is handed to `pipeline::handle`.

pub(crate) mod connection;
pub(crate) mod server;
pub(crate) mod shards;
pub(crate) mod tunnel;
