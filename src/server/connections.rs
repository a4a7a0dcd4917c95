//! Who holds a listener's connections, and which one makes room for a newcomer.
//!
//! A listener that refuses connections once it is full belongs to whoever fills it first: 80
//! idle connections from one pod kept every scrape and every kubelet probe out. Here a new
//! connection is always served, and when there is no room the oldest connection of the peer
//! holding the most is closed instead. A peer that floods a port only ever closes its own
//! connections, and a client that connects and asks at once (the kubelet, Prometheus) is served
//! whatever the others do. A genuine request lasts milliseconds, so the oldest connection of the
//! largest holder is an idle one unless that peer is the flood itself.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// The address a peer is counted by: an IPv4 address (also when it arrives mapped into IPv6 on a
/// dual-stack listener), or the /64 prefix of an IPv6 address, since one host usually holds a
/// whole /64 and could otherwise come from as many addresses as it likes.
pub fn peer_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

/// The connection to close so that one more from `peer` fits, given the open ones (id, peer) in
/// the order they were accepted: `None` while there is room.
pub fn to_close(
    open: &[(u64, IpAddr)],
    peer: IpAddr,
    max_connections: usize,
    max_per_peer: usize,
) -> Option<u64> {
    let held_by = |p: IpAddr| open.iter().filter(|(_, q)| *q == p).count();
    let oldest_of = |p: IpAddr| open.iter().find(|(_, q)| *q == p).map(|(id, _)| *id);
    if held_by(peer) >= max_per_peer.max(1) {
        return oldest_of(peer);
    }
    if open.len() < max_connections.max(1) {
        return None;
    }
    // The largest holder; among equals the one whose oldest connection is oldest, since `open`
    // is in accepted order and `max_by_key` keeps the last maximum of a reversed walk.
    let largest = open
        .iter()
        .rev()
        .map(|(_, p)| *p)
        .max_by_key(|p| held_by(*p))?;
    oldest_of(largest)
}

/// The connections a listener serves now.
#[derive(Debug, Default)]
pub struct Connections {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    /// By id, which grows with every accept: iteration is oldest first.
    open: BTreeMap<u64, (IpAddr, CancellationToken)>,
}

/// A connection's place in the table; the place is given back when this is dropped.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    connections: Arc<Connections>,
    /// Cancelled when another connection needs the place: the connection must then end.
    pub evicted: CancellationToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.table.lock().open.remove(&self.id);
    }
}

impl Connections {
    /// Takes a place for a connection from `ip`, closing another one if there is no room.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        max_connections: usize,
        max_per_peer: usize,
    ) -> Slot {
        let peer = peer_of(ip);
        let mut table = self.table.lock();
        let open: Vec<(u64, IpAddr)> = table.open.iter().map(|(id, (p, _))| (*id, *p)).collect();
        if let Some(victim) = to_close(&open, peer, max_connections, max_per_peer)
            && let Some((_, evicted)) = table.open.remove(&victim)
        {
            evicted.cancel();
        }
        let id = table.next_id;
        table.next_id += 1;
        let evicted = CancellationToken::new();
        table.open.insert(id, (peer, evicted.clone()));
        Slot {
            id,
            connections: self.clone(),
            evicted,
        }
    }

    /// How many connections are open.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn room_left_closes_nothing() {
        let open = [(0, ip("10.0.0.1")), (1, ip("10.0.0.2"))];
        assert_eq!(to_close(&open, ip("10.0.0.3"), 3, 2), None);
    }

    #[test]
    fn a_peer_at_its_share_gives_up_its_own_oldest() {
        let open = [
            (0, ip("10.0.0.2")),
            (1, ip("10.0.0.1")),
            (2, ip("10.0.0.1")),
        ];
        assert_eq!(to_close(&open, ip("10.0.0.1"), 64, 2), Some(1));
    }

    #[test]
    fn a_full_listener_takes_the_place_from_the_largest_holder() {
        let open = [
            (0, ip("10.0.0.9")),
            (1, ip("10.0.0.1")),
            (2, ip("10.0.0.1")),
            (3, ip("10.0.0.2")),
        ];
        assert_eq!(to_close(&open, ip("10.0.0.3"), 4, 8), Some(1));
        // Among equal holders, the one holding the oldest connection.
        let even = [(5, ip("10.0.0.2")), (6, ip("10.0.0.1"))];
        assert_eq!(to_close(&even, ip("10.0.0.3"), 2, 8), Some(5));
    }

    #[test]
    fn ipv6_peers_count_by_their_64_prefix_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            peer_of(ip("2001:db8:1:2:aaaa::1")),
            peer_of(ip("2001:db8:1:2:bbbb::7"))
        );
        assert_ne!(
            peer_of(ip("2001:db8:1:2::1")),
            peer_of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(peer_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    }

    #[test]
    fn a_place_is_given_back_when_its_connection_ends() {
        let connections = Arc::new(Connections::default());
        let first = connections.admit(ip("10.0.0.1"), 1, 1);
        let second = connections.admit(ip("10.0.0.2"), 1, 1);
        assert!(first.evicted.is_cancelled(), "no room: the first made way");
        assert!(!second.evicted.is_cancelled());
        assert_eq!(connections.len(), 1);
        drop(second);
        assert_eq!(connections.len(), 0);
        // The evicted one's slot was already given up; dropping it changes nothing.
        drop(first);
        assert_eq!(connections.len(), 0);
    }
}
