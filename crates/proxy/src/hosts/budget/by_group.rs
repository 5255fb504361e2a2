//! A host's group as the rest of the proxy asks for it, and the turn a
//! request waits for in its group. `groups.rs` keeps the grouping and knows
//! nothing of `Budgets`; the `Budgets` methods that go through it are here,
//! so that the two files import one way.

use std::collections::HashMap;
use std::sync::Arc;

use mannerly_policy::budget::{host_key, Refusal};
use mannerly_policy::site::{crawl_delay_wait, Group};
use tokio::time::Instant;

use super::groups::Members;
use super::{Budgets, Loan, Permit};

impl Budgets {
    /// The group of `host`: where its last request was placed, else by
    /// its name.
    pub(crate) fn group(&self, host: &str) -> Group {
        self.groups.of(host)
    }

    /// Places `host`, which resolved to `addr`, in its group (the guard
    /// step, once the name is resolved).
    pub(crate) fn place(&self, host: &str, addr: Option<std::net::IpAddr>) -> Group {
        self.groups.place(host, addr)
    }

    /// Whether a host's group can depend on the address it resolves to.
    pub(crate) fn groups_by_address(&self) -> bool {
        self.groups.by_address()
    }

    /// Every group hosts were placed in, with its kind, its hosts and
    /// their Crawl-delays (for `/hosts`).
    pub(crate) fn members(&self) -> HashMap<String, Members> {
        self.groups.members()
    }

    /// The members of the group `key`, without a walk over every host.
    pub(crate) fn members_of(&self, key: &str) -> Option<Members> {
        self.groups.members_of(key)
    }

    /// The budget key an operator means by `name`: a group's key as it
    /// is, a host's group otherwise.
    pub(crate) fn key_for(&self, name: &str) -> String {
        let key = host_key(name);
        match self.view(&key) {
            Some(_) => key.into_owned(),
            None => self.groups.of(&key).key,
        }
    }

    /// Waits for the turn of `host`'s group; a host with a Crawl-delay of
    /// its own inside a shared group first waits that delay after its own
    /// last send (one of its requests at a time).
    pub(super) async fn acquire_turn(
        self: &Arc<Self>,
        host: &str,
        deadline: Instant,
        loan: Loan,
    ) -> Result<Permit, Refusal> {
        let key = self.groups.of(host).key;
        let Some(spacing) = self.groups.spacing(host) else {
            return self.acquire_group(key, deadline, loan).await;
        };
        let Ok(mut last) = tokio::time::timeout_at(deadline, spacing.last.lock()).await else {
            return Err(self.held_too_long(&key));
        };
        let now = self.clock.now();
        let wait = crawl_delay_wait(last.map(Instant::into_std), spacing.delay(), now.into_std());
        if now + wait > deadline {
            return Err(Refusal::Paced { retry_after: wait });
        }
        tokio::time::sleep(wait).await;
        let permit = self.acquire_group(key, deadline, loan).await?;
        *last = Some(self.clock.now());
        Ok(permit)
    }
}
