//! Rule 7 across objects: a spec-2 stub secret that several machine resources name is upgraded
//! in place only when none of them keeps an image that may read spec 2 only ([`super::stub`]
//! decides each object alone).

use std::collections::{BTreeMap, BTreeSet};

use super::decision::{Action, Decision, ObjectKey};
use super::stub::kept_name;
use crate::machine_kind::MachineObject;
use crate::reason::Reason;

/// The objects that name each stub secret, by the secret's namespace and name.
pub type StubUsers = BTreeMap<(String, String), Vec<ObjectKey>>;

/// The objects that name each stub secret in their provider spec (the Machine API kinds: a
/// Cluster API object names its bootstrap secret elsewhere, and never has it upgraded).
pub fn users_of<'a>(objects: impl IntoIterator<Item = &'a dyn MachineObject>) -> StubUsers {
    let mut users = StubUsers::new();
    for object in objects {
        let meta = object.meta();
        let Some(name) = object.provider_spec().and_then(kept_name) else {
            continue;
        };
        let namespace = meta.namespace.clone().unwrap_or_default();
        let key = ObjectKey {
            kind: object.kind(),
            name: meta.name.clone().unwrap_or_default(),
        };
        users.entry((namespace, name.into())).or_default().push(key);
    }
    users
}

/// Objects a [`Reason::StubSecretShared`] message names at most.
const USERS_NAMED: usize = 5;

/// Rule 7 across objects: a spec-2 stub is upgraded in place only when no object that names it
/// keeps an image that may read spec 2 only (docs/how-it-decides.md, "Stub secrets"). Every object
/// that names it must move with it in this plan, or be on the golden image already (which reads
/// spec 3, as every release since 4.6 does); any other (opted out, a custom image, an error, a
/// hold) keeps its image, and its next machines would meet a stub they cannot read. Then the
/// decisions that would upgrade the stub move nothing, with a reason that names those objects.
/// Upstream upgrades the stub whenever one MachineSet moves (`upgradeStubIgnitionIfRequired`,
/// pkg/controller/bootimage/helpers.go, called from each `reconcile*ProviderSpec` of
/// platform_helpers.go, openshift/machine-config-operator main at 7ff337a4f), whoever else names
/// it. `decisions` must hold a decision for every object in `users` of such a stub; an object
/// without one counts as staying.
pub fn hold_shared_upgrades(decisions: &mut [Decision], users: &StubUsers) {
    let upgraded: BTreeSet<(String, String)> = (decisions.iter())
        .filter_map(|d| d.stub_upgrade.as_deref())
        .map(|u| (u.namespace.clone(), u.name.clone()))
        .collect();
    for stub in upgraded {
        let upgrades = |d: &Decision| {
            (d.stub_upgrade.as_deref())
                .is_some_and(|u| (&u.namespace, &u.name) == (&stub.0, &stub.1))
        };
        // An object names a stub of its own namespace: its decision is the one of that name there.
        let keeps_old_image = |key: &ObjectKey| {
            let decided = (decisions.iter()).find(|d| d.namespace == stub.0 && d.key() == *key);
            !decided.is_some_and(|d| {
                (d.action == Action::Update && upgrades(d)) || d.action == Action::UpToDate
            })
        };
        // In name order, whatever the order objects were listed in: the plan is the same.
        let staying: BTreeSet<&ObjectKey> = (users.get(&stub).into_iter().flatten())
            .filter(|key| keeps_old_image(key))
            .collect();
        if staying.is_empty() {
            continue;
        }
        let mut named: String = (staying.iter().take(USERS_NAMED))
            .map(|key| format!("{} {}", key.kind, key.name))
            .collect::<Vec<_>>()
            .join(", ");
        if staying.len() > USERS_NAMED {
            named += &format!(" and {} more", staying.len() - USERS_NAMED);
        }
        for decided in decisions.iter_mut().filter(|d| upgrades(d)) {
            let from =
                (decided.stub_upgrade.as_deref()).map_or(String::new(), |u| u.from_version.clone());
            decided.message = format!(
                "stub secret {}/{} is Ignition spec {from} and new boot images read spec 3 only, \
                 but {named} also name it and keep their boot images, which may read spec 2 \
                 only: upgrading it in place would keep their new machines from booting, so \
                 neither the stub nor this boot image is changed. Point them at a stub secret \
                 of their own (a copy of {}), or let them move too, and the update goes ahead",
                stub.0, stub.1, stub.1
            );
            decided.action = Action::Skip;
            decided.reason = Reason::StubSecretShared;
            decided.recorded = None;
            decided.withdraw_writes();
        }
    }
}
