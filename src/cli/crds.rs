//! `crds`: the CRDs generated from our typed views, as one multi-document YAML stream that
//! `kubectl apply -f -` accepts.

use anyhow::Context as _;

use super::{Failure, write_stdout};
use crate::api::local_crds;

pub fn run() -> Result<(), Failure> {
    let yaml = render().context("cannot render the CRDs as YAML")?;
    write_stdout(&yaml)
}

pub fn render() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string_multiple(&local_crds())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::controller::status::served_schema::StatusSchema;

    /// YAML has many ways to turn a string into something else (`on`, `1e3`, `null`); reading
    /// the output back must give exactly the CRDs we generated.
    #[test]
    fn the_yaml_reads_back_as_the_generated_crds() {
        let yaml = render().unwrap();
        let read_back: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        let expected: Vec<Value> = local_crds()
            .iter()
            .map(|crd| serde_json::to_value(crd).unwrap())
            .collect();
        assert_eq!(read_back, expected);
    }

    fn local_machine_configuration_schema() -> Value {
        let crd = local_crds()
            .into_iter()
            .find(|crd| crd.spec.names.kind == "MachineConfiguration")
            .expect("a MachineConfiguration CRD");
        let version = &crd.spec.versions[0];
        serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema).unwrap()
    }

    /// Without `../shared`, local clusters serve these CRDs: the controller must be able to
    /// write every boot-image status field there, or the tests of those fields pass only with
    /// the upstream CRDs (a fresh clone's `hack/test.sh` once failed that way).
    #[test]
    fn the_local_machine_configuration_declares_every_boot_image_status_field() {
        let schema = StatusSchema::from_kind_schema(&local_machine_configuration_schema());
        assert!(schema.skew_enforcement, "{schema:?}");
        assert!(schema.managed_boot_images, "{schema:?}");
        for resource in ["machinesets", "controlplanemachinesets"] {
            assert!(schema.allows(resource), "{resource}: {schema:?}");
        }
    }

    /// ... and exactly what the newest upstream release declares, so that both paths of the
    /// test command test the same controller (CI runs with `../shared` only).
    #[test]
    fn the_local_machine_configuration_status_matches_the_newest_release() {
        let Some(shared) = crate::testkit::skips::shared_dir() else {
            return;
        };
        let releases = shared.join("fixtures/crds/releases");
        let newest = std::fs::read_dir(&releases)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| semver::Version::parse(&format!("{name}.0")).ok())
            .max()
            .expect("a release");
        let path = releases.join(format!("{}.{}", newest.major, newest.minor));
        let text =
            std::fs::read_to_string(path.join("machineconfigurations.operator.openshift.io.yaml"))
                .unwrap();
        let upstream: Value = serde_saphyr::from_str(&text).unwrap();
        let upstream = &upstream["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(
            StatusSchema::from_kind_schema(&local_machine_configuration_schema()),
            StatusSchema::from_kind_schema(upstream),
            "release {newest}"
        );
    }
}
