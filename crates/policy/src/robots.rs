//! robots.txt (RFC 9309): parser and matcher.
