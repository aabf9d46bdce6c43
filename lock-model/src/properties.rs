//! The properties the models check alike, written once: each model's state says which token a
//! client holds, until when it believes it, and what the server keeps ([`Leases`] and the traits
//! built on it); the properties read only that, under the names the tests search for.

use stateright::{Model, Property};

/// What every model's state tells of its clients' leases.
pub trait Leases {
    /// How many clients.
    fn client_count(&self) -> usize;
    /// The token client `c` acts with and the end of its belief in the server's ticks, while
    /// it holds a lease (believed or not).
    fn holding(&self, c: usize) -> Option<(u8, u8)>;
    /// The server's clock.
    fn now(&self) -> u8;
    /// A client took a token not above an earlier taker's.
    fn regressed(&self) -> bool;

    /// `c` holds a lease it believes valid by its own clock (`now < valid_until`).
    fn believes(&self, c: usize) -> bool {
        self.holding(c).is_some_and(|(_, valid_until)| self.now() < valid_until)
    }
}

/// A state whose server's record of a lease can be read.
pub(crate) trait Kept: Leases {
    /// The server still keeps `c`'s lease with `token`: live, its own, that token.
    fn kept(&self, c: usize, token: u8) -> bool;
}

/// A state with one server's token counter.
pub(crate) trait Issued: Leases {
    /// The last token the server issued.
    fn issued(&self) -> u8;
}

/// `no two believers`: never two clients that each believe they hold a valid lease.
pub(crate) fn no_two_believers<M: Model<State: Leases>>() -> Property<M> {
    Property::always("no two believers", |_, s: &M::State| {
        (0..s.client_count()).filter(|&c| s.believes(c)).count() <= 1
    })
}

/// `tokens increase`: each taker's token is above every earlier taker's.
pub(crate) fn tokens_increase<M: Model<State: Leases>>() -> Property<M> {
    Property::always("tokens increase", |_, s: &M::State| !s.regressed())
}

/// `tokens come from the server`: no client holds a token above the last one issued.
pub(crate) fn tokens_come_from_the_server<M: Model<State: Issued>>() -> Property<M> {
    Property::always("tokens come from the server", |_, s: &M::State| {
        (0..s.client_count()).all(|c| s.holding(c).is_none_or(|(token, _)| token <= s.issued()))
    })
}

/// `a lost lease is signalled before it is gone`: while a client believes its lease, the server
/// keeps it.
pub(crate) fn lost_lease_signalled<M: Model<State: Kept>>() -> Property<M> {
    Property::always("a lost lease is signalled before it is gone", |_, s: &M::State| {
        (0..s.client_count()).all(|c| match s.holding(c) {
            Some((token, _)) => !s.believes(c) || s.kept(c, token),
            None => true,
        })
    })
}

/// What a model whose server's record can be read checks of every lease, with its own
/// properties `more` after them: `no two believers`, `tokens increase`, `a lost lease is
/// signalled before it is gone`.
pub(crate) fn of_kept_leases<M: Model<State: Kept>>(more: impl IntoIterator<Item = Property<M>>) -> Vec<Property<M>> {
    let mut all = vec![no_two_believers(), tokens_increase(), lost_lease_signalled()];
    all.extend(more);
    all
}

/// What a model with one server's token counter checks of every lease, with its own properties
/// `more` after them: `no two believers`, `tokens come from the server`, `tokens increase`.
pub(crate) fn of_issued_leases<M: Model<State: Issued>>(
    more: impl IntoIterator<Item = Property<M>>,
) -> Vec<Property<M>> {
    let mut all = vec![no_two_believers(), tokens_come_from_the_server(), tokens_increase()];
    all.extend(more);
    all
}

/// [`Leases`] for a model state with `now`, `clients` whose `Client::Holding` has `token` and
/// `valid_until`, and `taken` (a [`crate::shared::Taken`]) telling whether tokens went back.
macro_rules! leases_of_clients {
    ($state:ty) => {
        impl crate::properties::Leases for $state {
            fn client_count(&self) -> usize {
                self.clients.len()
            }

            fn holding(&self, c: usize) -> Option<(u8, u8)> {
                match self.clients[c] {
                    Client::Holding { token, valid_until, .. } => Some((token, valid_until)),
                    _ => None,
                }
            }

            fn now(&self) -> u8 {
                self.now
            }

            fn regressed(&self) -> bool {
                self.taken.regressed
            }
        }
    };
}
pub(crate) use leases_of_clients;
